package queuewait

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fake is a Queue whose mechanism each test scripts; L is a string, E an
// int. Await calls it from one goroutine; the test reads the counts after
// Await returned.
type fake struct {
	look  func(n int) (bool, error)                       // n: the calls before
	watch func(n int) (<-chan int, bool, error)           // default: events, not gone
	event func(ev int, ok bool) (<-chan int, bool, error) // default: gone

	events         chan int
	changed        chan struct{}
	joinable       func() (<-chan struct{}, bool)
	nest           func() (string, bool, error)
	head           func() (<-chan struct{}, bool) // default: not ours
	closed, lost   chan struct{}
	looks, watches int
	evs, grants    int
	nests, starts  int // starts: the rounds' calls of Joinable
	sameAtStart    bool
	waiting        bool // between a Watch and the Event that says gone
	failed         []error
	watchCtxs      []context.Context
}

var (
	errClosed = errors.New("closed")
	errLost   = errors.New("lost")
	errCtx    = errors.New("ctx ended")
)

func newFake() *fake {
	return &fake{
		events: make(chan int), changed: make(chan struct{}),
		closed: make(chan struct{}), lost: make(chan struct{}),
	}
}

func (f *fake) Look(context.Context) (bool, error) {
	f.looks++
	return f.look(f.looks - 1)
}

func (f *fake) Watch(ctx context.Context) (<-chan int, bool, error) {
	f.watches++
	f.watchCtxs = append(f.watchCtxs, ctx)
	events, gone, err := (<-chan int)(f.events), false, error(nil)
	if f.watch != nil {
		events, gone, err = f.watch(f.watches - 1)
	}
	f.waiting = err == nil && !gone
	return events, gone, err
}

func (f *fake) Event(_ context.Context, ev int, ok bool) (<-chan int, bool, error) {
	f.evs++
	events, gone, err := (<-chan int)(nil), true, error(nil)
	if f.event != nil {
		events, gone, err = f.event(ev, ok)
	}
	f.waiting = err == nil && !gone
	return events, gone, err
}

func (f *fake) Grant() (string, error) { f.grants++; return "granted", nil }

// Joinable answers sameAtStart with the first signal at the start of a
// round, and asks joinable while the entry waits on a watch.
func (f *fake) Joinable() (<-chan struct{}, bool) {
	if f.waiting {
		return f.joinable()
	}
	f.starts++
	return f.changed, f.sameAtStart
}

func (f *fake) Nest(context.Context) (string, bool, error) { f.nests++; return f.nest() }

func (f *fake) Head() (<-chan struct{}, bool) {
	if f.head == nil {
		return nil, false
	}
	return f.head()
}

func (f *fake) Fail(err error) error { f.failed = append(f.failed, err); return err }

func (f *fake) Ends() Ends {
	return Ends{Closed: f.closed, ClosedErr: errClosed, Lost: f.lost, LostErr: errLost,
		CtxErr: func(ctx context.Context) error { return errors.Join(errCtx, ctx.Err()) }}
}

// firstAt makes the n-th Look (from 0) the first to find the entry first.
func firstAt(n int) func(int) (bool, error) {
	return func(i int) (bool, error) { return i >= n, nil }
}

type result struct {
	l   string
	err error
}

// start runs Await on f in a goroutine.
func start(ctx context.Context, f *fake) <-chan result {
	done := make(chan result, 1)
	go func() {
		l, err := Await[string, int](ctx, f)
		done <- result{l, err}
	}()
	return done
}

func wait(t *testing.T, done <-chan result) result {
	t.Helper()
	select {
	case r := <-done:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("Await did not return")
		return result{}
	}
}

func TestFirstIsGrantedWithoutWatch(t *testing.T) {
	f := newFake()
	f.look = firstAt(0)
	r := wait(t, start(context.Background(), f))
	require.NoError(t, r.err)
	assert.Equal(t, "granted", r.l)
	assert.Equal(t, []int{1, 0, 0, 1}, []int{f.looks, f.watches, f.evs, f.grants})
	assert.Empty(t, f.failed)
}

// One deletion event: one more look, no other call; the watch's context is
// cancelled once the round is over.
func TestDeletionLooksAgain(t *testing.T) {
	f := newFake()
	f.look = firstAt(2)
	done := start(context.Background(), f)
	f.events <- 1
	f.events <- 2
	r := wait(t, done)
	require.NoError(t, r.err)
	assert.Equal(t, "granted", r.l)
	assert.Equal(t, []int{3, 2, 2, 1, 3}, []int{f.looks, f.watches, f.evs, f.grants, f.starts})
	for _, wctx := range f.watchCtxs {
		assert.Error(t, wctx.Err(), "a watch's context outlived its round")
	}
	assert.Empty(t, f.failed)
}

