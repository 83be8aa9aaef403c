package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock/backend"
)

// driver implements backend.Driver and backend.Blocker.
type driver struct {
	cfg     *config
	servers []string // owned: what to dial
	owned   bool

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	kick   chan struct{} // wakes the monitor

	wgMu    sync.Mutex
	stopped bool           // no new goroutine may start
	wg      sync.WaitGroup // every goroutine the driver starts
	bg      sync.WaitGroup // background cleanups (a subset of wg)

	mu     sync.Mutex
	closed bool
	conn   *zk.Conn
	info   *connInfo // nil for a caller's conn not made by Connect
	cur    *session
	keys   map[string]*keyState

	stats stats
}

// stats count server calls, for tests of the herd effect.
type stats struct {
	children    atomic.Int64 // getChildren calls
	watches     atomic.Int64 // predecessor watches set
	watchEvents atomic.Int64 // predecessor watches fired
	creates     atomic.Int64
	sessions    atomic.Int64 // sessions lost
}

// session is one ZooKeeper session as the driver uses it. The fields up to
// hb are fixed; the rest are guarded by driver.mu.
type session struct {
	conn    *zk.Conn
	info    *connInfo
	id      int64
	timeout time.Duration // negotiated
	margin  time.Duration
	hb      time.Duration // heartbeat period while in use
	created time.Time

	contact time.Time // send time of the latest Sync the server answered
	users   int       // acquisitions running on the session
	dead    bool
	deadCh  chan struct{}
	cause   error
	holds   map[*hold]struct{}
	hbBusy  bool
	hbLast  time.Time
}

// lastContactLocked is the latest moment at which the ensemble certainly
// heard from this session: the send time of an answered Sync (which the
// connected server forwards to the leader) or of a connect request that
// resumed the session since this record was made.
func (s *session) lastContactLocked() time.Time {
	c := s.contact
	if s.info != nil {
		if si, ok := s.info.session(s.id); ok && si.contact.After(s.created) && si.contact.After(c) {
			c = si.contact
		}
	}
	return c
}

// deadlineLocked is when the session's leases are declared lost unless
// contact is renewed: last contact + negotiated timeout − margin. The
// server cannot expire the session earlier, since it restarts the timeout
// whenever it hears from the client, at or after the send time of an
// answered request.
func (s *session) deadlineLocked() time.Time {
	c := s.lastContactLocked()
	if c.IsZero() {
		return time.Time{}
	}
	return c.Add(s.timeout - s.margin)
}

func (s *session) inUseLocked() bool { return s.users > 0 || len(s.holds) > 0 }

// keyState is the local state of one key: the hold this driver has on it,
// if any, and a channel closed whenever a hold appears (reentrant waiters
// of the same owner watch it).
type keyState struct {
	refs    int
	hold    *hold
	changed chan struct{}
}

// hold is one lock node held by this driver: one tenure, shared by the
// nested acquisitions of its owner.
type hold struct {
	key, owner string
	path       string
	token      uint64
	sess       *session
	count      int
	handles    map[*lock]func(error) // live handles and their Lost callbacks
	lost       bool
}

func newDriver(cfg *config, servers []string) *driver {
	d := &driver{cfg: cfg, servers: servers, owned: servers != nil, kick: make(chan struct{}, 1), keys: map[string]*keyState{}}
	d.ctx, d.cancel = context.WithCancel(context.Background())
	return d
}

func newOwnedDriver(servers []string, cfg *config) (*driver, error) {
	d := newDriver(cfg, servers)
	conn, _, info, err := connect(servers, cfg)
	if err != nil {
		return nil, err
	}
	d.conn, d.info = conn, info
	d.run()
	return d, nil
}

func (d *driver) run() {
	d.goTracked(false, d.monitor)
}

// goTracked runs f on a goroutine unless the driver has stopped.
func (d *driver) goTracked(background bool, f func()) bool {
	d.wgMu.Lock()
	if d.stopped {
		d.wgMu.Unlock()
		return false
	}
	d.wg.Add(1)
	if background {
		d.bg.Add(1)
	}
	d.wgMu.Unlock()
	go func() {
		defer d.wg.Done()
		if background {
			defer d.bg.Done()
		}
		f()
	}()
	return true
}

func (d *driver) poke() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

func (d *driver) Capabilities() backend.Capabilities {
	return backend.Capabilities{Fencing: true, Reentrant: true, Notify: true, Fair: true, SessionBound: true, Durable: true}
}

