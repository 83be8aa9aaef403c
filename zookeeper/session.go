package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock/backend"
)

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
		s, fresh, conn, info, err := d.use()
		if err != nil {
			return nil, err
		}
		if s != nil {
			if fresh {
				return s, nil
			}
			// Idle for a while, or never proven: renew contact before
			// the session backs a lease.
			err := d.retry(ctx, s, true, syncRoot)
			if err == nil {
				d.poke()
				return s, nil
			}
			d.unuse(s)
			if err = d.mapErr(s, err); !errors.Is(err, errRestart) {
				return nil, err
			}
			continue
		}
		var changed <-chan struct{}
		if info != nil {
			changed = info.watch()
		}
		state := conn.State()
		if d.adopt(conn, info) {
			continue
		}
		if giveUp.IsZero() {
			giveUp = time.Now().Add(d.connectWait(0))
		}
		if err := d.awaitSession(ctx, giveUp, state, info, changed); err != nil {
			return nil, err
		}
	}
}

// use marks the live session in use and returns it, with whether its last
// contact is recent; without one it returns the connection to wait on,
// connecting first if the driver owns its connection and has none.
func (d *driver) use() (s *session, fresh bool, conn *zk.Conn, info *connInfo, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, false, nil, nil, backend.ErrClosed
	}
	if s := d.cur; s != nil && !s.dead {
		s.users++
		lc := s.lastContactLocked()
		return s, !lc.IsZero() && time.Since(lc) < 2*s.hb, nil, nil, nil
	}
	if d.conn == nil && d.owned {
		conn, _, info, err := connect(d.servers, d.cfg)
		if err != nil {
			return nil, false, nil, nil, err
		}
		d.conn, d.info = conn, info
		d.poke()
	}
	return nil, false, d.conn, d.info, nil
}

// adopt makes the session conn has established the driver's current one,
// if its negotiated timeout is known; false if there is none to adopt.
func (d *driver) adopt(conn *zk.Conn, info *connInfo) bool {
	sid, state := conn.SessionID(), conn.State()
	if state != zk.StateHasSession || sid == 0 {
		return false
	}
	var (
		timeout time.Duration
		contact time.Time
	)
	if info != nil {
		si, ok := info.session(sid)
		if !ok || si.timeout <= 0 || si.expired {
			return false
		}
		timeout, contact = si.timeout, si.contact
	} else {
		timeout = d.cfg.sessionTimeout
	}
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
	return true
}

// awaitSession waits a little for the client to establish a session:
// until the wire reports a change (changed), 25ms pass, or giveUp, when it
// returns errNoSession. When the client's dials (info) show every server
// address failing, it returns their errors at once (errUnreachable).
func (d *driver) awaitSession(ctx context.Context, giveUp time.Time, state zk.State, info *connInfo, changed <-chan struct{}) error {
	if info != nil {
		if err := info.dials.unreachable(); err != nil {
			return err
		}
	}
	wait := time.Until(giveUp)
	if wait <= 0 {
		return fmt.Errorf("%w within %v (client state %v)", errNoSession, d.connectWait(0), state)
	}
	t := time.NewTimer(min(wait, 25*time.Millisecond))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return unreachable(ctx, fmt.Errorf("%w (client state %v)", errNoSession, state))
	case <-d.ctx.Done():
		return backend.ErrClosed
	case <-changed:
	case <-t.C:
	}
	return nil
}

// unuse ends an acquisition's use of s.
func (d *driver) unuse(s *session) {
	d.mu.Lock()
	s.users--
	d.mu.Unlock()
	d.poke()
}

func syncRoot(c *zk.Conn) error { _, err := c.Sync("/"); return err }

func (d *driver) sessionDead(s *session) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return s.dead
}

// poke wakes the monitor.
func (d *driver) poke() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

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
		case <-d.bg.Quit():
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
			if !d.spawn(func() { d.heartbeat(s) }) {
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
		lost = d.table.EndLocked(h, lost)
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
		d.spawn(func() { d.retire(s) })
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
