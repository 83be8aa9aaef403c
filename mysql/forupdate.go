package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distlock/distlock/backend"
)

// The forupdate-mode statements. Row kind 0 is the row locked FOR UPDATE;
// row kind 1 holds the fence counter, advanced on another connection while
// the kind-0 row is locked (so the token is committed before it is used).
const (
	fuLockNowaitSQL = `SELECT 1 FROM %[1]s WHERE key_hash = ? AND kind = 0 FOR UPDATE NOWAIT`
	fuLockWaitSQL   = `SELECT 1 FROM %[1]s WHERE key_hash = ? AND kind = 0 FOR UPDATE`
	fuCreateSQL     = `INSERT IGNORE INTO %[1]s (key_hash, kind, lock_key, fence) VALUES (?, 0, ?, 0)`
	fuFenceSQL      = `INSERT INTO %[1]s (key_hash, kind, lock_key, fence) VALUES (?, 1, ?, LAST_INSERT_ID(1))
ON DUPLICATE KEY UPDATE fence = LAST_INSERT_ID(fence + 1)`
)

const (
	// killTimeout bounds the KILL QUERY that stops a waiting statement.
	killTimeout = 2 * time.Second
	// cleanupTimeout bounds a ROLLBACK before a connection is discarded.
	cleanupTimeout = 2 * time.Second
	// createAttempts bounds the attempts to create a missing lock row
	// (each ends when the row exists; more are needed only if it is deleted
	// again meanwhile).
	createAttempts = 20
	// createBusyAfter is how long TryAcquire lets the INSERT that creates a
	// missing row wait: it waits only when another owner created and locked
	// the row in the meantime, and then the lock is busy.
	createBusyAfter = 500 * time.Millisecond
)

type fuDriver struct {
	*base
	keepalive   time.Duration
	pingTimeout time.Duration
	qNowait     string
	qWait       string
	qCreate     string
	qFence      string

	mu      sync.Mutex
	entries map[entryKey]*fuEntry
	pinned  int // connections held by locks and by acquisitions in progress
	closing bool

	noIdleTrx atomic.Bool // the server has no idle_*transaction_timeout (MySQL)
}

type entryKey struct{ key, owner string }

type entryState uint8

const (
	acquiring entryState = iota
	held
	gone
)

// fuEntry is one owner's lock on one key in this driver: one pinned
// connection with an open transaction, shared by the owner's nested holds.
type fuEntry struct {
	k      entryKey
	state  entryState
	ready  chan struct{} // closed when the state leaves acquiring
	conn   *sql.Conn
	connID int64
	token  uint64
	// idle is the session's idle limit (sessionInfo): the server ends the
	// session, and so the lock, after that long without a command. lastOK is when
	// the last command that succeeded on the connection was sent.
	idle   time.Duration
	lastOK time.Time
	locks  map[*fuLock]func(error) // live holds and their Lost callbacks
	stopKA chan struct{}
	kaDone chan struct{}
}

func newFUDriver(b *base, keepalive time.Duration) *fuDriver {
	return &fuDriver{
		base:        b,
		keepalive:   keepalive,
		pingTimeout: max(2*keepalive, 5*time.Second),
		qNowait:     fmt.Sprintf(fuLockNowaitSQL, b.table),
		qWait:       fmt.Sprintf(fuLockWaitSQL, b.table),
		qCreate:     fmt.Sprintf(fuCreateSQL, b.table),
		qFence:      fmt.Sprintf(fuFenceSQL, b.table),
		entries:     map[entryKey]*fuEntry{},
	}
}

func (d *fuDriver) Capabilities() backend.Capabilities {
	return backend.Capabilities{Fencing: true, Reentrant: true, Notify: true, SessionBound: true}
}

// TryAcquire locks the row with NOWAIT.
func (d *fuDriver) TryAcquire(ctx context.Context, req backend.Request) (backend.Lock, error) {
	return d.acquire(ctx, req, false)
}

// Acquire waits for the row lock inside the server. When ctx ends, the
// waiting statement is stopped with KILL QUERY and the connection is
// discarded.
func (d *fuDriver) Acquire(ctx context.Context, req backend.Request) (backend.Lock, error) {
	l, err := d.acquire(ctx, req, true)
	if err != nil && ctx.Err() != nil && !errors.Is(err, backend.ErrNotAcquired) {
		err = fmt.Errorf("%w: %w", backend.ErrNotAcquired, err)
	}
	return l, err
}

