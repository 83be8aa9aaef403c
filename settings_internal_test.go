package distlock

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/distlock/distlock/backend"
)

// TestSettingsWith: an acquisition's settings are defaultSettings, then the
// Locker's default options, then the call's own, in that order, the
// defaults applied once by New or (a nil default) at each acquisition; a
// call's options never change what the next acquisition gets.
func TestSettingsWith(t *testing.T) {
	drv := idleDriver{backend.DefaultValidity}
	defaults := []Option{WithTTL(time.Minute), WithMetadata("m1"), WithMinHold(time.Second), WithRetryUnavailable(true)}
	reference := func(opts []Option) settings {
		s := defaultSettings()
		for _, o := range append(append([]Option(nil), defaults...), opts...) {
			o(&s)
		}
		return s
	}
	l := New(drv, "idle", defaults...)
	require.True(t, l.baseOK)
	calls := [][]Option{
		nil,
		{WithTTL(time.Second)},
		{WithMetadata("m2")},
		nil, // after a call's WithMetadata: the defaults' again
		{WithMinHold(0), WithOwner("o"), WithAutoRefresh(false)},
		{WithOwner("")}, // an invalid option's error
		{WithRetry(nil)},
		nil,
	}
	for i, opts := range calls {
		require.Equal(t, reference(opts), l.settingsWith(opts), "call %d", i)
	}
	bare := New(drv, "idle")
	require.Equal(t, defaultSettings(), bare.settingsWith(nil))
	invalid := New(drv, "idle", WithOwner(""))
	for range 2 { // the default's error at every acquisition
		require.ErrorIs(t, invalid.settingsWith(nil).err, ErrInvalidOption)
	}

	// A nil default Option: New does not call it, an acquisition does.
	withNil := New(drv, "idle", WithTTL(time.Minute), nil)
	require.False(t, withNil.baseOK)
	require.Panics(t, func() { withNil.settingsWith(nil) })
}

// TestPrepareAllocations: preparing an acquisition without options of its
// own allocates only its random owner id (the settings stay on the stack).
func TestPrepareAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under the race detector")
	}
	l := New(idleDriver{backend.DefaultValidity}, "idle", WithTTL(time.Minute))
	if n := testing.AllocsPerRun(100, func() {
		if _, err := l.prepare("k", nil); err != nil {
			t.Fatal(err)
		}
	}); n > 1 {
		t.Errorf("prepare: %.0f allocations, want 1 (the owner id)", n)
	}
}
