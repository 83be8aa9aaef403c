package sqllock

import (
	"context"
	"fmt"
	"time"

	"github.com/distlock/distlock/backend"
)

// Hold is one hold of a lock in a Table: a backend.Lock and a
// backend.Deadliner.
type Hold[C any] struct {
	t *Table[C]
	e *entry[C]
}

// Token is the lock's fencing token, shared by the owner's nested holds.
func (h *Hold[C]) Token() uint64 { return h.e.p.Token }

// ValidUntil implements backend.Deadliner: the moment the server may end
// the lock's silent session — the last command that succeeded on the
// connection plus the session's bound, less a margin — so a holder resumed
// from a pause sees its loss before the keepalive has run.
func (h *Hold[C]) ValidUntil() time.Time {
	h.t.mu.Lock()
	defer h.t.mu.Unlock()
	return h.e.deadline()
}

// errLocked says why h is not a live hold. Callers hold Table.mu.
func (h *Hold[C]) errLocked() error {
	if _, ok := h.e.locks[h]; ok && h.e.state == held {
		return nil
	}
	if h.e.state == gone {
		return fmt.Errorf("%w: the lock's %s has ended", backend.ErrNotHeld, h.t.cfg.Noun)
	}
	return fmt.Errorf("%w: released", backend.ErrNotHeld)
}

// Refresh checks that the lock's session is alive (there is no TTL to
// extend): it returns ErrNotHeld when the lock is gone, ErrLockLost when
// this check found it gone. A caller's ctx that ends first returns early;
// the check goes on and ends the lock if it fails.
func (h *Hold[C]) Refresh(ctx context.Context, _ time.Duration) error {
	t, e := h.t, h.e
	t.mu.Lock()
	err := h.errLocked()
	t.mu.Unlock()
	if err != nil {
		return err
	}
	res := make(chan bool, 1)
	if !t.base.Go(func(context.Context) { res <- t.check(e) }) {
		return backend.ErrClosed
	}
	select {
	case alive := <-res:
		t.mu.Lock()
		defer t.mu.Unlock()
		if err := h.errLocked(); err != nil {
			if !alive {
				return fmt.Errorf("%w: the lock's %s failed", backend.ErrLockLost, t.cfg.Noun)
			}
			return err
		}
		return nil
	case <-ctx.Done():
		return NoAnswer(ctx, nil)
	}
}

// Release gives up one hold; the last one gives up the server's lock
// (Server.Unlock) once the keepalive has stopped.
func (h *Hold[C]) Release(ctx context.Context) error { return h.release(ctx, true) }

// release gives up one hold; record says whether a HoldRecorder records
// it (not for a hold whose +1 was never recorded).
func (h *Hold[C]) release(ctx context.Context, record bool) error {
	t, e := h.t, h.e
	t.mu.Lock()
	if err := h.errLocked(); err != nil {
		t.mu.Unlock()
		return err
	}
	delete(e.locks, h)
	if len(e.locks) > 0 {
		t.mu.Unlock()
		if rec, ok := t.srv.(HoldRecorder[C]); ok && record {
			// Only the operators' count depends on it: the hold is given
			// up whatever the answer.
			_, _ = rec.RecordHolds(ctx, e.k.key, e.p, -1)
		}
		return nil
	}
	e.state = gone
	if t.entries[e.k] == e {
		delete(t.entries, e.k)
	}
	t.mu.Unlock()

	close(e.stopKA)
	<-e.kaDone // an in-flight ping must finish: cancelling it would close the connection
	e.connMu.Lock()
	err := t.srv.Unlock(ctx, &e.p)
	e.connMu.Unlock()
	t.unpin()
	return err
}