func (d *fuDriver) acquire(ctx context.Context, req backend.Request, wait bool) (backend.Lock, error) {
	if err := d.ready(ctx); err != nil {
		return nil, err
	}
	ek := entryKey{req.Key, req.Owner}
	var e *fuEntry
	for e == nil {
		d.mu.Lock()
		if d.closing {
			d.mu.Unlock()
			return nil, backend.ErrClosed
		}
		cur := d.entries[ek]
		switch {
		case cur != nil && cur.state == held:
			// Reentrant: the owner's connection already holds the row.
			l := &fuLock{d: d, e: cur}
			cur.locks[l] = req.Lost
			d.mu.Unlock()
			return l, nil
		case cur != nil:
			// The same owner is acquiring this key right now: nest on its
			// result rather than queue behind it in the server.
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
			if err := d.reserveLocked(); err != nil {
				d.mu.Unlock()
				return nil, err
			}
			e = &fuEntry{k: ek, state: acquiring, ready: make(chan struct{}), locks: map[*fuLock]func(error){}}
			d.entries[ek] = e
			d.mu.Unlock()
		}
	}

	p, err := d.lockOnServer(ctx, req.Key, wait)

	d.mu.Lock()
	defer d.mu.Unlock()
	close(e.ready)
	if err != nil {
		e.state = gone
		delete(d.entries, ek)
		d.pinned--
		return nil, err
	}
	e.state, e.conn, e.connID, e.token, e.idle, e.lastOK = held, p.conn, p.id, p.token, p.idle, p.sent
	l := &fuLock{d: d, e: e}
	e.locks[l] = req.Lost
	e.stopKA, e.kaDone = make(chan struct{}), make(chan struct{})
	go d.keepaliveLoop(e)
	return l, nil
}

// reserveLocked counts one more pinned connection, or fails at once when
// the pool could not serve it and still keep one connection free for the
// fence counter and KILL QUERY. Callers hold d.mu.
func (d *fuDriver) reserveLocked() error {
	if maxOpen := d.db.Stats().MaxOpenConnections; maxOpen > 0 && d.pinned >= maxOpen-1 {
		return fmt.Errorf("%w: every connection the pool may open is taken: %d locks are held or awaited on pinned connections and the pool's MaxOpenConns is %d (one is kept free for the fence counter and KILL QUERY); raise the pool size (URL parameter maxConns)",
			backend.ErrUnavailable, d.pinned, maxOpen)
	}
	d.pinned++
	return nil
}

