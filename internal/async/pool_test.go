package async

import (
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// The Group's pool, as the Redis backends load it (moved from
// the old redisscript package's Background, which Group replaced).

// shortIdle sets WorkerIdle to d for the test. Tests using it do not run
// in parallel.
func shortIdle(t *testing.T, d time.Duration) {
	old := WorkerIdle
	WorkerIdle = d
	t.Cleanup(func() { WorkerIdle = old })
}

func (g *Group) idleWorkers() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.ready)
}

// TestGroupPoolShrinks: the goroutines a burst started exit once the load
// drops to a trickle, because work goes to the most recently idle one
// (handing it to the longest idle would keep every one of them alive).
func TestGroupPoolShrinks(t *testing.T) {
	shortIdle(t, 100*time.Millisecond)
	g := NewGroup()
	defer g.Close()
	const burst = 40
	var wg sync.WaitGroup
	release := make(chan struct{})
	for range burst {
		wg.Add(1)
		if !g.Go(func() { defer wg.Done(); <-release }) {
			t.Fatal("Go refused work before Close")
		}
	}
	close(release)
	wg.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for g.idleWorkers() < burst && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := g.idleWorkers(); n != burst {
		t.Fatalf("%d idle workers after a burst of %d, want %d", n, burst, burst)
	}
	// A trickle for 3 WorkerIdle periods: one task every 10ms.
	for end := time.Now().Add(3 * WorkerIdle); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		done := make(chan struct{})
		g.Go(func() { close(done) })
		<-done
	}
	if n := g.idleWorkers(); n > 3 {
		t.Errorf("%d idle workers after a one-at-a-time trickle, want <= 3", n)
	}
}

// TestGroupCloseRacesIdle: work handed to a worker at the moment its idle
// timer fires still runs, and Close waits for it.
func TestGroupCloseRacesIdle(t *testing.T) {
	shortIdle(t, 5*time.Millisecond)
	for range 50 {
		g := NewGroup()
		ran := make(chan struct{}, 2)
		g.Go(func() { ran <- struct{}{} })
		<-ran
		// The scenario: the second task arrives within 200µs of the
		// worker's idle timer firing.
		time.Sleep(WorkerIdle - time.Duration(rand.IntN(200))*time.Microsecond)
		g.Go(func() { ran <- struct{}{} })
		g.Close()
		select {
		case <-ran:
		default:
			t.Fatal("Close returned before the task ran")
		}
	}
}
