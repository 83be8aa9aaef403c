package redlock

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testkit/benchkit"
	"github.com/distlock/distlock/internal/testkit/netfault"
	"github.com/distlock/distlock/internal/testkit/testserver"
	_ "github.com/distlock/distlock/redis" // the single-node backend, for comparison
)

// BenchmarkRedlock runs against 5 local redis-servers (Redlock) and a 6th
// (the single-node redis backend, for comparison), in one process:
//
//   - acquire+release/redlock-5, acquire+release/redis: uncontended
//     Acquire and Release, separately;
//   - paired: the two cycles alternating in blocks of 100 within one run,
//     reporting the median per-cycle time of each and their ratio — the
//     comparison that survives a noisy machine. On loopback a round trip is
//     almost all CPU (client, kernel, server), so 5 nodes cost about 5
//     times the CPU, and on a 2-core machine that shared with 6 servers the
//     ratio is CPU-bound, not latency-bound;
//   - floor: the ratio's floor on this machine, interleaved in one run:
//     p50 of one PING to one redis-server and of five parallel PINGs (one
//     goroutine each) to the five nodes, and p50 of the single-node and
//     Redlock cycles (a cycle is two such round trips);
//   - paired/rtt-2ms: the same behind proxies adding about 2ms of round
//     trip: the fan-out is parallel, so the ratio stays near 1 (target
//     <= 1.5), not near 5;
//   - handoff: 16 goroutines over 4 Lockers on one key, zero hold time:
//     handoffs/s, release-to-next-acquire latency p50/p99, acquire attempts
//     per handoff (counted on node 0) and release messages and wake-ups per
//     handoff (summed over the 5 nodes' subscribers);
//   - handoff/redis: the same on the single-node backend, for reference.
func BenchmarkRedlock(b *testing.B) {
	c := startCluster(b, 5)
	single := testserver.Redis(b, testserver.RedisConfig{})
	redlockURLOf := redlockURL
	redlockURL := redlockURL(c.addrs(), "")
	redisURL := "redis://" + single.Addr() + "/0"
	open := func(b *testing.B, url string) *distlock.Locker { return benchkit.Open(b, url) }
	cycle := func(b *testing.B, l *distlock.Locker) { benchkit.Cycle(b, l, "bench/uncontended", false) }
	b.Run("acquire+release/redlock-5", func(b *testing.B) { cycle(b, open(b, redlockURL)) })
	b.Run("acquire+release/redis", func(b *testing.B) { cycle(b, open(b, redisURL)) })
	b.Run("paired", func(b *testing.B) { benchPaired(b, open(b, redisURL), open(b, redlockURL), 100) })
	b.Run("floor", func(b *testing.B) {
		benchFloor(b, c.addrs(), single.Addr(), open(b, redisURL), open(b, redlockURL), 50)
	})
	// The same with a network between client and servers: every node (and
	// the single Redis) behind an in-process proxy delaying each chunk by
	// 1ms each way (a ~2ms round trip). Here the round trip, not CPU,
	// dominates, as across real networks, and the parallel fan-out shows.
	b.Run("paired/rtt-2ms", func(b *testing.B) {
		g, err := netfault.ListenGroup(append(c.addrs(), single.Addr())...)
		if err != nil {
			b.Fatal(err)
		}
		defer g.Close()
		g.SetLatency(time.Millisecond)
		addrs := g.Addrs()
		benchPaired(b, open(b, "redis://"+addrs[5]+"/0"), open(b, redlockURLOf(addrs[:5], "")), 10)
	})
	b.Run("handoff", func(b *testing.B) { benchHandoff(b, c.addrs(), 4, 16) })
	b.Run("handoff/redis", func(b *testing.B) {
		ls := make([]*distlock.Locker, 4)
		for i := range ls {
			ls[i] = open(b, redisURL)
		}
		handoff(b, ls, 16)
	})
}

// benchPaired alternates blocks of single-node and Redlock cycles; one op
// is one block of each.
func benchPaired(b *testing.B, single, rl *distlock.Locker, block int) {
	ctx := context.Background()
	cycles := []struct {
		name string
		l    *distlock.Locker
	}{{"redis", single}, {"redlock", rl}}
	for _, cy := range cycles { // warm: connections, scripts
		lease, err := cy.l.Acquire(ctx, "bench/paired")
		if err != nil {
			b.Fatal(err)
		}
		_ = lease.Release(ctx)
	}
	per := make([][]float64, len(cycles))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		for i, cy := range cycles {
			start := time.Now()
			for range block {
				lease, err := cy.l.Acquire(ctx, "bench/paired")
				if err != nil {
					b.Fatal(err)
				}
				if err := lease.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
			per[i] = append(per[i], float64(time.Since(start))/float64(block)/float64(time.Microsecond))
		}
	}
	b.StopTimer()
	med := make([]float64, len(cycles))
	for i := range per {
		slices.Sort(per[i])
		med[i] = per[i][len(per[i])/2]
		b.ReportMetric(med[i], cycles[i].name+"-µs")
	}
	b.ReportMetric(med[1]/med[0], "redlock/redis")
}

