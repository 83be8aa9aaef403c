package sqllock

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/distlock/distlock/backend"
)

// keepalive checks e's connection every keepalive interval (at most a third
// of the session's bound). The checks keep the server's idle limits from
// ending an idle holder's session; a failed check ends the lock.
func (t *Table[C]) keepalive(e *entry[C]) {
	defer close(e.kaDone)
	tick := time.NewTicker(max(time.Millisecond, min(t.cfg.Keepalive, e.p.Bound/3)))
	defer tick.Stop()
	for {
		select {
		case <-e.stopKA:
			return
		case <-tick.C:
		}
		if !t.check(e) {
			return
		}
	}
}

// check pings the pinned connection and reports whether its session is
// alive and still the one holding the lock; when it is not, the lock is
// declared lost. It never uses a caller's context: a cancelled ping would
// close the connection and so drop the lock.
//
// A ping without an answer is a loss too, once pingTimeout has passed or
// once the server may have ended the silent session by its bound (counted
// from the last command that succeeded, less a margin). Then the holds are
// told before the connection is closed: so the holder hears of the loss
// before the server can free the lock, both when closing the connection
// frees it and when an idle limit does.
func (t *Table[C]) check(e *entry[C]) bool {
	e.connMu.Lock()
	defer e.connMu.Unlock()
	t.mu.Lock()
	if e.state != held {
		t.mu.Unlock()
		return false
	}
	deadline := e.deadline()
	t.mu.Unlock()
	sent := time.Now()
	wait := min(t.pingTimeout, deadline.Sub(sent))
	if wait <= 0 {
		t.lost(e, fmt.Errorf("no command succeeded within the %s's idle limit %v: the server may have ended it", t.cfg.Noun, e.p.Bound), nil)
		return false
	}
	pctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	res := make(chan error, 1)
	go func() { res <- t.srv.Ping(pctx, e.p.Conn) }()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case err := <-res:
		if err != nil {
			t.lost(e, err, nil)
			return false
		}
		// The answer proves the session alive when the server read the
		// ping, which may be as early as sent. If it is read only now
		// (this process was frozen meanwhile), an idle limit may have
		// ended the session since.
		t.mu.Lock()
		if sent.After(e.lastOK) {
			e.lastOK = sent
		}
		deadline = e.deadline()
		t.mu.Unlock()
		if time.Now().Before(deadline) {
			return true
		}
		t.lost(e, fmt.Errorf("the answer to a ping came too late to show the %s outlived its idle limit %v", t.cfg.Noun, e.p.Bound), nil)
	case <-timer.C:
		var once sync.Once
		stopPing := func() { once.Do(func() { cancel(); <-res }) }
		t.lost(e, fmt.Errorf("no answer to a ping within %v", wait.Round(time.Millisecond)), stopPing)
		stopPing()
	}
	return false
}

// lost ends a held entry whose session failed: every hold is told, then
// beforeClose (if any) runs, and the connection is discarded. Its caller
// (check) holds e.connMu.
func (t *Table[C]) lost(e *entry[C], cause error, beforeClose func()) {
	t.mu.Lock()
	if e.state != held {
		t.mu.Unlock()
		return
	}
	e.state = gone
	if t.entries[e.k] == e {
		delete(t.entries, e.k)
	}
	callbacks := make([]func(error), 0, len(e.locks))
	for _, f := range e.locks {
		if f != nil {
			callbacks = append(callbacks, f)
		}
	}
	clear(e.locks)
	t.mu.Unlock()
	err := fmt.Errorf("%w: the lock's %s (%s %d) failed: %w", backend.ErrLockLost, t.cfg.Noun, t.cfg.IDName, e.p.ID, cause)
	for _, f := range callbacks {
		f(err)
	}
	if beforeClose != nil {
		beforeClose()
	}
	t.srv.Discard(e.p.Conn)
	t.unpin()
}