// closeGrace bounds how long Close waits for background deletions on a
// caller's connection, and for calls still pending on it.
const closeGrace = 5 * time.Second

// Close stops the driver. An owned connection is closed, which ends its
// session and so deletes its nodes; on a caller's connection, background
// deletions get up to closeGrace to finish.
func (d *driver) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	conn := d.conn
	if d.owned {
		d.conn, d.info = nil, nil
	}
	d.mu.Unlock()
	if !d.owned {
		waitTimeout(&d.bg, closeGrace)
	}
	d.cancel()
	if d.owned && conn != nil {
		conn.Close()
	}
	d.wgMu.Lock()
	d.stopped = true
	d.wgMu.Unlock()
	if d.owned {
		d.wg.Wait()
	} else {
		waitTimeout(&d.wg, closeGrace)
	}
	return nil
}

func waitTimeout(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

func (d *driver) isClosed() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.closed
}

// current returns the live session, nil if there is none.
func (d *driver) current() *session {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cur != nil && !d.cur.dead {
		return d.cur
	}
	return nil
}

func (d *driver) connectWait(timeout time.Duration) time.Duration {
	if d.cfg.connectWait > 0 {
		return d.cfg.connectWait
	}
	if timeout > 0 {
		return timeout
	}
	if d.cfg.sessionTimeout > 0 {
		return d.cfg.sessionTimeout
	}
	return DefaultSessionTimeout
}

func (d *driver) marginFor(timeout time.Duration) time.Duration {
	m := d.cfg.margin
	if m == 0 {
		m = max(timeout/10, 100*time.Millisecond)
	}
	return min(m, timeout/2)
}

// session returns the live session for an acquisition, connecting (owned
// connection) and waiting for one if needed, for at most the connect
// timeout. The session is marked in use until unuse; its last contact is
// at most two heartbeat periods old when it is returned.
func (d *driver) session(ctx context.Context) (*session, error) {
	var giveUp time.Time
	for {
		d.mu.Lock()
		if d.closed {
			d.mu.Unlock()
			return nil, backend.ErrClosed
		}
		if d.cfg.err != nil {
			d.mu.Unlock()
			return nil, d.cfg.err
		}
		if s := d.cur; s != nil && !s.dead {
			s.users++
			lc := s.lastContactLocked()
			fresh := !lc.IsZero() && time.Since(lc) < 2*s.hb
			d.mu.Unlock()
			if fresh {
				return s, nil
			}
			// Idle for a while, or never proven: renew contact before
			// the session backs a lease.
			err := d.do(ctx, s, true, syncRoot, nil)
			if err == nil {
				d.poke()
				return s, nil
			}
			d.unuse(s)
			if err = d.mapErr(ctx, s, err); errors.Is(err, errRestart) {
				continue
			}
			return nil, err
		}
		if d.conn == nil && d.owned {
			conn, _, info, err := connect(d.servers, d.cfg)
			if err != nil {
				d.mu.Unlock()
				return nil, err
			}
			d.conn, d.info = conn, info
			d.poke()
		}
		conn, info := d.conn, d.info
		d.mu.Unlock()

		var changed <-chan struct{}
		if info != nil {
			changed = info.watch()
		}
		sid, state := conn.SessionID(), conn.State()
		if state == zk.StateHasSession && sid != 0 {
			var (
				timeout time.Duration
				contact time.Time
			)
			known := true
			if info != nil {
				si, ok := info.session(sid)
				known = ok && si.timeout > 0 && !si.expired
				timeout, contact = si.timeout, si.contact
			} else {
				timeout = d.cfg.sessionTimeout
			}
			if known {
				now := time.Now()
				s := &session{conn: conn, info: info, id: sid, timeout: timeout, margin: d.marginFor(timeout),
					hb: max(timeout/10, 10*time.Millisecond), created: now,
					deadCh: make(chan struct{}), holds: map[*hold]struct{}{}}
				if !contact.IsZero() && now.Sub(contact) < s.hb {
					s.contact = contact // just connected
				}
				d.mu.Lock()
				if !d.closed && d.conn == conn && (d.cur == nil || d.cur.dead) {
					d.cur = s
				}
				d.mu.Unlock()
				d.poke()
				continue
			}
		}
		if giveUp.IsZero() {
			giveUp = time.Now().Add(d.connectWait(0))
		}
		wait := time.Until(giveUp)
		if wait <= 0 {
			return nil, fmt.Errorf("%w: no ZooKeeper session within %v (client state %v)", backend.ErrUnavailable, d.connectWait(0), state)
		}
		t := time.NewTimer(min(wait, 25*time.Millisecond))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w: no ZooKeeper session (client state %v): %w", backend.ErrUnavailable, state, d.ctxErr(ctx))
		case <-d.ctx.Done():
			t.Stop()
			return nil, backend.ErrClosed
		case <-changed:
			t.Stop()
		case <-t.C:
		}
	}
}

