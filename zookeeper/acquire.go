package zookeeper

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock/backend"
)

// Node names: "_c_" + 32 lower-case hex digits (a random GUID per attempt)
// + "-lock-" + the sequence number the server appends (a signed 32-bit
// counter formatted %010d: "0000000007", and after 2147483647 it wraps to
// "-2147483648"). The "_c_<guid>-" prefix is Curator's and go-zookeeper's
// protected-mode convention.
const (
	protectedPrefix = "_c_"
	guidLen         = 32
	lockInfix       = "-lock-"
	keyPrefix       = "k-"
)

// errRestart: the session of the attempt was lost (or the attempt's node
// vanished); nothing of the attempt is left behind and the acquisition may
// start over on a new session.
var errRestart = errors.New("zookeeper: session lost during the attempt")

// encodeKey maps a key to one path component that the server accepts, with
// no collisions: "k-" followed by the key's bytes, where every byte other
// than A–Z a–z 0–9 - . _ ~ is written %XX. The prefix keeps "." and ".."
// from being components; the result is printable ASCII (at most 3074
// bytes for a 1024-byte key), so ZooKeeper's character restrictions
// (control characters, emoji, private-use code points) never apply.
func encodeKey(key string) string {
	const hexdig = "0123456789ABCDEF"
	b := make([]byte, 0, len(keyPrefix)+len(key)+len(key)/2)
	b = append(b, keyPrefix...)
	for i := 0; i < len(key); i++ {
		c := key[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '.', c == '_', c == '~':
			b = append(b, c)
		default:
			b = append(b, '%', hexdig[c>>4], hexdig[c&15])
		}
	}
	return string(b)
}

// decodeKey inverts encodeKey.
func decodeKey(name string) (string, bool) {
	rest, ok := strings.CutPrefix(name, keyPrefix)
	if !ok {
		return "", false
	}
	b := make([]byte, 0, len(rest))
	for i := 0; i < len(rest); i++ {
		if rest[i] != '%' {
			b = append(b, rest[i])
			continue
		}
		if i+2 >= len(rest) {
			return "", false
		}
		v, err := strconv.ParseUint(rest[i+1:i+3], 16, 8)
		if err != nil {
			return "", false
		}
		b = append(b, byte(v))
		i += 2
	}
	return string(b), true
}

func (d *driver) parentPath(key string) string { return d.cfg.basePath + "/" + encodeKey(key) }

