package redissub

import (
	"context"
	"errors"
	"net"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/internal/redislua"
)

// The pub/sub session: one connection and the goroutine that reads it,
// dispatches its messages to the waiters, and replaces it when it breaks or
// falls silent.

// session is one PubSub connection and its reader goroutine.
type session struct {
	ps *goredis.PubSub // replaced only by the reader (under wmu and mu)
	// ctx ends with the session (end): the reader's receives, and the
	// reconnections they make, run under it.
	ctx    context.Context
	cancel context.CancelFunc
	// expect holds, per channel, the (un)subscribe replies still to come
	// from writes we made, in order: the topic a "subscribe" confirms, or
	// nil for an "unsubscribe". Guarded by Subscriber.mu.
	expect map[string][]*topic
	stop   chan struct{}
}

// end stops a detached session: its reader exits once the connection is
// closed. Callers hold wmu (so the reader is not replacing ps).
func (sess *session) end() {
	close(sess.stop)
	sess.cancel()
	_ = sess.ps.Close()
}

func (sess *session) stopped() bool {
	select {
	case <-sess.stop:
		return true
	default:
		return false
	}
}

// read is the session's reader goroutine.
func (s *Subscriber) read(sess *session) {
	defer s.wg.Done()
	ctx := sess.ctx
	var backoff time.Duration
	pinged := false
	for {
		msg, err := sess.ps.ReceiveTimeout(ctx, s.health)
		if sess.stopped() {
			return
		}
		if err != nil {
			if isTimeout(err) {
				if !pinged {
					pinged = true
					pctx, cancel := context.WithTimeout(ctx, s.health)
					_ = sess.ps.Ping(pctx)
					cancel()
					continue
				}
				// Silent for two intervals, even to a PING: the
				// connection is dead without an error (half-open).
				pinged = false
				if !s.replace(sess) {
					return
				}
				continue
			}
			// Broken connection: go-redis reconnects and resubscribes
			// on the next receive. Messages may have been lost.
			s.broken(sess)
			backoff = min(max(2*backoff, 50*time.Millisecond), time.Second)
			select {
			case <-sess.stop:
				return
			case <-time.After(backoff):
			}
			continue
		}
		backoff, pinged = 0, false
		s.dispatch(sess, msg)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// dispatch handles one pub/sub item.
func (s *Subscriber) dispatch(sess *session, msg any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sess != sess {
		return
	}
	switch m := msg.(type) {
	case *goredis.Message:
		s.messages.Add(1)
		t := s.topics[m.Channel]
		if t == nil || len(t.watchers) == 0 {
			return
		}
		if hold := redislua.GrantHold(m.Payload); hold != "" {
			s.deliverGrant(t, hold, m.Payload)
			return
		}
		s.wakeHead(t)
		s.wakeObservers(t)
	case *goredis.Subscription:
		q := sess.expect[m.Channel]
		if len(q) > 0 {
			e := q[0]
			if len(q) == 1 {
				delete(sess.expect, m.Channel)
			} else {
				sess.expect[m.Channel] = q[1:]
			}
			if e != nil && m.Kind == "subscribe" && s.topics[m.Channel] == e {
				s.confirmTopic(e)
			}
			return
		}
		// A reply we did not ask for: go-redis resubscribing after a
		// reconnect. It confirms the current topic.
		if m.Kind == "subscribe" {
			if t := s.topics[m.Channel]; t != nil {
				s.confirmTopic(t)
			}
		}
	}
}

// confirmTopic records that the server confirmed t's subscription. If it is a
// resubscription (see broken), t's watchers are woken: a release published
// while the channel was down reached none of them, and only now, with the
// channel carrying the next release, is an attempt sure not to miss one.
// Callers hold mu.
func (s *Subscriber) confirmTopic(t *topic) {
	if t.ok {
		return
	}
	t.ok = true
	close(t.confirmed)
	if t.resub {
		t.resub = false
		s.wakeAll(t)
	}
}

// broken records a lost connection (or a failed attempt to restore it):
// expected replies will not come, and new watchers must wait for the
// resubscription. Current watchers are woken now, because a release may
// have been published while no one listened — so while the connection stays
// down they poll at the reconnection backoff — and woken again when their
// channel's resubscription is confirmed (confirmTopic): a release published
// between this wake-up's attempt and the resubscription reaches no one.
func (s *Subscriber) broken(sess *session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sess != sess {
		return
	}
	clear(sess.expect)
	for _, t := range s.topics {
		if t.ok {
			t.ok = false
			t.resub = true
			t.confirmed = make(chan struct{})
		}
		s.wakeAll(t)
	}
}

// wakeHead wakes the head of t's queue (the waiter of lowest rank; an
// observer of WatchAll is never the head) with a non-blocking send and
// marks it woken, so that it hands the wake-up on if it leaves. A head
// whose channel is already full has a wake-up pending and will retry after
// this release anyway. Without a waiter it wakes no one. Callers hold mu.
func (s *Subscriber) wakeHead(t *topic) {
	for _, w := range t.watchers {
		if w.all {
			continue
		}
		w.woken = true
		s.send(w)
		return
	}
}

// wakeObservers wakes every watcher of t that WatchAll made (each release
// message wakes them all, see WatchAll). Callers hold mu.
func (s *Subscriber) wakeObservers(t *topic) {
	for _, w := range t.watchers {
		if w.all {
			s.send(w)
		}
	}
}

// send makes a non-blocking send to w.
func (s *Subscriber) send(w *watcher) {
	select {
	case w.ch <- struct{}{}:
		s.wakes.Add(1)
	default:
	}
}

// deliverGrant hands a grant message to the fair waiter it names, if it is
// one of ours. Callers hold mu.
func (s *Subscriber) deliverGrant(t *topic, hold, payload string) {
	for _, w := range t.watchers {
		if w.hold == hold {
			select {
			case w.grants <- GrantMessage{Payload: payload, Received: time.Now()}:
				s.grants.Add(1)
			default:
			}
			return
		}
	}
}

// wakeAll makes a non-blocking send to every watcher of t. Callers hold mu.
func (s *Subscriber) wakeAll(t *topic) {
	for _, w := range t.watchers {
		select {
		case w.ch <- struct{}{}:
			s.wakes.Add(1)
		default:
		}
	}
}

// replace swaps a silent connection for a new one subscribed to every
// current channel. It reports false if the session was stopped meanwhile.
func (s *Subscriber) replace(sess *session) bool {
	s.broken(sess)
	s.wmu.Lock()
	s.mu.Lock()
	if s.sess != sess || sess.stopped() {
		s.mu.Unlock()
		s.wmu.Unlock()
		return false
	}
	names := make([]string, 0, len(s.topics))
	for name, t := range s.topics {
		names = append(names, name)
		t.sent = true // subscribed here, so unsubscribed when it ends
	}
	old := sess.ps
	ctx, cancel := context.WithTimeout(s.life, s.confirm)
	sess.ps = s.client.Subscribe(ctx, names...)
	cancel()
	s.mu.Unlock()
	s.wmu.Unlock()
	_ = old.Close()
	return true
}
