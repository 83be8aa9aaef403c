package redis

import (
	"context"
	"crypto/rand"
	"encoding/base64"

	"slices"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redissub"
	"github.com/distlock/distlock/internal/testkit/benchkit"
	"github.com/distlock/distlock/internal/testkit/testserver"
	"github.com/stretchr/testify/require"
)

// randomValue is the seeds' my_random_value: 128 random bits, as distlock's
// owner ids.
func randomValue() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

const floorDelSrc = `if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end`

// BenchmarkRedis runs every Redis benchmark against one local redis-server,
// in one process, so the figures compare:
//
//   - floor/rtt: one SET NX PX, a single round trip;
//   - floor/setnx+del: go-redis alone doing the seeds' lock: SET key random
//     NX PX, then the EVALSHA compare-and-delete (2 round trips);
//   - acquire+release, try-acquire+release: distlock, uncontended (target:
//     within 1.15× of floor/setnx+del); .../metadata: with a 54-byte
//     WithMetadata, which the lock hash stores;
//   - handoff: 16 goroutines over 4 Lockers on one key, zero hold time:
//     handoffs/s, release-to-next-acquire latency p50/p99 (from the
//     releaser calling Release to the next holder's Acquire returning), and
//     acquire attempts per handoff;
//   - paired: the floor and distlock's cycles alternating in blocks of 100
//     within one run, reporting the median per-cycle time of each and their
//     ratios — the comparison that survives a noisy machine, where the
//     separate sub-benchmarks can land in different load regimes;
//   - distinct-keys: 1,000 goroutines, each on its own key, through one
//     Locker (b.RunParallel).
func BenchmarkRedis(b *testing.B) {
	srv := testserver.Redis(b, testserver.RedisConfig{})
	url := "redis://" + srv.Addr() + "/0"
	ctx := context.Background()
	open := func(b *testing.B, opts ...distlock.Option) *distlock.Locker { return benchkit.Open(b, url, opts...) }
	cycle := func(b *testing.B, l *distlock.Locker, try bool, opts ...distlock.Option) {
		benchkit.Cycle(b, l, "bench/uncontended", try, opts...)
	}

	b.Run("floor/rtt", func(b *testing.B) {
		c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
		defer c.Close()
		b.ReportAllocs()
		for b.Loop() {
			if err := c.SetArgs(ctx, "bench/rtt", "v", goredis.SetArgs{Mode: "NX", TTL: 15 * time.Second}).Err(); err != nil && err != goredis.Nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("floor/setnx+del", func(b *testing.B) {
		c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
		defer c.Close()
		del := goredis.NewScript(floorDelSrc)
		require.NoError(b, del.Load(ctx, c).Err())
		b.ReportAllocs()
		for b.Loop() {
			val := randomValue()
			ok, err := c.SetNX(ctx, "bench/floor", val, 15001*time.Millisecond).Result() // SET NX PX 15001
			if err != nil || !ok {
				b.Fatalf("SET NX PX: %v %v", ok, err)
			}
			if n, err := del.Run(ctx, c, []string{"bench/floor"}, val).Int64(); err != nil || n != 1 {
				b.Fatalf("compare-and-delete: %v %v", n, err)
			}
		}
	})
	b.Run("acquire+release", func(b *testing.B) { cycle(b, open(b), false) })
	b.Run("try-acquire+release", func(b *testing.B) { cycle(b, open(b), true) })
	b.Run("try-acquire+release/no-auto-refresh", func(b *testing.B) {
		cycle(b, open(b), true, distlock.WithAutoRefresh(false))
	})
	b.Run("try-acquire+release/no-auto-refresh/metadata", func(b *testing.B) {
		cycle(b, open(b), true, distlock.WithAutoRefresh(false), distlock.WithMetadata("host=worker-17.example pid=4242 job=nightly-report"))
	})
	b.Run("paired", func(b *testing.B) { benchPaired(b, srv.Addr()) })
	b.Run("handoff", func(b *testing.B) { benchHandoff(b, srv.Addr(), 4, 16) })
	b.Run("handoff-light", func(b *testing.B) { benchHandoff(b, srv.Addr(), 2, 2) })
	b.Run("distinct-keys", func(b *testing.B) { benchkit.DistinctKeys(b, open(b)) })
}

// benchPaired alternates blocks of floor and distlock cycles; one op is
// one block of each.
func benchPaired(b *testing.B, addr string) {
	ctx := context.Background()
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	defer c.Close()
	del := goredis.NewScript(floorDelSrc)
	require.NoError(b, del.Load(ctx, c).Err())
	l, err := distlock.Open(ctx, "redis://"+addr+"/0")
	require.NoError(b, err)
	defer l.Close()
	fair, err := distlock.Open(ctx, "redis://"+addr+"/0?fair=true")
	require.NoError(b, err)
	defer fair.Close()
	cycles := []struct {
		name string
		fn   func() error
	}{
		{"floor", func() error {
			val := randomValue()
			if err := c.SetNX(ctx, "bench/paired/floor", val, 15001*time.Millisecond).Err(); err != nil {
				return err
			}
			return del.Run(ctx, c, []string{"bench/paired/floor"}, val).Err()
		}},
		{"acquire", func() error {
			lease, err := l.Acquire(ctx, "bench/paired/acquire")
			if err != nil {
				return err
			}
			return lease.Release(ctx)
		}},
		{"try", func() error {
			lease, err := l.TryAcquire(ctx, "bench/paired/try")
			if err != nil {
				return err
			}
			return lease.Release(ctx)
		}},
		{"fair-try", func() error {
			lease, err := fair.TryAcquire(ctx, "bench/paired/fair")
			if err != nil {
				return err
			}
			return lease.Release(ctx)
		}},
	}
	const block = 100
	per := make([][]float64, len(cycles))
	b.ResetTimer()
	for range b.N {
		for i, cy := range cycles {
			start := time.Now()
			for range block {
				if err := cy.fn(); err != nil {
					b.Fatal(err)
				}
			}
			per[i] = append(per[i], float64(time.Since(start))/block/float64(time.Microsecond))
		}
	}
	b.StopTimer()
	med := make([]float64, len(cycles))
	for i := range per {
		slices.Sort(per[i])
		med[i] = per[i][len(per[i])/2]
		b.ReportMetric(med[i], cycles[i].name+"-µs")
	}
	b.ReportMetric(med[1]/med[0], "acquire/floor")
	b.ReportMetric(med[2]/med[0], "try/floor")
	b.ReportMetric(med[3]/med[2], "fair/try")
}

// medianRTT is the median time of n single SET NX PX round trips.
func medianRTT(ctx context.Context, c *goredis.Client, n int) time.Duration {
	d := make([]time.Duration, n)
	for i := range d {
		start := time.Now()
		_ = c.SetArgs(ctx, "bench/rtt", "v", goredis.SetArgs{Mode: "NX", TTL: 15 * time.Second}).Err()
		d[i] = time.Since(start)
	}
	slices.Sort(d)
	return d[n/2]
}

// benchHandoff: goroutines over lockers contend for one key with zero hold
// time. One op is one acquisition (one handoff). Besides the latency it
// reports, per handoff, the acquire attempts (hook on each client), the
// release messages received and the waiter wake-ups they caused: attempts
// ≈ wake-ups + the initial try and post-subscribe retry of each wait shows
// that no attempt comes from polling.
func benchHandoff(b *testing.B, addr string, lockers, goroutines int) {
	ctx := context.Background()
	ls := make([]*testLocker, lockers)
	counters := make([]*cmdCounter, lockers)
	for i := range ls {
		client := goredis.NewClient(&goredis.Options{Addr: addr})
		counters[i] = newAcquireCounter()
		client.AddHook(counters[i])
		c, err := newConfig([]Option{WithPrefix("bench:"), WithCloseClient()})
		require.NoError(b, err)
		d, err := newDriver(client, c)
		require.NoError(b, err)
		ls[i] = &testLocker{Locker: distlock.New(d, "redis"), d: d, client: client}
	}
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	const key = "bench/hot"
	// Warm up: scripts loaded, subscriptions dialled.
	for _, l := range ls {
		lease, err := l.Acquire(ctx, key)
		require.NoError(b, err)
		_ = lease.Release(ctx)
	}
	rtt := medianRTT(ctx, ls[0].client, 500)
	var before int64
	var sBefore redissub.SubscriberStats
	for i, c := range counters {
		before += c.n.Load()
		st := ls[i].d.sub.Stats()
		sBefore.Messages += st.Messages
		sBefore.Wakes += st.Wakes
	}
	all := make([]*distlock.Locker, len(ls))
	for i, l := range ls {
		all[i] = l.Locker
	}
	res := benchkit.Handoff(b, ctx, all, key, goroutines)
	var after int64
	var sAfter redissub.SubscriberStats
	for i, c := range counters {
		after += c.n.Load()
		st := ls[i].d.sub.Stats()
		sAfter.Messages += st.Messages
		sAfter.Wakes += st.Wakes
	}
	b.ReportMetric(float64(after-before)/float64(b.N), "attempts/handoff")
	b.ReportMetric(float64(sAfter.Messages-sBefore.Messages)/float64(b.N), "msgs/handoff")
	b.ReportMetric(float64(sAfter.Wakes-sBefore.Wakes)/float64(b.N), "wakes/handoff")
	rttAfter := medianRTT(ctx, ls[0].client, 500)
	rttUS := float64((rtt+rttAfter)/2) / float64(time.Microsecond)
	b.ReportMetric(rttUS, "rtt-µs")
	b.ReportMetric(float64(res.P50)/float64(time.Microsecond)/rttUS, "p50-rtts")
}