// benchHandoff builds lockers over their own clients, with a counter of
// acquire scripts on node 0 and the subscribers' statistics at hand.
func benchHandoff(b *testing.B, addrs []string, lockers, goroutines int) {
	ls := make([]*distlock.Locker, lockers)
	ds := make([]*driver, lockers)
	counters := make([]*acquireCounter, lockers)
	for i := range ls {
		// The URL's node timeout, as the other cases have: under load the
		// default 50ms fails the warm-up's cold attempts on every node.
		tl := newTestLocker(b, addrs, WithNodeTimeout(DefaultURLNodeTimeout))
		counters[i] = &acquireCounter{}
		driverOf(tl).nodes[0].client.(*goredis.Client).AddHook(counters[i])
		ls[i], ds[i] = tl, driverOf(tl)
	}
	stats := func() (attempts, msgs, wakes int64) {
		for i, d := range ds {
			attempts += counters[i].n.Load()
			for _, n := range d.nodes {
				st := n.sub.Stats()
				msgs += st.Messages
				wakes += st.Wakes
			}
		}
		return
	}
	a0, m0, w0 := stats()
	handoff(b, ls, goroutines)
	a1, m1, w1 := stats()
	a1, m1, w1 = a1-a0, m1-m0, w1-w0
	b.ReportMetric(float64(a1)/float64(b.N), "attempts/handoff")
	b.ReportMetric(float64(m1)/float64(b.N), "msgs/handoff")
	b.ReportMetric(float64(w1)/float64(b.N), "wakes/handoff")
}

// handoff: goroutines over lockers contend for one key with zero hold time.
// One op is one acquisition (one handoff). The latency is from the releaser
// calling Release to the next holder's Acquire returning.
func handoff(b *testing.B, ls []*distlock.Locker, goroutines int) {
	ctx := context.Background()
	const key = "bench/hot"
	for _, l := range ls { // warm: scripts loaded, subscriptions dialled
		lease, err := l.Acquire(ctx, key)
		if err != nil {
			b.Fatal(err)
		}
		_ = lease.Release(ctx)
	}
	benchkit.Handoff(b, ctx, ls, key, goroutines)
}

// benchFloor measures, interleaved in blocks, the p50 of: one PING to the
// single server, five parallel PINGs to the five nodes, a single-node
// cycle and a Redlock cycle. One op is one block of each.
func benchFloor(b *testing.B, five []string, one string, single, rl *distlock.Locker, block int) {
	ctx := context.Background()
	client := func(addr string) *goredis.Client {
		c := goredis.NewClient(&goredis.Options{Addr: addr})
		b.Cleanup(func() { _ = c.Close() })
		return c
	}
	c1 := client(one)
	c5 := make([]*goredis.Client, len(five))
	for i, a := range five {
		c5[i] = client(a)
	}
	cycle := func(l *distlock.Locker) func() error {
		return func() error {
			lease, err := l.TryAcquire(ctx, "bench/floor")
			if err != nil {
				return err
			}
			return lease.Release(ctx)
		}
	}
	cases := []struct {
		name string
		do   func() error
	}{
		{"ping1", func() error { return c1.Ping(ctx).Err() }},
		{"ping5", func() error {
			var wg sync.WaitGroup
			errs := make([]error, len(c5))
			for i, c := range c5 {
				wg.Go(func() { errs[i] = c.Ping(ctx).Err() })
			}
			wg.Wait()
			return errors.Join(errs...)
		}},
		{"redis", cycle(single)},
		{"redlock", cycle(rl)},
	}
	lat := make([][]time.Duration, len(cases))
	for _, c := range cases { // warm: connections, scripts
		for range 20 {
			if err := c.do(); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ResetTimer()
	for range b.N {
		for i, c := range cases {
			for range block {
				start := time.Now()
				if err := c.do(); err != nil {
					b.Fatal(err)
				}
				lat[i] = append(lat[i], time.Since(start))
			}
		}
	}
	b.StopTimer()
	p50 := make([]float64, len(cases))
	for i := range lat {
		slices.Sort(lat[i])
		p50[i] = float64(lat[i][len(lat[i])/2]) / float64(time.Microsecond)
		b.ReportMetric(p50[i], cases[i].name+"-p50-µs")
	}
	b.ReportMetric(p50[1]/p50[0], "ping5/ping1")
	b.ReportMetric(p50[3]/p50[2], "redlock/redis")
}
