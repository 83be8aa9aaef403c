package redissub

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Subscriber delivers release wake-ups (the messages redislua.Release publishes on
// redislua.Keys.Channel) to any number of waiters over ONE pub/sub connection of one
// client. Channels are subscribed when their first waiter arrives and
// unsubscribed when their last waiter leaves (reference counted). The
// connection and its reader goroutine exist only while someone waits (plus
// an optional linger) and stop at Close. Safe for concurrent use.
//
// # Who is woken
//
// The waiters of one channel form a queue ordered by rank (arrival order
// for Watch, see NextRank). A release message wakes only the head of the
// queue — the waiter of lowest rank — rather than every waiter, so one
// release costs one retry instead of a herd of them. The head stays the head
// until it leaves: if its retry loses (to a waiter of another Subscriber, in
// another process), the next release wakes it again. A waiter that was woken
// and then leaves — it acquired the lock, gave up, or its context ended
// before it could retry — hands the wake-up on to the new head as it leaves
// (backend.Notifier's round-robin rule), so a release is never swallowed by
// a departing waiter. When the connection breaks, messages may have been
// lost: every waiter is woken at the break (and at every failed attempt to
// restore it, so that waiters poll while it is down), and again once its
// channel's resubscription is confirmed, so that a release published while
// the channel was down is found by an attempt made after it carries the next
// one. A fair lock's grant message (see redislua.Keys.Fair) wakes
// no one: it goes to the one waiter it names, if that waiter is ours
// (WatchGrant).
type Subscriber struct {
	client  goredis.UniversalClient
	confirm time.Duration // Watch waits this long for the server's SUBSCRIBE confirmation
	linger  time.Duration // the connection stays this long after its last waiter left
	health  time.Duration // a silent connection is pinged after this, and replaced after twice this

	wmu sync.Mutex // serialises (un)subscribe writes with their expected replies

	// life ends when Close begins: it bounds every write and dial, so that
	// Close does not wait for a write stuck on a silent connection.
	life    context.Context
	endLife context.CancelFunc

	mu     sync.Mutex
	closed bool
	done   chan struct{} // closed by Close
	sess   *session
	topics map[string]*topic
	idle   *time.Timer
	wg     sync.WaitGroup // reader goroutines and subscribe writes

	messages, wakes, handOns, sessions, grants atomic.Int64 // for Stats
}

// SubscriberStats counts what a Subscriber did since it was made.
type SubscriberStats struct {
	Messages int64 // release messages received
	Wakes    int64 // sends on waiters' channels (messages, hand-ons and reconnections)
	HandOns  int64 // wake-ups handed on by a woken waiter that left
	Sessions int64 // pub/sub sessions (connections) started
	Grants   int64 // fair-queue grants delivered to a waiter (WatchGrant)
}

// Stats returns the counters.
func (s *Subscriber) Stats() SubscriberStats {
	return SubscriberStats{Messages: s.messages.Load(), Wakes: s.wakes.Load(), HandOns: s.handOns.Load(), Sessions: s.sessions.Load(), Grants: s.grants.Load()}
}

// topic is one subscribed channel and its waiters.
type topic struct {
	name      string
	watchers  []*watcher
	confirmed chan struct{} // closed once the server confirmed the subscription
	ok        bool          // confirmed is closed
	resub     bool          // unconfirmed since a break: its confirmation wakes every watcher
	sent      bool          // a SUBSCRIBE for it was written (or it was resubscribed)
}

type watcher struct {
	ch     chan struct{}
	t      *topic
	rank   uint64
	woken  bool // a release message was delivered to it: its leaving hands it on
	all    bool // an observer (WatchAll): woken by every message, never the head
	gone   bool
	hold   string            // a fair-queue waiter's hold id (WatchGrant), else ""
	grants chan GrantMessage // where grant messages naming hold go
}

// GrantMessage is a grant message delivered to its waiter (WatchGrant), with
// the time the reader goroutine received it.
type GrantMessage struct {
	Payload  string
	Received time.Time
}

var rankSeq atomic.Uint64

// NextRank returns a watcher rank larger than every rank NextRank returned
// before in this process. Watch ranks its waiters with it; callers of
// WatchRank that share a waiter among several Subscribers (one per Redis
// node) take one rank for the waiter and pass it to each, so that every
// node's Subscriber agrees on who is at the head of the queue.
func NextRank() uint64 { return rankSeq.Add(1) }

// SubscriberOptions tunes a Subscriber. Zero values take the defaults.
type SubscriberOptions struct {
	// ConfirmTimeout bounds how long Watch waits for the server to confirm
	// a new subscription before it gives up (and returns a channel that
	// never fires). Default 2s.
	ConfirmTimeout time.Duration
	// Linger keeps the pub/sub connection open this long after its last
	// waiter left, so that a burst of waits does not dial and close a
	// connection each time. Negative: close at once. Default 1s.
	Linger time.Duration
	// HealthInterval: a connection silent for this long is pinged, and
	// replaced if still silent after another interval. Default 10s.
	HealthInterval time.Duration
}

// NewSubscriber returns a Subscriber over client. It opens no connection
// and starts no goroutine until the first Watch.
func NewSubscriber(client goredis.UniversalClient, o SubscriberOptions) *Subscriber {
	s := &Subscriber{
		client:  client,
		confirm: o.ConfirmTimeout,
		linger:  o.Linger,
		health:  o.HealthInterval,
		done:    make(chan struct{}),
		topics:  map[string]*topic{},
	}
	s.life, s.endLife = context.WithCancel(context.Background())
	if s.confirm <= 0 {
		s.confirm = 2 * time.Second
	}
	if s.linger == 0 {
		s.linger = time.Second
	}
	if s.health <= 0 {
		s.health = 10 * time.Second
	}
	return s
}

// never is the channel returned when no subscription could be made: it
// never fires, so the caller falls back to polling.
var never = make(chan struct{})

func noop() {}

// Watch subscribes to channel (sharing the subscription with every other
// waiter of it) and returns once the server has confirmed the subscription,
// so a message published after Watch returns is not missed. The waiter
// joins the channel's queue (see Subscriber) with rank NextRank(). Each
// message on channel that wakes this waiter, each hand-on from a woken
// waiter that left, and each reconnection of the shared connection (after
// which messages may have been lost) makes a non-blocking send on the
// returned channel (capacity 1). cancel, idempotent, ends the watch and hands
// a received wake-up on. If the subscription is not confirmed before ctx
// ends or within the confirm timeout, or the Subscriber is closed, Watch
// returns a channel that never fires and a no-op cancel. Watch never waits
// past ctx: the dial and the SUBSCRIBE write run on goroutines of their
// own.
func (s *Subscriber) Watch(ctx context.Context, channel string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	ok, cancel := s.WatchRank(ctx, channel, ch, NextRank())
	if !ok {
		return never, noop
	}
	return ch, cancel
}

// WatchHeld is Watch whose cancel is told whether the waiter leaves
// holding the lock (backend.HeldNotifier): cancel(true) hands no wake-up
// on, since the lock is taken and its release wakes the next waiter;
// cancel(false) is Watch's cancel.
func (s *Subscriber) WatchHeld(ctx context.Context, channel string) (<-chan struct{}, func(held bool)) {
	ch := make(chan struct{}, 1)
	ok, w := s.watch(ctx, channel, watcher{ch: ch, rank: NextRank()})
	if !ok {
		return never, func(bool) {}
	}
	return ch, func(held bool) { s.unwatch(w, !held) }
}

// WatchAll is Watch for an observer that does not attempt to take the lock
// (Election.Observe): every release message and reconnection wakes it, but
// it is never the head of the queue, so it never takes a wake-up from the
// waiters, which it would hold while it does not read its channel (its
// consumer is slow) and hand on only when it leaves; nor does its cancel
// hand anything on.
func (s *Subscriber) WatchAll(ctx context.Context, channel string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	ok, cancel := s.watchFunc(ctx, channel, watcher{ch: ch, rank: NextRank(), all: true})
	if !ok {
		return never, noop
	}
	return ch, cancel
}

// WatchAllRank is WatchAll with the caller's channel ch (capacity at least
// 1; sends to it never block), as WatchRank is Watch's. Several
// Subscribers may send to one ch.
func (s *Subscriber) WatchAllRank(ctx context.Context, channel string, ch chan struct{}) (ok bool, cancel func()) {
	return s.watchFunc(ctx, channel, watcher{ch: ch, rank: NextRank(), all: true})
}

// WatchRank is Watch with the caller's channel ch (capacity at least 1;
// sends to it never block) and rank (see NextRank). It reports whether the
// subscription was confirmed; if not, ch will not be sent to and cancel is
// a no-op. Several Subscribers may send to one ch.
func (s *Subscriber) WatchRank(ctx context.Context, channel string, ch chan struct{}, rank uint64) (ok bool, cancel func()) {
	return s.watchFunc(ctx, channel, watcher{ch: ch, rank: rank})
}

// WatchGrant is WatchRank for a waiter of a fair lock (redislua.Keys.Fair) whose
// hold id is hold: a grant message naming hold (see redislua.ParseGrant) is sent to
// grants (non-blocking; capacity at least 1) and wakes no one else, since
// the lock is taken; plain release messages and reconnections wake ch as
// for Watch.
func (s *Subscriber) WatchGrant(ctx context.Context, channel, hold string, ch chan struct{}, grants chan GrantMessage) (ok bool, cancel func()) {
	return s.watchFunc(ctx, channel, watcher{ch: ch, rank: NextRank(), hold: hold, grants: grants})
}

// watchFunc is watch with the watcher's cancel (handing a wake-up on) as a
// func, a no-op if the subscription was not confirmed.
func (s *Subscriber) watchFunc(ctx context.Context, channel string, proto watcher) (ok bool, cancel func()) {
	ok, w := s.watch(ctx, channel, proto)
	if !ok {
		return false, noop
	}
	return true, func() { s.unwatch(w, true) }
}

// watch adds a waiter like proto to channel's queue and waits for the
// subscription's confirmation (await); it returns the waiter, to be
// removed with unwatch, when confirmed. It takes only mu on the caller's
// goroutine: a new channel's SUBSCRIBE is written by subscribe, which
// waits for the write lock (held by a write that may be stuck on a silent
// connection) on a goroutine of its own.
func (s *Subscriber) watch(ctx context.Context, channel string, proto watcher) (ok bool, w *watcher) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return false, nil
	}
	t := s.topics[channel]
	if t == nil {
		t = &topic{name: channel, confirmed: make(chan struct{})}
		s.topics[channel] = t
		s.wg.Add(1)
		go s.subscribe(t)
	}
	w = s.addLocked(t, proto)
	s.mu.Unlock()
	return s.await(ctx, w), w
}

