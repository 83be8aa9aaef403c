package sqllock

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock/backend"
)

// fakeConn and fakeServer stand in for a database: no server is needed.
type fakeConn struct{ id int64 }

type fakeServer struct {
	lock                         func(ctx context.Context, key string, wait bool) (Pinned[*fakeConn], error)
	pingErr                      atomic.Pointer[error]
	pings                        atomic.Int32
	unlocked, discarded, dropped atomic.Int32
}

func (f *fakeServer) Lock(ctx context.Context, req backend.Request, wait bool) (Pinned[*fakeConn], error) {
	return f.lock(ctx, req.Key, wait)
}

func (f *fakeServer) Ping(context.Context, *fakeConn) error {
	f.pings.Add(1)
	if p := f.pingErr.Load(); p != nil {
		return *p
	}
	return nil
}

func (f *fakeServer) Unlock(context.Context, *Pinned[*fakeConn]) error {
	f.unlocked.Add(1)
	return nil
}
func (f *fakeServer) Discard(*fakeConn) { f.discarded.Add(1) }
func (f *fakeServer) Abandon(*fakeConn) { f.dropped.Add(1) }

var nextID atomic.Int64

func granted(context.Context, string, bool) (Pinned[*fakeConn], error) {
	id := nextID.Add(1)
	return Pinned[*fakeConn]{Conn: &fakeConn{id}, ID: id, Token: uint64(id), Bound: time.Hour, Sent: time.Now()}, nil
}

func newFake(t *testing.T, keepalive time.Duration) (*fakeServer, *Table[*fakeConn], *Base) {
	f := &fakeServer{lock: granted}
	c := &Config{Table: "t", Mode: "m"}
	b := NewBase(Dialect{Quote: `"`}, nil, c, nil)
	t.Cleanup(func() { _ = b.Shutdown() })
	return f, NewTable[*fakeConn](f, b, TableConfig{Keepalive: keepalive, Noun: "session", IDName: "pid"}), b
}

// An owner's nested holds share one pinned connection and one token; the
// server's lock is given up once, by the last Release.
func TestTableNests(t *testing.T) {
	f, tab, _ := newFake(t, time.Hour)
	ctx := context.Background()
	req := backend.Request{Key: "k", Owner: "o"}
	a, err := tab.Acquire(ctx, req, false)
	if err != nil {
		t.Fatal(err)
	}
	b, err := tab.Acquire(ctx, req, true)
	if err != nil || b.Token() != a.Token() || tab.Pinned() != 1 {
		t.Fatalf("nested: %v, token %d want %d, %d pinned", err, b.Token(), a.Token(), tab.Pinned())
	}
	if err := a.Release(ctx); err != nil || f.unlocked.Load() != 0 {
		t.Fatalf("first release: %v, %d unlocks", err, f.unlocked.Load())
	}
	if err := a.Release(ctx); !errors.Is(err, backend.ErrNotHeld) {
		t.Errorf("second release of one hold: %v", err)
	}
	if err := b.Release(ctx); err != nil || f.unlocked.Load() != 1 || tab.Pinned() != 0 {
		t.Fatalf("last release: %v, %d unlocks, %d pinned", err, f.unlocked.Load(), tab.Pinned())
	}
}

