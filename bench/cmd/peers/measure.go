package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
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

type uncontended struct {
	p50, p99, allocs float64 // µs, µs, mallocs/cycle
	client, server   float64 // CPU µs per cycle: this process; the redis-server(s)
}

// processCPU is this process's user+system CPU time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// uncBlock is how many cycles of one library run before the next library's
// turn: short enough that every library samples the same machine states
// (this VM's loopback latency shifts between modes every few seconds).
const uncBlock = 250

// measureUncontended runs cycles acquire+release cycles per library (libs[i]
// on the servers addrs[i]), one key and one instance each, interleaved in
// blocks of uncBlock cycles in a random order per block, after a warm-up.
func measureUncontended(libs []lib, addrs [][]string, keyPrefix string, cycles int, rng *rand.Rand) ([]uncontended, error) {
	type state struct {
		in      inst
		cycle   func() error
		lat     []time.Duration
		mallocs uint64
		cpu     time.Duration
		srv     float64
		perCmd  map[string]cmdStat
		fails   int
	}
	st := make([]*state, len(libs))
	defer func() {
		for _, s := range st {
			if s != nil {
				s.in.close()
			}
		}
	}()
	ctx := context.Background()
	for i, l := range libs {
		in := l.make(addrs[i])
		acq := in.bind(fmt.Sprintf("%s/%d", keyPrefix, i), false)
		s := &state{in: in, lat: make([]time.Duration, 0, cycles), perCmd: map[string]cmdStat{}}
		s.cycle = func() error {
			h, err := acq(ctx)
			if err != nil {
				return err
			}
			return h.release(ctx)
		}
		st[i] = s
		for range 200 {
			if err := warm(l.name, s.cycle); err != nil {
				return nil, err
			}
		}
	}
	var m0, m1 runtime.MemStats
	for done := 0; done < cycles; done += uncBlock {
		n := min(uncBlock, cycles-done)
		for _, i := range rng.Perm(len(libs)) {
			s, l := st[i], libs[i]
			load0, err := serverLoad(addrs[i])
			if err != nil {
				return nil, err
			}
			runtime.ReadMemStats(&m0)
			cpu0 := processCPU()
			pprof.SetGoroutineLabels(pprof.WithLabels(ctx, pprof.Labels("lib", l.name)))
			for range n {
				t := time.Now()
				if err := s.cycle(); err != nil {
					// A rare failed cycle (a Redlock node timeout on a
					// loaded machine) is counted, not fatal; more than 1%
					// is.
					if s.fails++; s.fails > cycles/100 {
						return nil, fmt.Errorf("%s: %d failed cycles, last: %w", l.name, s.fails, err)
					}
					fmt.Fprintf(os.Stderr, "peers: %s: failed cycle (%d so far): %v\n", l.name, s.fails, err)
					continue
				}
				s.lat = append(s.lat, time.Since(t))
			}
			pprof.SetGoroutineLabels(ctx)
			s.cpu += processCPU() - cpu0
			runtime.ReadMemStats(&m1)
			s.mallocs += m1.Mallocs - m0.Mallocs
			load1, err := serverLoad(addrs[i])
			if err != nil {
				return nil, err
			}
			s.srv += load1.cpu - load0.cpu
			for k, v := range load1.sub(load0) {
				c := s.perCmd[k]
				s.perCmd[k] = cmdStat{c.calls + v.calls, c.usec + v.usec}
			}
		}
	}
	out := make([]uncontended, len(libs))
	for i, s := range st {
		slices.Sort(s.lat)
		out[i] = uncontended{
			p50:    us(pct(s.lat, .5)),
			p99:    us(pct(s.lat, .99)),
			allocs: float64(s.mallocs) / float64(cycles),
			client: us(s.cpu) / float64(cycles),
			server: s.srv * 1e6 / float64(cycles),
		}
		for k, v := range s.perCmd {
			// per cycle, summed over rounds: the report divides by rounds
			addCmdStat(libs[i].name, k, cmdStat{v.calls / float64(cycles), v.usec / float64(cycles)})
		}
	}
	return out, nil
}

// warm runs one warm-up cycle, again after a pause when it fails (up to 5
// tries): on an overloaded machine a Redlock node can miss its 50ms
// per-node timeout, and the partial holds of that attempt are given back
// in the background, so the key may be busy for a moment after.
func warm(name string, cycle func() error) error {
	var err error
	for try := range 5 {
		if err = cycle(); err == nil {
			return nil
		}
		fmt.Fprintf(os.Stderr, "peers: %s: warm-up cycle failed (try %d): %v\n", name, try+1, err)
		time.Sleep(time.Duration(try+1) * 50 * time.Millisecond)
	}
	return fmt.Errorf("%s warm-up: %w", name, err)
}

// cmdStats is, per library of the uncontended table, the server's work per
// cycle by command (INFO commandstats), summed over rounds.
var (
	cmdStatsMu sync.Mutex
	cmdStats   = map[string]map[string]cmdStat{}
)