// unuse ends an acquisition's use of s.
func (d *driver) unuse(s *session) {
	d.mu.Lock()
	s.users--
	d.mu.Unlock()
	d.poke()
}

func syncRoot(c *zk.Conn) error { _, err := c.Sync("/"); return err }

// monitor declares sessions lost and runs the heartbeat. It does not read
// go-zookeeper's event channel: it watches the wire (connInfo), the
// session id, and a local deadline on the monotonic clock.
func (d *driver) monitor() {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		wait, changed := d.check(time.Now())
		timer.Reset(wait)
		select {
		case <-d.ctx.Done():
			return
		case <-timer.C:
		case <-d.kick:
		case <-changed:
		}
	}
}

// check examines the current session once and returns when to look again.
func (d *driver) check(now time.Time) (time.Duration, <-chan struct{}) {
	d.mu.Lock()
	var changed <-chan struct{}
	if d.info != nil {
		changed = d.info.watch()
	}
	s := d.cur
	if d.closed || s == nil || s.dead {
		d.mu.Unlock()
		return time.Second, changed
	}
	inUse := s.inUseLocked()
	if cause := d.lossCauseLocked(s, now, inUse); cause != "" {
		d.mu.Unlock()
		d.sessionLost(s, cause)
		return time.Millisecond, changed
	}
	next := s.timeout / 10
	if !inUse {
		d.mu.Unlock()
		return next, changed
	}
	if d.cfg.policy == LoseOnDisconnect && s.info == nil {
		next = min(next, 50*time.Millisecond)
	}
	if dl := s.deadlineLocked(); !dl.IsZero() {
		next = min(next, dl.Sub(now))
	}
	if !s.hbBusy {
		if due := s.hbLast.Add(s.hb); !now.Before(due) {
			s.hbBusy, s.hbLast = true, now
			if !d.goTracked(false, func() { d.heartbeat(s) }) {
				s.hbBusy = false
			}
		} else {
			next = min(next, due.Sub(now))
		}
	}
	d.mu.Unlock()
	return max(next, time.Millisecond), changed
}

// lossCauseLocked says why s is lost, "" if it is not.
// The local deadline and the disconnect policy apply only while s is in
// use: an idle session renews its contact before its next use.
func (d *driver) lossCauseLocked(s *session, now time.Time, inUse bool) string {
	if s.info != nil {
		if si, ok := s.info.session(s.id); ok && si.expired {
			return "the server reported the session expired"
		}
	}
	if sid := s.conn.SessionID(); sid != s.id {
		return fmt.Sprintf("the client moved to session 0x%x: the previous one expired", sid)
	}
	if s.conn.State() == zk.StateExpired {
		return "the client reports the session expired"
	}
	if !inUse {
		return ""
	}
	if dl := s.deadlineLocked(); !dl.IsZero() && !now.Before(dl) {
		return fmt.Sprintf("no contact with the ensemble for %v (negotiated session timeout %v − margin %v): the server may expire the session at any moment",
			now.Sub(s.lastContactLocked()).Round(time.Millisecond), s.timeout, s.margin)
	}
	if d.cfg.policy == LoseOnDisconnect {
		if s.info != nil {
			if s.info.liveSession() != s.id {
				return "connection to the ensemble lost (loss policy: disconnect)"
			}
		} else if st := s.conn.State(); st != zk.StateHasSession {
			return fmt.Sprintf("connection to the ensemble lost, client state %v (loss policy: disconnect)", st)
		}
	}
	return ""
}

// heartbeat sends one Sync: its answer proves that the ensemble heard from
// the session at the moment it was sent.
func (d *driver) heartbeat(s *session) {
	ctx, cancel := context.WithTimeout(d.ctx, s.timeout)
	defer cancel()
	_ = d.do(ctx, s, true, syncRoot, nil)
	d.mu.Lock()
	s.hbBusy = false
	d.mu.Unlock()
	d.poke()
}