func TestWatchFindsPredecessorGone(t *testing.T) {
	f := newFake()
	f.look = firstAt(1)
	f.watch = func(int) (<-chan int, bool, error) { return nil, true, nil }
	r := wait(t, start(context.Background(), f))
	require.NoError(t, r.err)
	assert.Equal(t, []int{2, 1, 0, 1}, []int{f.looks, f.watches, f.evs, f.grants})
}

// An event that is no deletion keeps the wait on the same channel (nil) or
// moves it to a new watch's.
func TestEventThatIsNoDeletion(t *testing.T) {
	f := newFake()
	f.look = firstAt(1)
	rewatch := make(chan int)
	f.event = func(ev int, _ bool) (<-chan int, bool, error) {
		switch ev {
		case 1:
			return nil, false, nil // same channel
		case 2:
			return rewatch, false, nil
		}
		return nil, true, nil
	}
	done := start(context.Background(), f)
	f.events <- 1
	f.events <- 2
	rewatch <- 3
	r := wait(t, done)
	require.NoError(t, r.err)
	assert.Equal(t, []int{2, 1, 3, 1}, []int{f.looks, f.watches, f.evs, f.grants})
}

// ctx, the driver's closing and the session's loss end the wait with the
// entry deleted and their error.
func TestEnds(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(f *fake, cancel context.CancelFunc)
		want error
	}{
		{"ctx", func(_ *fake, cancel context.CancelFunc) { cancel() }, context.Canceled},
		{"closed", func(f *fake, _ context.CancelFunc) { close(f.closed) }, errClosed},
		{"lost", func(f *fake, _ context.CancelFunc) { close(f.lost) }, errLost},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake()
			f.look = firstAt(100)
			f.event = func(int, bool) (<-chan int, bool, error) { return nil, false, nil }
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := start(ctx, f)
			f.events <- 1 // Await is waiting on the watch
			tc.end(f, cancel)
			r := wait(t, done)
			require.ErrorIs(t, r.err, tc.want)
			require.Len(t, f.failed, 1)
			assert.ErrorIs(t, f.failed[0], tc.want)
			assert.Equal(t, []int{1, 1, 0, 0}, []int{f.looks, f.watches, f.grants, f.nests})
			assert.Error(t, f.watchCtxs[0].Err())
		})
	}
}

// Errors of Look, Watch and Event have ended the attempt: returned as they
// are, without a Fail of Await's.
func TestBackendErrorsReturnedAsTheyAre(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name string
		set  func(f *fake)
	}{
		{"look", func(f *fake) { f.look = func(int) (bool, error) { return false, boom } }},
		{"watch", func(f *fake) { f.watch = func(int) (<-chan int, bool, error) { return nil, false, boom } }},
		{"event", func(f *fake) { f.event = func(int, bool) (<-chan int, bool, error) { return nil, false, boom } }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake()
			f.look = firstAt(100)
			close(f.events) // an event at once: Event sees ok false
			tc.set(f)
			r := wait(t, start(context.Background(), f))
			require.ErrorIs(t, r.err, boom)
			assert.Empty(t, f.failed)
			assert.Zero(t, f.grants)
		})
	}
}

// A hold the driver got for our owner: nest in it, delete the entry.
func TestJoinsOwnersHold(t *testing.T) {
	f := newFake()
	f.look = firstAt(100)
	f.event = func(int, bool) (<-chan int, bool, error) { return nil, false, nil }
	f.joinable = func() (<-chan struct{}, bool) { return make(chan struct{}), true }
	f.nest = func() (string, bool, error) { return "nested", true, nil }
	done := start(context.Background(), f)
	f.events <- 0 // Await is waiting on the watch
	close(f.changed)
	r := wait(t, done)
	require.NoError(t, r.err)
	assert.Equal(t, "nested", r.l)
	assert.Equal(t, []error{nil}, f.failed)
	assert.Equal(t, []int{1, 1, 0, 1}, []int{f.looks, f.watches, f.grants, f.nests})
}

// A hold of another owner renews the signal only; a nest that finds the
// hold gone waits on; a nest's error ends the wait with the entry deleted.
func TestOtherHoldThenNestError(t *testing.T) {
	f := newFake()
	f.look = firstAt(100)
	f.event = func(int, bool) (<-chan int, bool, error) { return nil, false, nil }
	second, third := make(chan struct{}), make(chan struct{})
	joins := 0
	joined := make(chan int, 3)
	f.joinable = func() (<-chan struct{}, bool) {
		joins++
		joined <- joins
		switch joins {
		case 1:
			return second, false // another owner's hold
		case 2:
			return third, true // ours, but the nest finds it gone
		}
		return make(chan struct{}), true
	}
	boom := errors.New("publish failed")
	f.nest = func() (string, bool, error) {
		if f.nests == 1 {
			return "", false, nil
		}
		return "", false, boom
	}
	done := start(context.Background(), f)
	close(f.changed)
	require.Equal(t, 1, <-joined)
	f.events <- 0 // Await waits on
	close(second)
	require.Equal(t, 2, <-joined)
	f.events <- 0 // the nest that found the hold gone did not end the wait
	close(third)
	r := wait(t, done)
	require.ErrorIs(t, r.err, boom)
	assert.Equal(t, []error{boom}, f.failed)
	assert.Equal(t, []int{1, 1, 0, 2, 3}, []int{f.looks, f.watches, f.grants, f.nests, joins})
}