// lockOnServer pins a connection, opens a transaction and locks the key's
// row in it, creating the row first if it does not exist. It then advances
// the fence on another connection and checks that the pinned connection is
// still alive, so the token is committed and was issued while the row lock
// was held. On any failure the connection is rolled back or discarded, never
// returned to the pool holding a lock.
func (d *fuDriver) lockOnServer(ctx context.Context, key string, wait bool) (*pinned, error) {
	conn, err := d.db.Conn(ctx)
	if err != nil {
		return nil, d.wrap(ctx, err)
	}
	h := keyHash(key)
	clean := true // the connection has no open transaction: it may go back to the pool
	fail := func(err error) (*pinned, error) {
		if clean {
			_ = conn.Close()
		} else {
			d.abandonConn(conn)
		}
		return nil, err
	}
	var connID int64
	needID := func() error {
		if connID != 0 {
			return nil
		}
		var err error
		connID, _, err = d.sessionInfo(ctx, conn)
		return err
	}
	// cancelled is the error for an acquisition given up because ctx ended.
	cancelled := func(err error) (*pinned, error) {
		clean = false
		return fail(fmt.Errorf("%w: %w", backend.ErrNotAcquired, d.wrapWait(ctx, err)))
	}

	created := 0
	for {
		if _, err := conn.ExecContext(ctx, "START TRANSACTION"); err != nil {
			clean = false
			return fail(d.wrap(ctx, err))
		}
		clean = false
		found, err := d.lockRow(ctx, conn, d.qNowait, h)
		if isLockBusy(err) {
			if !wait {
				if rerr := rollback(ctx, conn); rerr == nil {
					clean = true
				}
				return fail(backend.Busy(0))
			}
			if err := needID(); err != nil {
				return fail(d.wrap(ctx, err))
			}
			_, err = d.killable(ctx, connID, 0, func(qctx context.Context) error {
				found, err = d.lockRow(qctx, conn, d.qWait, h)
				return err
			})
			if ctx.Err() != nil {
				return cancelled(err)
			}
			if mysqlCode(err) == erLockWaitTimeout {
				// innodb_lock_wait_timeout: the statement was rolled
				// back, the transaction is still open. Start afresh.
				if rerr := rollback(ctx, conn); rerr != nil {
					return fail(d.wrap(ctx, rerr))
				}
				clean = true
				continue
			}
		}
		if mysqlCode(err) == erLockDeadlock {
			// InnoDB rolled the transaction back. Unlikely for one row;
			// try again.
			clean = true
			continue
		}
		if err != nil {
			return fail(d.wrap(ctx, err))
		}
		if found {
			break
		}

		// No row yet. End this transaction (its locking read of the
		// missing row holds a gap lock) and create the row with an
		// autocommit INSERT IGNORE. That INSERT waits if someone else
		// created the row meanwhile and holds it locked: TryAcquire bounds
		// the wait and reports the lock busy, Acquire waits for the holder
		// like the locking read would.
		if err := rollback(ctx, conn); err != nil {
			return fail(d.wrap(ctx, err))
		}
		clean = true
		if created++; created > createAttempts {
			return fail(fmt.Errorf("%w: the lock row was not created after %d attempts", backend.ErrUnavailable, createAttempts))
		}
		if err := needID(); err != nil {
			clean = false
			return fail(d.wrap(ctx, err))
		}
		limit := time.Duration(0)
		if !wait {
			limit = createBusyAfter
		}
		timedOut, err := d.killable(ctx, connID, limit, func(qctx context.Context) error {
			_, err := conn.ExecContext(qctx, d.qCreate, h[:], []byte(key))
			return err
		})
		switch {
		case ctx.Err() != nil:
			return cancelled(err)
		case timedOut:
			clean = false
			return fail(backend.Busy(0))
		case err != nil && !isLockBusy(err) && mysqlCode(err) != erLockDeadlock:
			clean = false
			return fail(d.wrap(ctx, err))
		}
	}

	// The row is locked. Advance the fence on another connection: it
	// commits at once, so a token is never handed out twice, even when this
	// connection dies before COMMIT.
	res, err := d.db.ExecContext(ctx, d.qFence, h[:], []byte(key))
	if err != nil {
		return fail(d.wrap(ctx, err))
	}
	tok, err := res.LastInsertId()
	if err != nil || tok <= 0 {
		return fail(fmt.Errorf("%w: fence update returned %d: %v", backend.ErrUnavailable, tok, err))
	}
	// The pinned connection must have held the row lock when the token
	// was issued: if it is alive now, it was alive then.
	sent := time.Now()
	connID, idle, err := d.sessionInfo(ctx, conn)
	if err != nil {
		return fail(fmt.Errorf("%w: the lock's connection failed while the fence was issued: %w", backend.ErrUnavailable, d.wrap(ctx, err)))
	}
	return &pinned{conn: conn, id: connID, token: uint64(tok), idle: idle, sent: sent}, nil
}

// pinned is a connection whose transaction holds a row lock.
type pinned struct {
	conn  *sql.Conn
	id    int64
	token uint64
	idle  time.Duration // the session's idle limit (sessionInfo)
	sent  time.Time     // when its last successful command was sent
}

