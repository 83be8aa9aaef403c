package memcached

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/internal/testkit/netfault"
	"github.com/distlock/distlock/internal/testkit/testserver"
	"github.com/stretchr/testify/require"
)

// confTTL is the TTL of the suite's expiry checks. Its validity is 2s
// (memcached's ttl − 1s) and a lease is refreshed every 1s, so a refresh
// may be up to 1s late before the lease is lost. With the shortest TTL
// memcached honours (MinTTL, 2s) that slack was 500ms, which a loaded
// 2-core machine under -race overran: the auto-refresh check lost its lease
// and another owner took the lock.
const confTTL = 3 * time.Second

// badURLs are refused by Open with ErrInvalidOption.
var badURLs = []string{
	"memcached://",
	"memcached://127.0.0.1:11211/db",
	"memcached://user:pw@127.0.0.1:11211",
	"memcached://127.0.0.1:0",
	"memcached://127.0.0.1:65536",
	"memcached://127.0.0.1:x",
	"memcached://127.0.0.1:11211,",
	"memcached://,127.0.0.1:11211",
	"memcached://127.0.0.1:11211#frag",
	"memcached://127.0.0.1:11211?timeout=0s",
	"memcached://127.0.0.1:11211?timeout=fast",
	"memcached://127.0.0.1:11211?timeout=-1s",
	"memcached://127.0.0.1:11211?max_idle=0",
	"memcached://127.0.0.1:11211?max_idle=many",
	"memcached://127.0.0.1:11211?release=delete",
	"memcached://127.0.0.1:11211?pin=maybe",
	"memcached://127.0.0.1:11211?prefix=has%20space",
	"memcached://127.0.0.1:11211?prefix=tab%09",
	"memcached://127.0.0.1:11211?prefix=del%7F",
	"memcached://127.0.0.1:11211?timeout=1s&timeout=2s",
	"memcached://127.0.0.1:11211?prefix=a&bogus=1",
	"memcached:opaque",
}

// badTTLs are refused with ErrInvalidTTL: below 2s, not whole seconds, or
// beyond memcached's 30-day relative expiry.
var badTTLs = []time.Duration{
	time.Nanosecond, time.Millisecond, 999 * time.Millisecond, time.Second, 1500 * time.Millisecond,
	2500 * time.Millisecond, 2*time.Second + time.Nanosecond, MaxTTL + time.Second, 31 * 24 * time.Hour,
}

// closedPortURL returns a memcached URL of a loopback port nothing listens on.
func closedPortURL(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	return "memcached://" + addr
}

// harness describes one memcached server for the suite, every Locker opened
// by URL with query (its own client and connections).
func harness(t *testing.T, srv *testserver.Server, query string) conformance.Harness {
	addr := srv.Addr()
	url := "memcached://" + addr + "/?" + query
	admin := memcache.New(addr)
	admin.Timeout = 5 * time.Second
	t.Cleanup(func() { _ = admin.Close() })
	h := conformance.Harness{
		Name:           "memcached",
		NewLocker:      func(ctx context.Context) (*distlock.Locker, error) { return distlock.Open(ctx, url) },
		TTL:            confTTL,
		URL:            url,
		UnreachableURL: closedPortURL(t),
		BadURLs:        badURLs,
		BadTTLs:        badTTLs,
		Faults: conformance.Faults{
			// Expire deletes the item directly, bypassing the owner
			// check, as an eviction or an early expiry would.
			Expire: func(_ context.Context, key string) error {
				err := admin.Delete(ItemKey(DefaultPrefix, key))
				if err != nil && !errors.Is(err, memcache.ErrCacheMiss) {
					// A pooled connection may predate a server restart
					// by an earlier check (EOF): once more, on a fresh one.
					err = admin.Delete(ItemKey(DefaultPrefix, key))
				}
				return err
			},
			NewLinkedLocker: func(ctx context.Context) (*distlock.Locker, conformance.Link, error) {
				p, err := netfault.Listen(addr)
				if err != nil {
					return nil, nil, err
				}
				// Another address for the same server: the pin would
				// (rightly) see another server list.
				l, err := distlock.Open(ctx, "memcached://"+p.Addr()+"/?pin=off&"+query)
				if err != nil {
					_ = p.Close()
					return nil, nil, err
				}
				t.Cleanup(func() { _ = p.Close() })
				return l, p, nil
			},
		},
	}
	if srv.Controllable() {
		h.Faults.StopBackend = func(context.Context) error { return srv.Kill() }
		h.Faults.StartBackend = srv.Restart
		h.Faults.ServerFaults = []conformance.ServerFault{
			// A pause keeps the items (a restart would not: memcached
			// forgets every lock, which the suite would rightly report as
			// a violation; see TestRestartWhileHeld).
			{Name: "SIGSTOP 3s", Inject: func(context.Context) (func(context.Context) error, error) {
				return func(context.Context) error { return srv.Resume() }, srv.Pause()
			}},
		}
	}
	return h
}

// TestConformance runs the suite with the default release: the meta
// protocol's compare-and-delete; no release falls back to the tombstone
// against memcached 1.6. It and TestConformanceCASRelease run at once,
// each on a server of its own (their Alone checks one at a time, see
// conformance.Parallel).
func TestConformance(t *testing.T) {
	t.Parallel()
	st := &releaseStats[ReleaseAuto]
	runConformance(t, "", "the meta protocol", &st.metaDeletes, "the tombstone", &st.tombstones)
}

// TestConformanceCASRelease runs the suite with the fallback release forced:
// gets + cas to a tombstone that expires at once; no release uses the meta
// protocol.
func TestConformanceCASRelease(t *testing.T) {
	t.Parallel()
	st := &releaseStats[ReleaseCAS]
	runConformance(t, "release=cas", "the tombstone", &st.tombstones, "the meta protocol", &st.metaDeletes)
}

// runConformance runs the suite on a Locker opened with query, whose
// releases must use the path counted by used, and never the one counted by
// unused.
func runConformance(t *testing.T, query, usedName string, used *atomic.Int64, unusedName string, unused *atomic.Int64) {
	srv := testserver.Memcached(t, testserver.MemcachedConfig{NoEvict: true})
	usedBefore, unusedBefore := used.Load(), unused.Load()
	conformance.Run(t, harness(t, srv, query))
	if used.Load() == usedBefore {
		t.Errorf("no release used %s", usedName)
	}
	if n := unused.Load() - unusedBefore; n != 0 {
		t.Errorf("%d releases used %s (query %q)", n, unusedName, query)
	}
}
