package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock/backend"
)

// The advisory-mode statements. The lock statements take the lock and, only
// when it was granted, advance the key's fence in the same statement (a
// data-modifying CTE gated on the lock's result); the UPDATE follows the
// row's newest committed version even when the statement waited (READ
// COMMITTED re-check), so fences never repeat. Arguments: lock id, key.
const (
	advLockSQL = `WITH l AS MATERIALIZED (%[2]s),
u AS (UPDATE %[1]s SET fence = fence + 1 WHERE lock_id = $1 AND lock_key = $2 AND (SELECT ok FROM l) RETURNING fence)
SELECT (SELECT ok FROM l), (SELECT fence FROM u), pg_backend_pid()`

	// Registers key under candidate id $1 unless the id or the key is
	// taken, then reads the key's id. Arguments: candidate id, key.
	advRegisterSQL = `WITH ins AS (INSERT INTO %[1]s (lock_id, lock_key, fence) VALUES ($1, $2, 0) ON CONFLICT DO NOTHING RETURNING lock_id)
SELECT lock_id FROM ins UNION ALL SELECT lock_id FROM %[1]s WHERE lock_key = $2`

	advLookupSQL = `SELECT lock_id FROM %[1]s WHERE lock_key = $1`

	// The session's identity and the limits after which the server ends
	// a silent session.
	advSessionSQL = `SELECT pg_backend_pid(),
  COALESCE(max(setting::bigint) FILTER (WHERE name = 'idle_session_timeout'), 0),
  COALESCE(max(setting::bigint) FILTER (WHERE name = 'idle_in_transaction_session_timeout'), 0),
  COALESCE(max(setting::bigint) FILTER (WHERE name = 'tcp_keepalives_idle'), 0),
  COALESCE(max(setting::bigint) FILTER (WHERE name = 'tcp_keepalives_interval'), 0),
  COALESCE(max(setting::bigint) FILTER (WHERE name = 'tcp_keepalives_count'), 0),
  COALESCE(max(setting::bigint) FILTER (WHERE name = 'tcp_user_timeout'), 0)
FROM pg_settings WHERE name IN ('idle_session_timeout', 'idle_in_transaction_session_timeout',
  'tcp_keepalives_idle', 'tcp_keepalives_interval', 'tcp_keepalives_count', 'tcp_user_timeout')`

	advUnlockSQL = `SELECT pg_advisory_unlock($1::bigint), pg_advisory_unlock_all()`
	advPingSQL   = `SELECT pg_backend_pid()`
)

const (
	// cancelTimeout bounds the cancel request that stops a waiting
	// statement.
	cancelTimeout = 2 * time.Second
	// cancelGrace is how long a wait cut by its ctx may take to end after
	// the cancel request was sent, before its connection is broken.
	cancelGrace = 250 * time.Millisecond
	// probeLimit bounds the candidates tried for a key's lock id.
	probeLimit = 16
	// idCacheMax bounds the key → lock id cache (cleared when full).
	idCacheMax = 1 << 16
	// maxBound is the silence bound of a session with no server limit.
	maxBound = 365 * 24 * time.Hour
	// sessionKey stores a connection's sessionInfo in pgconn's CustomData.
	sessionKey = "distlock.session"
)

type advDriver struct {
	*base
	keepalive   time.Duration
	pingTimeout time.Duration
	qTry, qWait string
	qRegister   string
	qLookup     string

	idMu sync.Mutex
	ids  map[string]int64

	mu      sync.Mutex
	entries map[entryKey]*advEntry
	closing bool
}

type entryKey struct{ key, owner string }

type entryState uint8

const (
	acquiring entryState = iota
	held
	gone
)

// advEntry is one owner's lock on one key in this driver: one pinned
// connection holding the advisory lock once, shared by the owner's nested
// holds.
type advEntry struct {
	k     entryKey
	state entryState
	ready chan struct{} // closed when the state leaves acquiring
	conn  *pgxpool.Conn
	pid   uint32
	id    int64
	token uint64
	// bound is how long the server lets the session stay silent; lastOK
	// is when the last command that succeeded on it was sent.
	bound  time.Duration
	lastOK time.Time
	locks  map[*advLock]func(error)
	stopKA chan struct{}
	kaDone chan struct{}
	// connMu serializes the use of conn once the lock is held (checks
	// from the keepalive and from Refresh, the unlock, the discard): a
	// pgx connection runs one command at a time, and after it is
	// released or discarded it must not be touched.
	connMu sync.Mutex
}