// lockRow runs a locking read and reports whether the row exists (and is
// now locked).
func (d *fuDriver) lockRow(ctx context.Context, conn *sql.Conn, q string, h [32]byte) (bool, error) {
	var one int
	err := conn.QueryRowContext(ctx, q, h[:]).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

// killable runs a statement that may wait for a row lock on the pinned
// connection connID. The statement does not see ctx — go-sql-driver would
// close the socket, and the server would leave the orphaned statement queued
// for the lock — instead, when ctx ends or limit (if positive) passes, KILL
// QUERY from another connection stops it (and only if that fails is the
// socket closed). timedOut reports that limit stopped it. After a stop the
// caller must discard the connection.
func (d *fuDriver) killable(ctx context.Context, connID int64, limit time.Duration, run func(ctx context.Context) error) (timedOut bool, err error) {
	qctx, qcancel := context.WithCancel(context.WithoutCancel(ctx))
	defer qcancel()
	var timer <-chan time.Time
	if limit > 0 {
		t := time.NewTimer(limit)
		defer t.Stop()
		timer = t.C
	}
	done := make(chan struct{})
	var killer sync.WaitGroup
	var fired bool
	killer.Go(func() {
		select {
		case <-done:
			return
		case <-ctx.Done():
		case <-timer:
			fired = true
		}
		kctx, cancel := context.WithTimeout(context.Background(), killTimeout)
		_, err := d.db.ExecContext(kctx, "KILL QUERY "+strconv.FormatInt(connID, 10))
		cancel()
		if err != nil {
			qcancel()
		}
	})
	err = run(qctx)
	close(done)
	killer.Wait()
	return fired, err
}

// wrapWait puts the error of a lock wait cut by ctx into shape: the ctx
// error, reachable with errors.Is.
func (d *fuDriver) wrapWait(ctx context.Context, err error) error {
	cerr := context.Cause(ctx)
	if err == nil || errors.Is(err, cerr) {
		return cerr
	}
	return fmt.Errorf("%w (%v)", cerr, err)
}

func rollback(ctx context.Context, conn *sql.Conn) error {
	_, err := conn.ExecContext(ctx, "ROLLBACK")
	return err
}

// maxIdleSeconds caps the idle limit (the documented maximum of
// wait_timeout and of MariaDB's idle_*transaction_timeout: 31536000 s, a
// year).
const maxIdleSeconds = 365 * 24 * 3600

// idleMargin is how long before the server's idle limit may end a silent
// session the holder declares its lock lost: a rate difference of 1% between
// the clocks plus 100ms.
func idleMargin(idle time.Duration) time.Duration { return idle/100 + 100*time.Millisecond }

// abandonConn rolls back (bounded) and discards a connection that may hold a
// lock or be in an unknown state: it is closed, never returned to the pool,
// so no other goroutine can run inside its transaction. Closing the
// connection makes the server roll back whatever the ROLLBACK did not.
func (d *fuDriver) abandonConn(conn *sql.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	_ = rollback(ctx, conn)
	cancel()
	discard(conn)
}

// discard closes conn's driver connection instead of returning it to the
// pool.
func discard(conn *sql.Conn) {
	_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	_ = conn.Close()
}

// keepaliveLoop pings the entry's connection every keepalive interval (at
// most a third of the session's idle limit). The pings keep the idle limits
// from ending an idle holder's session; a failed ping (the connection was
// killed, timed out or broke) ends the lock.
func (d *fuDriver) keepaliveLoop(e *fuEntry) {
	defer close(e.kaDone)
	t := time.NewTicker(min(d.keepalive, e.idle/3))
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

// check pings the pinned connection and reports whether it is alive; when it
// is not, the lock is declared lost. It never uses a caller's context: a
// cancelled ping would close the connection and so drop the lock.
//
// A ping without an answer is a loss too, once pingTimeout has passed or
// once the server may have ended the silent session by its idle limit
// (counted from the last command that succeeded, less a margin). Then the
// holds are told before the connection is closed: so the holder hears of
// the loss before the server can free the lock, both when closing the
// connection frees it and when an idle limit does.
func (d *fuDriver) check(e *fuEntry) bool {
	d.mu.Lock()
	deadline := e.lastOK.Add(e.idle - idleMargin(e.idle))
	d.mu.Unlock()
	sent := time.Now()
	wait := min(d.pingTimeout, deadline.Sub(sent))
	if wait <= 0 {
		d.lost(e, fmt.Errorf("no command succeeded within the session's idle limit %v: the server may have ended it", e.idle), nil)
		return false
	}
	pctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	res := make(chan error, 1)
	go func() { res <- e.conn.PingContext(pctx) }()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case err := <-res:
		if err != nil {
			d.lost(e, err, nil)
			return false
		}
		// The answer proves the session alive when the server read the
		// ping, which may be as early as sent. If it is read only now
		// (this process was frozen meanwhile), an idle limit may have ended
		// the session since.
		d.mu.Lock()
		if sent.After(e.lastOK) {
			e.lastOK = sent
		}
		deadline = e.lastOK.Add(e.idle - idleMargin(e.idle))
		d.mu.Unlock()
		if time.Now().Before(deadline) {
			return true
		}
		d.lost(e, fmt.Errorf("the answer to a ping came too late to show the session outlived its idle limit %v", e.idle), nil)
	case <-t.C:
		var once sync.Once
		stopPing := func() { once.Do(func() { cancel(); <-res }) }
		d.lost(e, fmt.Errorf("no answer to a ping within %v", wait.Round(time.Millisecond)), stopPing)
		stopPing()
	}
	return false
}

// lost ends a held entry whose connection failed: every hold is told, then
// beforeClose (if any) runs, and the connection is discarded.
func (d *fuDriver) lost(e *fuEntry, cause error, beforeClose func()) {
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
	err := fmt.Errorf("%w: the lock's connection (id %d) failed: %w", backend.ErrLockLost, e.connID, cause)
	for _, f := range callbacks {
		f(err)
	}
	if beforeClose != nil {
		beforeClose()
	}
	discard(e.conn)
	d.mu.Lock()
	d.pinned--
	d.mu.Unlock()
}

// Close rolls back and discards the connections of locks still held
// (distlock has released its leases before), stops keepalives and closes a
// URL-opened pool.
func (d *fuDriver) Close() error {
	d.mu.Lock()
	d.closing = true
	var rest []*fuEntry
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
		d.abandonConn(e.conn)
		d.mu.Lock()
		d.pinned--
		d.mu.Unlock()
	}
	return d.shutdown()
}

