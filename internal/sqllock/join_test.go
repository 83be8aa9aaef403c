package sqllock

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock/backend"
)

// recordingServer is a fakeServer that records nested holds: record
// answers RecordHolds.
type recordingServer struct {
	*fakeServer
	record func(delta int) (bool, error)
}

func (r *recordingServer) RecordHolds(_ context.Context, _ string, _ Pinned[*fakeConn], delta int) (bool, error) {
	return r.record(delta)
}

func newRecording(t *testing.T, record func(delta int) (bool, error)) (*recordingServer, *Table[*fakeConn]) {
	f := &fakeServer{lock: granted}
	r := &recordingServer{fakeServer: f, record: record}
	c := &Config{Table: "t", Mode: "m"}
	b := NewBase(Dialect{Quote: `"`}, nil, c, nil)
	t.Cleanup(func() { _ = b.Shutdown() })
	return r, NewTable[*fakeConn](r, b, TableConfig{Keepalive: time.Hour, Noun: "session", IDName: "pid"})
}

// lostTo returns a Lost callback that stores its error.
func lostTo(p *atomic.Pointer[error]) func(error) { return func(err error) { p.Store(&err) } }

// A nested acquisition asks the server first: when the owner's session is
// gone (its ping fails) the owner's hold ends with ErrLockLost and the
// acquisition goes to the server as a new one, which another owner's lock
// makes busy — it never joins the dead session.
func TestTableNestIntoDeadSession(t *testing.T) {
	f, tab, _ := newFake(t, time.Hour)
	ctx := context.Background()
	var lost atomic.Pointer[error]
	first, err := tab.Acquire(ctx, backend.Request{Key: "k", Owner: "o", Lost: lostTo(&lost)}, false)
	if err != nil {
		t.Fatal(err)
	}
	gone := errors.New("terminated by an administrator")
	f.pingErr.Store(&gone)
	f.lock = func(context.Context, string, bool) (Pinned[*fakeConn], error) {
		return Pinned[*fakeConn]{}, backend.Busy(0)
	}
	if _, err := tab.Acquire(ctx, backend.Request{Key: "k", Owner: "o"}, false); !errors.Is(err, backend.ErrNotAcquired) {
		t.Fatalf("nested into a dead session: %v, want ErrNotAcquired", err)
	}
	if p := lost.Load(); p == nil || !errors.Is(*p, backend.ErrLockLost) || !errors.Is(*p, gone) {
		t.Fatalf("the dead session's hold was told %v, want ErrLockLost wrapping the ping's error", p)
	}
	if err := first.Release(ctx); !errors.Is(err, backend.ErrNotHeld) {
		t.Errorf("release of the lost hold: %v, want ErrNotHeld", err)
	}
	if f.discarded.Load() != 1 || tab.Pinned() != 0 {
		t.Errorf("%d discarded, %d pinned; want 1, 0", f.discarded.Load(), tab.Pinned())
	}
}

// A nested acquisition whose session answers but whose record shows a newer
// tenure ends the owner's hold and acquires anew (a new token).
func TestTableNestIntoStaleRecord(t *testing.T) {
	r, tab := newRecording(t, func(delta int) (bool, error) { return false, nil })
	ctx := context.Background()
	var lost atomic.Pointer[error]
	first, err := tab.Acquire(ctx, backend.Request{Key: "k", Owner: "o", Lost: lostTo(&lost)}, false)
	if err != nil {
		t.Fatal(err)
	}
	second, err := tab.Acquire(ctx, backend.Request{Key: "k", Owner: "o"}, false)
	if err != nil || second.Token() == first.Token() {
		t.Fatalf("nested into a stale tenure: %v, token %d (first %d), want a new acquisition", err, second.Token(), first.Token())
	}
	if p := lost.Load(); p == nil || !errors.Is(*p, backend.ErrLockLost) {
		t.Fatalf("the stale hold was told %v, want ErrLockLost", p)
	}
	if r.discarded.Load() != 1 || tab.Pinned() != 1 {
		t.Errorf("%d discarded, %d pinned; want 1, 1", r.discarded.Load(), tab.Pinned())
	}
	_ = second.Release(ctx)
}

// A nested acquisition whose record fails gives its hold up like a Release:
// when the owner's other holds were released meanwhile, that is the last
// hold, and the lock and its connection are given back, not left pinned.
func TestTableNestRecordFailsAfterLastRelease(t *testing.T) {
	entered, proceed := make(chan struct{}), make(chan struct{})
	r, tab := newRecording(t, func(delta int) (bool, error) {
		if delta > 0 {
			close(entered)
			<-proceed
			return false, backend.ErrUnavailable
		}
		return true, nil
	})
	ctx := context.Background()
	first, err := tab.Acquire(ctx, backend.Request{Key: "k", Owner: "o"}, false)
	if err != nil {
		t.Fatal(err)
	}
	res := make(chan error, 1)
	go func() {
		_, err := tab.Acquire(ctx, backend.Request{Key: "k", Owner: "o"}, false)
		res <- err
	}()
	<-entered
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	close(proceed)
	if err := <-res; !errors.Is(err, backend.ErrUnavailable) {
		t.Fatalf("nested acquisition whose record failed: %v, want ErrUnavailable", err)
	}
	if r.unlocked.Load() != 1 || tab.Pinned() != 0 {
		t.Errorf("%d unlocks, %d pinned after every hold was given up; want 1, 0", r.unlocked.Load(), tab.Pinned())
	}
}