func newAdvDriver(b *base, keepalive time.Duration) *advDriver {
	return &advDriver{
		base:        b,
		keepalive:   keepalive,
		pingTimeout: max(2*keepalive, 5*time.Second),
		qTry:        fmt.Sprintf(advLockSQL, b.table, "SELECT pg_try_advisory_lock($1::bigint) AS ok"),
		qWait:       fmt.Sprintf(advLockSQL, b.table, "SELECT true AS ok FROM (SELECT pg_advisory_lock($1::bigint)) w"),
		qRegister:   fmt.Sprintf(advRegisterSQL, b.table),
		qLookup:     fmt.Sprintf(advLookupSQL, b.table),
		ids:         map[string]int64{},
		entries:     map[entryKey]*advEntry{},
	}
}

func (d *advDriver) Capabilities() backend.Capabilities {
	return backend.Capabilities{Fencing: true, Reentrant: true, Notify: true, SessionBound: true}
}

// TryAcquire runs pg_try_advisory_lock.
func (d *advDriver) TryAcquire(ctx context.Context, req backend.Request) (backend.Lock, error) {
	return d.acquire(ctx, req, false)
}

// Acquire waits in pg_advisory_lock inside the server. When ctx ends, the
// waiting statement is cancelled with the protocol's cancel request and the
// connection is closed.
func (d *advDriver) Acquire(ctx context.Context, req backend.Request) (backend.Lock, error) {
	l, err := d.acquire(ctx, req, true)
	if err != nil && ctx.Err() != nil && !errors.Is(err, backend.ErrNotAcquired) {
		err = fmt.Errorf("%w: %w", backend.ErrNotAcquired, err)
	}
	return l, err
}

func (d *advDriver) acquire(ctx context.Context, req backend.Request, wait bool) (backend.Lock, error) {
	if err := d.ready(ctx); err != nil {
		return nil, err
	}
	ek := entryKey{req.Key, req.Owner}
	var e *advEntry
	for e == nil {
		d.mu.Lock()
		if d.closing {
			d.mu.Unlock()
			return nil, backend.ErrClosed
		}
		cur := d.entries[ek]
		switch {
		case cur != nil && cur.state == held:
			// Reentrant: the owner's connection already holds the lock.
			l := &advLock{d: d, e: cur}
			cur.locks[l] = req.Lost
			d.mu.Unlock()
			return l, nil
		case cur != nil:
			// The same owner is acquiring this key right now: nest on
			// its result rather than queue behind it in the server.
			ch := cur.ready
			d.mu.Unlock()
			if !wait {
				return nil, backend.Busy(0)
			}
			select {
			case <-ch:
			case <-ctx.Done():
				return nil, fmt.Errorf("%w: %w", backend.ErrNotAcquired, context.Cause(ctx))
			}
		default:
			e = &advEntry{k: ek, state: acquiring, ready: make(chan struct{}), locks: map[*advLock]func(error){}}
			d.entries[ek] = e
			d.mu.Unlock()
		}
	}

	p, err := d.lockOnServer(ctx, req.Key, wait)

	d.mu.Lock()
	defer d.mu.Unlock()
	close(e.ready)
	if err == nil && d.closing {
		// Close ran meanwhile and will not see this entry: give the
		// lock back with its connection.
		discard(p.conn)
		err = backend.ErrClosed
	}
	if err != nil {
		e.state = gone
		if d.entries[ek] == e {
			delete(d.entries, ek)
		}
		return nil, err
	}
	e.state, e.conn, e.pid, e.id, e.token, e.bound, e.lastOK = held, p.conn, p.pid, p.id, p.token, p.bound, p.sent
	l := &advLock{d: d, e: e}
	e.locks[l] = req.Lost
	e.stopKA, e.kaDone = make(chan struct{}), make(chan struct{})
	go d.keepaliveLoop(e)
	return l, nil
}

