package memcached

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/internal/testkit/testserver"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// serverOf returns which of the given addresses holds the item key.
func serverOf(t *testing.T, key string, addrs ...string) []string {
	t.Helper()
	var on []string
	for _, a := range addrs {
		c := memcache.New(a)
		_, err := c.Get(key)
		c.Close()
		switch {
		case err == nil:
			on = append(on, a)
		case !errors.Is(err, memcache.ErrCacheMiss):
			t.Fatalf("get %s on %s: %v", key, a, err)
		}
	}
	return on
}

// With several servers, the same key always maps to the same server for a
// given server list: two Lockers opened with the same list contend, and the
// item sits on exactly the server gomemcache's ServerList picks.
func TestSameKeySameServer(t *testing.T) {
	conformance.Parallel(t)
	s1 := testserver.Memcached(t, testserver.MemcachedConfig{})
	s2 := testserver.Memcached(t, testserver.MemcachedConfig{})
	url := "memcached://" + s1.Addr() + "," + s2.Addr()
	a, b := openURL(t, url), openURL(t, url)
	d := openDriver(t, url)
	ctx := ctxT(t, time.Minute)
	count := map[string]int{}
	for i := range 40 {
		key := fmt.Sprintf("spread/%d", i)
		lease, err := a.TryAcquire(ctx, key)
		require.NoError(t, err)
		if _, err := b.TryAcquire(ctx, key); !errors.Is(err, distlock.ErrNotAcquired) {
			t.Errorf("%s: second Locker with the same list = %v, want ErrNotAcquired", key, err)
		}
		ik := ItemKey(DefaultPrefix, key)
		on := serverOf(t, ik, s1.Addr(), s2.Addr())
		want, err := d.sel.PickServer(ik)
		require.NoError(t, err)
		for range 3 {
			if again, _ := d.sel.PickServer(ik); again.String() != want.String() {
				t.Fatalf("%s mapped to %v, then %v", key, want, again)
			}
		}
		if len(on) != 1 || on[0] != want.String() {
			t.Errorf("%s stored on %v, want only on %v", key, on, want)
		}
		count[want.String()]++
		require.NoError(t, lease.Release(ctx))
	}
	assert.Len(t, count, 2, "40 keys all on one server")
}

// A changed server list moves keys to other servers, where their locks look
// free. The server-list guard refuses a Locker whose list differs from the
// one recorded on the server; with the guard off the danger is real: two
// owners hold the same lock on different servers.
func TestServerPin(t *testing.T) {
	s1 := testserver.Memcached(t, testserver.MemcachedConfig{})
	s2 := testserver.Memcached(t, testserver.MemcachedConfig{})
	ctx := ctxT(t, time.Minute)
	oldURL := "memcached://" + s1.Addr() + "," + s2.Addr()
	newList := s2.Addr() + "," + s1.Addr()
	old := openURL(t, oldURL)
	dOld, dNew := openDriver(t, oldURL+"?pin=off"), openDriver(t, "memcached://"+newList+"?pin=off")
	// A key that the two lists put on different servers, and a lease for
	// it, plus leases that pin both servers.
	var moved string
	var leases []*distlock.Lease
	for i := 0; moved == "" || i < 8; i++ {
		key := fmt.Sprintf("pin/%d", i)
		ik := ItemKey(DefaultPrefix, key)
		a1, _ := dOld.sel.PickServer(ik)
		a2, _ := dNew.sel.PickServer(ik)
		if moved == "" && a1.String() != a2.String() {
			moved = key
		}
		lease, err := old.TryAcquire(ctx, key, distlock.WithTTL(time.Minute))
		require.NoError(t, err)
		leases = append(leases, lease)
		if i > 100 {
			t.Fatalf("no key moves between the two lists")
		}
	}

	// The guard: a Locker with the reordered list is refused on both.
	reordered := openURL(t, "memcached://"+newList)
	_, err := reordered.TryAcquire(ctx, moved)
	assert.ErrorIs(t, err, distlock.ErrInvalidOption, "acquire with a changed server list")
	t.Logf("refused: %v", err)
	shrunk := openURL(t, "memcached://"+s1.Addr())
	if _, err := shrunk.TryAcquire(ctx, "pin/other"); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Errorf("acquire with a server removed = %v, want ErrInvalidOption", err)
	}

	// Without the guard: two owners of one lock.
	unguarded := openURL(t, "memcached://"+newList+"?pin=off")
	lease, err := unguarded.TryAcquire(ctx, moved)
	require.NoError(t, err, "unguarded acquire")
	if on := serverOf(t, ItemKey(DefaultPrefix, moved), s1.Addr(), s2.Addr()); len(on) != 2 {
		t.Errorf("%q held on %v, want on both servers", moved, on)
	}
	t.Logf("documented: with pin=off and a reordered list, %q is held twice (once on each server)", moved)
	_ = lease.Release(ctx)

	// After every old holder is gone, pin=reset adopts the new list; the
	// old list is then the one refused.
	for _, l := range leases {
		require.NoError(t, l.Release(ctx))
	}
	reset := openURL(t, "memcached://"+newList+"?pin=reset")
	for i := range 8 { // reaches both servers
		lease, err := reset.TryAcquire(ctx, fmt.Sprintf("pin/%d", i))
		require.NoError(t, err, "acquire with pin=reset")
		_ = lease.Release(ctx)
	}
	if lease, err := openURL(t, "memcached://"+newList).TryAcquire(ctx, moved); err != nil {
		t.Errorf("acquire with the new list after the reset: %v", err)
	} else {
		_ = lease.Release(ctx)
	}
	if _, err := openURL(t, oldURL).TryAcquire(ctx, moved); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Errorf("acquire with the old list after the reset = %v, want ErrInvalidOption", err)
	}
}
