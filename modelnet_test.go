package distlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distlock/distlock/backend"
)

// modelLink is the network between one client (a Locker's driver) and the
// model server. Requests and replies travel independently: each is delayed
// uniformly up to its direction's current maximum (so they reorder), a
// reply may be dropped, and a partition drops what is sent or arrives
// while it lasts, except the messages it holds back to deliver late, when
// it heals.
type modelLink struct {
	mu          sync.Mutex
	rng         *rand.Rand
	reqDelay    time.Duration
	replyDelay  time.Duration
	dropReply   float64
	partitioned bool
	held        []func()
	pending     atomic.Int64 // messages in the network
}

// setNet changes the link's delays and reply loss.
func (k *modelLink) setNet(req, reply time.Duration, drop float64) {
	k.mu.Lock()
	k.reqDelay, k.replyDelay, k.dropReply = req, reply, drop
	k.mu.Unlock()
}

// partition cuts the link (on) or heals it (off), delivering the messages
// it held back.
func (k *modelLink) partition(on bool) {
	k.mu.Lock()
	k.partitioned = on
	var late []func()
	if !on {
		late, k.held = k.held, nil
	}
	k.mu.Unlock()
	for _, m := range late {
		m()
	}
}

// lost decides the fate of a message meeting a partition: held back for
// late delivery (after a fresh delay) or dropped. Callers hold k.mu.
func (k *modelLink) lost(deliver func(), reply bool) {
	if k.rng.Float64() < 0.3 {
		k.held = append(k.held, func() { k.send(deliver, reply); k.pending.Add(-1) })
		return
	}
	k.pending.Add(-1)
}

// send puts a message on the link; deliver runs at its arrival.
func (k *modelLink) send(deliver func(), reply bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.pending.Add(1)
	if k.partitioned {
		k.lost(deliver, reply)
		return
	}
	if reply && k.rng.Float64() < k.dropReply {
		k.pending.Add(-1)
		return
	}
	maxDelay := k.reqDelay
	if reply {
		maxDelay = k.replyDelay
	}
	d := time.Duration(k.rng.Int64N(int64(maxDelay) + 1))
	time.AfterFunc(d, func() {
		k.mu.Lock()
		if k.partitioned {
			k.lost(deliver, reply)
			k.mu.Unlock()
			return
		}
		k.mu.Unlock()
		deliver()
		k.pending.Add(-1)
	})
}

// modelDriver is a backend.Driver talking to the model server over its
// link: one round trip per call, honouring ctx exactly. An acquisition
// whose reply did not come before ctx ended is undone in the background,
// retried until the server confirms (the network is healed at the end of
// every run).
type modelDriver struct {
	srv     *modelServer
	link    *modelLink
	onReply func(key string, token uint64) // a refresh's reply was delivered

	mu      sync.Mutex
	failed  map[uint64]string // holds of acquisitions that failed for their caller
	undos   atomic.Int64      // undos under way
	closed  bool
	closeCh chan struct{}
}

// modelBatchDriver adds backend.BatchRefresher: one round trip for many
// refreshes, so they share their send time (and their leases a deadline).
type modelBatchDriver struct{ *modelDriver }

func newModelDriver(srv *modelServer, link *modelLink) *modelDriver {
	return &modelDriver{srv: srv, link: link, failed: map[uint64]string{}, closeCh: make(chan struct{})}
}

func (d *modelDriver) Capabilities() backend.Capabilities {
	return backend.Capabilities{Fencing: true, Reentrant: true, Expiring: true}
}

func (d *modelDriver) Close() error {
	d.mu.Lock()
	if !d.closed {
		d.closed = true
		close(d.closeCh)
	}
	d.mu.Unlock()
	return nil
}

// errNoReply is the error of a call whose reply did not come before ctx ended.
func errNoReply(ctx context.Context) error {
	return fmt.Errorf("%w: no reply: %w", backend.ErrUnavailable, context.Cause(ctx))
}