func newGUID() string {
	var b [guidLen / 2]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// member is one lock node under a key's parent.
type member struct {
	name string
	guid string
	seq  int32
}

// parseMember recognises a lock node; anything else under the parent is a
// foreign child and is ignored.
func parseMember(name string) (member, bool) {
	const seqAt = len(protectedPrefix) + guidLen + len(lockInfix)
	if len(name) <= seqAt || !strings.HasPrefix(name, protectedPrefix) || name[len(protectedPrefix)+guidLen:seqAt] != lockInfix {
		return member{}, false
	}
	guid := name[len(protectedPrefix) : len(protectedPrefix)+guidLen]
	for i := 0; i < len(guid); i++ {
		if c := guid[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return member{}, false
		}
	}
	v, err := strconv.ParseInt(name[seqAt:], 10, 32)
	if err != nil {
		return member{}, false
	}
	return member{name: name, guid: guid, seq: int32(v)}, true
}

// seqBefore orders sequence numbers as serial numbers (RFC 1982): a is
// before b if b is less than 2^31 steps after a, so the order survives the
// counter's wrap from 2147483647 to -2147483648. Sequence numbers of nodes
// alive at the same time are always far closer than 2^31: the counter
// advances by one per child created or deleted.
func seqBefore(a, b int32) bool { return int32(uint32(a)-uint32(b)) < 0 }

// order returns the lock nodes among children, first holder first.
func order(children []string) []member {
	ms := make([]member, 0, len(children))
	for _, c := range children {
		if m, ok := parseMember(c); ok {
			ms = append(ms, m)
		}
	}
	slices.SortFunc(ms, func(a, b member) int {
		switch {
		case a.seq == b.seq:
			return strings.Compare(a.name, b.name)
		case seqBefore(a.seq, b.seq):
			return -1
		default:
			return 1
		}
	})
	return ms
}

// TryAcquire creates a node, checks whether it is first, and deletes it if
// it is not.
func (d *driver) TryAcquire(ctx context.Context, req backend.Request) (backend.Lock, error) {
	return d.acquire(ctx, req, false)
}

// Acquire creates a node and waits, watching only its predecessor, until
// it is first.
func (d *driver) Acquire(ctx context.Context, req backend.Request) (backend.Lock, error) {
	l, err := d.acquire(ctx, req, true)
	if err != nil && ctx.Err() != nil && !errors.Is(err, backend.ErrNotAcquired) {
		err = fmt.Errorf("%w: %w", backend.ErrNotAcquired, err)
	}
	return l, err
}

func (d *driver) acquire(ctx context.Context, req backend.Request, wait bool) (backend.Lock, error) {
	ks := d.refKey(req.Key)
	defer d.unrefKey(req.Key, ks)
	parent := d.parentPath(req.Key)
	for restarts := 0; ; restarts++ {
		if ctx.Err() != nil {
			return nil, d.ctxErrNow(ctx)
		}
		if l, ok, err := d.nest(ctx, ks, req); ok || err != nil {
			return l, err
		}
		s, err := d.session(ctx)
		if err != nil {
			return nil, err
		}
		l, err := d.attempt(ctx, s, ks, parent, req, wait)
		d.unuse(s)
		if !errors.Is(err, errRestart) {
			return l, err
		}
		if !wait && restarts >= 2 {
			return nil, fmt.Errorf("%w: %w", backend.ErrUnavailable, err)
		}
		if restarts > 0 && !sleepCtx(ctx, d.ctx, min(time.Duration(restarts)*50*time.Millisecond, time.Second)) {
			if ctx.Err() != nil {
				return nil, d.ctxErrNow(ctx)
			}
			return nil, backend.ErrClosed
		}
	}
}

// nest joins the hold of the same owner on this key, if this driver has
// one: reentrancy is per Locker (one session). The node is checked to
// still exist first; an owner id held through another session's node is
// an ordinary competitor, not a reentrant hold.
func (d *driver) nest(ctx context.Context, ks *keyState, req backend.Request) (backend.Lock, bool, error) {
	d.mu.Lock()
	h := ks.hold
	if h == nil || h.lost || h.owner != req.Owner {
		d.mu.Unlock()
		return nil, false, nil
	}
	h.count++ // reserve, so a concurrent last Release keeps the node
	l := &lock{d: d, h: h}
	h.handles[l] = req.Lost
	d.mu.Unlock()
	held, err := d.verify(ctx, h)
	if err != nil {
		d.goTracked(false, func() {
			ctx, cancel := context.WithTimeout(d.ctx, 10*time.Second)
			defer cancel()
			_ = l.Release(ctx)
		})
		return nil, false, err
	}
	if !held {
		d.mu.Lock()
		l.done = true
		delete(h.handles, l)
		d.mu.Unlock()
		d.holdGone(h, "lock node deleted by another client", nil)
		return nil, false, nil
	}
	return l, true, nil
}

// verify reports whether h's node still exists in h's session.
func (d *driver) verify(ctx context.Context, h *hold) (bool, error) {
	var (
		ok   bool
		stat *zk.Stat
	)
	err := d.retrying(ctx, h.sess, func(c *zk.Conn) error {
		var err error
		ok, stat, err = c.Exists(h.path)
		return err
	})
	if err != nil {
		if err = d.mapErr(ctx, h.sess, err); errors.Is(err, errRestart) {
			return false, nil
		}
		return false, err
	}
	return ok && stat.EphemeralOwner == h.sess.id, nil
}

// attempt is one acquisition on session s: protected create, then the
// recipe's loop — list the children without a watch, hold if first,
// otherwise watch only the next-lower node.
func (d *driver) attempt(ctx context.Context, s *session, ks *keyState, parent string, req backend.Request, wait bool) (backend.Lock, error) {
	guid := newGUID()
	child, err := d.protectedCreate(ctx, s, parent, guid, []byte(req.Owner))
	if err != nil {
		return nil, err
	}
	path := parent + "/" + child
	fail := func(err error) (backend.Lock, error) {
		d.deleteNode(s, path)
		return nil, err
	}
	// The node's stat (czxid: the fencing token; ephemeralOwner: the
	// session it belongs to), fetched alongside the first listing.
	var (
		exists bool
		stat   *zk.Stat
	)
	statCall := d.start(s, false, func(c *zk.Conn) error {
		var err error
		exists, stat, err = c.Exists(path)
		return err
	}, nil)
	statDone := false
	for {
		d.mu.Lock()
		changed := ks.changed
		d.mu.Unlock()
		var children []string
		d.stats.children.Add(1)
		err := d.retrying(ctx, s, func(c *zk.Conn) error {
			var err error
			children, _, err = c.Children(parent)
			return err
		})
		if errors.Is(err, zk.ErrNoNode) {
			return nil, errRestart // the parent, hence our node, is gone
		}
		if err != nil {
			return fail(d.mapErr(ctx, s, err))
		}
		ms := order(children)
		idx := -1
		for i, m := range ms {
			switch {
			case m.name == child:
				idx = i
			case m.guid == guid:
				// A second node of this attempt: a create whose
				// outcome we could not see was applied after all.
				d.deleteNodeBG(s, parent+"/"+m.name)
			}
		}
		if idx < 0 {
			// Our node is gone: the session ended, or another
			// client deleted it.
			return nil, errRestart
		}
		if !statDone {
			if err := statCall.wait(ctx, d); err != nil {
				return fail(d.mapErr(ctx, s, err))
			}
			statDone = true
			if !exists {
				return nil, errRestart
			}
			if stat.EphemeralOwner != s.id {
				// Created in another session: go-zookeeper replaced
				// ours after it expired.
				d.sessionLost(s, fmt.Sprintf("node created in session 0x%x", stat.EphemeralOwner))
				return fail(errRestart)
			}
		}
		if idx == 0 {
			return d.grant(s, ks, req, path, uint64(stat.Czxid), fail)
		}
		if !wait {
			return fail(backend.Busy(0))
		}
		pred := parent + "/" + ms[idx-1].name
		var (
			predExists bool
			ch         <-chan zk.Event
		)
		err = d.retrying(ctx, s, func(c *zk.Conn) error {
			var err error
			predExists, _, ch, err = c.ExistsW(pred)
			return err
		})
		if err != nil {
			return fail(d.mapErr(ctx, s, err))
		}
		if !predExists {
			continue
		}
		d.stats.watches.Add(1)
	waiting:
		for {
			select {
			case <-ch:
				d.stats.watchEvents.Add(1)
				break waiting
			case <-ctx.Done():
				return fail(d.ctxErrConn(ctx, s.conn))
			case <-d.ctx.Done():
				return fail(backend.ErrClosed)
			case <-s.deadCh:
				return fail(errRestart)
			case <-changed:
				// This driver got a hold on the key: if it is our
				// owner's, nest in it and leave the queue.
				d.mu.Lock()
				h := ks.hold
				changed = ks.changed
				same := h != nil && !h.lost && h.owner == req.Owner
				d.mu.Unlock()
				if same {
					if l, ok, err := d.nest(ctx, ks, req); ok || err != nil {
						d.deleteNode(s, path)
						return l, err
					}
				}
			}
		}
	}
}

// grant makes the first node a hold.
func (d *driver) grant(s *session, ks *keyState, req backend.Request, path string, token uint64, fail func(error) (backend.Lock, error)) (backend.Lock, error) {
	d.mu.Lock()
	if s.dead {
		d.mu.Unlock()
		return fail(errRestart)
	}
	if dl := s.deadlineLocked(); !dl.IsZero() && !time.Now().Before(dl) {
		d.mu.Unlock()
		d.sessionLost(s, "no contact with the ensemble before the grant")
		return fail(errRestart)
	}
	h := &hold{key: req.Key, owner: req.Owner, path: path, token: token, sess: s, count: 1, handles: map[*lock]func(error){}}
	l := &lock{d: d, h: h}
	h.handles[l] = req.Lost
	stale := ks.hold
	ks.hold = h
	close(ks.changed)
	ks.changed = make(chan struct{})
	s.holds[h] = struct{}{}
	d.mu.Unlock()
	if stale != nil {
		// Our node is first, so the node of an earlier hold of ours is
		// gone (another client deleted it).
		d.holdGone(stale, "lock node deleted by another client", nil)
	}
	return l, nil
}

// maxCreateAttempts bounds the creates of one attempt (parent reaped
// between calls, create lost with the connection).
const maxCreateAttempts = 10

// protectedCreate creates the ephemeral-sequential node of attempt guid
// under parent. A create whose answer is lost with the connection may have
// been applied: the children are listed (after a Sync) and the node with
// our GUID is adopted if its ephemeralOwner is our session (CURATOR-498);
// if that cannot be known, the node is deleted in the background. A parent
// reaped as an empty container is created again.
func (d *driver) protectedCreate(ctx context.Context, s *session, parent, guid string, data []byte) (string, error) {
	prefix := parent + "/" + protectedPrefix + guid + lockInfix
	var lastErr error
	for range maxCreateAttempts {
		if h := d.cfg.hooks; h != nil && h.beforeCreate != nil {
			h.beforeCreate(parent)
		}
		var created string
		d.stats.creates.Add(1)
		err := d.do(ctx, s, false, func(c *zk.Conn) error {
			var err error
			created, err = c.Create(prefix, data, zk.FlagEphemeralSequential, d.cfg.acl)
			return err
		}, func(err error) {
			// The caller gave up waiting: undo whatever happened.
			switch {
			case err == nil:
				d.deleteNodeBG(s, created)
			case errors.Is(err, zk.ErrConnectionClosed):
				d.cleanupGUIDBG(s, parent, guid)
			}
		})
		lastErr = err
		switch {
		case err == nil:
			return created[strings.LastIndexByte(created, '/')+1:], nil
		case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
			return "", err // the abandon handler cleans up
		case errors.Is(err, zk.ErrNoNode):
			if err := d.ensureParent(ctx, s, parent); err != nil {
				return "", err
			}
		case errors.Is(err, zk.ErrConnectionClosed):
			// The create may have been applied.
			name, err := d.findGUID(ctx, s, parent, guid)
			if err != nil {
				d.cleanupGUIDBG(s, parent, guid)
				return "", err
			}
			if name != "" {
				return name, nil
			}
		case errors.Is(err, zk.ErrNoServer):
			// Never sent: go-zookeeper fails queued requests after
			// trying every server. Retry while the session may live.
			if err := d.pauseUnavailable(ctx, s, err); err != nil {
				return "", err
			}
		default:
			return "", d.mapErr(ctx, s, err)
		}
	}
	return "", fmt.Errorf("%w: create under %s failed %d times: %w", backend.ErrUnavailable, parent, maxCreateAttempts, lastErr)
}

// pauseUnavailable waits a little before retrying a request that could not
// be sent, unless the session is lost, the driver closes or ctx ends.
func (d *driver) pauseUnavailable(ctx context.Context, s *session, err error) error {
	if d.sessionDead(s) {
		return errRestart
	}
	if !sleepCtx(ctx, d.ctx, 200*time.Millisecond) {
		if ctx.Err() != nil {
			return fmt.Errorf("%w: %w: %w", backend.ErrUnavailable, err, d.ctxErr(ctx))
		}
		return backend.ErrClosed
	}
	return nil
}

// findGUID looks for the node of attempt guid after a create whose answer
// was lost. It returns its name if it exists in session s, "" if the
// create was not applied.
func (d *driver) findGUID(ctx context.Context, s *session, parent, guid string) (string, error) {
	// Let the server we are connected to catch up with the leader, so
	// that a create applied through another server is visible.
	err := d.retrying(ctx, s, func(c *zk.Conn) error { _, err := c.Sync(parent); return err })
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		return "", d.mapErr(ctx, s, err)
	}
	var children []string
	err = d.retrying(ctx, s, func(c *zk.Conn) error {
		var err error
		children, _, err = c.Children(parent)
		return err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return "", nil
	}
	if err != nil {
		return "", d.mapErr(ctx, s, err)
	}
	for _, name := range children {
		m, ok := parseMember(name)
		if !ok || m.guid != guid {
			continue
		}
		var (
			exists bool
			stat   *zk.Stat
		)
		err := d.retrying(ctx, s, func(c *zk.Conn) error {
			var err error
			exists, stat, err = c.Exists(parent + "/" + name)
			return err
		})
		if err != nil {
			return "", d.mapErr(ctx, s, err)
		}
		if !exists {
			continue
		}
		if stat.EphemeralOwner == s.id {
			return name, nil
		}
		// Applied in another session of this connection: ours expired.
		d.deleteNodeBG(s, parent+"/"+name)
		d.sessionLost(s, fmt.Sprintf("node created in session 0x%x", stat.EphemeralOwner))
		return "", errRestart
	}
	return "", nil
}

// ensureParent creates the key's container node, and the base path if it
// is missing.
func (d *driver) ensureParent(ctx context.Context, s *session, parent string) error {
	create := func() error {
		return d.retrying(ctx, s, func(c *zk.Conn) error {
			_, err := c.CreateContainer(parent, nil, zk.FlagContainer, d.cfg.acl)
			return err
		})
	}
	err := create()
	if errors.Is(err, zk.ErrNoNode) {
		if err := d.ensureBase(ctx, s); err != nil {
			return err
		}
		err = create()
	}
	if err == nil || errors.Is(err, zk.ErrNodeExists) {
		return nil
	}
	return d.mapErr(ctx, s, err)
}

// ensureBase creates the missing components of the base path as
// persistent nodes.
func (d *driver) ensureBase(ctx context.Context, s *session) error {
	p := ""
	for _, comp := range strings.Split(d.cfg.basePath[1:], "/") {
		p += "/" + comp
		err := d.retrying(ctx, s, func(c *zk.Conn) error {
			_, err := c.Create(p, nil, zk.FlagPersistent, d.cfg.acl)
			return err
		})
		if err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return d.mapErr(ctx, s, err)
		}
	}
	return nil
}
