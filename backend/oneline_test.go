package backend

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestOneLine(t *testing.T) {
	base := errors.New("failed to connect to `user=u`:\n\thostname resolving error\n\tlookup h: no such host")
	err := OneLine(fmt.Errorf("%w: %w", ErrUnavailable, base))
	require.False(t, strings.ContainsAny(err.Error(), "\r\n\t"), "OneLine kept a line break: %q", err)
	if want := "backend unavailable: failed to connect to `user=u`:; hostname resolving error; lookup h: no such host"; err.Error() != want {
		t.Errorf("OneLine = %q, want %q", err, want)
	}
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, base) {
		t.Errorf("OneLine lost the chain: %v", err)
	}
	assert.NoError(t, OneLine(nil), "OneLine(nil) != nil")
	if e := errors.New("one line"); OneLine(e) != e {
		t.Error("OneLine changed an error already on one line")
	}
}