// call runs op on the server at the request's arrival and waits for the
// reply or the end of ctx.
func call[T any](ctx context.Context, d *modelDriver, op func() T) (T, error) {
	reply := make(chan T, 1)
	d.link.send(func() {
		r := op()
		d.link.send(func() { reply <- r }, true)
	}, false)
	select {
	case r := <-reply:
		return r, nil
	case <-ctx.Done():
		var zero T
		return zero, errNoReply(ctx)
	}
}

func (d *modelDriver) TryAcquire(ctx context.Context, req backend.Request) (backend.Lock, error) {
	if err := ctx.Err(); err != nil {
		return nil, errNoReply(ctx)
	}
	d.mu.Lock()
	closed := d.closed
	d.mu.Unlock()
	if closed {
		return nil, backend.ErrClosed
	}
	hold := d.srv.holdID()
	g, err := call(ctx, d, func() modelGrant { return d.srv.acquire(req.Key, req.Owner, req.TTL, hold) })
	if err != nil {
		d.undo(req.Key, hold, "acquisition cut off by its ctx")
		return nil, err
	}
	if !g.ok {
		return nil, backend.Busy(g.busy)
	}
	return &modelLock{d: d, key: req.Key, owner: req.Owner, token: g.token, hold: hold}, nil
}

// undo takes back an acquisition whose outcome the caller never learnt, in
// the background, until the server confirms.
func (d *modelDriver) undo(key string, hold uint64, why string) {
	d.mu.Lock()
	d.failed[hold] = why
	d.mu.Unlock()
	d.undos.Add(1)
	go func() {
		defer d.undos.Add(-1)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			_, err := call(ctx, d, func() bool { d.srv.undo(key, hold); return true })
			cancel()
			if err == nil {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
}

// replied tells the model checker that a refresh of l has returned: the
// moment its lease's state changes.
func (d *modelDriver) replied(l *modelLock) {
	if d.onReply != nil {
		d.onReply(l.key, l.token)
	}
}

// orphans returns the holds of failed acquisitions.
func (d *modelDriver) orphans() map[uint64]string {
	d.mu.Lock()
	defer d.mu.Unlock()
	m := make(map[uint64]string, len(d.failed))
	for h, why := range d.failed {
		m[h] = why
	}
	return m
}

func (d modelBatchDriver) RefreshBatch(ctx context.Context, items []backend.RefreshItem) []error {
	oks, err := call(ctx, d.modelDriver, func() []bool {
		oks := make([]bool, len(items))
		for i, it := range items {
			l := it.Lock.(*modelLock)
			oks[i] = d.srv.refresh(l.key, l.owner, l.token, it.TTL)
		}
		return oks
	})
	for _, it := range items {
		d.replied(it.Lock.(*modelLock))
	}
	errs := make([]error, len(items))
	for i := range items {
		switch {
		case err != nil:
			errs[i] = err
		case !oks[i]:
			errs[i] = fmt.Errorf("%w: refresh refused", backend.ErrNotHeld)
		}
	}
	return errs
}

type modelLock struct {
	d     *modelDriver
	key   string
	owner string
	token uint64
	hold  uint64
}

func (l *modelLock) Token() uint64 { return l.token }

func (l *modelLock) Refresh(ctx context.Context, ttl time.Duration) error {
	ok, err := call(ctx, l.d, func() bool { return l.d.srv.refresh(l.key, l.owner, l.token, ttl) })
	l.d.replied(l)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: refresh refused", backend.ErrNotHeld)
	}
	return nil
}

func (l *modelLock) Release(ctx context.Context) error {
	ok, err := call(ctx, l.d, func() bool { return l.d.srv.release(l.key, l.owner, l.token, l.hold) })
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: release refused", backend.ErrNotHeld)
	}
	return nil
}

func (d *modelDriver) Inspect(context.Context, string) (backend.LockInfo, error) {
	return backend.LockInfo{}, errors.ErrUnsupported
}

func (d *modelDriver) ForceRelease(context.Context, string, backend.Holder) (backend.LockInfo, error) {
	return backend.LockInfo{}, errors.ErrUnsupported
}
