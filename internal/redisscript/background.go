package redisscript

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Background runs the work of a Redis-based driver that outlives the call
// that started it: round trips whose caller's context ended first (go-redis
// does not interrupt a socket read when a context is cancelled, and honours
// deadlines only with Options.ContextTimeoutEnabled), and the owner-checked
// undo of operations whose outcome is unknown. Close waits for all of it.
// Safe for concurrent use.
type Background struct {
	undoSem chan struct{}
	quit    chan struct{} // closed when Close begins: waits between retries end
	workers sync.WaitGroup

	mu       sync.Mutex
	draining bool
	active   int
	idle     sync.Cond
	// ready is the stack of idle pooled goroutines, the most recently idle
	// on top: work goes to the top, so under a steady load the same few
	// stay busy and the rest of a burst's goroutines time out at the
	// bottom (a FIFO hand-off would keep every one of them alive).
	ready []*bgWorker
}

// bgWorker is a pooled goroutine's inbox.
type bgWorker struct{ task chan func() }

// DefaultMaxUndo bounds the concurrent undo operations of a Background made
// with NewBackground(0).
const DefaultMaxUndo = 64

// UndoTimeout bounds each background undo.
const UndoTimeout = 5 * time.Second

// NewBackground returns a Background that runs at most maxUndo undo
// operations at once (DefaultMaxUndo if maxUndo <= 0); beyond that an orphan
// hold is left to its TTL.
func NewBackground(maxUndo int) *Background {
	if maxUndo <= 0 {
		maxUndo = DefaultMaxUndo
	}
	b := &Background{undoSem: make(chan struct{}, maxUndo), quit: make(chan struct{})}
	b.idle.L = &b.mu
	return b
}

// Go runs fn on a goroutine that Close waits for. Once Close has begun, only
// work started from background work (fromBackground, which holds Close back
// itself) may start more; Go then reports false and does not run fn.
//
// The goroutines are pooled: the most recently idle one takes fn if there
// is one, else a new one starts, and each stays idle for workerIdle before
// it exits. A fan-out to several nodes per operation would otherwise pay
// for a new goroutine, and for growing its stack, per node and operation.
func (b *Background) Go(fn func(), fromBackground bool) bool {
	b.mu.Lock()
	if b.draining && !fromBackground {
		b.mu.Unlock()
		return false
	}
	b.active++
	task := func() {
		defer b.done()
		fn()
	}
	if n := len(b.ready); n > 0 {
		w := b.ready[n-1]
		b.ready[n-1] = nil
		b.ready = b.ready[:n-1]
		b.mu.Unlock()
		w.task <- task // buffered: never blocks
		return true
	}
	b.workers.Add(1)
	b.mu.Unlock()
	go b.worker(task)
	return true
}

// workerIdle is how long a pooled goroutine waits for more work. A
// variable only so that tests can shorten it.
var workerIdle = time.Second

func (b *Background) worker(task func()) {
	defer b.workers.Done()
	w := &bgWorker{task: make(chan func(), 1)}
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		task()
		b.mu.Lock()
		b.ready = append(b.ready, w)
		b.mu.Unlock()
		idle.Reset(workerIdle)
		select {
		case task = <-w.task:
			continue
		case <-idle.C:
		case <-b.quit:
		}
		if !b.retire(w) {
			task = <-w.task // Go took w off the stack: its task is on the way
			continue
		}
		return
	}
}

// retire takes w off the idle stack; false if Go already took it.
func (b *Background) retire(w *bgWorker) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, r := range b.ready {
		if r == w {
			b.ready = slices.Delete(b.ready, i, i+1) // clears the vacated slot
			return true
		}
	}
	return false
}

func (b *Background) done() {
	b.mu.Lock()
	b.active--
	if b.active == 0 {
		b.idle.Broadcast()
	}
	b.mu.Unlock()
}

// Run calls op so that the caller returns as soon as ctx ends. op runs on
// its own goroutine; if ctx ends first, Run returns ctx's error (see
// CtxError) at once with abandoned set, and late, if not nil, receives op's
// result when it finally arrives, on op's goroutine. After Close began, op
// runs on the caller's goroutine.
func (b *Background) Run(ctx context.Context, op func(context.Context) error, late func(error)) (abandoned bool, err error) {
	var state atomic.Int32 // 0 running, 1 result taken by the caller, 2 abandoned
	done := make(chan error, 1)
	if !b.Go(func() {
		err := op(ctx)
		if !state.CompareAndSwap(0, 1) && late != nil {
			late(err)
		}
		done <- err
	}, false) {
		return false, op(ctx) // closing: no more background work
	}
	select {
	case err := <-done:
		return false, err
	case <-ctx.Done():
		if state.CompareAndSwap(0, 2) {
			return true, CtxError(ctx)
		}
		return false, <-done
	}
}

// CtxError is ctx's error, with its cause when that says more (such as
// distlock.ErrClosed when the Locker closes). errors.Is(CtxError(ctx),
// ctx.Err()) holds.
func CtxError(ctx context.Context) error {
	err := ctx.Err()
	if cause := context.Cause(ctx); cause != nil && cause != err {
		return fmt.Errorf("%w: %w", err, cause)
	}
	return err
}

