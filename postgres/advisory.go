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
	"github.com/distlock/distlock/internal/sqllock"
)

// The advisory-mode statements. The lock statements take the lock and, only
// when it was granted, advance the key's fence in the same statement (a
// data-modifying CTE gated on the lock's result); the UPDATE follows the
// row's newest committed version even when the statement waited (READ
// COMMITTED re-check), so fences never repeat. The same UPDATE records the
// holder (owner, metadata, one hold, backend pid) for Inspect and
// ForceRelease. Arguments: lock id, key, owner, metadata.
const (
	advLockSQL = `WITH l AS MATERIALIZED (%[2]s),
u AS (UPDATE %[1]s SET fence = fence + 1, owner = $3, metadata = $4, holds = 1, pid = pg_backend_pid()
  WHERE lock_id = $1 AND lock_key = $2 AND (SELECT ok FROM l) RETURNING fence)
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

// advDriver is advisory mode: the SQL of a session advisory lock on a
// pinned connection (sqllock.Server); the pinned-lock bookkeeping is its
// sqllock.Table.
type advDriver struct {
	*base
	t           *sqllock.Table[*advConn]
	qTry, qWait string
	qRegister   string
	qLookup     string

	idMu sync.Mutex
	ids  map[string]int64
}

// advConn is a pinned connection whose session holds the advisory lock id.
type advConn struct {
	conn *pgxpool.Conn
	pid  uint32
	id   int64
}

func newAdvDriver(b *base, keepalive time.Duration) *advDriver {
	d := &advDriver{
		base:      b,
		qTry:      fmt.Sprintf(advLockSQL, b.Table, "SELECT pg_try_advisory_lock($1::bigint) AS ok"),
		qWait:     fmt.Sprintf(advLockSQL, b.Table, "SELECT true AS ok FROM (SELECT pg_advisory_lock($1::bigint)) w"),
		qRegister: fmt.Sprintf(advRegisterSQL, b.Table),
		qLookup:   fmt.Sprintf(advLookupSQL, b.Table),
		ids:       map[string]int64{},
	}
	d.t = sqllock.NewTable[*advConn](d, b.Base, sqllock.TableConfig{Keepalive: keepalive, Noun: "session", IDName: "backend pid"})
	return d
}

func (d *advDriver) Capabilities() backend.Capabilities {
	return backend.Capabilities{Fencing: true, Reentrant: true, Notify: true, SessionBound: true}
}

// TryAcquire runs pg_try_advisory_lock.
func (d *advDriver) TryAcquire(ctx context.Context, req backend.Request) (backend.Lock, error) {
	if err := d.ready(ctx); err != nil {
		return nil, err
	}
	return d.t.Acquire(ctx, req, false)
}

// Acquire waits in pg_advisory_lock inside the server. When ctx ends, the
// waiting statement is cancelled with the protocol's cancel request and the
// connection is closed.
func (d *advDriver) Acquire(ctx context.Context, req backend.Request) (backend.Lock, error) {
	if err := d.ready(ctx); err != nil {
		return nil, err
	}
	return d.t.Acquire(ctx, req, true)
}

// Close discards the connections of locks still held (distlock has released
// its leases before), which ends their sessions and so their locks; stops
// keepalives; and closes a URL-opened pool.
func (d *advDriver) Close() error {
	d.t.Close()
	return d.Shutdown()
}

// Lock implements sqllock.Server: it takes a connection out of the pool and
// takes key's advisory lock in its session, advancing the fence in the same
// statement. On any failure after the lock statement was sent, the
// connection is closed — never returned to the pool — which frees whatever
// the session held.
func (d *advDriver) Lock(ctx context.Context, req backend.Request, wait bool) (sqllock.Pinned[*advConn], error) {
	id, err := d.lockID(ctx, req.Key)
	if err != nil {
		return sqllock.Pinned[*advConn]{}, err
	}
	for {
		p, retry, err := d.lockOnce(ctx, req, id, wait)
		if !retry || ctx.Err() != nil {
			return p, err
		}
	}
}

// lockOnce is one attempt of Lock; retry reports a wait ended by a
// server-side timeout (statement_timeout, lock_timeout) while ctx lives.
func (d *advDriver) lockOnce(ctx context.Context, req backend.Request, id int64, wait bool) (p sqllock.Pinned[*advConn], retry bool, err error) {
	key := req.Key
	owner, md := []byte(req.Owner), []byte(req.Metadata)
	conn, err := d.pool.Acquire(ctx)
	if err != nil {
		return p, false, failed(ctx, err)
	}
	info, err := d.session(ctx, conn)
	if err != nil {
		discard(conn)
		return p, false, failed(ctx, err)
	}
	var ok *bool
	var fence *int64
	var pid uint32
	sent := d.Now()
	if wait {
		err = d.cancellable(ctx, conn, func(qctx context.Context) error {
			return conn.QueryRow(qctx, d.qWait, id, []byte(key), owner, md).Scan(&ok, &fence, &pid)
		})
	} else {
		err = conn.QueryRow(ctx, d.qTry, id, []byte(key), owner, md).Scan(&ok, &fence, &pid)
	}
	switch {
	case err != nil && wait && ctx.Err() != nil:
		discard(conn)
		return p, false, sqllock.WaitCut(ctx, err)
	case err != nil:
		discard(conn)
		c := pgCode(err)
		return p, wait && (c == "57014" || c == "55P03"), failed(ctx, err)
	case ok == nil || pid != info.pid:
		discard(conn)
		return p, false, fmt.Errorf("%w: the lock statement ran in another server session (backend pid %d, expected %d): a transaction-pooling proxy such as pgbouncer?", backend.ErrUnavailable, pid, info.pid)
	case !*ok:
		conn.Release() // the lock was not granted: the session holds nothing
		return p, false, backend.Busy(0)
	case fence == nil || *fence <= 0:
		discard(conn)
		d.forgetID(key)
		return p, false, fmt.Errorf("%w: the advisory table %s has no row for the key's lock id (deleted?)", backend.ErrUnavailable, d.Table)
	}
	if wait {
		// The session was busy while it waited, so silence counts from
		// now: prove it alive with one more command.
		sent = d.Now()
		if err := d.ping(ctx, conn, info.pid); err != nil {
			discard(conn)
			return p, false, fmt.Errorf("the lock's connection failed after the lock was granted: %w", failed(ctx, err))
		}
	}
	c := &advConn{conn: conn, pid: info.pid, id: id}
	return sqllock.Pinned[*advConn]{Conn: c, ID: int64(info.pid), Token: uint64(*fence), Bound: info.bound, Sent: sent}, false, nil
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
		err = d.pool.QueryRow(ctx, d.qRegister, lockID(d.Name, key, i), []byte(key)).Scan(&id)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("%w: no free advisory lock id for the key after %d candidates", backend.ErrUnavailable, probeLimit)
	}
	if err != nil {
		return 0, failed(ctx, err)
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

// cancellable runs a statement that may wait for a lock on conn. When ctx
// ends, a cancel request stops it in the server, within cancelGrace, or the
// connection is broken. The caller must then discard the connection.
func (d *advDriver) cancellable(ctx context.Context, conn *pgxpool.Conn, run func(ctx context.Context) error) error {
	_, err := sqllock.Stoppable(ctx, 0, cancelGrace, func(abort func()) {
		pg := conn.Conn().PgConn()
		if !d.Go(func(life context.Context) {
			cctx, cancel := context.WithTimeout(life, cancelTimeout)
			defer cancel()
			if pg.CancelRequest(cctx) != nil {
				abort()
			}
		}) {
			abort()
		}
	}, run)
	return err
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

// Ping implements sqllock.Server: the session is alive and still the one
// that took the lock.
func (d *advDriver) Ping(ctx context.Context, c *advConn) error { return d.ping(ctx, c.conn, c.pid) }

// Unlock implements sqllock.Server: it unlocks the advisory lock and
// returns the connection to the pool, or discards it (which ends the
// session and the lock) when the unlock fails or finds the lock not held.
func (d *advDriver) Unlock(ctx context.Context, p *sqllock.Pinned[*advConn]) error {
	c := p.Conn
	var unlocked bool
	var all any
	err := c.conn.QueryRow(ctx, advUnlockSQL, c.id).Scan(&unlocked, &all)
	switch {
	case err == nil && unlocked:
		c.conn.Release()
		return nil
	case err == nil:
		discard(c.conn)
		return fmt.Errorf("%w: the session (backend pid %d) no longer held the lock", backend.ErrLockLost, c.pid)
	case ctx.Err() != nil:
		discard(c.conn)
		return fmt.Errorf("unlock interrupted, so the connection was closed and the server frees the lock: %w", failed(ctx, err))
	default:
		discard(c.conn)
		return fmt.Errorf("%w: unlock failed, the lock ended with its session (backend pid %d): %w", backend.ErrLockLost, c.pid, err)
	}
}

// Discard implements sqllock.Server.
func (d *advDriver) Discard(c *advConn) { discard(c.conn) }

// Abandon implements sqllock.Server: closing the connection ends the
// session and so its locks.
func (d *advDriver) Abandon(c *advConn) { discard(c.conn) }

// discard closes a connection whose session may hold a lock or be in an
// unknown state: it is taken out of the pool and closed, which makes the
// server end the session and free its advisory locks.
func discard(conn *pgxpool.Conn) {
	c := conn.Hijack()
	ctx, cancel := context.WithTimeout(context.Background(), cancelTimeout)
	_ = c.Close(ctx)
	cancel()
}