// pinned is a connection whose session holds an advisory lock.
type pinned struct {
	conn  *pgxpool.Conn
	pid   uint32
	id    int64
	token uint64
	bound time.Duration
	sent  time.Time // when its last successful command was sent
}

// lockOnServer takes a connection out of the pool and takes key's advisory
// lock in its session, advancing the fence in the same statement. On any
// failure after the lock statement was sent, the connection is closed —
// never returned to the pool — which frees whatever the session held.
func (d *advDriver) lockOnServer(ctx context.Context, key string, wait bool) (*pinned, error) {
	id, err := d.lockID(ctx, key)
	if err != nil {
		return nil, err
	}
	for {
		p, retry, err := d.lockOnce(ctx, key, id, wait)
		if !retry || ctx.Err() != nil {
			return p, err
		}
	}
}

// lockOnce is one attempt of lockOnServer; retry reports a wait ended by a
// server-side timeout (statement_timeout, lock_timeout) while ctx lives.
func (d *advDriver) lockOnce(ctx context.Context, key string, id int64, wait bool) (p *pinned, retry bool, err error) {
	conn, err := d.pool.Acquire(ctx)
	if err != nil {
		return nil, false, d.wrap(ctx, err)
	}
	info, err := d.session(ctx, conn)
	if err != nil {
		discard(conn)
		return nil, false, d.wrap(ctx, err)
	}
	var ok *bool
	var fence *int64
	var pid uint32
	sent := time.Now()
	if wait {
		err = d.cancellable(ctx, conn, func(qctx context.Context) error {
			return conn.QueryRow(qctx, d.qWait, id, []byte(key)).Scan(&ok, &fence, &pid)
		})
	} else {
		err = conn.QueryRow(ctx, d.qTry, id, []byte(key)).Scan(&ok, &fence, &pid)
	}
	switch {
	case err != nil && wait && ctx.Err() != nil:
		discard(conn)
		return nil, false, fmt.Errorf("%w: %w", backend.ErrNotAcquired, d.wrapWait(ctx, err))
	case err != nil:
		discard(conn)
		c := pgCode(err)
		return nil, wait && (c == "57014" || c == "55P03"), d.wrap(ctx, err)
	case ok == nil || pid != info.pid:
		discard(conn)
		return nil, false, fmt.Errorf("%w: the lock statement ran in another server session (backend pid %d, expected %d): a transaction-pooling proxy such as pgbouncer?", backend.ErrUnavailable, pid, info.pid)
	case !*ok:
		conn.Release() // the lock was not granted: the session holds nothing
		return nil, false, backend.Busy(0)
	case fence == nil || *fence <= 0:
		discard(conn)
		d.forgetID(key)
		return nil, false, fmt.Errorf("%w: the advisory table %s has no row for the key's lock id (deleted?)", backend.ErrUnavailable, d.table)
	}
	if wait {
		// The session was busy while it waited, so silence counts from
		// now: prove it alive with one more command.
		sent = time.Now()
		if err := d.ping(ctx, conn, info.pid); err != nil {
			discard(conn)
			return nil, false, fmt.Errorf("%w: the lock's connection failed after the lock was granted: %w", backend.ErrUnavailable, d.wrap(ctx, err))
		}
	}
	return &pinned{conn: conn, pid: info.pid, id: id, token: uint64(*fence), bound: info.bound, sent: sent}, false, nil
}

// sessionInfo is what the driver knows of a pooled connection's session.
type sessionInfo struct {
	pid   uint32
	bound time.Duration
}

