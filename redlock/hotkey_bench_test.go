package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
)

// BenchmarkHotKey is bench/'s Redlock hot-key row inside the package: 16
// waiters over 4 Lockers contend for one key on 5 nodes, each holder
// keeping it 1ms, for hotKeyRun per op (run it with -benchtime=1x or a
// few x). A goroutine that released does not try again until another one
// acquired, so every acquisition is a handoff to a waiter. Reported:
// handoffs/s, release→next-acquire p50/p99 (of acquisitions whose call
// began before the release), acquire attempts per handoff, split votes
// per handoff (attempts granted by some nodes, but not a quorum, at their
// decision), refusals at the gate per handoff (attempts that asked one
// node), the 5 servers' commands and CPU µs per handoff (INFO), and
// the acquisitions that failed unavailable (a node slower than the 50ms
// per-node timeout on a loaded machine), which are tried again.
func BenchmarkHotKey(b *testing.B) {
	c := startCluster(b, 5)
	for _, tc := range []struct {
		lockers, waiters int
	}{{4, 16}, {4, 4}, {1, 16}} {
		b.Run(fmt.Sprintf("lockers=%d/waiters=%d", tc.lockers, tc.waiters), func(b *testing.B) {
			var agg []hotKeyResult
			for range b.N {
				agg = append(agg, hotKey(b, c.addrs(), tc.lockers, tc.waiters, time.Millisecond, hotKeyRun))
			}
			med := func(f func(hotKeyResult) float64) float64 {
				v := make([]float64, len(agg))
				for i, r := range agg {
					v[i] = f(r)
				}
				slices.Sort(v)
				return v[len(v)/2]
			}
			b.ReportMetric(med(func(r hotKeyResult) float64 { return r.perSec }), "handoffs/s")
			b.ReportMetric(med(func(r hotKeyResult) float64 { return r.p50 }), "p50-µs")
			b.ReportMetric(med(func(r hotKeyResult) float64 { return r.p99 }), "p99-µs")
			b.ReportMetric(med(func(r hotKeyResult) float64 { return r.attempts }), "attempts/handoff")
			b.ReportMetric(med(func(r hotKeyResult) float64 { return r.split }), "splits/handoff")
			b.ReportMetric(med(func(r hotKeyResult) float64 { return r.gated }), "gate-refusals/handoff")
			b.ReportMetric(med(func(r hotKeyResult) float64 { return r.cmds }), "cmds/handoff")
			b.ReportMetric(med(func(r hotKeyResult) float64 { return r.cpu }), "srv-cpu-µs/handoff")
			b.ReportMetric(med(func(r hotKeyResult) float64 { return r.errs }), "unavailable/run")
		})
	}
}

// hotKeyRun bounds one hot-key run.
const hotKeyRun = 2 * time.Second

type hotKeyResult struct {
	perSec, p50, p99, attempts, split, gated, cmds, cpu float64
	errs                                                float64 // unavailable answers per run
}

