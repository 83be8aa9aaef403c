package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

func pct(s []time.Duration, p float64) time.Duration {
	if len(s) == 0 {
		return 0
	}
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

type uncontended struct{ p50, p99, allocs float64 } // µs, µs, mallocs/cycle

// measureUncontended runs cycles acquire+release cycles on one key with one
// instance, after a warm-up.
func measureUncontended(l lib, addrs []string, key string, cycles int) (uncontended, error) {
	in := l.make(addrs)
	defer in.close()
	ctx := context.Background()
	acq := in.bind(key, false)
	cycle := func() error {
		h, err := acq(ctx)
		if err != nil {
			return err
		}
		return h.release(ctx)
	}
	for range 200 {
		if err := cycle(); err != nil {
			return uncontended{}, fmt.Errorf("%s warm-up: %w", l.name, err)
		}
	}
	lat := make([]time.Duration, 0, cycles)
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	fails := 0
	for range cycles {
		t := time.Now()
		if err := cycle(); err != nil {
			// A rare failed cycle (a Redlock node timeout on a loaded
			// machine) is counted, not fatal; more than 1% is.
			if fails++; fails > cycles/100 {
				return uncontended{}, fmt.Errorf("%s: %d failed cycles, last: %w", l.name, fails, err)
			}
			fmt.Fprintf(os.Stderr, "peers: %s: failed cycle (%d so far): %v\n", l.name, fails, err)
			continue
		}
		lat = append(lat, time.Since(t))
	}
	runtime.ReadMemStats(&m1)
	slices.Sort(lat)
	return uncontended{
		p50:    us(pct(lat, .5)),
		p99:    us(pct(lat, .99)),
		allocs: float64(m1.Mallocs-m0.Mallocs) / float64(cycles),
	}, nil
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

type handoff struct {
	perSec, p50, p99 float64 // acquisitions/s, µs, µs
	otherSec         float64 // acquisitions/s by a goroutine other than the previous holder
	failures         float64 // acquisitions that gave up (retry limit), per run
	errs             float64 // other errors
}

// measureHandoff: waiters goroutines over nInst instances contend for one
// key with zero hold time for dur.
func measureHandoff(l lib, addrs []string, key string, nInst, waiters int, dur time.Duration) (handoff, error) {
	ins := make([]inst, nInst)
	for i := range ins {
		ins[i] = l.make(addrs)
	}
	defer func() {
		for _, in := range ins {
			in.close()
		}
	}()
	// Warm up every instance (scripts loaded, connections dialled).
	for _, in := range ins {
		wctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		h, err := in.bind(key, false)(wctx)
		if err == nil {
			err = h.release(wctx)
		}
		cancel()
		if err != nil {
			return handoff{}, fmt.Errorf("%s warm-up: %w", l.name, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), dur)
	defer cancel()
	var (
		base        = time.Now()
		lastRelease atomic.Int64
		lastHolder  atomic.Int64
		count       atomic.Int64
		others      atomic.Int64
		fails, errs atomic.Int64
		mu          sync.Mutex
		lat         []time.Duration
		wg          sync.WaitGroup
	)
	for g := range waiters {
		acq := ins[g%nInst].bind(key, true)
		wg.Go(func() {
			var mine []time.Duration
			for ctx.Err() == nil {
				h, err := acq(ctx)
				if err != nil {
					if ctx.Err() != nil {
						break
					}
					if errors.Is(err, errGaveUp) {
						fails.Add(1)
					} else {
						errs.Add(1)
						time.Sleep(time.Millisecond)
					}
					continue
				}
				now := int64(time.Since(base))
				// Latency only for handoffs to another goroutine: a polling
				// releaser re-grabbing at once is not a handoff.
				if r := lastRelease.Load(); r != 0 && lastHolder.Load() != int64(g) {
					mine = append(mine, time.Duration(now-r))
					others.Add(1)
				}
				lastHolder.Store(int64(g))
				count.Add(1)
				lastRelease.Store(int64(time.Since(base)))
				rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
				if err := h.release(rctx); err != nil {
					errs.Add(1)
				}
				rcancel()
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	el := time.Since(base)
	slices.Sort(lat)
	return handoff{
		perSec:   float64(count.Load()) / el.Seconds(),
		otherSec: float64(others.Load()) / el.Seconds(),
		p50:      us(pct(lat, .5)),
		p99:      us(pct(lat, .99)),
		failures: float64(fails.Load()),
		errs:     float64(errs.Load()),
	}, nil
}

// measureDistinct: goroutines over nInst instances cycle through nKeys
// distinct keys (each goroutine its own subset, so no contention) for dur.
func measureDistinct(l lib, addrs []string, prefix string, nInst, goroutines, nKeys int, dur time.Duration) (float64, error) {
	ins := make([]inst, nInst)
	for i := range ins {
		ins[i] = l.make(addrs)
	}
	defer func() {
		for _, in := range ins {
			in.close()
		}
	}()
	keys := make([]string, nKeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s/%d", prefix, i)
	}
	for _, in := range ins { // warm-up
		h, err := in.bind(keys[0]+"w", false)(context.Background())
		if err != nil {
			return 0, fmt.Errorf("%s warm-up: %w", l.name, err)
		}
		_ = h.release(context.Background())
	}
	ctx, cancel := context.WithTimeout(context.Background(), dur)
	defer cancel()
	var count atomic.Int64
	var firstErr atomic.Pointer[error]
	var wg sync.WaitGroup
	start := time.Now()
	for g := range goroutines {
		in := ins[g%nInst]
		wg.Go(func() {
			for i := g; ctx.Err() == nil; i += goroutines {
				if i >= nKeys {
					i = g
				}
				h, err := in.bind(keys[i], false)(ctx)
				if err != nil {
					if ctx.Err() == nil {
						firstErr.CompareAndSwap(nil, &err)
					}
					continue
				}
				if err := h.release(context.Background()); err != nil {
					firstErr.CompareAndSwap(nil, &err)
				}
				count.Add(1)
			}
		})
	}
	wg.Wait()
	el := time.Since(start)
	if p := firstErr.Load(); p != nil {
		return 0, fmt.Errorf("%s: %w", l.name, *p)
	}
	return float64(count.Load()) / el.Seconds(), nil
}
