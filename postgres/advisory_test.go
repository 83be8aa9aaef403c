package postgres_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/internal/testkit/sqltest"
	"github.com/distlock/distlock/postgres"
)

// advisoryLocker opens an advisory Locker by URL with a fast keepalive.
func advisoryLocker(t *testing.T, url string) *distlock.Locker {
	t.Helper()
	l, err := distlock.Open(ctxT(t, 30*time.Second), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// waitFor polls cond until it holds or d has passed.
var waitFor = sqltest.Until

// advisoryPIDs lists the backend pids holding (granted) or awaiting (not
// granted) an advisory lock.
func advisoryPIDs(ctx context.Context, t *testing.T, admin *pgxpool.Pool, granted bool) []int32 {
	t.Helper()
	rows, err := admin.Query(ctx, "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted = $1", granted)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var pids []int32
	for rows.Next() {
		var pid int32
		if err := rows.Scan(&pid); err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
	}
	return pids
}

// pg_terminate_backend of the holder's session: the holder's lease ends
// (Done closes with ErrLockLost) and a waiter blocked in the server gets the
// lock with a larger fencing token.
func TestTerminateHolder(t *testing.T) {
	srv := server(t)
	admin := openPool(t, srv, nil)
	table := uniqueTable("term")
	a := mustNew(t, openPool(t, srv, nil), postgres.WithMode(postgres.ModeAdvisory), postgres.WithTable(table),
		postgres.WithCreateTable(true), postgres.WithKeepalive(100*time.Millisecond))
	defer a.Close()
	b := advisoryLocker(t, pgURL(srv, "mode=advisory&table="+table))
	ctx := ctxT(t, time.Minute)
	lease, err := a.TryAcquire(ctx, "term/key")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *distlock.Lease, 1)
	go func() {
		l, err := b.Acquire(ctx, "term/key")
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	if !waitFor(10*time.Second, func() bool { return len(advisoryPIDs(ctx, t, admin, false)) == 1 }) {
		t.Fatal("the waiter is not waiting in the server")
	}
	pid, ok := postgres.PinnedPID(a, "term/key")
	if !ok {
		t.Fatal("no pinned session for the held key")
	}
	if err := terminate(ctx, admin, pid); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lease.Done():
		if !errors.Is(lease.Err(), distlock.ErrLockLost) {
			t.Errorf("holder's Err after its session was terminated: %v", lease.Err())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the holder's Done did not close after its session was terminated")
	}
	select {
	case l := <-got:
		if l == nil {
			t.Fatal("the waiter did not get the lock")
		}
		if l.Token() <= lease.Token() {
			t.Errorf("waiter's token %d not above the terminated holder's %d", l.Token(), lease.Token())
		}
		if err := l.Release(ctx); err != nil {
			t.Error(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter did not acquire after the holder's session ended")
	}
}

// A server restart ends every advisory lock: the holder's lease ends, and
// after the restart the lock is free and the next token is larger (the
// counter row survived).
func TestServerRestartAdvisory(t *testing.T) {
	conformance.Parallel(t)
	srv := ownServer(t)
	url := pgURL(srv, "mode=advisory&keepalive=100ms&table="+uniqueTable("restart"))
	a := advisoryLocker(t, url)
	ctx := ctxT(t, 2*time.Minute)
	lease, err := a.TryAcquire(ctx, "restart/key")
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lease.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the holder's Done did not close when the server died")
	}
	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	b := advisoryLocker(t, url)
	var next *distlock.Lease
	if !waitFor(20*time.Second, func() bool {
		next, err = b.TryAcquire(ctx, "restart/key")
		return err == nil
	}) {
		t.Fatalf("TryAcquire after the restart: %v", err)
	}
	if next.Token() <= lease.Token() {
		t.Errorf("token after restart %d, before %d: not increasing", next.Token(), lease.Token())
	}
	_ = next.Release(ctx)
}

// An Acquire cancelled while it waits in pg_advisory_lock leaves nothing:
// its wait is gone from pg_locks at once, and when the holder releases,
// the lock is free (the cancelled waiter never got it).
func TestCancelledWaitLeavesNoLock(t *testing.T) {
	srv := server(t)
	admin := openPool(t, srv, nil)
	url := pgURL(srv, "mode=advisory&table="+uniqueTable("cancel"))
	a, b := advisoryLocker(t, url), advisoryLocker(t, url)
	ctx := ctxT(t, time.Minute)
	lease, err := a.TryAcquire(ctx, "cancel/key")
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := b.Acquire(wctx, "cancel/key")
		done <- err
	}()
	if !waitFor(10*time.Second, func() bool { return len(advisoryPIDs(ctx, t, admin, false)) == 1 }) {
		t.Fatal("the waiter is not waiting in the server")
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, distlock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled Acquire: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the cancelled Acquire did not return")
	}
	if !waitFor(5*time.Second, func() bool { return len(advisoryPIDs(ctx, t, admin, false)) == 0 }) {
		t.Errorf("the cancelled wait is still queued in the server: %v", advisoryPIDs(ctx, t, admin, false))
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if pids := advisoryPIDs(ctx, t, admin, true); len(pids) != 0 {
		t.Errorf("advisory locks held after the release and the cancelled wait: %v", pids)
	}
	l, err := b.TryAcquire(ctx, "cancel/key")
	if err != nil {
		t.Fatalf("the lock is not free after the cancelled wait: %v", err)
	}
	_ = l.Release(ctx)
}

// No connection that goes back to the pool holds an advisory lock: after
// releases, nested releases, cancelled waits and busy attempts, every idle
// connection of the Locker's pool holds nothing.
func TestPooledConnectionsHoldNoLock(t *testing.T) {
	srv := server(t)
	admin := openPool(t, srv, nil)
	pool := openPool(t, srv, nil)
	table := uniqueTable("pooled")
	l := mustNew(t, pool, postgres.WithMode(postgres.ModeAdvisory), postgres.WithTable(table), postgres.WithCreateTable(true))
	defer l.Close()
	other := mustNew(t, openPool(t, srv, nil), postgres.WithMode(postgres.ModeAdvisory), postgres.WithTable(table), postgres.WithCreateTable(true))
	defer other.Close()
	ctx := ctxT(t, time.Minute)
	blocker, err := other.TryAcquire(ctx, "pooled/busy")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		a, err := l.TryAcquire(ctx, "pooled/a", distlock.WithOwner("o"))
		if err != nil {
			t.Fatal(err)
		}
		n, err := l.TryAcquire(ctx, "pooled/a", distlock.WithOwner("o"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.TryAcquire(ctx, "pooled/busy"); !errors.Is(err, distlock.ErrNotAcquired) {
			t.Fatalf("TryAcquire of a held key: %v", err)
		}
		wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		if _, err := l.Acquire(wctx, "pooled/busy"); !errors.Is(err, distlock.ErrNotAcquired) {
			t.Fatalf("Acquire of a held key: %v", err)
		}
		cancel()
		if err := n.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := a.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	idle := pool.AcquireAllIdle(ctx)
	if len(idle) == 0 {
		t.Fatal("no idle connection in the pool")
	}
	for _, c := range idle {
		var n int
		if err := admin.QueryRow(ctx, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = $1", int32(c.Conn().PgConn().PID())).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Errorf("pooled connection (backend %d) holds %d advisory locks", c.Conn().PgConn().PID(), n)
		}
		c.Release()
	}
	_ = blocker.Release(ctx)
}

// Refreshes racing a Release (and each other) never touch a connection
// that went back to the pool or use one connection at once.
func TestRefreshDuringRelease(t *testing.T) {
	srv := server(t)
	l := mustNew(t, openPool(t, srv, nil), postgres.WithMode(postgres.ModeAdvisory), postgres.WithTable(uniqueTable("refrel")), postgres.WithCreateTable(true))
	defer l.Close()
	ctx := ctxT(t, time.Minute)
	for i := 0; i < 50; i++ {
		lease, err := l.TryAcquire(ctx, "refrel/key")
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		var wg sync.WaitGroup
		for g := 0; g < 3; g++ {
			wg.Go(func() {
				for {
					select {
					case <-done:
						return
					default:
					}
					if err := lease.Refresh(ctx, time.Second); err != nil && !errors.Is(err, distlock.ErrNotHeld) {
						t.Errorf("Refresh: %v", err)
						return
					}
				}
			})
		}
		time.Sleep(time.Duration(i%5) * time.Millisecond)
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
		close(done)
		wg.Wait()
	}
}

// The session's silence bound comes from the server's settings: with
// idle_session_timeout=2500ms (or TCP keepalives giving up sooner), the
// lease's deadline is within that bound of the last command, and the
// keepalive — capped at a third of the bound although WithKeepalive asks
// for a minute — keeps the session, and so the lock, alive well past it.
func TestSessionBound(t *testing.T) {
	t.Parallel() // its subtests: conformance.Parallel
	srv := server(t)
	admin := openPool(t, srv, nil)
	table := uniqueTable("bound")
	for name, params := range map[string]map[string]string{
		"idle_session_timeout": {"idle_session_timeout": "2500"},
		"tcp_keepalives":       {"tcp_keepalives_idle": "1", "tcp_keepalives_interval": "1", "tcp_keepalives_count": "1"},
	} {
		t.Run(name, func(t *testing.T) {
			conformance.Parallel(t)
			table := table + "_" + name // heldAdvisory counts the table's locks
			l := mustNew(t, openPool(t, srv, params), postgres.WithMode(postgres.ModeAdvisory), postgres.WithTable(table),
				postgres.WithCreateTable(true), postgres.WithKeepalive(time.Minute))
			defer l.Close()
			ctx := ctxT(t, time.Minute)
			lease, err := l.TryAcquire(ctx, "bound/"+name)
			if err != nil {
				t.Fatal(err)
			}
			if left := time.Until(lease.Deadline()); left <= 0 || left > 2500*time.Millisecond {
				t.Errorf("deadline %v ahead, want within the 2.5s bound", left)
			}
			time.Sleep(4 * time.Second)
			if err := lease.Err(); err != nil {
				t.Fatalf("the lease ended although its keepalive ran: %v", err)
			}
			if left := time.Until(lease.Deadline()); left <= 0 {
				t.Errorf("deadline not moved forward by the keepalive: %v", left)
			}
			held, err := heldAdvisory(ctx, admin, table)
			if err != nil || len(held) != 1 {
				t.Errorf("held on the server after 4s: %q (%v)", held, err)
			}
			if err := lease.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}
