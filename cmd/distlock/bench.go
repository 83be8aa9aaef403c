package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/distlock/distlock"
)

// BenchReport is what bench measures. Latencies are in microseconds.
type BenchReport struct {
	Backend string `json:"backend"`
	// Uncontended: one client, Acquire+Release cycles on a free key.
	Uncontended struct {
		Cycles       int     `json:"cycles"`
		CyclesPerSec float64 `json:"cycles_per_sec"`
		AcquireP50us float64 `json:"acquire_p50_us"`
		AcquireP99us float64 `json:"acquire_p99_us"`
		CycleP50us   float64 `json:"cycle_p50_us"`
	} `json:"uncontended"`
	// Contended: Clients goroutines over Lockers clients on Keys keys,
	// zero hold time.
	Contended struct {
		Clients        int     `json:"clients"`
		Lockers        int     `json:"lockers"`
		Keys           int     `json:"keys"`
		Handoffs       int     `json:"handoffs"`
		HandoffsPerSec float64 `json:"handoffs_per_sec"`
		HandoffP50us   float64 `json:"handoff_p50_us"`
		HandoffP99us   float64 `json:"handoff_p99_us"`
		AcquireP50us   float64 `json:"acquire_p50_us"`
		AcquireP99us   float64 `json:"acquire_p99_us"`
		Errors         int     `json:"errors"`
	} `json:"contended"`
}

func cmdBench(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("bench", "bench [--backend URL] [--clients N] [--keys K] [--duration D] [--json]", "Measures uncontended Acquire+Release cycles, then contended handoffs, each for --duration; progress goes to stderr.", stdout)
	backendFlagValue := backendFlag(fs, "mem://")
	clients := fs.Int("clients", 16, "contending goroutines")
	lockers := fs.Int("lockers", 4, "independent clients (Lockers) the goroutines are spread over")
	keys := fs.Int("keys", 1, "distinct keys the contending goroutines share")
	duration := fs.Duration("duration", 5*time.Second, "length of each phase")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	if st := parseFlags(fs, args, stderr); st >= 0 {
		return st
	}
	switch {
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "distlock bench: unexpected argument %q\n", fs.Arg(0))
		return ExitUsage
	case *clients < 1 || *keys < 1 || *lockers < 1 || *duration <= 0:
		fmt.Fprintln(stderr, "distlock bench: --clients, --keys, --lockers and --duration must be positive")
		return ExitUsage
	}
	*lockers = min(*lockers, *clients)
	url := backendURL(*backendFlagValue, "mem://")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	ls := make([]*distlock.Locker, *lockers)
	for i := range ls {
		l, err := distlock.Open(ctx, url)
		if err != nil {
			fmt.Fprintf(stderr, "distlock bench: %s\n", errLine(err))
			return exitFor(err)
		}
		defer l.Close()
		ls[i] = l
	}
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	prefix := "distlock-bench/" + hex.EncodeToString(rnd[:]) + "/"
	rep := BenchReport{Backend: redactURL(url)}
	fmt.Fprintf(stderr, "distlock bench: uncontended: 1 client, Acquire+Release cycles for %v...\n", *duration)
	if err := benchUncontended(ctx, ls[0], prefix, *duration, &rep); err != nil {
		fmt.Fprintf(stderr, "distlock bench: uncontended: %s\n", errLine(err))
		return exitFor(err)
	}
	fmt.Fprintf(stderr, "distlock bench: uncontended: %d cycles, %.0f/s\n", rep.Uncontended.Cycles, rep.Uncontended.CyclesPerSec)
	fmt.Fprintf(stderr, "distlock bench: contended: %d clients over %d Lockers on %d key(s) for %v...\n", *clients, *lockers, *keys, *duration)
	benchContended(ctx, ls, prefix, *clients, *keys, *duration, &rep)
	fmt.Fprintf(stderr, "distlock bench: contended: %d handoffs, %.0f/s\n", rep.Contended.Handoffs, rep.Contended.HandoffsPerSec)
	if *asJSON {
		writeJSON(stdout, rep)
		return ExitOK
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	u, c := rep.Uncontended, rep.Contended
	fmt.Fprintf(tw, "backend\t%s\n", rep.Backend)
	fmt.Fprintf(tw, "uncontended cycles/s\t%.0f\t(%d Acquire+Release cycles, 1 client)\n", u.CyclesPerSec, u.Cycles)
	fmt.Fprintf(tw, "uncontended acquire p50 / p99\t%.0f µs / %.0f µs\n", u.AcquireP50us, u.AcquireP99us)
	fmt.Fprintf(tw, "contended handoffs/s\t%.0f\t(%d clients over %d Lockers on %d key(s))\n", c.HandoffsPerSec, c.Clients, c.Lockers, c.Keys)
	fmt.Fprintf(tw, "contended handoff p50 / p99\t%.0f µs / %.0f µs\t(release to the next acquire of the key)\n", c.HandoffP50us, c.HandoffP99us)
	fmt.Fprintf(tw, "contended acquire p50 / p99\t%.0f µs / %.0f µs\t(time a waiter waits)\n", c.AcquireP50us, c.AcquireP99us)
	if c.Errors > 0 {
		fmt.Fprintf(tw, "errors\t%d\n", c.Errors)
	}
	_ = tw.Flush()
	return ExitOK
}

