package natbatch

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock/internal/async"
	"github.com/stretchr/testify/assert"
)

// sreq is a request of the stress test: how often it was sent and
// answered to late.
type sreq struct {
	Req
	sent, late atomic.Int32
	answered   atomic.Bool
}

// TestQueueStress runs 100,000 requests through one Queue from 64
// goroutines, a third of them with a ctx cancelled at a random point
// (while queued, while sent, after the answer), a mix of lone sends (Own)
// and queued ones, with a batch bound: every request is sent at most once;
// a Dropped one never; a Delivered one was answered; an Abandoned one goes
// to late exactly once; the stats count exactly the requests sent; the
// queue ends free and no goroutine outlives the group.
func TestQueueStress(t *testing.T) {
	base := runtime.NumGoroutine()
	g := async.NewGroup()
	var sentReqs, lates atomic.Int64
	q := New(g, 7, func(batch []*sreq) {
		for _, r := range batch {
			r.sent.Add(1)
			sentReqs.Add(1)
		}
		runtime.Gosched()
		for _, r := range batch {
			r.answered.Store(true)
		}
	}, func(r *sreq) {
		r.late.Add(1)
		lates.Add(1)
	})
	const workers, per = 64, 100000 / 64
	deadline := time.Now().Add(2 * time.Minute)
	var (
		wg                                       sync.WaitGroup
		own, delivered, dropped, abandoned, lost atomic.Int64
		all                                      = make([][]*sreq, workers)
	)
	for w := range workers {
		wg.Go(func() {
			for i := range per {
				if time.Now().After(deadline) {
					return
				}
				r := &sreq{}
				all[w] = append(all[w], r)
				if i%5 == 0 && q.Own() {
					r.sent.Add(1)
					sentReqs.Add(1)
					r.answered.Store(true)
					own.Add(1)
					q.Next()
					continue
				}
				ctx, cancel := context.WithCancel(context.Background())
				q.Push(r)
				if i%3 == 0 {
					for range i % 4 {
						runtime.Gosched()
					}
					cancel()
				}
				switch q.Wait(ctx, r, i%2 == 0) {
				case Delivered:
					delivered.Add(1)
					if !r.answered.Load() || r.sent.Load() != 1 {
						lost.Add(1)
					}
				case Dropped:
					dropped.Add(1)
				case Abandoned:
					abandoned.Add(1)
				}
				cancel()
			}
		})
	}
	wg.Wait()
	if !until(func() bool { return !q.Busy() && q.Pending() == 0 }) {
		t.Fatalf("the queue stayed busy (%d pending)", q.Pending())
	}
	g.Close()
	n := int64(0)
	for _, rs := range all {
		for _, r := range rs {
			n++
			if r.sent.Load() > 1 || r.late.Load() > 1 {
				t.Fatalf("a request sent %d times, late %d times", r.sent.Load(), r.late.Load())
			}
		}
	}
	t.Logf("%d requests: %d own, %d delivered, %d dropped, %d abandoned", n, own.Load(), delivered.Load(), dropped.Load(), abandoned.Load())
	if got := own.Load() + delivered.Load() + dropped.Load() + abandoned.Load(); got != n {
		t.Errorf("%d outcomes for %d requests", got, n)
	}
	assert.Equal(t, int64(0), lost.Load(), "%d Delivered before their answer", lost.Load())
	assert.Equal(t, abandoned.Load(), lates.Load(), "late called %d times for %d abandoned", lates.Load(), abandoned.Load())
	if want := own.Load() + delivered.Load() + abandoned.Load(); sentReqs.Load() != want {
		t.Errorf("%d requests sent, want %d (own, delivered, abandoned)", sentReqs.Load(), want)
	}
	if _, reqs := q.Stats(); int64(reqs) != sentReqs.Load() {
		t.Errorf("stats count %d requests, %d were sent", reqs, sentReqs.Load())
	}
	if !until(func() bool { return runtime.NumGoroutine() <= base }) {
		t.Errorf("%d goroutines after Close, %d before", runtime.NumGoroutine(), base)
	}
}
