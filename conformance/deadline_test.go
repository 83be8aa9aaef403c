package conformance

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// A check that waits on its context is ended at its deadline, and one that
// ignores it is reported by name soon after.
func TestCheckDeadline(t *testing.T) {
	h := &Harness{Name: "fake", SessionTimeout: time.Millisecond}
	d := Check{}.Deadline(h)
	if d <= 0 || d > 10*time.Minute {
		t.Fatalf("Deadline = %v, want within (0, 10m]", d)
	}

	var mu sync.Mutex
	var hung []string
	onHang := func(msg string) { mu.Lock(); hung = append(hung, msg); mu.Unlock() }
	disarm := hangWatch("fake/blocked", time.Millisecond, 50*time.Millisecond, onHang)
	time.Sleep(500 * time.Millisecond)
	disarm()
	mu.Lock()
	if len(hung) != 1 || !strings.Contains(hung[0], "fake/blocked hung") {
		t.Errorf("hangWatch reported %q, want one report naming fake/blocked", hung)
	}
	hung = nil
	mu.Unlock()

	disarm = hangWatch("fake/returned", time.Millisecond, 50*time.Millisecond, onHang)
	disarm()
	time.Sleep(500 * time.Millisecond)
	mu.Lock()
	if len(hung) != 0 {
		t.Errorf("a disarmed watch reported %q", hung)
	}
	mu.Unlock()
}

func TestCheckContextEndsAtDeadline(t *testing.T) {
	h := &Harness{Name: "fake"}
	var got error
	check := Check{Name: "waits", Fn: func(t T, h *Harness) {
		if dl, ok := t.Context().Deadline(); !ok || time.Until(dl) > (Check{}).Deadline(h) {
			got = errors.New("check context has no deadline within the check's")
			return
		}
	}}
	runTests(t, h, []Check{check}, func(msg string) { t.Errorf("hung: %s", msg) })
	if got != nil {
		t.Fatal(got)
	}
}
