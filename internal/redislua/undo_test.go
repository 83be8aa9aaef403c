package redislua

import (
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// TestUndoerCloseCutsSchedule (no server: nothing listens, every try is
// refused): an UndoAcquire whose tries keep failing would try for 4.5s;
// Close cuts its schedule short after one more try, and refuses new work.
func TestUndoerCloseCutsSchedule(t *testing.T) {
	c := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialerRetries: 1})
	defer c.Close()
	u := NewUndoer(1)
	k := KeysFor("t:", "undo")
	u.UndoAcquire(c, k, "o", 0, NewHoldSource().Next(), time.Minute, false)
	start := time.Now()
	u.Close()
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Close took %v with an undo on its schedule, want it cut short", took)
	}
	if u.Go(func() { t.Error("work ran after Close") }, false) {
		t.Error("Go accepted work after Close")
	}
}