// addLocked adds a watcher like proto to t's queue, in rank order. Callers
// hold mu.
func (s *Subscriber) addLocked(t *topic, proto watcher) *watcher {
	if s.idle != nil {
		s.idle.Stop()
		s.idle = nil
	}
	w := &proto
	w.t = t
	i := len(t.watchers)
	for i > 0 && t.watchers[i-1].rank > w.rank {
		i--
	}
	t.watchers = slices.Insert(t.watchers, i, w)
	return w
}

// subscribe sends SUBSCRIBE for the new topic t, starting the session if
// needed, unless t was dropped (its last waiter left and unsubscribe ran
// first, which then wrote nothing) or the Subscriber closed before the
// write lock was free. A t without waiters is still subscribed: a new
// waiter may join it, and if none does the unsubscribe its last waiter
// started follows. It runs on a goroutine of its own (counted in wg by its
// starter), so that a waiter whose ctx ends meanwhile returns at once
// (await), while (un)subscribe writes stay in order under wmu.
func (s *Subscriber) subscribe(t *topic) {
	defer s.wg.Done()
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.mu.Lock()
	if s.closed || s.topics[t.name] != t {
		s.mu.Unlock()
		return
	}
	sess := s.sess
	if sess == nil {
		sess = &session{expect: map[string][]*topic{}, stop: make(chan struct{})}
		sess.ctx, sess.cancel = context.WithCancel(s.life)
		sess.ps = s.client.Subscribe(sess.ctx) // no channel yet: no I/O
		s.sess = sess
		s.sessions.Add(1)
		s.wg.Add(1)
		go s.read(sess)
	}
	sess.expect[t.name] = append(sess.expect[t.name], t)
	t.sent = true
	ps := sess.ps
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(s.life, s.confirm)
	defer cancel()
	// On a write error go-redis reconnects and resubscribes; the
	// confirmation (or the confirm timeout) decides.
	_ = ps.Subscribe(ctx, t.name)
}

