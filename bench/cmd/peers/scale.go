package main

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	dlredis "github.com/distlock/distlock/redis"
)

// pipeHook counts pipelines and the commands sent in them.
type pipeHook struct{ pipes, pipedCmds, single atomic.Int64 }

func (h *pipeHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (h *pipeHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		h.single.Add(1)
		return next(ctx, cmd)
	}
}
func (h *pipeHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		h.pipes.Add(1)
		h.pipedCmds.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

type scaleResult struct {
	n                          int
	acquireSec                 float64
	heapPerLease               float64
	goroutineDelta             int
	evalshaPerSec, expectedSec float64
	pipesPerSec, cmdsPerPipe   float64
	singlePerSec               float64
	lost                       int
}

func commandCalls(ctx context.Context, c *goredis.Client, cmd string) int64 {
	s, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(s, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":calls="); ok {
			n, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
			return n
		}
	}
	return 0
}

func measureScale(addr string, n int, ttl, window time.Duration) (scaleResult, error) {
	ctx := context.Background()
	r := scaleResult{n: n}
	stats := goredis.NewClient(&goredis.Options{Addr: addr})
	defer stats.Close()
	client := goredis.NewClient(&goredis.Options{Addr: addr})
	hook := &pipeHook{}
	client.AddHook(hook)
	l := dlredis.New(client, dlredis.WithPrefix(fmt.Sprintf("scale%d:", n)), dlredis.WithCloseClient())
	// warm-up so the pool and scripts exist before the baseline
	if ls, err := l.TryAcquire(ctx, "warm", distlock.WithTTL(ttl)); err == nil {
		_ = ls.Release(ctx)
	}
	runtime.GC()
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	g0 := runtime.NumGoroutine()
	leases := make([]*distlock.Lease, n)
	start := time.Now()
	var wg sync.WaitGroup
	var firstErr atomic.Pointer[error]
	const workers = 32
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				ls, err := l.TryAcquire(ctx, "lease/"+strconv.Itoa(i), distlock.WithTTL(ttl))
				if err != nil {
					firstErr.CompareAndSwap(nil, &err)
					return
				}
				leases[i] = ls
			}
		})
	}
	wg.Wait()
	r.acquireSec = time.Since(start).Seconds()
	if p := firstErr.Load(); p != nil {
		_ = l.Close()
		return r, *p
	}
	time.Sleep(100 * time.Millisecond)
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m1)
	r.heapPerLease = (float64(m1.HeapAlloc) - float64(m0.HeapAlloc)) / float64(n)
	r.goroutineDelta = runtime.NumGoroutine() - g0
	// Refresh traffic over the window.
	e0, p0, c0, s0 := commandCalls(ctx, stats, "evalsha"), hook.pipes.Load(), hook.pipedCmds.Load(), hook.single.Load()
	t0 := time.Now()
	time.Sleep(window)
	el := time.Since(t0).Seconds()
	e1, p1, c1, s1 := commandCalls(ctx, stats, "evalsha"), hook.pipes.Load(), hook.pipedCmds.Load(), hook.single.Load()
	r.evalshaPerSec = float64(e1-e0) / el
	r.expectedSec = float64(n) / (ttl / 3).Seconds()
	r.pipesPerSec = float64(p1-p0) / el
	if p1 > p0 {
		r.cmdsPerPipe = float64(c1-c0) / float64(p1-p0)
	}
	r.singlePerSec = float64(s1-s0) / el
	for _, ls := range leases {
		if ls.Err() != nil {
			r.lost++
		}
	}
	runtime.KeepAlive(leases)
	_ = l.Close() // releases every lease
	return r, nil
}

var _ = net.JoinHostPort