// sessionLost declares s lost: every lease on it ends (Lost is called once
// per handle), waiting acquisitions restart on a new session, an owned
// connection is closed (which deletes the session's nodes if the server
// can still be reached) and replaced at the next acquisition, and on a
// caller's connection the nodes are deleted in the background in case the
// session is in fact alive.
func (d *driver) sessionLost(s *session, cause string) {
	d.mu.Lock()
	if s.dead {
		d.mu.Unlock()
		return
	}
	s.dead = true
	s.cause = fmt.Errorf("%w: zookeeper session 0x%x lost: %s", backend.ErrLockLost, s.id, cause)
	close(s.deadCh)
	var (
		lost  []func(error)
		paths []string
	)
	for h := range s.holds {
		h.lost = true
		d.detachLocked(h)
		for _, f := range h.handles {
			if f != nil {
				lost = append(lost, f)
			}
		}
		paths = append(paths, h.path)
	}
	s.holds = nil
	if d.cur == s {
		d.cur = nil
	}
	var retire *zk.Conn
	if d.owned && d.conn == s.conn {
		retire = d.conn
		d.conn, d.info = nil, nil
	}
	d.mu.Unlock()
	d.stats.sessions.Add(1)
	for _, f := range lost {
		f(s.cause)
	}
	if hook := d.cfg.hooks; hook != nil && hook.sessionLost != nil {
		hook.sessionLost(s.id, cause)
	}
	if retire != nil {
		d.goTracked(false, func() { d.retire(s) })
		d.poke()
		return
	}
	for _, p := range paths {
		d.deleteNodeBG(s, p)
	}
}

// retire closes the owned connection of a lost session. Closing it while
// it is connected ends the session on the server at once, which deletes its
// nodes; so if the connection is down but the session may still be alive
// (a loss declared on disconnect or on the local deadline), retire first
// waits, at most the session timeout, for go-zookeeper to resume the
// session. A session that cannot be resumed expires on the server within
// that time anyway.
func (d *driver) retire(s *session) {
	defer s.conn.Close()
	giveUp := time.NewTimer(s.timeout)
	defer giveUp.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if s.conn.SessionID() != s.id {
			return // ended: nothing to close on the server
		}
		// Connected in this session. go-zookeeper updates its state only
		// after its loops noticed a broken connection; the wire-level view
		// (an established TCP connection of this session) knows at once.
		live := s.conn.State() == zk.StateHasSession
		if s.info != nil {
			if si, ok := s.info.session(s.id); ok && si.expired {
				return
			}
			live = live && s.info.liveSession() == s.id
		}
		if live {
			return
		}
		select {
		case <-d.ctx.Done():
			return
		case <-giveUp.C:
			return
		case <-tick.C:
		}
	}
}

// detachLocked removes h from its key's local state and its session.
func (d *driver) detachLocked(h *hold) {
	if ks := d.keys[h.key]; ks != nil && ks.hold == h {
		ks.hold = nil
		if ks.refs == 0 {
			delete(d.keys, h.key)
		}
	}
	if h.sess.holds != nil {
		delete(h.sess.holds, h)
	}
}

// holdGone ends a hold whose node was found missing (deleted by another
// client, or the session ended): its other handles are told they were lost.
func (d *driver) holdGone(h *hold, cause string, except *lock) {
	d.mu.Lock()
	if h.lost {
		d.mu.Unlock()
		return
	}
	h.lost = true
	d.detachLocked(h)
	var lost []func(error)
	for l, f := range h.handles {
		if l != except && f != nil {
			lost = append(lost, f)
		}
	}
	d.mu.Unlock()
	err := fmt.Errorf("%w: %s", backend.ErrLockLost, cause)
	for _, f := range lost {
		f(err)
	}
}

func (d *driver) refKey(key string) *keyState {
	d.mu.Lock()
	defer d.mu.Unlock()
	ks := d.keys[key]
	if ks == nil {
		ks = &keyState{changed: make(chan struct{})}
		d.keys[key] = ks
	}
	ks.refs++
	return ks
}

func (d *driver) unrefKey(key string, ks *keyState) {
	d.mu.Lock()
	defer d.mu.Unlock()
	ks.refs--
	if ks.refs == 0 && ks.hold == nil && d.keys[key] == ks {
		delete(d.keys, key)
	}
}

// call is one request to the server on its own goroutine, so that the
// caller can honour ctx (go-zookeeper's API takes no context).
type call struct {
	conn      *zk.Conn
	mu        sync.Mutex
	done      chan struct{}
	err       error
	finished  bool
	abandoned bool
	onAbandon func(error)
}

