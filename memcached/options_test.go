package memcached

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/internal/testkit/testserver"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Bad URLs get typed errors and no panic.
func TestOpenBadURLs(t *testing.T) {
	conformance.RefusesURLs(t, append(badURLs,
		"memcached://[::1", "memcached://127.0.0.1:99999999", "memcached:/%zz", "memcached://127.0.0.1:1/?no_such_parameter=1",
		"memcached://no-such-host.invalid:11211",
	)...)
	for _, u := range []string{
		"memcached://127.0.0.1", "memcached://127.0.0.1:11211/", "memcached://localhost:11211",
		"memcached://127.0.0.1:1,127.0.0.1:2?prefix=p:&timeout=250ms&max_idle=4&release=cas&pin=off",
		"memcached://[::1]:11211?release=auto&pin=reset",
	} {
		l, err := distlock.Open(ctxT(t, 10*time.Second), u)
		if err != nil {
			t.Errorf("Open(%q): %v", u, err)
			continue
		}
		_ = l.Close()
	}
}

// New over a caller's client: without a selector releases use the tombstone;
// with the client's selector, the meta protocol and the server-list guard.
func TestNew(t *testing.T) {
	srv := testserver.Memcached(t, testserver.MemcachedConfig{})
	admin := adminClient(t, srv.Addr())
	ctx := ctxT(t, 30*time.Second)

	plain := memcache.New(srv.Addr())
	defer plain.Close()
	l, err := New(plain, WithDefaults(distlock.WithTTL(3*time.Second)), WithPrefix("typed:"))
	require.NoError(t, err)
	defer l.Close()
	tomb := releaseStats[ReleaseAuto].tombstones.Load()
	start := time.Now()
	lease, err := l.TryAcquire(ctx, "typed")
	require.NoError(t, err)
	if v := lease.Deadline().Sub(start); v > 2100*time.Millisecond || v < 2*time.Second {
		t.Errorf("WithDefaults(WithTTL(3s)): validity %v, want 2s", v)
	}
	assert.Equal(t, ItemKey("typed:", "typed"), itemNames(l).Key("typed"), "ItemKey ignores the prefix")
	if _, err := admin.Get(itemNames(l).Key("typed")); err != nil {
		t.Errorf("item under the prefix: %v", err)
	}
	require.NoError(t, lease.Release(ctx))
	if releaseStats[ReleaseAuto].tombstones.Load() == tomb {
		t.Errorf("without a selector the release did not use the tombstone")
	}
	require.NoError(t, l.Close())
	if _, err := plain.Get("anything"); !errors.Is(err, memcache.ErrCacheMiss) {
		t.Errorf("caller's client unusable after Close: %v", err)
	}

	ss := new(memcache.ServerList)
	require.NoError(t, ss.SetServers(srv.Addr()))
	sc := memcache.NewFromSelector(ss)
	ml, err := New(sc, WithSelector(ss), WithCloseClient())
	require.NoError(t, err)
	defer ml.Close()
	meta := releaseStats[ReleaseAuto].metaDeletes.Load()
	lease, err = ml.TryAcquire(ctx, "typed")
	require.NoError(t, err)
	require.NoError(t, lease.Release(ctx))
	if releaseStats[ReleaseAuto].metaDeletes.Load() == meta {
		t.Errorf("with the selector the release did not use md")
	}
	if _, err := admin.Get(pinKey(DefaultPrefix)); err != nil {
		t.Errorf("no server-list record with the selector: %v", err)
	}

}

// New checks every option value (and the client) itself: a bad one is an
// error wrapping ErrInvalidOption, on one line, naming the option — not a
// Locker whose acquisitions fail later. Before, New returned such a Locker
// (its TryAcquire answered ErrInvalidOption) and took out-of-range modes as
// the defaults. Needs no server.
func TestNewChecksOptions(t *testing.T) {
	plain := memcache.New("127.0.0.1:1")
	for _, c := range []struct {
		name string
		c    *memcache.Client
		opts []Option
		want string // in the message
	}{
		{"nil client", nil, nil, "New(nil)"},
		{"space", plain, []Option{WithPrefix("a b")}, `WithPrefix("a b")`},
		{"long prefix", plain, []Option{WithPrefix(strings.Repeat("p", 201))}, "WithPrefix("},
		{"nil option", plain, []Option{WithPrefix("p:"), nil}, "option 1 is nil"},
		{"nil selector", plain, []Option{WithSelector(nil)}, "WithSelector(nil)"},
		{"nil server list", plain, []Option{WithSelector((*memcache.ServerList)(nil))}, "WithSelector(nil)"},
		{"release", plain, []Option{WithRelease(ReleaseMode(7))}, "WithRelease(7)"},
		{"release negative", plain, []Option{WithRelease(-1)}, "WithRelease(-1)"},
		{"pin", plain, []Option{WithPin(PinMode(3))}, "WithPin(3)"},
	} {
		l, err := New(c.c, c.opts...)
		if l != nil || !errors.Is(err, distlock.ErrInvalidOption) {
			t.Errorf("%s: New = %v, %v; want no Locker and ErrInvalidOption", c.name, l, err)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, c.want) || strings.Contains(msg, "\n") {
			t.Errorf("%s: error %q: want one line naming %s", c.name, msg, c.want)
		}
	}
	for _, m := range []ReleaseMode{ReleaseAuto, ReleaseCAS} {
		for _, p := range []PinMode{PinCheck, PinReset, PinOff} {
			l, err := New(plain, WithRelease(m), WithPin(p), WithPrefix(""))
			if err != nil {
				t.Errorf("New(%v, %v): %v", m, p, err)
				continue
			}
			_ = l.Close()
		}
	}
}
