package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/internal/testkit/netfault"
	"github.com/distlock/distlock/internal/testkit/slack"
	"github.com/distlock/distlock/internal/testkit/sqltest"
	"github.com/distlock/distlock/mysql"
)

func fuLocker(t testing.TB, db *sql.DB, table string, opts ...mysql.Option) *distlock.Locker {
	t.Helper()
	l := mustNew(t, db, append([]mysql.Option{mysql.WithMode(mysql.ModeForUpdate), mysql.WithTable(table)}, opts...)...)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func killConn(t testing.TB, admin *sql.DB, id int64) {
	t.Helper()
	if _, err := admin.Exec(fmt.Sprintf("KILL CONNECTION %d", id)); err != nil {
		t.Fatalf("KILL CONNECTION %d: %v", id, err)
	}
}

// lockWaits counts the locking reads running (waiting for a row lock) on
// connections other than the caller's.
func lockWaits(t testing.TB, admin *sql.DB) int {
	t.Helper()
	var n int
	if err := admin.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE '%FOR UPDATE%' AND ID <> CONNECTION_ID()").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// innodbTrxCache is how long the server answers from a cache of
// information_schema.INNODB_TRX after a read of it refreshed the cache
// (InnoDB's TRX_I_S_CACHE_MIN_UPDATE_INTERVAL, 0.1s): within it, a read
// lists transactions that have ended since.
const innodbTrxCache = 100 * time.Millisecond

// openTrx counts the open InnoDB transactions of connections other than
// the caller's, as of its call: it first waits out innodbTrxCache, so that
// the cache is refreshed after the call at the latest.
func openTrx(t testing.TB, admin *sql.DB) int {
	t.Helper()
	time.Sleep(innodbTrxCache + 10*time.Millisecond)
	return openTrxCached(t, admin)
}

// openTrxCached counts them from the cache as it is.
func openTrxCached(t testing.TB, admin *sql.DB) int {
	t.Helper()
	var n int
	if err := admin.QueryRow("SELECT COUNT(*) FROM information_schema.INNODB_TRX WHERE trx_mysql_thread_id <> CONNECTION_ID()").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Round trips of an uncontended forupdate acquisition: START TRANSACTION,
// the NOWAIT locking read, the fence (committed on another connection) and
// the liveness check of the pinned connection; release is one COMMIT.
func TestForUpdateRoundTrips(t *testing.T) {
	srv := server(t)
	w := &wire{}
	l := fuLocker(t, wiredDB(t, srv, w), uniqueTable("furt"))
	ctx := ctxT(t, time.Minute)
	lease, err := l.TryAcquire(ctx, "rt") // creates table and row
	if err != nil {
		t.Fatal(err)
	}
	_ = lease.Release(ctx)
	for _, op := range []string{"TryAcquire", "Acquire"} {
		w.reset()
		if op == "Acquire" {
			lease, err = l.Acquire(ctx, "rt")
		} else {
			lease, err = l.TryAcquire(ctx, "rt")
		}
		if err != nil {
			t.Fatal(err)
		}
		acq, q := w.roundTrips(), w.queries()
		w.reset()
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
		rel := w.roundTrips()
		t.Logf("%s: %d round trips %.80q; Release: %d %q", op, acq, q, rel, w.queries())
		if acq != 4 || rel != 1 {
			t.Errorf("%s: %d+%d round trips, want 4+1", op, acq, rel)
		}
	}
}

// KILL CONNECTION of the holder from an admin connection: a waiter acquires
// at once, the holder's Done closes within the keepalive interval, and the
// fence keeps increasing.
func TestForUpdateKillHolder(t *testing.T) {
	srv := server(t)
	admin := adminDB(t, srv)
	table := uniqueTable("fukill")
	const keepalive = 300 * time.Millisecond
	a := fuLocker(t, openDB(t, config(t, srv)), table, mysql.WithKeepalive(keepalive))
	b := fuLocker(t, openDB(t, config(t, srv)), table, mysql.WithKeepalive(keepalive))
	ctx := ctxT(t, time.Minute)
	for round := 0; round < 3; round++ {
		key := fmt.Sprintf("kill/%d", round)
		held, err := a.TryAcquire(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan *distlock.Lease, 1)
		go func() {
			lease, err := b.Acquire(ctx, key)
			if err != nil {
				t.Errorf("waiter: %v", err)
			}
			got <- lease
		}()
		if !sqltest.Until(10*time.Second, func() bool { return lockWaits(t, admin) > 0 }) {
			t.Fatal("the waiter is not waiting for the row lock after 10s")
		}
		id, ok := mysql.PinnedConnID(a, key)
		if !ok {
			t.Fatal("no pinned connection")
		}
		killed := time.Now()
		killConn(t, admin, id)
		var lease *distlock.Lease
		select {
		case lease = <-got:
			t.Logf("waiter acquired %v after the KILL", time.Since(killed).Round(time.Millisecond))
		case <-time.After(5 * time.Second):
			t.Fatal("waiter not granted 5s after the holder's connection was killed")
		}
		if lease == nil {
			t.FailNow()
		}
		select {
		case <-held.Done():
			t.Logf("holder's Done closed %v after the KILL", time.Since(killed).Round(time.Millisecond))
		case <-time.After(keepalive + 2*time.Second):
			t.Fatalf("holder's Done still open %v after the KILL", keepalive+2*time.Second)
		}
		if !errors.Is(held.Err(), distlock.ErrLockLost) {
			t.Errorf("holder's lease ended with %v, want ErrLockLost", held.Err())
		}
		if lease.Token() <= held.Token() {
			t.Errorf("token after the takeover %d, not above the killed holder's %d", lease.Token(), held.Token())
		}
		if err := held.Release(ctx); !errors.Is(err, distlock.ErrNotHeld) {
			t.Errorf("killed holder's Release = %v, want ErrNotHeld", err)
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
		sqltest.Until(2*time.Second, func() bool { return mysql.PinnedCount(a) == 0 })
		if n := mysql.PinnedCount(a); n != 0 {
			t.Errorf("%d connections still pinned by the killed holder's Locker", n)
		}
	}
}

// wait_timeout: the keepalive keeps an idle holder's session alive past
// it; and when the holder is cut off (a blackholed link), the server ends
// the silent session after wait_timeout — the lock is free in seconds, not
// hours — and the holder has declared the lock lost just before.
func TestForUpdateWaitTimeout(t *testing.T) {
	conformance.Parallel(t)
	srv := server(t)
	table := uniqueTable("fuwait")
	ctx := ctxT(t, time.Minute)
	b := fuLocker(t, openDB(t, config(t, srv)), table)

	cfg := config(t, srv)
	cfg.Params = map[string]string{"wait_timeout": "2"}
	p, err := netfault.Listen(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	cfg.Addr = p.Addr()
	a := fuLocker(t, openDB(t, cfg), table, mysql.WithKeepalive(time.Minute)) // the keepalive adapts to wait_timeout/3

	lease, err := a.TryAcquire(ctx, "idle")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Second) // 2.5 × wait_timeout
	if err := lease.Err(); err != nil {
		t.Fatalf("idle holder lost its lock to wait_timeout: %v", err)
	}
	if _, err := b.TryAcquire(ctx, "idle"); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("idle holder's lock: %v, want busy", err)
	}

	p.Blackhole()
	cut := time.Now()
	var lostAt atomic.Int64
	go func() { <-lease.Done(); lostAt.Store(int64(time.Since(cut))) }()
	other, err := b.Acquire(ctxT(t, 20*time.Second), "idle")
	if err != nil {
		t.Fatalf("lock of a cut-off holder not freed by wait_timeout: %v", err)
	}
	acquired := time.Since(cut)
	lost := time.Duration(lostAt.Load())
	t.Logf("cut-off holder declared the loss after %v; the server freed the lock after %v", lost.Round(time.Millisecond), acquired.Round(time.Millisecond))
	if lost == 0 || lost > acquired {
		t.Errorf("holder learned of the loss at %v, after the takeover at %v", lost, acquired)
	}
	if acquired > 4*time.Second {
		t.Errorf("takeover after %v, want about wait_timeout (2s)", acquired)
	}
	_ = other.Release(ctx)
	p.Heal()
}

// The pool never hands a connection that holds (or may hold) a lock to
// anyone else: not while the lock is held, not after a cancelled wait, not
// after the lock was lost.
func TestForUpdatePoolNeverLeaksLockedConn(t *testing.T) {
	srv := server(t)
	admin := adminDB(t, srv)
	table := uniqueTable("fupool")
	db := openDB(t, config(t, srv))
	db.SetMaxOpenConns(8)
	l := fuLocker(t, db, table, mysql.WithKeepalive(200*time.Millisecond))
	ctx := ctxT(t, time.Minute)
	holder, err := l.TryAcquire(ctx, "pool")
	if err != nil {
		t.Fatal(err)
	}
	pinned, _ := mysql.PinnedConnID(l, "pool")
	check := func(when string) {
		t.Helper()
		var wg sync.WaitGroup
		for i := 0; i < 40; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var id int64
				var trx int
				if err := db.QueryRowContext(ctx, "SELECT CONNECTION_ID(), (SELECT COUNT(*) FROM information_schema.INNODB_TRX WHERE trx_mysql_thread_id = CONNECTION_ID())").Scan(&id, &trx); err != nil {
					t.Errorf("%s: %v", when, err)
					return
				}
				if id == pinned {
					t.Errorf("%s: the pool handed out the lock-holding connection %d", when, id)
				}
				if trx != 0 {
					t.Errorf("%s: pooled connection %d has an open transaction", when, id)
				}
			}()
		}
		wg.Wait()
		// Another owner through the same pool must find the lock busy (a
		// statement run inside the holder's transaction would get it).
		if _, err := l.TryAcquire(ctx, "pool"); !errors.Is(err, distlock.ErrNotAcquired) {
			t.Errorf("%s: another owner on the same pool: %v, want busy", when, err)
		}
	}
	check("while held")

	// A waiting Acquire cancelled: its statement is killed and its
	// connection discarded.
	actx, cancel := context.WithTimeout(ctx, 400*time.Millisecond)
	_, err = l.Acquire(actx, "pool")
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("cancelled Acquire: %v", err)
	}
	var waiting int
	if err := admin.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE '%FOR UPDATE%' AND ID <> CONNECTION_ID()").Scan(&waiting); err != nil {
		t.Fatal(err)
	}
	if waiting != 0 {
		t.Errorf("%d locking reads still running after the cancelled Acquire", waiting)
	}
	if n := openTrx(t, admin); n != 1 {
		t.Errorf("%d open transactions after the cancelled Acquire, want the holder's only", n)
	}
	check("after a cancelled Acquire")

	// The lock lost: its connection is discarded, not pooled.
	killConn(t, admin, pinned)
	select {
	case <-holder.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("holder not told of the KILL")
	}
	// The holds are told first, then the connection is discarded.
	sqltest.Until(2*time.Second, func() bool { return mysql.PinnedCount(l) == 0 })
	if n := mysql.PinnedCount(l); n != 0 {
		t.Errorf("%d connections pinned 2s after the loss", n)
	}
	lease, err := l.TryAcquire(ctx, "pool")
	if err != nil {
		t.Fatalf("after the loss: %v", err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n := openTrx(t, admin); n != 0 {
		t.Errorf("%d open transactions after every lock was released", n)
	}
}

// More locks than the pool can pin fail at once with a clear error, not a
// hang, and work again once a lock is released.
func TestForUpdatePoolExhausted(t *testing.T) {
	srv := server(t)
	ctx := ctxT(t, time.Minute)
	l, err := distlock.Open(ctx, mysqlURL(srv, "mode=forupdate&maxConns=4&table="+uniqueTable("fufull")))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var held []*distlock.Lease
	for i := 0; i < 3; i++ {
		lease, err := l.TryAcquire(ctx, fmt.Sprintf("full/%d", i))
		if err != nil {
			t.Fatalf("lock %d of 3: %v", i, err)
		}
		held = append(held, lease)
	}
	for _, op := range []string{"TryAcquire", "Acquire"} {
		start := time.Now()
		var err error
		if op == "Acquire" {
			_, err = l.Acquire(ctx, "full/x")
		} else {
			_, err = l.TryAcquire(ctx, "full/x")
		}
		if !errors.Is(err, distlock.ErrUnavailable) || !strings.Contains(err.Error(), "maxConns") {
			t.Errorf("%s beyond the pool: %v, want ErrUnavailable naming maxConns", op, err)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("%s beyond the pool took %v, want at once", op, d)
		}
		t.Logf("%s: %v", op, err)
	}
	_ = held[0].Release(ctx)
	lease, err := l.TryAcquire(ctx, "full/x")
	if err != nil {
		t.Fatalf("after a release: %v", err)
	}
	_ = lease.Release(ctx)
	for _, h := range held[1:] {
		_ = h.Release(ctx)
	}

	// A pool of one connection cannot pin any.
	db := openDB(t, config(t, srv))
	db.SetMaxOpenConns(1)
	one := fuLocker(t, db, uniqueTable("fuone"))
	if _, err := one.TryAcquire(ctx, "x"); !errors.Is(err, distlock.ErrUnavailable) {
		t.Errorf("pool of one: %v, want ErrUnavailable", err)
	}
}

// Many clients take a brand-new key at once: the row is created once,
// exactly one TryAcquire wins, none waits for the winner; waiting Acquires
// all get their turn.
func TestForUpdateCreateRace(t *testing.T) {
	srv := server(t)
	table := uniqueTable("furace")
	const clients = 12
	ls := make([]*distlock.Locker, clients)
	for i := range ls {
		ls[i] = fuLocker(t, openDB(t, config(t, srv)), table)
	}
	ctx := ctxT(t, 2*time.Minute)
	for round := 0; round < 3; round++ {
		key := fmt.Sprintf("race/%d", round)
		var (
			wg      sync.WaitGroup
			wins    atomic.Int32
			slowest atomic.Int64
			start   = make(chan struct{})
			mu      sync.Mutex
			leases  []*distlock.Lease
		)
		for _, l := range ls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				t0 := time.Now()
				lease, err := l.TryAcquire(ctx, key)
				if d := int64(time.Since(t0)); d > slowest.Load() {
					slowest.Store(d)
				}
				switch {
				case err == nil:
					wins.Add(1)
					mu.Lock()
					leases = append(leases, lease)
					mu.Unlock()
				case !errors.Is(err, distlock.ErrNotAcquired):
					t.Errorf("TryAcquire: %v", err)
				}
			}()
		}
		close(start)
		wg.Wait()
		if wins.Load() != 1 {
			t.Errorf("round %d: %d winners", round, wins.Load())
		}
		// None waits for the winner's transaction (the server's lock wait
		// is 50s): the bound is far below that, with room for a loaded
		// machine.
		if d := time.Duration(slowest.Load()); d > slack.D(10*time.Second) {
			t.Errorf("round %d: a TryAcquire took %v", round, d)
		}
		for _, l := range leases {
			_ = l.Release(ctx)
		}
	}
	var inside, overlaps atomic.Int32
	var wg sync.WaitGroup
	for _, l := range ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lease, err := l.Acquire(ctx, "race/acquire")
			if err != nil {
				t.Errorf("Acquire: %v", err)
				return
			}
			if inside.Add(1) != 1 {
				overlaps.Add(1)
			}
			time.Sleep(5 * time.Millisecond)
			inside.Add(-1)
			_ = lease.Release(ctx)
		}()
	}
	wg.Wait()
	if overlaps.Load() != 0 {
		t.Errorf("%d overlaps", overlaps.Load())
	}
}