// start sends fn on s's connection. proves marks requests whose answer
// proves contact (Sync). onAbandon, if set, runs with the outcome of a
// call whose caller gave up waiting.
func (d *driver) start(s *session, proves bool, fn func(*zk.Conn) error, onAbandon func(error)) *call {
	c := &call{conn: s.conn, done: make(chan struct{}), onAbandon: onAbandon}
	before := s.conn.SessionID()
	sent := time.Now()
	ok := d.goTracked(false, func() {
		err := fn(s.conn)
		d.observe(s, before, sent, proves, err)
		c.mu.Lock()
		c.err, c.finished = err, true
		ab := c.abandoned
		c.mu.Unlock()
		close(c.done)
		if ab && c.onAbandon != nil {
			c.onAbandon(err)
		}
	})
	if !ok {
		c.err, c.finished = backend.ErrClosed, true
		close(c.done)
	}
	return c
}

// wait returns the call's error, or the ctx error if ctx ends first (the
// call is then abandoned).
func (c *call) wait(ctx context.Context, d *driver) error {
	select {
	case <-c.done:
		return c.err
	case <-ctx.Done():
		c.mu.Lock()
		if c.finished {
			c.mu.Unlock()
			return c.err
		}
		c.abandoned = true
		c.mu.Unlock()
		return d.ctxErrConn(ctx, c.conn)
	}
}

func (d *driver) do(ctx context.Context, s *session, proves bool, fn func(*zk.Conn) error, onAbandon func(error)) error {
	if ctx.Err() != nil {
		return d.ctxErrConn(ctx, s.conn)
	}
	return d.start(s, proves, fn, onAbandon).wait(ctx, d)
}

// observe records contact proven by an answered Sync and reacts to a
// session the server declared expired.
func (d *driver) observe(s *session, before int64, sent time.Time, proves bool, err error) {
	if errors.Is(err, zk.ErrSessionExpired) {
		d.sessionLost(s, "the server reported the session expired")
		return
	}
	if proves && err == nil && before == s.id && s.conn.SessionID() == s.id {
		d.mu.Lock()
		if sent.After(s.contact) {
			s.contact = sent
		}
		d.mu.Unlock()
	}
}

// retrying runs an idempotent request, retrying connection losses while
// the session lives, for at most the connect timeout.
func (d *driver) retrying(ctx context.Context, s *session, fn func(*zk.Conn) error) error {
	var firstFail time.Time
	pause := 20 * time.Millisecond
	for {
		err := d.do(ctx, s, false, fn, nil)
		if !transient(err) || d.sessionDead(s) {
			return err
		}
		now := time.Now()
		if firstFail.IsZero() {
			firstFail = now
		}
		if now.Sub(firstFail) >= d.connectWait(s.timeout) {
			return err
		}
		if !sleepCtx(ctx, d.ctx, pause) {
			if ctx.Err() != nil {
				// Ended while the server could not be reached.
				return fmt.Errorf("%w: %w: %w", backend.ErrUnavailable, err, d.ctxErr(ctx))
			}
			return backend.ErrClosed
		}
		pause = min(2*pause, 500*time.Millisecond)
	}
}

// transient errors: the request may be retried on the same session.
func transient(err error) bool {
	return errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, zk.ErrNoServer) || errors.Is(err, zk.ErrSessionMoved)
}

func (d *driver) sessionDead(s *session) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return s.dead
}

func sleepCtx(ctx, ctx2 context.Context, dur time.Duration) bool {
	t := time.NewTimer(dur)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-ctx2.Done():
		return false
	}
}

// ctxErr is the error of an operation cut short by ctx: it wraps ctx.Err()
// and, if different, its cause (ErrClosed when a Locker closes).
func (d *driver) ctxErr(ctx context.Context) error {
	err := ctx.Err()
	if cause := context.Cause(ctx); cause != nil && cause != err {
		return fmt.Errorf("%w: %w", err, cause)
	}
	return err
}

// ctxErrConn is ctxErr for a request that was waiting on conn: if the
// client is not connected, the backend was unreachable and the error also
// wraps ErrUnavailable.
func (d *driver) ctxErrConn(ctx context.Context, conn *zk.Conn) error {
	err := d.ctxErr(ctx)
	if st := conn.State(); st != zk.StateHasSession {
		return fmt.Errorf("%w: client %v: %w", backend.ErrUnavailable, st, err)
	}
	return err
}