// session returns conn's session info, read once per connection and kept
// with it. It refuses a connection whose server pid differs from the one
// announced at login: a proxy stands between.
func (d *advDriver) session(ctx context.Context, conn *pgxpool.Conn) (sessionInfo, error) {
	pc := conn.Conn().PgConn()
	if s, ok := pc.CustomData()[sessionKey].(sessionInfo); ok {
		return s, nil
	}
	var pid int64
	var ist, iitst, kaIdle, kaInterval, kaCount, userTimeout int64
	if err := conn.QueryRow(ctx, advSessionSQL).Scan(&pid, &ist, &iitst, &kaIdle, &kaInterval, &kaCount, &userTimeout); err != nil {
		return sessionInfo{}, err
	}
	if uint32(pid) != pc.PID() {
		return sessionInfo{}, fmt.Errorf("%w: advisory mode needs a direct server session: the server's backend pid %d differs from the %d announced at login, so a connection pooler (pgbouncer?) stands between — use mode=row behind a pooler", backend.ErrInvalidOption, pid, pc.PID())
	}
	bound := maxBound
	for _, ms := range []int64{ist, iitst, userTimeout} {
		if ms > 0 {
			bound = min(bound, time.Duration(ms)*time.Millisecond)
		}
	}
	if kaIdle > 0 && kaInterval > 0 && kaCount > 0 {
		bound = min(bound, time.Duration(kaIdle+kaInterval*kaCount)*time.Second)
	}
	s := sessionInfo{pid: uint32(pid), bound: bound}
	pc.CustomData()[sessionKey] = s
	return s, nil
}

// lockID returns key's advisory lock id, registering it in the advisory
// table on first use: the first candidate not taken by another key.
func (d *advDriver) lockID(ctx context.Context, key string) (int64, error) {
	d.idMu.Lock()
	id, ok := d.ids[key]
	d.idMu.Unlock()
	if ok {
		return id, nil
	}
	err := d.pool.QueryRow(ctx, d.qLookup, []byte(key)).Scan(&id)
	for i := uint32(0); errors.Is(err, pgx.ErrNoRows) && i < probeLimit; i++ {
		err = d.pool.QueryRow(ctx, d.qRegister, lockID(d.name, key, i), []byte(key)).Scan(&id)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("%w: no free advisory lock id for the key after %d candidates", backend.ErrUnavailable, probeLimit)
	}
	if err != nil {
		return 0, d.wrap(ctx, err)
	}
	d.idMu.Lock()
	if len(d.ids) >= idCacheMax {
		clear(d.ids)
	}
	d.ids[key] = id
	d.idMu.Unlock()
	return id, nil
}

func (d *advDriver) forgetID(key string) {
	d.idMu.Lock()
	delete(d.ids, key)
	d.idMu.Unlock()
}

// cancellable runs a statement that may wait for a lock on conn. The
// statement does not see ctx (pgx would break the connection, and the
// server would leave the orphaned statement queued for the lock); when ctx
// ends, a cancel request stops it in the server, and only if that fails is
// the connection broken. The caller must then discard the connection.
func (d *advDriver) cancellable(ctx context.Context, conn *pgxpool.Conn, run func(ctx context.Context) error) error {
	qctx, qcancel := context.WithCancel(context.WithoutCancel(ctx))
	defer qcancel()
	done := make(chan struct{})
	var canceller sync.WaitGroup
	canceller.Go(func() {
		select {
		case <-done:
			return
		case <-ctx.Done():
		}
		// The cancel request goes on a connection of its own, in the
		// background (bounded by cancelTimeout): the caller's ctx has
		// ended, so it waits at most cancelGrace more for the statement
		// to end — a request that never reached the server (a silent
		// connection) cannot be cancelled there, and then the
		// connection is broken instead.
		pg := conn.Conn().PgConn()
		if !d.goBackground(func(life context.Context) {
			cctx, cancel := context.WithTimeout(life, cancelTimeout)
			defer cancel()
			if pg.CancelRequest(cctx) != nil {
				qcancel()
			}
		}) {
			qcancel()
			return
		}
		t := time.NewTimer(cancelGrace)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
			qcancel()
		}
	})
	err := run(qctx)
	close(done)
	canceller.Wait()
	return err
}

// wrapWait puts the error of a lock wait cut by ctx into shape: the ctx
// error, reachable with errors.Is.
func (d *advDriver) wrapWait(ctx context.Context, err error) error {
	cerr := context.Cause(ctx)
	if err == nil || errors.Is(err, cerr) {
		return cerr
	}
	return fmt.Errorf("%w (%v)", cerr, err)
}