// A kill -9 of MariaDB ends every forupdate lock (not Durable): the
// holder's Done closes, another client acquires after the restart, and the
// committed fence keeps increasing.
func TestForUpdateRestart(t *testing.T) {
	conformance.Parallel(t)
	srv := ownServer(t)
	table := uniqueTable("furestart")
	ctx := ctxT(t, 2*time.Minute)
	u := mysqlURL(srv, "mode=forupdate&keepalive=300ms&table="+table)
	open := func() *distlock.Locker {
		l, err := distlock.Open(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		return l
	}
	a, b := open(), open()
	var last uint64
	for i := 0; i < 3; i++ {
		lease, err := a.TryAcquire(ctx, "restart")
		if err != nil {
			t.Fatal(err)
		}
		last = lease.Token()
		_ = lease.Release(ctx)
	}
	held, err := a.TryAcquire(ctx, "restart")
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	select {
	case <-held.Done():
		t.Logf("holder learned of the crash after %v: %v", time.Since(killed).Round(time.Millisecond), held.Err())
	case <-time.After(10 * time.Second):
		t.Fatal("holder's Done still open 10s after the server died")
	}
	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	var lease *distlock.Lease
	for deadline := time.Now().Add(30 * time.Second); ; {
		lease, err = b.TryAcquire(ctx, "restart")
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("after the restart: %v", err)
	}
	if lease.Token() <= held.Token() || held.Token() <= last {
		t.Errorf("fences %d, %d, %d not strictly increasing across the crash", last, held.Token(), lease.Token())
	}
	_ = lease.Release(ctx)
}

// Reentrancy in forupdate mode is per Locker: the same owner nests on the
// connection that holds the row; another Locker with that owner id
// contends like anyone else.
func TestForUpdateReentrantScope(t *testing.T) {
	srv := server(t)
	table := uniqueTable("fureent")
	a := fuLocker(t, openDB(t, config(t, srv)), table)
	b := fuLocker(t, openDB(t, config(t, srv)), table)
	ctx := ctxT(t, time.Minute)
	owner := distlock.WithOwner("me")
	l1, err := a.TryAcquire(ctx, "r", owner)
	if err != nil {
		t.Fatal(err)
	}
	l2, err := a.Acquire(ctx, "r", owner)
	if err != nil {
		t.Fatal(err)
	}
	if l2.Token() != l1.Token() || mysql.PinnedCount(a) != 1 {
		t.Errorf("nested: token %d (want %d), %d pinned connections (want 1)", l2.Token(), l1.Token(), mysql.PinnedCount(a))
	}
	if _, err := b.TryAcquire(ctx, "r", owner); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Errorf("same owner id on another Locker: %v, want busy", err)
	}
	_ = l1.Release(ctx)
	if _, err := b.TryAcquire(ctx, "r"); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Errorf("freed with a nested hold left: %v", err)
	}
	if err := l2.Refresh(ctx, time.Second); err != nil {
		t.Errorf("Refresh of a live forupdate lock: %v", err)
	}
	_ = l2.Release(ctx)
	lease, err := b.TryAcquire(ctx, "r")
	if err != nil {
		t.Fatalf("after both releases: %v", err)
	}
	_ = lease.Release(ctx)
}