// ctxErrNow is ctxErr, wrapping ErrUnavailable too if the current
// connection is down.
func (d *driver) ctxErrNow(ctx context.Context) error {
	d.mu.Lock()
	conn := d.conn
	d.mu.Unlock()
	if conn == nil {
		return d.ctxErr(ctx)
	}
	return d.ctxErrConn(ctx, conn)
}

// mapErr turns a client error into the driver's error.
func (d *driver) mapErr(ctx context.Context, s *session, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.Is(err, backend.ErrClosed):
		return err
	case errors.Is(err, zk.ErrSessionExpired):
		d.sessionLost(s, "the server reported the session expired")
		return errRestart
	case errors.Is(err, zk.ErrClosing), errors.Is(err, zk.ErrConnectionClosed), errors.Is(err, zk.ErrNoServer), errors.Is(err, zk.ErrSessionMoved):
		if d.isClosed() {
			return backend.ErrClosed
		}
		if d.sessionDead(s) {
			return errRestart
		}
		return fmt.Errorf("%w: %w", backend.ErrUnavailable, err)
	}
	return err
}

// deleteNode deletes a node of ours now if it can (bounded), else in the
// background.
func (d *driver) deleteNode(s *session, path string) {
	ctx, cancel := context.WithTimeout(d.ctx, min(2*time.Second, s.timeout))
	defer cancel()
	err := d.do(ctx, s, false, func(c *zk.Conn) error { return c.Delete(path, -1) }, nil)
	if err == nil || errors.Is(err, zk.ErrNoNode) {
		return
	}
	d.deleteNodeBG(s, path)
}

// deleteNodeBG deletes path in the background until that succeeds, the
// node is gone, or its session has ended (which deletes it).
func (d *driver) deleteNodeBG(s *session, path string) {
	d.cleanupBG(s, func(ctx context.Context) bool {
		err := d.do(ctx, s, false, func(c *zk.Conn) error { return c.Delete(path, -1) }, nil)
		return err == nil || errors.Is(err, zk.ErrNoNode)
	})
}

// cleanupGUIDBG deletes, in the background, every node of parent created
// by the attempt guid: the outcome of its create is unknown.
func (d *driver) cleanupGUIDBG(s *session, parent, guid string) {
	d.cleanupBG(s, func(ctx context.Context) bool {
		_ = d.do(ctx, s, false, func(c *zk.Conn) error { _, err := c.Sync(parent); return err }, nil)
		var children []string
		err := d.do(ctx, s, false, func(c *zk.Conn) error {
			var err error
			children, _, err = c.Children(parent)
			return err
		}, nil)
		if errors.Is(err, zk.ErrNoNode) {
			return true
		}
		if err != nil {
			return false
		}
		ok := true
		for _, name := range children {
			if m, isOurs := parseMember(name); isOurs && m.guid == guid {
				err := d.do(ctx, s, false, func(c *zk.Conn) error { return c.Delete(parent+"/"+name, -1) }, nil)
				if err != nil && !errors.Is(err, zk.ErrNoNode) {
					ok = false
				}
			}
		}
		return ok
	})
}

// cleanupBG retries attempt with backoff until it reports done, the
// session has ended, or the driver closes.
func (d *driver) cleanupBG(s *session, attempt func(ctx context.Context) bool) {
	d.goTracked(true, func() {
		pause := 50 * time.Millisecond
		for {
			if d.ctx.Err() != nil || d.sessionEnded(s) {
				return
			}
			ctx, cancel := context.WithTimeout(d.ctx, s.timeout)
			done := attempt(ctx)
			cancel()
			if done {
				return
			}
			if !sleepCtx(d.ctx, d.ctx, pause) {
				return
			}
			pause = min(2*pause, 2*time.Second)
		}
	})
}

// sessionEnded reports whether s has certainly ended on the server side, or
// is ending: its connection moved to another session, or it was an owned
// connection that has been closed.
func (d *driver) sessionEnded(s *session) bool {
	if sid := s.conn.SessionID(); sid != s.id {
		return true
	}
	if s.info != nil {
		if si, ok := s.info.session(s.id); ok && si.expired {
			return true
		}
	}
	if d.owned {
		d.mu.Lock()
		defer d.mu.Unlock()
		return s.dead // an owned connection is closed when its session is declared lost
	}
	return false
}

// testHooks let tests interfere at precise points.
type testHooks struct {
	beforeCreate func(parent string)
	sessionLost  func(id int64, cause string)
}

func withHooks(h *testHooks) Option { return func(c *config) { c.hooks = h } }