// Our owner's hold, granted before a round took the signal: the round
// joins it before it looks; a nest that finds it gone looks on.
func TestJoinsOwnersHoldAtRoundStart(t *testing.T) {
	f := newFake()
	f.look = firstAt(0)
	f.sameAtStart = true
	f.nest = func() (string, bool, error) { return "nested", true, nil }
	r := wait(t, start(context.Background(), f))
	require.NoError(t, r.err)
	assert.Equal(t, "nested", r.l)
	assert.Equal(t, []error{nil}, f.failed)
	assert.Equal(t, []int{0, 0, 0, 1}, []int{f.looks, f.watches, f.grants, f.nests})

	f = newFake()
	f.look = firstAt(0)
	f.sameAtStart = true
	f.nest = func() (string, bool, error) { return "", false, nil }
	r = wait(t, start(context.Background(), f))
	require.NoError(t, r.err)
	assert.Equal(t, "granted", r.l)
	assert.Empty(t, f.failed)
	assert.Equal(t, []int{1, 0, 1, 1}, []int{f.looks, f.watches, f.grants, f.nests})
}

// A try that is not first joins its owner's hold, if the driver has one,
// and is refused otherwise; either way its entry is deleted.
func TestRefuse(t *testing.T) {
	busy := errors.New("busy")
	f := newFake()
	f.sameAtStart = true
	f.nest = func() (string, bool, error) { return "nested", true, nil }
	l, err := Refuse[string, int](context.Background(), f, busy)
	require.NoError(t, err)
	assert.Equal(t, "nested", l)
	assert.Equal(t, []error{nil}, f.failed)

	for _, nest := range []func() (string, bool, error){
		nil, // no hold of the owner
		func() (string, bool, error) { return "", false, nil }, // one that is gone
	} {
		f = newFake()
		f.sameAtStart = nest != nil
		f.nest = nest
		l, err = Refuse[string, int](context.Background(), f, busy)
		require.ErrorIs(t, err, busy)
		assert.Empty(t, l)
		assert.Equal(t, []error{busy}, f.failed)
	}
}

// A try behind an attempt of its owner at the head of the queue waits for
// it: joins its hold once granted, or looks again once it ended (granted
// if first, refused if another owner's entry heads the queue then).
func TestRefuseWaitsForOwnersAttemptAtHead(t *testing.T) {
	busy := errors.New("busy")
	t.Run("granted", func(t *testing.T) {
		f := newFake()
		// The owner's hold appears with the signal: the join after it
		// finds it (Head runs in Refuse's goroutine, before the wait).
		f.head = func() (<-chan struct{}, bool) { f.sameAtStart = true; return nil, true }
		f.nest = func() (string, bool, error) { return "nested", true, nil }
		done := make(chan result, 1)
		go func() { l, err := Refuse[string, int](context.Background(), f, busy); done <- result{l, err} }()
		close(f.changed)
		r := wait(t, done)
		require.NoError(t, r.err)
		assert.Equal(t, "nested", r.l)
		assert.Equal(t, []error{nil}, f.failed)
	})
	for _, tc := range []struct {
		name  string
		first bool
		want  error
	}{{"ended, first", true, nil}, {"ended, behind another owner", false, busy}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake()
			ended := make(chan struct{})
			heads := 0
			f.head = func() (<-chan struct{}, bool) { heads++; return ended, heads == 1 }
			f.look = func(int) (bool, error) { return tc.first, nil }
			done := make(chan result, 1)
			go func() { l, err := Refuse[string, int](context.Background(), f, busy); done <- result{l, err} }()
			close(ended)
			r := wait(t, done)
			if tc.want != nil {
				require.ErrorIs(t, r.err, tc.want)
				assert.Equal(t, []error{busy}, f.failed)
				return
			}
			require.NoError(t, r.err)
			assert.Equal(t, "granted", r.l)
			assert.Empty(t, f.failed)
		})
	}
	t.Run("ctx", func(t *testing.T) {
		f := newFake()
		f.head = func() (<-chan struct{}, bool) { return nil, true }
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan result, 1)
		go func() { l, err := Refuse[string, int](ctx, f, busy); done <- result{l, err} }()
		cancel()
		r := wait(t, done)
		require.ErrorIs(t, r.err, context.Canceled)
		require.Len(t, f.failed, 1)
	})
}
