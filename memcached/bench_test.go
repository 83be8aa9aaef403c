package memcached

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testkit/benchkit"
	"github.com/distlock/distlock/internal/testkit/testserver"
	"github.com/stretchr/testify/require"
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
//   - inspect: Locker.Inspect of a held key from another Locker (one
//     meta get, "mg <key> t v c"), and /no-selector (gets, the record's
//     expiry: New without WithSelector).
func BenchmarkMemcached(b *testing.B) {
	srv := testserver.Memcached(b, testserver.MemcachedConfig{NoEvict: true, ExtraArgs: []string{"-c", "4096"}})
	ctx := context.Background()
	open := func(b *testing.B, query string, opts ...distlock.Option) *distlock.Locker {
		return benchkit.Open(b, mcURL(srv, query), opts...)
	}
	cycle := func(b *testing.B, l *distlock.Locker, try bool, opts ...distlock.Option) {
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
		require.NoError(b, err)
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
	inspect := func(b *testing.B, l *distlock.Locker) {
		holder := open(b, "")
		lease, err := holder.TryAcquire(ctx, "bench/inspect", distlock.WithMetadata("bench"))
		require.NoError(b, err)
		defer func() { _ = lease.Release(ctx) }()
		b.ReportAllocs()
		for b.Loop() {
			if info, err := l.Inspect(ctx, "bench/inspect"); err != nil || !info.Held {
				b.Fatal(info, err)
			}
		}
	}
	b.Run("inspect", func(b *testing.B) { inspect(b, open(b, "")) })
	b.Run("inspect/no-selector", func(b *testing.B) {
		c := memcache.New(srv.Addr())
		l, err := New(c)
		require.NoError(b, err)
		defer func() { _ = l.Close(); _ = c.Close() }()
		inspect(b, l)
	})
}

// benchHandoff: 16 goroutines over 4 Lockers contend for one key with zero
// hold time. One op is one acquisition (one handoff).
func benchHandoff(b *testing.B, srv *testserver.Server, query string) {
	const lockers, goroutines = 4, 16
	ctx := context.Background()
	ls := make([]*distlock.Locker, lockers)
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
		require.NoError(b, err)
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

// BenchmarkNaturalBatching measures natural batching (pipe.go) side by
// side with gomemcache's connection per request: goroutines (1 and 64)
// share one Locker (URL defaults: 16 idle connections) and cycle
// TryAcquire+Release, each with a ctx that has a deadline, over 1,000
// distinct keys (goroutine i cycles through its own keys, ≡ i mod
// goroutines: no contention). It reports cycles/s, the server's requests
// per cycle (its get, set, touch and delete counters), the round trips
// (writes on the client's connections) and the dials per cycle.
// goroutines=N/paired alternates blocks of cycles (64×10, or 50 for a
// lone goroutine) between an
// unbatched and a batched Locker and reports the median rate of each and
// their ratio: a side-by-side comparison immune to the load of other
// processes, which drifts between sub-benchmarks.
func BenchmarkNaturalBatching(b *testing.B) {
	srv := testserver.Memcached(b, testserver.MemcachedConfig{NoEvict: true, ExtraArgs: []string{"-c", "4096"}})
	for _, n := range []int{1, 64} {
		for _, batched := range []bool{false, true} {
			name := fmt.Sprintf("goroutines=%d/unbatched", n)
			if batched {
				name = fmt.Sprintf("goroutines=%d/batched", n)
			}
			b.Run(name, func(b *testing.B) { benchBatching(b, srv, n, batched) })
		}
	}
	// paired: blocks of cycles alternate between an unbatched and a
	// batched Locker; one op is one block.
	for _, n := range []int{1, 64} {
		b.Run(fmt.Sprintf("goroutines=%d/paired", n), func(b *testing.B) {
			var ls [2]*distlock.Locker
			for i := range ls {
				ls[i], _ = benchLocker(b, srv, i == 1)
				require.NoError(b, batchCycle(ls[i], "bench/batch/warm"))
			}
			per := 10 // cycles per goroutine and block
			if n == 1 {
				per = 50
			}
			var took [2][]time.Duration
			for i := 0; b.Loop(); i++ {
				w := i % 2
				start := time.Now()
				var wg sync.WaitGroup
				for g := range n {
					wg.Go(func() {
						for j := range per {
							if err := batchCycle(ls[w], fmt.Sprintf("bench/batch/%d", g+n*j)); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
				took[w] = append(took[w], time.Since(start))
			}
			if len(took[1]) == 0 {
				return
			}
			x, y := medianOf(took[0]), medianOf(took[1])
			cycles := float64(per * n)
			b.ReportMetric(cycles/x.Seconds(), "unbatched-cycles/s")
			b.ReportMetric(cycles/y.Seconds(), "batched-cycles/s")
			b.ReportMetric(float64(x)/float64(y), "speedup")
		})
	}
}

func medianOf(d []time.Duration) time.Duration {
	slices.Sort(d)
	return d[len(d)/2]
}

// benchCounters count a benchmark Locker's dials and writes.
type benchCounters struct{ writes, dials atomic.Int64 }

// benchLocker is a Locker on srv as the URL opener makes it (selector,
// 16 idle connections), with natural batching or without, whose
// connections are counted.
func benchLocker(b *testing.B, srv *testserver.Server, batched bool) (*distlock.Locker, *benchCounters) {
	cnt := new(benchCounters)
	client := memcache.New(srv.Addr())
	client.Timeout = 5 * time.Second
	client.MaxIdleConns = defaultURLMaxIdle
	client.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		cnt.dials.Add(1)
		return &countingConn{Conn: c, writes: &cnt.writes}, nil
	}
	ss := new(memcache.ServerList)
	require.NoError(b, ss.SetServers(srv.Addr()))
	l, err := New(client, WithSelector(ss), WithCloseClient())
	require.NoError(b, err)
	b.Cleanup(func() { _ = l.Close() })
	if !batched {
		driverOf(l).pipes = nil
	}
	return l, cnt
}

// batchCycle is TryAcquire+Release of key on l, within a deadline.
func batchCycle(l *distlock.Locker, key string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lease, err := l.TryAcquire(ctx, key)
	if err != nil {
		return err
	}
	return lease.Release(ctx)
}

func benchBatching(b *testing.B, srv *testserver.Server, goroutines int, batched bool) {
	const keys = 1000
	l, cnt := benchLocker(b, srv, batched)
	if err := batchCycle(l, "bench/batch/warm"); err != nil { // pin checked, connections dialled
		b.Fatal(err)
	}
	reqs0, writes0, dials0 := serverRequests(b, srv.Addr()), cnt.writes.Load(), cnt.dials.Load()
	var left atomic.Int64
	left.Store(int64(b.N))
	var wg sync.WaitGroup
	start := time.Now()
	b.ResetTimer()
	for g := range goroutines {
		wg.Go(func() {
			for i := 0; left.Add(-1) >= 0; i++ {
				if err := batchCycle(l, fmt.Sprintf("bench/batch/%d", g+goroutines*(i%(keys/goroutines)))); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(n/elapsed.Seconds(), "cycles/s")
	b.ReportMetric(float64(serverRequests(b, srv.Addr())-reqs0)/n, "requests/cycle")
	b.ReportMetric(float64(cnt.writes.Load()-writes0)/n, "roundtrips/cycle")
	b.ReportMetric(float64(cnt.dials.Load()-dials0)/n, "dials/cycle")
}

// countingConn counts the writes on a connection.
type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// serverRequests is the sum of the server's get, set (add, cas), touch
// and delete (md) counters.
func serverRequests(t testing.TB, addr string) int64 {
	var n int64
	for _, line := range rawCmd(t, addr, "stats", func(l string) bool { return l == "END" }) {
		f := strings.Fields(line)
		if len(f) != 3 {
			continue
		}
		switch f[1] {
		case "cmd_get", "cmd_set", "cmd_touch", "delete_hits", "delete_misses":
			v, _ := strconv.ParseInt(f[2], 10, 64)
			n += v
		}
	}
	return n
}
