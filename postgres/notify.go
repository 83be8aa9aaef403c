package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/distlock/distlock/backend"
)

// Row mode's optional release notifications (WithNotify): a release that
// frees a row runs pg_notify on a channel named after the table, and each
// Locker LISTENs on one connection of its own. While the listener is down,
// waiters poll. LISTEN needs a real session: with notify=true row mode is
// not safe behind a transaction-pooling proxy.

const (
	// pollWhileDown is how soon a waiter retries when no listener
	// confirms that releases will be heard.
	pollWhileDown = 50 * time.Millisecond
	// relistenPause spaces the listener's reconnection attempts.
	relistenPause = 250 * time.Millisecond
)

// keyTag is the notification payload of key: hex(sha256(key)), which the
// server computes with encode(sha256(lock_key), 'hex').
func keyTag(key string) string {
	h := sha256.Sum256([]byte(key))
	return hex.EncodeToString(h[:])
}

// listener wakes the watchers of keys from one LISTEN connection.
type listener struct {
	d *rowDriver

	mu        sync.Mutex
	watchers  map[string]map[chan struct{}]struct{}
	listening bool
	started   bool
}

func newListener(d *rowDriver) *listener {
	return &listener{d: d, watchers: map[string]map[chan struct{}]struct{}{}}
}

// notifyRowDriver is the row driver with WithNotify: a backend.Notifier.
type notifyRowDriver struct{ *rowDriver }

var _ backend.Notifier = notifyRowDriver{}

// Watch implements backend.Notifier for locks; permits are not announced
// (a nil channel: distlock polls for them). It never waits (the shared
// LISTEN connection is kept by a background goroutine), so ctx is not
// consulted.
func (d notifyRowDriver) Watch(_ context.Context, req backend.Request) (<-chan struct{}, func()) {
	if req.Permits > 0 {
		return nil, nil
	}
	ln := d.listen
	ch := make(chan struct{}, 1)
	tag := keyTag(req.Key)
	ln.mu.Lock()
	if ln.watchers[tag] == nil {
		ln.watchers[tag] = map[chan struct{}]struct{}{}
	}
	ln.watchers[tag][ch] = struct{}{}
	if !ln.started {
		ln.started = d.Go(ln.run)
	}
	var poll *time.Timer
	if !ln.listening {
		poll = time.AfterFunc(pollWhileDown, func() { wake(ch) })
	}
	ln.mu.Unlock()
	return ch, func() {
		if poll != nil {
			poll.Stop()
		}
		ln.mu.Lock()
		delete(ln.watchers[tag], ch)
		if len(ln.watchers[tag]) == 0 {
			delete(ln.watchers, tag)
		}
		ln.mu.Unlock()
	}
}

func wake(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// run keeps a LISTEN connection until the driver closes, reconnecting after
// failures.
func (ln *listener) run(life context.Context) {
	for life.Err() == nil {
		ln.listenOnce(life)
		ln.setListening(false)
		t := time.NewTimer(relistenPause)
		select {
		case <-life.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// setListening records whether releases are heard now; when they stop being
// heard, every watcher is woken, as a release may have been missed.
func (ln *listener) setListening(on bool) {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	was := ln.listening
	ln.listening = on
	if was && !on {
		for _, ws := range ln.watchers {
			for ch := range ws {
				wake(ch)
			}
		}
	}
}

func (ln *listener) listenOnce(life context.Context) {
	d := ln.d
	pc, err := d.pool.Acquire(life)
	if err != nil {
		return
	}
	conn := pc.Hijack()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), cancelTimeout)
		_ = conn.Close(ctx)
		cancel()
	}()
	if _, err := conn.Exec(life, "LISTEN "+d.channel); err != nil {
		return
	}
	ln.setListening(true)
	// Releases between the end of a previous listener and this one
	// were not heard: wake everyone once.
	ln.wakeAll()
	for {
		n, err := conn.WaitForNotification(life)
		if err != nil {
			return
		}
		ln.wakeTag(n)
	}
}

func (ln *listener) wakeAll() {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	for _, ws := range ln.watchers {
		for ch := range ws {
			wake(ch)
		}
	}
}

func (ln *listener) wakeTag(n *pgconn.Notification) {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	for ch := range ln.watchers[n.Payload] {
		wake(ch)
	}
}