// ping checks that conn's session is alive and is still the session pid.
func (d *advDriver) ping(ctx context.Context, conn *pgxpool.Conn, pid uint32) error {
	var got int64
	if err := conn.QueryRow(ctx, advPingSQL).Scan(&got); err != nil {
		return err
	}
	if uint32(got) != pid {
		return fmt.Errorf("the connection now talks to server session %d, not %d, which holds the lock (a transaction-pooling proxy?)", got, pid)
	}
	return nil
}

// discard closes a connection whose session may hold a lock or be in an
// unknown state: it is taken out of the pool and closed, which makes the
// server end the session and free its advisory locks.
func discard(conn *pgxpool.Conn) {
	c := conn.Hijack()
	ctx, cancel := context.WithTimeout(context.Background(), cancelTimeout)
	_ = c.Close(ctx)
	cancel()
}

// idleMargin is how long before the server may end a silent session the
// holder declares its lock lost: a clock rate difference of 1% plus 100ms.
func idleMargin(bound time.Duration) time.Duration { return bound/100 + 100*time.Millisecond }

// keepaliveLoop checks the entry's connection every keepalive interval (at
// most a third of the session's silence bound). A failed check ends the
// lock.
func (d *advDriver) keepaliveLoop(e *advEntry) {
	defer close(e.kaDone)
	t := time.NewTicker(max(time.Millisecond, min(d.keepalive, e.bound/3)))
	defer t.Stop()
	for {
		select {
		case <-e.stopKA:
			return
		case <-t.C:
		}
		if !d.check(e) {
			return
		}
	}
}

// check pings the pinned connection and reports whether its session is
// alive and still the one holding the lock; when it is not, the lock is
// declared lost. A ping without an answer is a loss too, once pingTimeout
// has passed or once the server may have ended the silent session; the
// holds are then told before the connection is closed, so the holder hears
// of the loss before the server can free the lock.
func (d *advDriver) check(e *advEntry) bool {
	e.connMu.Lock()
	defer e.connMu.Unlock()
	d.mu.Lock()
	if e.state != held {
		d.mu.Unlock()
		return false
	}
	deadline := e.lastOK.Add(e.bound - idleMargin(e.bound))
	d.mu.Unlock()
	sent := time.Now()
	wait := min(d.pingTimeout, deadline.Sub(sent))
	if wait <= 0 {
		d.lost(e, fmt.Errorf("no command succeeded within the session's silence bound %v: the server may have ended it", e.bound), nil)
		return false
	}
	pctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	res := make(chan error, 1)
	go func() { res <- d.ping(pctx, e.conn, e.pid) }()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case err := <-res:
		if err != nil {
			d.lost(e, err, nil)
			return false
		}
		d.mu.Lock()
		if sent.After(e.lastOK) {
			e.lastOK = sent
		}
		deadline = e.lastOK.Add(e.bound - idleMargin(e.bound))
		d.mu.Unlock()
		if time.Now().Before(deadline) {
			return true
		}
		d.lost(e, fmt.Errorf("the answer to a ping came too late to show the session outlived its silence bound %v", e.bound), nil)
	case <-t.C:
		var once sync.Once
		stopPing := func() { once.Do(func() { cancel(); <-res }) }
		d.lost(e, fmt.Errorf("no answer to a ping within %v", wait.Round(time.Millisecond)), stopPing)
		stopPing()
	}
	return false
}

// lost ends a held entry whose session failed: every hold is told, then
// beforeClose (if any) runs, and the connection is discarded. Its caller
// (check) holds e.connMu.
func (d *advDriver) lost(e *advEntry, cause error, beforeClose func()) {
	d.mu.Lock()
	if e.state != held {
		d.mu.Unlock()
		return
	}
	e.state = gone
	if d.entries[e.k] == e {
		delete(d.entries, e.k)
	}
	callbacks := make([]func(error), 0, len(e.locks))
	for _, f := range e.locks {
		if f != nil {
			callbacks = append(callbacks, f)
		}
	}
	clear(e.locks)
	d.mu.Unlock()
	err := fmt.Errorf("%w: the lock's session (backend pid %d) failed: %w", backend.ErrLockLost, e.pid, cause)
	for _, f := range callbacks {
		f(err)
	}
	if beforeClose != nil {
		beforeClose()
	}
	discard(e.conn)
}