// fuLock is one hold of a forupdate lock.
type fuLock struct {
	d *fuDriver
	e *fuEntry
}

func (l *fuLock) Token() uint64 { return l.e.token }

// ValidUntil implements backend.Deadliner: the moment the server may end the
// lock's silent session — the last command that succeeded on the
// connection plus the session's idle limit, less a margin — so a holder
// resumed from a pause sees its loss before the keepalive has run.
func (l *fuLock) ValidUntil() time.Time {
	l.d.mu.Lock()
	defer l.d.mu.Unlock()
	return l.e.lastOK.Add(l.e.idle - idleMargin(l.e.idle))
}

// holdErr says why l is not a live hold. Callers hold d.mu.
func (l *fuLock) holdErrLocked() error {
	if _, ok := l.e.locks[l]; ok && l.e.state == held {
		return nil
	}
	if l.e.state == gone {
		return fmt.Errorf("%w: the lock's connection or transaction has ended", backend.ErrNotHeld)
	}
	return fmt.Errorf("%w: released", backend.ErrNotHeld)
}

// Refresh checks that the lock's connection is alive (there is no TTL to
// extend): it returns ErrNotHeld when the lock is gone. A caller's ctx that
// ends first returns early; the check goes on and ends the lock if it fails.
func (l *fuLock) Refresh(ctx context.Context, _ time.Duration) error {
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
				return fmt.Errorf("%w: the lock's connection failed", backend.ErrLockLost)
			}
			return err
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", backend.ErrUnavailable, ctx.Err())
	}
}

// Release gives up one hold; the last one commits the transaction, which
// frees the row for the next waiter, and returns the connection to the pool.
// If the commit fails the connection is discarded, which ends the lock too.
func (l *fuLock) Release(ctx context.Context) error {
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
	<-e.kaDone // an in-flight ping must finish: cancelling it would close the connection
	_, err := e.conn.ExecContext(ctx, "COMMIT")
	if err == nil {
		err = e.conn.Close() // back to the pool, with no transaction open
	} else {
		discard(e.conn)
	}
	d.mu.Lock()
	d.pinned--
	d.mu.Unlock()
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return fmt.Errorf("commit interrupted, so the connection was dropped and the server rolls the lock back: %w", d.wrap(ctx, err))
	default:
		return fmt.Errorf("%w: commit failed, the lock ended with its connection (id %d): %w", backend.ErrLockLost, e.connID, err)
	}
}
