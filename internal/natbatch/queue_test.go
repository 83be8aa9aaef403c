package natbatch

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/distlock/distlock/internal/async"
	"github.com/stretchr/testify/require"
)

// req is a test request: its id and the batch it went out in.
type req struct {
	Req
	id    int
	batch int
}

// rig is a Queue whose send blocks until the test lets the round trip end.
type rig struct {
	q       *Queue[*req]
	mu      sync.Mutex
	batches [][]int
	gate    chan struct{} // a round trip ends when the test sends on it
	late    chan *req
}

func newRig(t *testing.T, max int) *rig {
	g := async.NewGroup()
	t.Cleanup(g.Close)
	r := &rig{gate: make(chan struct{}), late: make(chan *req, 16)}
	r.q = New(g, max, func(batch []*req) {
		r.mu.Lock()
		ids := []int{}
		for _, x := range batch {
			ids = append(ids, x.id)
			x.batch = len(r.batches)
		}
		r.batches = append(r.batches, ids)
		r.mu.Unlock()
		<-r.gate
	}, func(x *req) { r.late <- x })
	return r
}

// until polls cond, bounded: false if it never held within 10s.
func until(cond func() bool) bool {
	for range 2000 {
		if cond() {
			return true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return false
}

// TestQueue: behind a round trip in flight (the caller's own), requests
// queue and go out together in one batch of at most max; a queued request
// whose ctx ends is dropped and never sent; one abandoned after it was
// sent goes to late; the queue is free again when the queue drains.
func TestQueue(t *testing.T) {
	r := newRig(t, 2)
	require.True(t, r.q.Own(), "a free queue refused Own")
	require.False(t, r.q.Own(), "Own while a round trip is in flight")
	ctx := t.Context()
	dropCtx, drop := context.WithCancel(ctx)
	abandonCtx, abandon := context.WithCancel(ctx)
	out := make(chan Outcome, 4)
	reqs := []*req{{id: 1}, {id: 2}, {id: 3}, {id: 4}}
	ctxs := []context.Context{ctx, dropCtx, abandonCtx, ctx}
	for i, x := range reqs {
		r.q.Push(x)
		go func() { out <- r.q.Wait(ctxs[i], x, true) }()
	}
	if !until(func() bool { return r.q.Pending() == 4 }) {
		t.Fatalf("%d pending, want 4", r.q.Pending())
	}
	drop()
	if o := <-out; o != Dropped {
		t.Fatalf("cancelled while queued: %v, want Dropped", o)
	}
	r.q.Next() // the caller's own round trip ends: a flusher takes the queue
	sent := func(n int) bool {
		return until(func() bool { r.mu.Lock(); defer r.mu.Unlock(); return len(r.batches) == n })
	}
	require.True(t, sent(1), "no batch sent")
	r.gate <- struct{}{} // batch [1] (2 was dropped; at most 2 taken) answered
	require.Equal(t, Delivered, <-out, "request 1")
	require.True(t, sent(2), "second batch not sent")
	abandon()
	if o := <-out; o != Abandoned {
		t.Fatalf("cancelled after it was sent: %v, want Abandoned", o)
	}
	r.gate <- struct{}{} // batch [3 4] answered
	require.Equal(t, Delivered, <-out, "request 4")
	if x := <-r.late; x.id != 3 {
		t.Fatalf("late got %d, want 3", x.id)
	}
	if !until(func() bool { return !r.q.Busy() }) {
		t.Fatal("the queue stayed busy")
	}
	if got := r.batches; len(got) != 2 || len(got[0]) != 1 || got[0][0] != 1 || len(got[1]) != 2 || got[1][0] != 3 || got[1][1] != 4 {
		t.Errorf("batches %v, want [[1] [3 4]] (2 dropped, at most 2 taken a round trip)", got)
	}
	if rt, n := r.q.Stats(); rt != 3 || n != 4 {
		t.Errorf("stats %d round trips, %d requests; want 3, 4 (own, [1], [3 4])", rt, n)
	}
}

// TestQueuePatientWait: without abandon, a request whose ctx ends after it
// was sent waits for its answer (Delivered), and late is not called.
func TestQueuePatientWait(t *testing.T) {
	r := newRig(t, 0)
	ctx, cancel := context.WithCancel(t.Context())
	x := &req{id: 1}
	r.q.Push(x)
	out := make(chan Outcome, 1)
	go func() { out <- r.q.Wait(ctx, x, false) }()
	if !until(func() bool { r.mu.Lock(); defer r.mu.Unlock(); return len(r.batches) == 1 }) {
		t.Fatal("not sent")
	}
	cancel()
	select {
	case o := <-out:
		t.Fatalf("returned %v before the answer", o)
	case <-time.After(20 * time.Millisecond):
	}
	r.gate <- struct{}{}
	require.Equal(t, Delivered, <-out)
	select {
	case <-r.late:
		t.Fatal("late called for a request that was waited for")
	default:
	}
}