// A failed keepalive ping ends every hold (Lost with ErrLockLost, naming
// the session) before the connection is discarded; Refresh then says the
// lock is gone.
func TestTableLossOnPing(t *testing.T) {
	f, tab, _ := newFake(t, 5*time.Millisecond)
	lost := make(chan error, 1)
	l, err := tab.Acquire(context.Background(), backend.Request{Key: "k", Owner: "o", Lost: func(err error) { lost <- err }}, false)
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("connection reset")
	f.pingErr.Store(&boom)
	select {
	case err := <-lost:
		if !errors.Is(err, backend.ErrLockLost) || !errors.Is(err, boom) || !strings.Contains(err.Error(), "session (pid") {
			t.Errorf("lost with %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("loss not reported")
	}
	if !waitUntil(func() bool { return f.discarded.Load() == 1 && tab.Pinned() == 0 }) {
		t.Errorf("%d discards, %d pinned after the loss", f.discarded.Load(), tab.Pinned())
	}
	if err := l.Refresh(context.Background(), time.Second); !errors.Is(err, backend.ErrNotHeld) {
		t.Errorf("Refresh after the loss: %v", err)
	}
}

// A session whose bound has passed without a successful command is lost
// at once: ValidUntil reports the deadline, the keepalive ends the lock
// without waiting for a ping.
func TestTableDeadline(t *testing.T) {
	f, tab, _ := newFake(t, time.Millisecond)
	f.lock = func(ctx context.Context, key string, wait bool) (Pinned[*fakeConn], error) {
		p, _ := granted(ctx, key, wait)
		p.Bound, p.Sent = time.Second, time.Now().Add(-time.Hour)
		return p, nil
	}
	lost := make(chan error, 1)
	l, err := tab.Acquire(context.Background(), backend.Request{Key: "k", Owner: "o", Lost: func(err error) { lost <- err }}, false)
	if err != nil {
		t.Fatal(err)
	}
	if d := l.(backend.Deadliner).ValidUntil(); time.Until(d) > 0 {
		t.Errorf("ValidUntil %v is in the future", d)
	}
	select {
	case err := <-lost:
		if !errors.Is(err, backend.ErrLockLost) || !strings.Contains(err.Error(), "idle limit") {
			t.Errorf("lost with %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("loss not reported")
	}
}

// A lock granted after Close began is given back with its connection
// (Abandon) and the acquisition fails with ErrClosed; nothing stays
// pinned and no keepalive runs. (mysql forupdate kept such a lock, its
// connection and a keepalive goroutine after Close.)
func TestTableCloseDuringAcquire(t *testing.T) {
	f, tab, _ := newFake(t, time.Millisecond)
	entered, release := make(chan struct{}), make(chan struct{})
	f.lock = func(ctx context.Context, key string, wait bool) (Pinned[*fakeConn], error) {
		close(entered)
		<-release
		return granted(ctx, key, wait)
	}
	res := make(chan error, 1)
	go func() {
		_, err := tab.Acquire(context.Background(), backend.Request{Key: "k", Owner: "o"}, true)
		res <- err
	}()
	<-entered
	tab.Close()
	close(release)
	if err := <-res; !errors.Is(err, backend.ErrClosed) {
		t.Errorf("acquire across Close: %v, want ErrClosed", err)
	}
	if f.dropped.Load() != 1 || tab.Pinned() != 0 {
		t.Errorf("%d abandoned, %d pinned", f.dropped.Load(), tab.Pinned())
	}
	pings := f.pings.Load()
	time.Sleep(20 * time.Millisecond) // the scenario: keepalive intervals pass
	if f.pings.Load() != pings {
		t.Error("a keepalive runs for the abandoned lock")
	}
	if _, err := tab.Acquire(context.Background(), backend.Request{Key: "k", Owner: "o"}, false); !errors.Is(err, backend.ErrClosed) {
		t.Errorf("acquire after Close: %v", err)
	}
}

// The same owner's acquisition in progress is waited for, not queued
// behind in the server: a TryAcquire finds it busy, an Acquire whose ctx
// ends gets ErrNotAcquired with the ctx error.
func TestTableSameOwnerInProgress(t *testing.T) {
	f, tab, _ := newFake(t, time.Hour)
	entered, release := make(chan struct{}), make(chan struct{})
	f.lock = func(ctx context.Context, key string, wait bool) (Pinned[*fakeConn], error) {
		close(entered)
		<-release
		return granted(ctx, key, wait)
	}
	req := backend.Request{Key: "k", Owner: "o"}
	go func() { _, _ = tab.Acquire(context.Background(), req, true) }()
	<-entered
	if _, err := tab.Acquire(context.Background(), req, false); !errors.Is(err, backend.ErrNotAcquired) {
		t.Errorf("try during the owner's acquisition: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if _, err := tab.Acquire(ctx, req, true); !errors.Is(err, backend.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("wait cut by ctx: %v", err)
	}
	close(release)
}

// Stoppable stops a statement from the server side when ctx ends, and
// breaks it (abort) when it is still running grace later.
func TestStoppable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	var stopped atomic.Bool
	_, err := Stoppable(ctx, 0, 20*time.Millisecond, func(func()) { stopped.Store(true) }, func(qctx context.Context) error {
		<-qctx.Done() // only abort ends it
		return qctx.Err()
	})
	if !stopped.Load() || !errors.Is(err, context.Canceled) {
		t.Errorf("stopped %v, err %v", stopped.Load(), err)
	}
	timedOut, err := Stoppable(context.Background(), 5*time.Millisecond, 0, func(abort func()) { abort() }, func(qctx context.Context) error {
		<-qctx.Done()
		return errors.New("killed")
	})
	if !timedOut || err == nil {
		t.Errorf("limit: timedOut %v, err %v", timedOut, err)
	}
}

// Option errors wrap ErrInvalidOption and name the backend, the option and
// the value on one line; the first one wins.
func TestConfigFail(t *testing.T) {
	c := Config{Backend: "x"}
	c.SetKeepalive(-time.Second)
	c.SetMode("bogus", "a", "b")
	if !errors.Is(c.Err, backend.ErrInvalidOption) || !strings.HasSuffix(c.Err.Error(), `: x: WithKeepalive(-1s): must be positive`) {
		t.Errorf("%v", c.Err)
	}
	c = Config{Backend: "x"}
	c.SetMode("bogus", "a", "b")
	if c.Err == nil || !strings.HasSuffix(c.Err.Error(), `x: WithMode("bogus"): want "a" or "b"`) {
		t.Errorf("%v", c.Err)
	}
}

// WithCleanup's values are checked: interval 0 disables, a negative
// interval or grace, or a batch outside [1, 100000], is refused.
func TestSetCleanup(t *testing.T) {
	for _, bad := range []struct {
		interval, grace time.Duration
		batch           int
	}{{-time.Second, 0, 1}, {time.Second, -1, 1}, {time.Second, 0, 0}, {time.Second, 0, 100_001}} {
		c := Config{Backend: "x"}
		c.SetCleanup(bad.interval, bad.grace, bad.batch)
		if !errors.Is(c.Err, backend.ErrInvalidOption) || !strings.Contains(c.Err.Error(), "WithCleanup") {
			t.Errorf("SetCleanup(%v, %v, %d): %v", bad.interval, bad.grace, bad.batch, c.Err)
		}
	}
	c := Config{Backend: "x"}
	c.SetCleanup(0, 0, 0)
	if c.Err != nil || c.Cleanup.Interval != 0 {
		t.Errorf("disabled cleanup: %v, %+v", c.Err, c.Cleanup)
	}
}

// Undo stops at the first try that gives the hold back.
func TestUndoStopsWhenDone(t *testing.T) {
	b := NewBase(Dialect{}, nil, &Config{}, nil)
	var tries atomic.Int32
	b.Undo(time.Minute, func(context.Context) (bool, error) { return tries.Add(1) == 2, nil })
	if !waitUntil(func() bool { return tries.Load() == 2 }) {
		t.Fatalf("%d tries", tries.Load())
	}
	if err := b.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if tries.Load() != 2 {
		t.Errorf("%d tries, want 2", tries.Load())
	}
}

func waitUntil(cond func() bool) bool {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}