func addCmdStat(lib, cmd string, v cmdStat) {
	cmdStatsMu.Lock()
	defer cmdStatsMu.Unlock()
	m := cmdStats[lib]
	if m == nil {
		m = map[string]cmdStat{}
		cmdStats[lib] = m
	}
	c := m[cmd]
	m[cmd] = cmdStat{c.calls + v.calls, c.usec + v.usec}
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

type handoff struct {
	perSec   float64 // handoffs (acquisitions) per second
	p50, p99 float64 // release → next holder's acquire, µs
	waitP99  float64 // Acquire call → return, µs
	cmds     float64 // commands the server(s) processed per handoff
	cpu      float64 // server CPU µs per handoff
	failures float64 // acquisitions that gave up (retry limit), per run
	errs     float64 // other errors
}

// measureHandoff: waiters goroutines over nInst instances contend for one
// key, holding it for hold each time, for dur. The hold lets the others
// start waiting (with zero hold, two polite goroutines merely alternate
// without ever waiting). A goroutine that released does not try
// again until another goroutine has acquired, so every acquisition is a
// handoff to a goroutine that wanted the lock, and the lock is never kept
// busy by a releaser re-grabbing it (which would measure starvation of the
// waiters, not how fast a free lock reaches them). The release→acquire
// latency is recorded when the new holder's Acquire call had started before
// the release (it was waiting, not arriving late).
func measureHandoff(l lib, addrs []string, key string, nInst, waiters int, hold, dur time.Duration) (handoff, error) {
	if l.clients > 0 {
		nInst = l.clients
	}
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
		err := warm(l.name, func() error {
			wctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			h, err := in.bind(key, false)(wctx)
			if err == nil {
				err = h.release(wctx)
			}
			return err
		})
		if err != nil {
			return handoff{}, err
		}
	}
	load0, err := serverLoad(addrs)
	if err != nil {
		return handoff{}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), dur)
	defer cancel()
	var (
		base        = time.Now()
		lastRelease atomic.Int64 // ns since base, stored just before each release
		count       atomic.Int64
		fails, errs atomic.Int64
		mu          sync.Mutex
		lat, waits  []time.Duration
		wg          sync.WaitGroup
		turn        = newEpoch(ctx)
	)
	for g := range waiters {
		acq := ins[g%nInst].bind(key, true)
		wg.Go(func() {
			var mine, waited []time.Duration
			for ctx.Err() == nil {
				called := int64(time.Since(base))
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
				if r := lastRelease.Load(); r > called {
					mine = append(mine, time.Duration(now-r))
				}
				waited = append(waited, time.Duration(now-called))
				count.Add(1)
				e := turn.advance()
				time.Sleep(hold)
				lastRelease.Store(int64(time.Since(base)))
				rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
				if err := h.release(rctx); err != nil {
					errs.Add(1)
				}
				rcancel()
				turn.waitPast(e) // let another goroutine have it first
			}
			mu.Lock()
			lat = append(lat, mine...)
			waits = append(waits, waited...)
			mu.Unlock()
		})
	}
	wg.Wait()
	el := time.Since(base)
	load1, err := serverLoad(addrs)
	if err != nil {
		return handoff{}, err
	}
	slices.Sort(lat)
	slices.Sort(waits)
	n := float64(max(count.Load(), 1))
	return handoff{
		cmds:     float64(load1.cmds-load0.cmds) / n,
		cpu:      (load1.cpu - load0.cpu) * 1e6 / n,
		perSec:   float64(count.Load()) / el.Seconds(),
		p50:      us(pct(lat, .5)),
		p99:      us(pct(lat, .99)),
		waitP99:  us(pct(waits, .99)),
		failures: float64(fails.Load()),
		errs:     float64(errs.Load()),
	}, nil
}

// load is what the servers have done so far.
type load struct {
	cmds int64   // total_commands_processed
	cpu  float64 // used_cpu_user + used_cpu_sys, seconds
	// per command (INFO commandstats, the commands a script runs
	// included): calls and µs
	perCmd map[string]cmdStat
}

// cmdStat is one command's line of INFO commandstats.
type cmdStat struct{ calls, usec float64 }

// sub returns the per-command difference l - before.
func (l load) sub(before load) map[string]cmdStat {
	d := map[string]cmdStat{}
	for k, v := range l.perCmd {
		b := before.perCmd[k]
		if v.calls > b.calls {
			d[k] = cmdStat{v.calls - b.calls, v.usec - b.usec}
		}
	}
	return d
}

// serverLoad sums INFO stats and cpu over addrs.
func serverLoad(addrs []string) (load, error) {
	l := load{perCmd: map[string]cmdStat{}}
	for _, a := range addrs {
		c := newClient(a)
		info, err := c.Info(context.Background(), "stats", "cpu", "commandstats").Result()
		_ = c.Close()
		if err != nil {
			return l, fmt.Errorf("INFO on %s: %w", a, err)
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
			default:
				name, ok := strings.CutPrefix(k, "cmdstat_")
				if !ok {
					continue
				}
				var st cmdStat
				for _, f := range strings.Split(v, ",") {
					fk, fv, _ := strings.Cut(f, "=")
					n, _ := strconv.ParseFloat(fv, 64)
					switch fk {
					case "calls":
						st.calls = n
					case "usec":
						st.usec = n
					}
				}
				c := l.perCmd[name]
				l.perCmd[name] = cmdStat{c.calls + st.calls, c.usec + st.usec}
			}
		}
	}
	return l, nil
}