func hotKey(b *testing.B, addrs []string, lockers, waiters int, hold, dur time.Duration) hotKeyResult {
	b.Helper()
	var attempts, split, gated atomic.Int64
	ls := make([]*distlock.Locker, lockers)
	for i := range ls {
		l := newTestLocker(b, addrs)
		d := driverOf(l)
		d.onAttempt = func(t tally) {
			attempts.Add(1)
			if t.yes+t.no+t.failed == 1 {
				gated.Add(1)
			}
			if t.yes > 0 && t.yes < d.quorum {
				split.Add(1)
			}
		}
		warm(b, l)
		ls[i] = l
	}
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	const key = "bench/hotkey"
	ctx, cancel := context.WithTimeout(context.Background(), dur)
	defer cancel()
	load0 := serverLoad(b, addrs)
	attempts.Store(0)
	split.Store(0)
	gated.Store(0)
	var (
		base        = time.Now()
		lastRelease atomic.Int64
		count       atomic.Int64
		mu          sync.Mutex
		lat         []time.Duration
		wg          sync.WaitGroup
		turn        = newTurn(ctx)
		failed      atomic.Pointer[error]
		errs        atomic.Int64
	)
	for g := range waiters {
		l := ls[g%lockers]
		wg.Go(func() {
			var mine []time.Duration
			defer func() {
				mu.Lock()
				lat = append(lat, mine...)
				mu.Unlock()
			}()
			for ctx.Err() == nil {
				called := int64(time.Since(base))
				lease, err := l.Acquire(ctx, key)
				if err != nil {
					if ctx.Err() != nil {
						return
					}
					if !errors.Is(err, distlock.ErrUnavailable) {
						failed.Store(&err)
						return
					}
					// A node slower than the per-node timeout on a
					// loaded machine: counted, and tried again.
					errs.Add(1)
					time.Sleep(time.Millisecond)
					continue
				}
				now := int64(time.Since(base))
				if r := lastRelease.Load(); r > called {
					mine = append(mine, time.Duration(now-r))
				}
				count.Add(1)
				e := turn.advance()
				time.Sleep(hold)
				lastRelease.Store(int64(time.Since(base)))
				if err := lease.Release(context.Background()); err != nil {
					failed.Store(&err)
					return
				}
				turn.waitPast(e)
			}
		})
	}
	wg.Wait()
	el := time.Since(base)
	if p := failed.Load(); p != nil {
		b.Fatal(*p)
	}
	n := float64(max(count.Load(), 1))
	load1 := serverLoad(b, addrs)
	slices.Sort(lat)
	pct := func(p float64) float64 {
		if len(lat) == 0 {
			return 0
		}
		return float64(lat[int(float64(len(lat)-1)*p)]) / float64(time.Microsecond)
	}
	return hotKeyResult{
		perSec:   float64(count.Load()) / el.Seconds(),
		p50:      pct(.5),
		p99:      pct(.99),
		attempts: float64(attempts.Load()) / n,
		split:    float64(split.Load()) / n,
		gated:    float64(gated.Load()) / n,
		cmds:     float64(load1.cmds-load0.cmds) / n,
		cpu:      (load1.cpu - load0.cpu) * 1e6 / n,
		errs:     float64(errs.Load()),
	}
}

// turn lets a goroutine that released wait until another acquired.
type turn struct {
	mu   sync.Mutex
	cond *sync.Cond
	n    int64
	done bool
}

func newTurn(ctx context.Context) *turn {
	t := &turn{}
	t.cond = sync.NewCond(&t.mu)
	context.AfterFunc(ctx, func() {
		t.mu.Lock()
		t.done = true
		t.mu.Unlock()
		t.cond.Broadcast()
	})
	return t
}

func (t *turn) advance() int64 {
	t.mu.Lock()
	t.n++
	n := t.n
	t.mu.Unlock()
	t.cond.Broadcast()
	return n
}

func (t *turn) waitPast(n int64) {
	t.mu.Lock()
	for t.n <= n && !t.done {
		t.cond.Wait()
	}
	t.mu.Unlock()
}

// load is what the servers did so far: commands processed and CPU seconds.
type load struct {
	cmds int64
	cpu  float64
}

func serverLoad(b *testing.B, addrs []string) load {
	b.Helper()
	var l load
	for _, a := range addrs {
		c := goredis.NewClient(&goredis.Options{Addr: a})
		info, err := c.Info(context.Background(), "stats", "cpu").Result()
		_ = c.Close()
		if err != nil {
			b.Fatalf("INFO on %s: %v", a, err)
		}
		for _, line := range strings.Split(info, "\n") {
			k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
			if !ok {
				continue
			}
			switch k {
			case "total_commands_processed":
				n, _ := strconv.ParseInt(v, 10, 64)
				l.cmds += n
			case "used_cpu_user", "used_cpu_sys":
				f, _ := strconv.ParseFloat(v, 64)
				l.cpu += f
			}
		}
	}
	return l
}
