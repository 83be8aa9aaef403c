package memcached

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testkit/benchkit"
	"github.com/distlock/distlock/internal/testkit/testserver"
)

// BenchmarkMemcached runs every memcached benchmark against one local
// memcached (-M), in one process, so the figures compare:
//
//   - floor/rtt: one gomemcache add on a held key, a single round trip;
//   - floor/add+gets+md: gomemcache and one meta md doing the lock by hand:
//     add, then the owner-checked delete (gets, md C<cas>): 3 round trips,
//     what distlock's uncontended cycle costs on the wire;
//   - acquire+release, try-acquire+release: distlock, uncontended, with the
//     meta release (and /cas with the tombstone release);
//   - handoff: 16 goroutines over 4 Lockers on one key, zero hold time:
//     handoffs/s, release-to-next-acquire latency p50/p99 (from the
//     releaser calling Release to the next holder's Acquire returning), and
//     acquire attempts per handoff (waiters poll with jittered backoff);
//   - distinct-keys: 1,000 goroutines, each on its own key, through one
//     Locker (b.RunParallel);
//   - inspect: distlock.Inspect of a held key from another Locker (one
//     meta get, "mg <key> t v c"), and /no-selector (gets, the record's
//     expiry: New without WithSelector).
func BenchmarkMemcached(b *testing.B) {
	srv := testserver.Memcached(b, testserver.MemcachedConfig{NoEvict: true, ExtraArgs: []string{"-c", "4096"}})
	ctx := context.Background()
	open := func(b *testing.B, query string, opts ...distlock.Option) distlock.Locker {
		return benchkit.Open(b, mcURL(srv, query), opts...)
	}
	cycle := func(b *testing.B, l distlock.Locker, try bool, opts ...distlock.Option) {
		benchkit.Cycle(b, l, "bench/uncontended", try, opts...)
	}

	b.Run("floor/rtt", func(b *testing.B) {
		c := memcache.New(srv.Addr())
		defer c.Close()
		_ = c.Set(&memcache.Item{Key: "bench/rtt", Value: []byte("v"), Expiration: 60})
		b.ReportAllocs()
		for b.Loop() {
			if err := c.Add(&memcache.Item{Key: "bench/rtt", Value: []byte("v"), Expiration: 15}); !errors.Is(err, memcache.ErrNotStored) {
				b.Fatal(err)
			}
		}
	})
	b.Run("floor/add+gets+md", func(b *testing.B) {
		c := memcache.New(srv.Addr())
		defer c.Close()
		addr, err := net.ResolveTCPAddr("tcp", srv.Addr())
		if err != nil {
			b.Fatal(err)
		}
		p := newRawPool(nil, time.Second, 2)
		defer p.close()
		b.ReportAllocs()
		for b.Loop() {
			val := []byte(randomID(tenureBytes))
			if err := c.Add(&memcache.Item{Key: "bench/floor", Value: val, Expiration: 15}); err != nil {
				b.Fatal(err)
			}
			it, err := c.Get("bench/floor")
			if err != nil || string(it.Value) != string(val) {
				b.Fatal(err)
			}
			if res, err := p.metaDelete(ctx, addr, "bench/floor", it.CasID); err != nil || res != mdDeleted {
				b.Fatal(res, err)
			}
		}
	})
	b.Run("acquire+release", func(b *testing.B) { cycle(b, open(b, ""), false) })
	b.Run("try-acquire+release", func(b *testing.B) { cycle(b, open(b, ""), true) })
	b.Run("try-acquire+release/no-auto-refresh", func(b *testing.B) {
		cycle(b, open(b, ""), true, distlock.WithAutoRefresh(false))
	})
	b.Run("try-acquire+release/cas", func(b *testing.B) { cycle(b, open(b, "release=cas"), true) })
	b.Run("handoff", func(b *testing.B) { benchHandoff(b, srv, "") })
	b.Run("handoff/cas", func(b *testing.B) { benchHandoff(b, srv, "release=cas") })
	b.Run("distinct-keys", func(b *testing.B) { benchkit.DistinctKeys(b, open(b, "max_idle=64")) })
	inspect := func(b *testing.B, l distlock.Locker) {
		holder := open(b, "")
		lease, err := holder.TryAcquire(ctx, "bench/inspect", distlock.WithMetadata("bench"))
		if err != nil {
			b.Fatal(err)
		}
		defer func() { _ = lease.Release(ctx) }()
		b.ReportAllocs()
		for b.Loop() {
			if info, err := distlock.Inspect(ctx, l, "bench/inspect"); err != nil || !info.Held {
				b.Fatal(info, err)
			}
		}
	}
	b.Run("inspect", func(b *testing.B) { inspect(b, open(b, "")) })
	b.Run("inspect/no-selector", func(b *testing.B) {
		c := memcache.New(srv.Addr())
		l, err := New(c)
		if err != nil {
			b.Fatal(err)
		}
		defer func() { _ = l.Close(); _ = c.Close() }()
		inspect(b, l)
	})
}

// benchHandoff: 16 goroutines over 4 Lockers contend for one key with zero
// hold time. One op is one acquisition (one handoff).
func benchHandoff(b *testing.B, srv *testserver.Server, query string) {
	const lockers, goroutines = 4, 16
	ctx := context.Background()
	ls := make([]distlock.Locker, lockers)
	drivers := make([]*countingDriver, lockers)
	for i := range ls {
		d := openDriver(b, mcURL(srv, query))
		drivers[i] = &countingDriver{driver: d}
		ls[i] = distlock.New(drivers[i], "memcached")
	}
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	const key = "bench/hot"
	for _, l := range ls { // warm up: connections dialled, server pinned
		lease, err := l.Acquire(ctx, key)
		if err != nil {
			b.Fatal(err)
		}
		_ = lease.Release(ctx)
	}
	var before int64
	for _, d := range drivers {
		before += d.attempts.Load()
	}
	benchkit.Handoff(b, ctx, ls, key, goroutines)
	var after int64
	for _, d := range drivers {
		after += d.attempts.Load()
	}
	b.ReportMetric(float64(after-before)/float64(b.N), "attempts/handoff")
}