// epoch counts acquisitions; waitPast blocks until the count passes a value
// or the run ends.
type epoch struct {
	mu   sync.Mutex
	cond *sync.Cond
	n    int64
	done bool
}

func newEpoch(ctx context.Context) *epoch {
	e := &epoch{}
	e.cond = sync.NewCond(&e.mu)
	context.AfterFunc(ctx, func() {
		e.mu.Lock()
		e.done = true
		e.mu.Unlock()
		e.cond.Broadcast()
	})
	return e
}

func (e *epoch) advance() int64 {
	e.mu.Lock()
	e.n++
	n := e.n
	e.mu.Unlock()
	e.cond.Broadcast()
	return n
}

func (e *epoch) waitPast(n int64) {
	e.mu.Lock()
	for e.n <= n && !e.done {
		e.cond.Wait()
	}
	e.mu.Unlock()
}

// measureDistinct: goroutines over nInst instances cycle through nKeys
// distinct keys (each goroutine its own subset, so no contention) for dur.
// distinct is what measureDistinct found.
type distinct struct {
	perSec               float64 // cycles/s
	p50, p99             float64 // µs per acquire+release cycle
	serverPct, clientPct float64 // CPU utilisation, % of one core
	serverUS, clientUS   float64 // CPU µs per cycle
	timeouts             float64 // attempts that failed without an error of ours: the library's own timeout (errTimedOut), or a key still held by such an attempt
}

func measureDistinct(l lib, addrs []string, prefix string, nInst, goroutines, nKeys int, dur time.Duration) (distinct, error) {
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
		err := warm(l.name, func() error {
			h, err := in.bind(keys[0]+"w", false)(context.Background())
			if err == nil {
				_ = h.release(context.Background())
			}
			return err
		})
		if err != nil {
			return distinct{}, err
		}
	}
	load0, err := serverLoad(addrs)
	if err != nil {
		return distinct{}, err
	}
	cpu0 := processCPU()
	ctx, cancel := context.WithTimeout(context.Background(), dur)
	defer cancel()
	end, _ := ctx.Deadline()
	var count, timeouts atomic.Int64
	var firstErr atomic.Pointer[error]
	var wg sync.WaitGroup
	lat := make([][]time.Duration, goroutines) // per goroutine: each cycle's acquire+release time
	start := time.Now()
	for g := range goroutines {
		in := ins[g%nInst]
		wg.Go(func() {
			// The cycles carry pprof labels (-cpuprofile; the libraries'
			// own background goroutines do not).
			pprof.SetGoroutineLabels(pprof.WithLabels(ctx, pprof.Labels("lib", l.name, "keys", fmt.Sprintf("%dx%d", goroutines, nInst))))
			for i := g; ctx.Err() == nil; i += goroutines {
				t0 := time.Now()
				if i >= nKeys {
					i = g
				}
				h, err := in.bind(keys[i], false)(ctx)
				if errors.Is(err, errTimedOut) || errors.Is(err, errGaveUp) {
					// The library timed the attempt out itself, or the
					// key is still held by such an attempt that landed
					// (its background delete has not run yet).
					timeouts.Add(1)
					continue
				}
				if err != nil {
					// A library whose lock ctx ends at the caller's
					// deadline by a timer of its own (rueidislock) can
					// fail just before ctx's own timer fires: the run's
					// end, not an error.
					if ctx.Err() == nil && time.Now().Before(end) {
						firstErr.CompareAndSwap(nil, &err)
					}
					continue
				}
				if err := h.release(context.Background()); err != nil {
					firstErr.CompareAndSwap(nil, &err)
				}
				lat[g] = append(lat[g], time.Since(t0))
				count.Add(1)
			}
		})
	}
	wg.Wait()
	el := time.Since(start)
	cpu := processCPU() - cpu0
	load1, err := serverLoad(addrs)
	if err != nil {
		return distinct{}, err
	}
	if p := firstErr.Load(); p != nil {
		return distinct{}, fmt.Errorf("%s: %w", l.name, *p)
	}
	n := float64(max(count.Load(), 1))
	all := slices.Concat(lat...)
	slices.Sort(all)
	return distinct{
		perSec:    float64(count.Load()) / el.Seconds(),
		p50:       us(pct(all, 0.50)),
		p99:       us(pct(all, 0.99)),
		serverPct: (load1.cpu - load0.cpu) / el.Seconds() * 100,
		clientPct: cpu.Seconds() / el.Seconds() * 100,
		serverUS:  (load1.cpu - load0.cpu) * 1e6 / n,
		clientUS:  us(cpu) / n,
		timeouts:  float64(timeouts.Load()),
	}, nil
}
