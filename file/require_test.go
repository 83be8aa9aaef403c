package file

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// require is a few assertions in testify's shape, without the module.
var require asserts

type asserts struct{}

func fail(t testing.TB, what string, msg []any) {
	t.Helper()
	if len(msg) > 0 {
		if f, ok := msg[0].(string); ok {
			what += ": " + fmt.Sprintf(f, msg[1:]...)
		}
	}
	t.Fatal(what)
}

func (asserts) NoError(t testing.TB, err error, msg ...any) {
	t.Helper()
	if err != nil {
		fail(t, fmt.Sprintf("unexpected error: %v", err), msg)
	}
}

func (asserts) Error(t testing.TB, err error, msg ...any) {
	t.Helper()
	if err == nil {
		fail(t, "no error", msg)
	}
}

func (asserts) ErrorIs(t testing.TB, err, target error, msg ...any) {
	t.Helper()
	if !errors.Is(err, target) {
		fail(t, fmt.Sprintf("error %v, want errors.Is %v", err, target), msg)
	}
}

func (asserts) True(t testing.TB, v bool, msg ...any) {
	t.Helper()
	if !v {
		fail(t, "false, want true", msg)
	}
}

func (asserts) False(t testing.TB, v bool, msg ...any) {
	t.Helper()
	if v {
		fail(t, "true, want false", msg)
	}
}

func (asserts) Equal(t testing.TB, want, got any, msg ...any) {
	t.Helper()
	if !reflect.DeepEqual(want, got) {
		fail(t, fmt.Sprintf("got %v, want %v", got, want), msg)
	}
}

func (asserts) Empty(t testing.TB, s string, msg ...any) {
	t.Helper()
	if s != "" {
		fail(t, fmt.Sprintf("%q, want empty", s), msg)
	}
}

func (asserts) Greater(t testing.TB, a, b uint64, msg ...any) {
	t.Helper()
	if a <= b {
		fail(t, fmt.Sprintf("%d, want more than %d", a, b), msg)
	}
}

func (asserts) LessOrEqual(t testing.TB, a, b int, msg ...any) {
	t.Helper()
	if a > b {
		fail(t, fmt.Sprintf("%d, want at most %d", a, b), msg)
	}
}

func (asserts) Contains(t testing.TB, s, sub string, msg ...any) {
	t.Helper()
	if !strings.Contains(s, sub) {
		fail(t, fmt.Sprintf("%q does not contain %q", s, sub), msg)
	}
}

func (asserts) NotContains(t testing.TB, s, sub string, msg ...any) {
	t.Helper()
	if strings.Contains(s, sub) {
		fail(t, fmt.Sprintf("%q contains %q", s, sub), msg)
	}
}

func (asserts) Len(t testing.TB, b []byte, n int, msg ...any) {
	t.Helper()
	if len(b) != n {
		fail(t, fmt.Sprintf("length %d, want %d", len(b), n), msg)
	}
}