// Close discards the connections of locks still held (distlock has released
// its leases before), which ends their sessions and so their locks; stops
// keepalives; and closes a URL-opened pool.
func (d *advDriver) Close() error {
	d.mu.Lock()
	d.closing = true
	var rest []*advEntry
	for _, e := range d.entries {
		if e.state == held {
			e.state = gone
			rest = append(rest, e)
		}
	}
	clear(d.entries)
	d.mu.Unlock()
	for _, e := range rest {
		close(e.stopKA)
		<-e.kaDone
		e.connMu.Lock()
		discard(e.conn)
		e.connMu.Unlock()
	}
	return d.shutdown()
}

// advLock is one hold of an advisory lock.
type advLock struct {
	d *advDriver
	e *advEntry
}

func (l *advLock) Token() uint64 { return l.e.token }

// ValidUntil implements backend.Deadliner: the moment the server may end the
// lock's silent session — the last command that succeeded on the connection
// plus the session's silence bound, less a margin.
func (l *advLock) ValidUntil() time.Time {
	l.d.mu.Lock()
	defer l.d.mu.Unlock()
	return l.e.lastOK.Add(l.e.bound - idleMargin(l.e.bound))
}

// holdErrLocked says why l is not a live hold. Callers hold d.mu.
func (l *advLock) holdErrLocked() error {
	if _, ok := l.e.locks[l]; ok && l.e.state == held {
		return nil
	}
	if l.e.state == gone {
		return fmt.Errorf("%w: the lock's session has ended", backend.ErrNotHeld)
	}
	return fmt.Errorf("%w: released", backend.ErrNotHeld)
}

// Refresh checks that the lock's session is alive (there is no TTL to
// extend): it returns ErrNotHeld when the lock is gone. A caller's ctx that
// ends first returns early; the check goes on and ends the lock if it
// fails.
func (l *advLock) Refresh(ctx context.Context, _ time.Duration) error {
	d, e := l.d, l.e
	d.mu.Lock()
	err := l.holdErrLocked()
	d.mu.Unlock()
	if err != nil {
		return err
	}
	res := make(chan bool, 1)
	if !d.goBackground(func(context.Context) { res <- d.check(e) }) {
		return backend.ErrClosed
	}
	select {
	case alive := <-res:
		d.mu.Lock()
		defer d.mu.Unlock()
		if err := l.holdErrLocked(); err != nil {
			if !alive {
				return fmt.Errorf("%w: the lock's session failed", backend.ErrLockLost)
			}
			return err
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", backend.ErrUnavailable, ctx.Err())
	}
}

// Release gives up one hold; the last one unlocks the advisory lock and
// returns the connection to the pool, or discards it (which ends the
// session and the lock) when the unlock fails or finds the lock not held.
func (l *advLock) Release(ctx context.Context) error {
	d, e := l.d, l.e
	d.mu.Lock()
	if err := l.holdErrLocked(); err != nil {
		d.mu.Unlock()
		return err
	}
	delete(e.locks, l)
	if len(e.locks) > 0 {
		d.mu.Unlock()
		return nil
	}
	e.state = gone
	if d.entries[e.k] == e {
		delete(d.entries, e.k)
	}
	d.mu.Unlock()

	close(e.stopKA)
	<-e.kaDone // an in-flight ping must finish first
	e.connMu.Lock()
	defer e.connMu.Unlock()
	var unlocked bool
	var all any
	err := e.conn.QueryRow(ctx, advUnlockSQL, e.id).Scan(&unlocked, &all)
	switch {
	case err == nil && unlocked:
		e.conn.Release()
		return nil
	case err == nil:
		discard(e.conn)
		return fmt.Errorf("%w: the session (backend pid %d) no longer held the lock", backend.ErrLockLost, e.pid)
	case ctx.Err() != nil:
		discard(e.conn)
		return fmt.Errorf("unlock interrupted, so the connection was closed and the server frees the lock: %w", d.wrap(ctx, err))
	default:
		discard(e.conn)
		return fmt.Errorf("%w: unlock failed, the lock ended with its session (backend pid %d): %w", backend.ErrLockLost, e.pid, err)
	}
}
