package election_test

import (
	"testing"

	"github.com/distlock/distlock"
	"github.com/stretchr/testify/assert"
)

// TestNilFnIsAnError: Lead, Do and TryDo with a nil function return an
// error wrapping ErrInvalidOption before taking anything; they panicked
// (a nil function call) after taking the lock.
func TestNilFnIsAnError(t *testing.T) {
	l := open(t, "mem://nil-fn")
	e := election(t, l, "leader", "host-a")
	call := func(name string, f func() error) {
		t.Helper()
		defer func() {
			if p := recover(); p != nil {
				t.Errorf("%s with a nil function panicked: %v", name, p)
			}
		}()
		assert.ErrorIs(t, f(), distlock.ErrInvalidOption, "%s with a nil function", name)
	}
	call("Lead", func() error { return e.Lead(t.Context(), nil) })
	call("Do", func() error { return l.Do(t.Context(), "job", nil) })
	call("TryDo", func() error {
		ran, err := l.TryDo(t.Context(), "job", nil)
		assert.False(t, ran, "TryDo with a nil function reports it ran")
		return err
	})
	if info, err := e.Leader(t.Context()); err != nil || info.Held {
		t.Errorf("after the nil-function calls: %+v, %v; want nothing held", info, err)
	}
}