// A waiting Acquire outlives innodb_lock_wait_timeout: each 1205 rolls the
// transaction back and the wait starts again, until the holder releases.
func TestForUpdateLockWaitTimeoutRetried(t *testing.T) {
	srv := server(t)
	table := uniqueTable("fu1205")
	a := fuLocker(t, openDB(t, config(t, srv)), table)
	cfg := config(t, srv)
	cfg.Params = map[string]string{"innodb_lock_wait_timeout": "1"}
	b := fuLocker(t, openDB(t, cfg), table)
	ctx := ctxT(t, time.Minute)
	held, err := a.TryAcquire(ctx, "1205")
	if err != nil {
		t.Fatal(err)
	}
	const hold = 2500 * time.Millisecond
	time.AfterFunc(hold, func() { _ = held.Release(context.Background()) })
	start := time.Now()
	lease, err := b.Acquire(ctx, "1205")
	if err != nil {
		t.Fatalf("Acquire across lock-wait timeouts: %v", err)
	}
	if d := time.Since(start); d < hold-100*time.Millisecond {
		t.Errorf("acquired after %v, while the holder held for %v", d, hold)
	}
	if lease.Token() <= held.Token() {
		t.Errorf("token %d not above %d", lease.Token(), held.Token())
	}
	_ = lease.Release(ctx)
}