// await waits for w's topic to be confirmed, at most the confirm timeout
// or until ctx ends; unconfirmed, w is removed.
func (s *Subscriber) await(ctx context.Context, w *watcher) bool {
	s.mu.Lock()
	confirmed := w.t.confirmed
	s.mu.Unlock()
	select {
	case <-confirmed:
		return true
	default:
	}
	timer := time.NewTimer(s.confirm)
	defer timer.Stop()
	select {
	case <-confirmed:
		return true
	case <-timer.C:
	case <-s.done:
	case <-ctx.Done():
	}
	s.unwatch(w, true)
	return false
}

// unwatch removes w, handing a wake-up it received on to the new head of
// the queue if handOn; the last watcher of a topic unsubscribes it, the
// last topic schedules the end of the session.
func (s *Subscriber) unwatch(w *watcher, handOn bool) {
	s.mu.Lock()
	if w.gone {
		s.mu.Unlock()
		return
	}
	w.gone = true
	t := w.t
	t.watchers = slices.DeleteFunc(t.watchers, func(x *watcher) bool { return x == w })
	if handOn && w.woken && len(t.watchers) > 0 && s.topics[t.name] == t && !s.closed {
		s.handOns.Add(1)
		s.wakeHead(t)
	}
	if len(t.watchers) > 0 || s.topics[t.name] != t || s.closed {
		s.mu.Unlock()
		return
	}
	// The last watcher left: unsubscribe on a goroutine of its own, which
	// may have to wait for a subscribe write still under way (wmu), so
	// that the departing waiter returns at once.
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		s.unsubscribe(t)
	}()
}

