package async

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestGroupCloseWaitsAndRefuses(t *testing.T) {
	g := NewGroup()
	release := make(chan struct{})
	var ran atomic.Int32
	if !g.Go(func() { <-release; ran.Add(1) }) {
		t.Fatal("Go refused on an open group")
	}
	closed := make(chan struct{})
	go func() { g.Close(); close(closed) }()
	select {
	case <-g.Quit():
	case <-time.After(5 * time.Second):
		t.Fatal("Quit not closed when Close began")
	}
	if g.Go(func() { ran.Add(10) }) {
		t.Fatal("Go accepted work after Close began")
	}
	select {
	case <-closed:
		t.Fatal("Close returned while work was running")
	default:
	}
	close(release)
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return after the work ended")
	}
	require.Equal(t, int32(1), ran.Load(), "ran")
	if g.GoChild(func() {}) {
		t.Fatal("GoChild accepted work after Close returned")
	}
}

func TestGroupChildDuringClose(t *testing.T) {
	g := NewGroup()
	child := make(chan bool, 1)
	var childRan atomic.Bool
	g.Go(func() {
		<-g.Quit()
		child <- g.GoChild(func() { childRan.Store(true) })
	})
	g.Close()
	if !<-child || !childRan.Load() {
		t.Fatal("a child started during Close did not run before Close returned")
	}
}

func TestGroupReusesWorkers(t *testing.T) {
	g := NewGroup()
	defer g.Close()
	idle := func() int {
		g.mu.Lock()
		defer g.mu.Unlock()
		return len(g.ready)
	}
	for i := range 1000 {
		done := make(chan struct{})
		g.Go(func() { close(done) })
		<-done
		// The worker is back on the stack a moment after its task ended:
		// wait for it (CI saw a third worker started in that moment, under
		// load), so that each Go finds an idle worker to reuse.
		deadline := time.Now().Add(5 * time.Second)
		for idle() == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("task %d: its worker never went idle", i)
			}
			runtime.Gosched()
		}
	}
	if n := idle(); n != 1 {
		t.Fatalf("%d idle workers after 1000 sequential tasks each started on an idle worker, want 1", n)
	}
}

func TestCallReturnsAtCtxEndAndHandsOnLateResult(t *testing.T) {
	g := NewGroup()
	defer g.Close()
	ctx, cancel := context.WithCancelCause(context.Background())
	cause := errors.New("closing")
	unblock := make(chan struct{})
	late := make(chan int, 1)
	go func() { time.Sleep(20 * time.Millisecond); cancel(cause) }()
	v, abandoned, err := Call(g, ctx, func(context.Context) (int, error) { <-unblock; return 7, nil },
		func(v int, err error) { late <- v })
	if !abandoned || v != 0 || !errors.Is(err, context.Canceled) || !errors.Is(err, cause) {
		t.Fatalf("got %v %v %v, want abandoned with the ctx error and its cause", v, abandoned, err)
	}
	close(unblock)
	select {
	case v := <-late:
		require.Equal(t, 7, v, "late result")
	case <-time.After(5 * time.Second):
		t.Fatal("late result never handed on")
	}
}

func TestCallResultWins(t *testing.T) {
	g := NewGroup()
	defer g.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	v, abandoned, err := Call(g, ctx, func(context.Context) (int, error) { return 3, nil },
		func(int, error) { t.Error("late called for a result the caller took") })
	if v != 3 || abandoned || err != nil {
		t.Fatalf("got %v %v %v", v, abandoned, err)
	}
	if _, _, err := Call(g, ctx, func(context.Context) (int, error) { return 0, nil }, nil); err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, _, err := Call(g, ctx, func(context.Context) (int, error) { t.Error("op ran on an ended ctx"); return 0, nil }, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("ended ctx: %v", err)
	}
}

func TestRetryAtSchedule(t *testing.T) {
	var tries []time.Duration
	start := time.Now()
	ok := Retry{Schedule: At{0, 10 * time.Millisecond, 30 * time.Millisecond}}.Do(context.Background(), func(context.Context) bool {
		tries = append(tries, time.Since(start))
		return false
	})
	if ok || len(tries) != 3 {
		t.Fatalf("done=%v after %d tries, want 3 failed tries", ok, len(tries))
	}
	if tries[2] < 30*time.Millisecond {
		t.Fatalf("third try at %v, before its offset 30ms", tries[2])
	}
}

func TestRetryStopsWhenDone(t *testing.T) {
	n := 0
	ok := Retry{Schedule: Backoff{First: time.Millisecond, Max: 4 * time.Millisecond}}.Do(context.Background(), func(context.Context) bool {
		n++
		return n == 5
	})
	if !ok || n != 5 {
		t.Fatalf("done=%v after %d tries", ok, n)
	}
}

func TestRetryWithinBounds(t *testing.T) {
	start := time.Now()
	var last time.Duration
	Retry{Schedule: Backoff{First: time.Millisecond, Max: 5 * time.Millisecond}, Within: 60 * time.Millisecond}.Do(context.Background(), func(ctx context.Context) bool {
		last = time.Since(start)
		if _, ok := ctx.Deadline(); !ok {
			t.Error("try ctx has no deadline")
		}
		return false
	})
	// Do decides to start a try before Within; the try's first line runs a
	// moment later: 5ms for that moment on a loaded machine.
	if last >= 60*time.Millisecond+5*time.Millisecond {
		t.Fatalf("a try started at %v, at or after Within (60ms)", last)
	}
}

func TestRetryQuitMakesOneLastTry(t *testing.T) {
	quit := make(chan struct{})
	n := 0
	go func() { time.Sleep(20 * time.Millisecond); close(quit) }()
	start := time.Now()
	Retry{Schedule: At{0, time.Hour}, Quit: quit}.Do(context.Background(), func(context.Context) bool { n++; return false })
	if n != 2 || time.Since(start) > 10*time.Second {
		t.Fatalf("%d tries in %v, want 2 (the second at Quit)", n, time.Since(start))
	}
}

func TestRetryCtxEndedNoTry(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	Retry{Schedule: At{0}}.Do(ctx, func(context.Context) bool { t.Error("try after ctx ended"); return true })
}

func TestBackoffDoubles(t *testing.T) {
	b := Backoff{First: 10 * time.Millisecond, Max: 35 * time.Millisecond}
	var zero time.Time
	for n, want := range map[int]time.Duration{1: 10, 2: 20, 3: 35, 9: 35} {
		at, ok := b.Next(n, zero, zero)
		if !ok || at.Sub(zero) != want*time.Millisecond {
			t.Errorf("Next(%d) = %v, want %vms", n, at.Sub(zero), int(want))
		}
	}
}

func TestGoBoundedSlots(t *testing.T) {
	g := NewGroup()
	defer g.Close()
	s := NewSlots(1)
	block := make(chan struct{})
	if !GoBounded(g, s, false, func() { <-block }) {
		t.Fatal("first job refused")
	}
	if GoBounded(g, s, false, func() {}) {
		t.Fatal("second job accepted with no free slot")
	}
	close(block)
}
