package redisscript

import (
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// shortIdle sets workerIdle to d for the test. Tests using it do not run
// in parallel.
func shortIdle(t *testing.T, d time.Duration) {
	old := workerIdle
	workerIdle = d
	t.Cleanup(func() { workerIdle = old })
}

func (b *Background) idleWorkers() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.ready)
}

// TestBackgroundPoolShrinks: the goroutines a burst started exit once the
// load drops to a trickle, because work goes to the most recently idle one
// (handing it to the longest idle would keep every one of them alive).
func TestBackgroundPoolShrinks(t *testing.T) {
	shortIdle(t, 100*time.Millisecond)
	b := NewBackground(0)
	defer b.Close()
	const burst = 40
	var wg sync.WaitGroup
	release := make(chan struct{})
	for range burst {
		wg.Add(1)
		if !b.Go(func() { defer wg.Done(); <-release }, false) {
			t.Fatal("Go refused work before Close")
		}
	}
	close(release)
	wg.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for b.idleWorkers() < burst && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := b.idleWorkers(); n != burst {
		t.Fatalf("%d idle workers after a burst of %d, want %d", n, burst, burst)
	}
	// A trickle for 3 workerIdle periods: one task every 10ms.
	for end := time.Now().Add(3 * workerIdle); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		done := make(chan struct{})
		b.Go(func() { close(done) }, false)
		<-done
	}
	if n := b.idleWorkers(); n > 3 {
		t.Errorf("%d idle workers after a one-at-a-time trickle, want <= 3", n)
	}
}

// TestBackgroundCloseRacesIdle: work handed to a worker at the moment its
// idle timer fires still runs, and Close waits for it.
func TestBackgroundCloseRacesIdle(t *testing.T) {
	shortIdle(t, 5*time.Millisecond)
	for range 50 {
		b := NewBackground(0)
		ran := make(chan struct{}, 2)
		b.Go(func() { ran <- struct{}{} }, false)
		<-ran
		time.Sleep(workerIdle - time.Duration(rand.IntN(200))*time.Microsecond)
		b.Go(func() { ran <- struct{}{} }, false)
		b.Close()
		select {
		case <-ran:
		default:
			t.Fatal("Close returned before the task ran")
		}
	}
}