// unsubscribe drops t if it still has no watcher, UNSUBSCRIBEs it and,
// when no topic is left, ends the session (no linger) or schedules its end.
func (s *Subscriber) unsubscribe(t *topic) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.mu.Lock()
	if len(t.watchers) > 0 || s.topics[t.name] != t || s.closed {
		s.mu.Unlock()
		return
	}
	delete(s.topics, t.name)
	sess := s.sess
	if len(s.topics) == 0 {
		if s.linger < 0 {
			s.sess = nil
			s.mu.Unlock()
			if sess != nil {
				sess.end()
			}
			return
		}
		if s.idle == nil {
			s.idle = time.AfterFunc(s.linger, s.idleCheck)
		}
	}
	if sess == nil || !t.sent {
		// No session, or never subscribed (its last waiter left before
		// subscribe ran, which then writes nothing).
		s.mu.Unlock()
		return
	}
	sess.expect[t.name] = append(sess.expect[t.name], nil)
	ps := sess.ps
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(s.life, s.confirm)
	defer cancel()
	_ = ps.Unsubscribe(ctx, t.name)
}

// idleCheck ends the session if no one has waited since the linger began.
func (s *Subscriber) idleCheck() {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.mu.Lock()
	s.idle = nil
	if len(s.topics) > 0 || s.sess == nil {
		s.mu.Unlock()
		return
	}
	sess := s.sess
	s.sess = nil
	s.mu.Unlock()
	sess.end()
}

// Close ends every watch (their channels never fire again), closes the
// pub/sub connection and waits for the reader goroutine to exit. It is
// idempotent and does not close the client.
func (s *Subscriber) Close() error {
	s.endLife() // cut short a write or dial that holds wmu
	s.wmu.Lock()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.wmu.Unlock()
		s.wg.Wait()
		return nil
	}
	s.closed = true
	close(s.done)
	if s.idle != nil {
		s.idle.Stop()
		s.idle = nil
	}
	sess := s.sess
	s.sess = nil
	clear(s.topics)
	s.mu.Unlock()
	if sess != nil {
		sess.end()
	}
	s.wmu.Unlock()
	s.wg.Wait()
	return nil
}

// Watching reports whether channel has a watcher (a waiter or an
// observer).
func (s *Subscriber) Watching(channel string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.topics[channel]
	return t != nil && len(t.watchers) > 0
}

// Active reports whether the pub/sub session (connection and reader
// goroutine) is up, and how many channels are watched.
func (s *Subscriber) Active() (session bool, channels int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sess != nil, len(s.topics)
}