// Undo removes one hold in the background, owner-checked (see Release; token
// 0 does not check the token, the unique hold id identifies the
// acquisition), retrying with backoff until it gets an answer from the
// server, the client is closed, or min(within, UndoTimeout) passes — after
// which the TTL frees the lock anyway. When too many undo operations are
// running it does nothing and leaves the hold to its TTL. fromBackground as
// for Go.
func (b *Background) Undo(c goredis.Scripter, k Keys, owner string, token uint64, hold string, within time.Duration, fromBackground bool) {
	select {
	case b.undoSem <- struct{}{}:
	default:
		return // too many at once: the TTL will do
	}
	if !b.Go(func() {
		defer func() { <-b.undoSem }()
		b.release(c, k, owner, token, hold, within, Ambiguous)
	}, fromBackground) {
		<-b.undoSem
	}
}

// Leave ends a wait in a fair lock's queue (k from Keys.Fair) in the
// background: it removes hold from the queue and releases the lock if it
// was granted to hold. Unlike Undo it is never dropped for lack of an undo
// slot — a waiter left in the queue could be granted a lock that no one
// would use until its TTL — so it costs at most one pooled goroutine per
// departing waiter. inFlight says that an attempt of hold may still reach
// the server: Leave then repeats on UndoAcquire's schedule, so that an
// attempt landing after the first try is undone too; otherwise it retries
// any failure with backoff until one try succeeds, within UndoTimeout.
// fromBackground as for Go.
func (b *Background) Leave(c goredis.Scripter, k Keys, owner, hold string, inFlight, fromBackground bool) {
	b.Go(func() {
		if inFlight {
			b.undoOnSchedule(c, k, owner, 0, hold, UndoTimeout)
			return
		}
		b.release(c, k, owner, 0, hold, UndoTimeout, func(error) bool { return true })
	}, fromBackground)
}

// release calls Release until it succeeds or fails with an error retry
// does not accept, the client is closed, or min(within, UndoTimeout) passes.
func (b *Background) release(c goredis.Scripter, k Keys, owner string, token uint64, hold string, within time.Duration, retry func(error) bool) {
	ctx, cancel := context.WithTimeout(context.Background(), min(within, UndoTimeout))
	defer cancel()
	pause := 20 * time.Millisecond
	for {
		_, err := Release(ctx, c, k, owner, token, hold)
		if err == nil || !retry(err) || ctx.Err() != nil || errors.Is(err, goredis.ErrClosed) {
			return
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		pause = min(2*pause, time.Second)
	}
}

// UndoAcquire removes, in the background and owner-checked, the hold of an
// acquire whose outcome is unknown because its request may still be on its
// way (a timeout after sending it; the node may be slow or paused). One
// release can come too early — it finds nothing and the acquire lands
// after it — so it tries several times, spaced out over about 4.5s
// (bounded by within, and each try by half a second), until a try finds
// and removes the hold or the client is closed; Close cuts the schedule
// short after one more try. When too many undo
// operations are running it does nothing and leaves the hold to its TTL.
// fromBackground as for Go.
func (b *Background) UndoAcquire(c goredis.Scripter, k Keys, owner string, token uint64, hold string, within time.Duration, fromBackground bool) {
	select {
	case b.undoSem <- struct{}{}:
	default:
		return
	}
	if !b.Go(func() {
		defer func() { <-b.undoSem }()
		b.undoOnSchedule(c, k, owner, token, hold, within)
	}, fromBackground) {
		<-b.undoSem
	}
}

// undoOnSchedule is UndoAcquire's work.
func (b *Background) undoOnSchedule(c goredis.Scripter, k Keys, owner string, token uint64, hold string, within time.Duration) {
	start := time.Now()
	end := start.Add(min(within, UndoTimeout))
	for _, at := range undoAcquireSchedule {
		if wait := time.Until(start.Add(at)); wait > 0 {
			if !start.Add(at).Before(end) {
				return
			}
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-b.quit:
				t.Stop()
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), min(time.Until(end), 500*time.Millisecond))
		r, err := Release(ctx, c, k, owner, token, hold)
		cancel()
		if (err == nil && r != NotHeld) || errors.Is(err, goredis.ErrClosed) || !time.Now().Before(end) || b.quitting() {
			return
		}
	}
}

// undoAcquireSchedule: when UndoAcquire tries, from its start.
var undoAcquireSchedule = []time.Duration{0, 100 * time.Millisecond, 500 * time.Millisecond, 1500 * time.Millisecond, 3 * time.Second, 4500 * time.Millisecond}

func (b *Background) quitting() bool {
	select {
	case <-b.quit:
		return true
	default:
		return false
	}
}

// Close stops new work (Go from outside background work reports false),
// cuts UndoAcquire's waits short and waits until every task started by Go
// has returned and every pooled goroutine has exited.
func (b *Background) Close() {
	b.mu.Lock()
	if !b.draining {
		close(b.quit)
	}
	b.draining = true
	for b.active > 0 {
		b.idle.Wait()
	}
	b.mu.Unlock()
	b.workers.Wait()
}