// The server's INNODB_TRX lags: read again within innodbTrxCache of a read,
// it still lists a transaction committed in between (what made
// TestForUpdatePoolNeverLeaksLockedConn see "1 open transactions after
// every lock was released" when its checks ran fast); openTrx waits the
// lag out.
func TestOpenTrxAfterCommit(t *testing.T) {
	srv := server(t)
	admin := adminDB(t, srv)
	admin.SetMaxOpenConns(1)
	ctx := ctxT(t, time.Minute)
	conn, err := openDB(t, config(t, srv)).Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	table := uniqueTable("trxlag")
	if _, err := conn.ExecContext(ctx, "CREATE TABLE `"+table+"` (id INT PRIMARY KEY) ENGINE=InnoDB"); err != nil {
		t.Fatal(err)
	}
	before := openTrxCached(t, admin)
	if _, err := conn.ExecContext(ctx, "START TRANSACTION"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "INSERT INTO `"+table+"` VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	if n := openTrx(t, admin); n != before+1 {
		t.Fatalf("%d open transactions with one begun, %d before", n, before)
	}
	refreshed := time.Now()
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	cached := openTrxCached(t, admin)
	if since := time.Since(refreshed); since >= innodbTrxCache {
		t.Logf("the second read came %v after the refresh, when it may refresh the cache", since)
	} else if cached != before+1 {
		t.Errorf("read %v after a refresh: %d open transactions, want the committed one still listed (%d)", since, cached, before+1)
	}
	if n := openTrx(t, admin); n != before {
		t.Errorf("%d open transactions after the commit, %d before", n, before)
	}
}