func benchUncontended(ctx context.Context, l *distlock.Locker, prefix string, d time.Duration, rep *BenchReport) error {
	key := prefix + "uncontended"
	var acq, cyc []time.Duration
	start := time.Now()
	for time.Since(start) < d && ctx.Err() == nil && len(acq) < 10_000_000 {
		t0 := time.Now()
		lease, err := l.Acquire(ctx, key)
		if err != nil {
			return err
		}
		t1 := time.Now()
		if err := lease.Release(ctx); err != nil {
			return err
		}
		acq = append(acq, t1.Sub(t0))
		cyc = append(cyc, time.Since(t0))
	}
	u := &rep.Uncontended
	u.Cycles = len(acq)
	u.CyclesPerSec = float64(len(acq)) / time.Since(start).Seconds()
	u.AcquireP50us, u.AcquireP99us = pct(acq, 50), pct(acq, 99)
	u.CycleP50us = pct(cyc, 50)
	return nil
}

func benchContended(ctx context.Context, ls []*distlock.Locker, prefix string, clients, keys int, d time.Duration, rep *BenchReport) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	base := time.Now()
	released := make([]atomic.Int64, keys) // ns since base of the last release, per key
	var (
		mu       sync.Mutex
		handoffs []time.Duration
		waits    []time.Duration
		errs     atomic.Int64
		wg       sync.WaitGroup
	)
	for g := 0; g < clients; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := g % keys
			key := prefix + "hot/" + strconv.Itoa(k)
			l := ls[g%len(ls)]
			var myHandoffs, myWaits []time.Duration
			for ctx.Err() == nil {
				t0 := time.Now()
				lease, err := l.Acquire(ctx, key)
				if err != nil {
					if ctx.Err() == nil {
						errs.Add(1)
					}
					break
				}
				now := time.Now()
				if r := released[k].Load(); r > 0 {
					myHandoffs = append(myHandoffs, now.Sub(base.Add(time.Duration(r))))
				}
				myWaits = append(myWaits, now.Sub(t0))
				released[k].Store(int64(time.Since(base)))
				rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
				if err := lease.Release(rctx); err != nil {
					errs.Add(1)
				}
				rcancel()
			}
			mu.Lock()
			handoffs = append(handoffs, myHandoffs...)
			waits = append(waits, myWaits...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	c := &rep.Contended
	c.Clients, c.Lockers, c.Keys = clients, len(ls), keys
	c.Handoffs = len(waits)
	c.HandoffsPerSec = float64(len(waits)) / time.Since(base).Seconds()
	c.HandoffP50us, c.HandoffP99us = pct(handoffs, 50), pct(handoffs, 99)
	c.AcquireP50us, c.AcquireP99us = pct(waits, 50), pct(waits, 99)
	c.Errors = int(errs.Load())
}

// pct returns the p-th percentile of ds in microseconds.
func pct(ds []time.Duration, p int) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := min(len(s)-1, len(s)*p/100)
	return float64(s[i].Nanoseconds()) / 1e3
}
