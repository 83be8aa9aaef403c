package mysql_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/internal/testkit/slack"
	"github.com/distlock/distlock/internal/testkit/sqltest"
	"github.com/distlock/distlock/mysql"
)

// One round trip to acquire, one to refresh, one to release: the statement
// and its outcome (fence, or the holder's remaining time) travel in one
// COM_QUERY and its OK packet.
func TestRowRoundTrips(t *testing.T) {
	srv := server(t)
	w := &wire{}
	db := wiredDB(t, srv, w)
	l := mustNew(t, db, mysql.WithTable(uniqueTable("rt")))
	defer l.Close()
	other := mustNew(t, db, mysql.WithTable(uniqueTable("unused")))
	defer other.Close()
	ctx := ctxT(t, time.Minute)
	key := "round-trips"
	// Warm up: the first acquisition creates the table and a connection.
	lease, err := l.TryAcquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}

	step := func(name string, want int, f func() error) {
		t.Helper()
		w.reset()
		if err := f(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := w.roundTrips(); got != want {
			t.Errorf("%s: %d round trips, want %d: %q", name, got, want, w.queries())
		} else {
			t.Logf("%s: %d round trip(s): %.120q", name, got, w.queries())
		}
	}
	step("TryAcquire", 1, func() error { lease, err = l.TryAcquire(ctx, key, distlock.WithAutoRefresh(false)); return err })
	step("Refresh", 1, func() error { return lease.Refresh(ctx, time.Minute) })
	step("busy TryAcquire", 1, func() error {
		_, err := l.TryAcquire(ctx, key)
		var busy *backend.BusyError
		if !errors.As(err, &busy) || busy.RetryAfter <= 50*time.Second || busy.RetryAfter > time.Minute {
			return fmt.Errorf("want busy with the holder's remaining ~1m, got %v", err)
		}
		return nil
	})
	step("Release", 1, func() error { return lease.Release(ctx) })

	// Without interpolateParams each statement is prepared on the server:
	// COM_STMT_PREPARE and COM_STMT_EXECUTE, two round trips (the
	// COM_STMT_CLOSE has no reply).
	w2 := &wire{}
	cfg := config(t, srv)
	cfg.InterpolateParams = false
	cfg.DialFunc = w2.dial
	l2 := mustNew(t, openDB(t, cfg), mysql.WithTable(uniqueTable("rtprep")))
	defer l2.Close()
	lease, err = l2.TryAcquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	_ = lease.Release(ctx)
	w2.reset()
	lease, err = l2.TryAcquire(ctx, key, distlock.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	acq := w2.roundTrips()
	w2.reset()
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("without interpolateParams: acquire %d round trips, release %d", acq, w2.roundTrips())
	if acq != 2 {
		t.Errorf("prepared acquire: %d round trips, want 2 (prepare, execute)", acq)
	}
}

var dateLiteral = regexp.MustCompile(`'\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}[^']*'`)

// The SQL never carries the client's time: every expiry is computed by the
// database from UTC_TIMESTAMP(6) and a duration. The statements are read
// off the wire (with interpolateParams they include every argument).
func TestRowSQLSendsNoClientTime(t *testing.T) {
	srv := server(t)
	w := &wire{}
	db := wiredDB(t, srv, w)
	table := uniqueTable("clock")
	a := mustNew(t, db, mysql.WithTable(table))
	defer a.Close()
	ctx := ctxT(t, time.Minute)
	owner := distlock.WithOwner("clock-owner")
	l1, err := a.TryAcquire(ctx, "k", owner, distlock.WithTTL(slack.D(2*time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	l2, err := a.TryAcquire(ctx, "k", owner) // nested
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.TryAcquire(ctx, "k"); !errors.Is(err, distlock.ErrNotAcquired) { // busy
		t.Fatal(err)
	}
	if err := l1.Refresh(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	_ = l2.Release(ctx)
	_ = l1.Release(ctx)
	// Long enough that the grant arrives within it on a loaded machine.
	l3, err := a.TryAcquire(ctx, "k", distlock.WithTTL(slack.D(time.Second)), distlock.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	watcher := mustNew(t, openDB(t, config(t, srv)), mysql.WithTable(table)) // off the wire
	defer watcher.Close()
	if !sqltest.Until(10*time.Second, func() bool { info, err := watcher.Inspect(ctx, "k"); return err == nil && !info.Held }) {
		t.Fatal("a 1s lease still held after 10s")
	}
	l4, err := a.TryAcquire(ctx, "k") // takeover of the expired row
	if err != nil {
		t.Fatal(err)
	}
	_ = l3.Release(ctx)
	_ = l4.Release(ctx)

	qs := w.queries()
	if len(qs) < 8 {
		t.Fatalf("only %d statements recorded", len(qs))
	}
	for _, q := range qs {
		up := strings.ToUpper(q)
		for _, m := range dateLiteral.FindAllString(q, -1) {
			if m != "'1970-01-01 00:00:01'" { // the constant "free" expiry
				t.Errorf("statement carries a time literal %s: %.200s", m, q)
			}
		}
		for _, f := range []string{"NOW(", "CURRENT_TIMESTAMP", "SYSDATE", "UNIX_TIMESTAMP"} {
			if strings.Contains(up, f) {
				t.Errorf("statement uses %s (session time zone dependent): %.200s", f, q)
			}
		}
		if strings.Contains(up, "EXPIRES_AT =") && !strings.Contains(up, "UTC_TIMESTAMP(6)") {
			t.Errorf("expiry written without the database clock: %.200s", q)
		}
	}
}

// Two clients whose sessions disagree about the time by 25 hours (time_zone
// +13:00 and -12:00: NOW() differs, UTC_TIMESTAMP() does not) see the same
// expiry: neither can steal the lock early nor keep it past its TTL.
func TestRowSessionClockSkew(t *testing.T) {
	srv := server(t)
	table := uniqueTable("skew")
	open := func(tz string) (*distlock.Locker, string) {
		cfg := config(t, srv)
		cfg.Params = map[string]string{"time_zone": "'" + tz + "'"}
		db := openDB(t, cfg)
		var now string
		if err := db.QueryRow("SELECT NOW(6)").Scan(&now); err != nil {
			t.Fatal(err)
		}
		l := mustNew(t, db, mysql.WithTable(table))
		t.Cleanup(func() { _ = l.Close() })
		return l, now
	}
	ahead, nowAhead := open("+13:00")
	behind, nowBehind := open("-12:00")
	t.Logf("session clocks: NOW(6) = %s and %s", nowAhead, nowBehind)
	if nowAhead[:10] == nowBehind[:10] {
		t.Fatalf("sessions not skewed: %s vs %s", nowAhead, nowBehind)
	}
	sqltest.ClockSkew(t, ahead, behind)
}

// An expired row taken over by many clients at once has exactly one winner,
// whose token is the next fence.
func TestRowConcurrentTakeover(t *testing.T) {
	srv := server(t)
	admin := adminDB(t, srv)
	table := uniqueTable("takeover")
	const clients = 16
	ls := make([]*distlock.Locker, clients)
	for i := range ls {
		ls[i] = mustNew(t, openDB(t, config(t, srv)), mysql.WithTable(table))
		defer ls[i].Close()
	}
	ctx := ctxT(t, 2*time.Minute)
	for round := 0; round < 5; round++ {
		key := fmt.Sprintf("takeover/%d", round)
		old, err := ls[0].TryAcquire(ctx, key, distlock.WithTTL(time.Hour), distlock.WithAutoRefresh(false))
		if err != nil {
			t.Fatal(err)
		}
		if err := expireRow(ctx, admin, table, key); err != nil {
			t.Fatal(err)
		}
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			winners []*distlock.Lease
			start   = make(chan struct{})
		)
		for _, l := range ls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				lease, err := l.TryAcquire(ctx, key)
				if err == nil {
					mu.Lock()
					winners = append(winners, lease)
					mu.Unlock()
				} else if !errors.Is(err, distlock.ErrNotAcquired) {
					t.Errorf("TryAcquire: %v", err)
				}
			}()
		}
		close(start)
		wg.Wait()
		if len(winners) != 1 {
			t.Fatalf("round %d: %d winners of one expired row", round, len(winners))
		}
		if winners[0].Token() != old.Token()+1 {
			t.Errorf("round %d: winner's token %d, want %d", round, winners[0].Token(), old.Token()+1)
		}
		if err := old.Release(ctx); !errors.Is(err, distlock.ErrNotHeld) {
			t.Errorf("old holder's Release = %v, want ErrNotHeld", err)
		}
		_ = winners[0].Release(ctx)
	}
}

// The fence increases strictly across releases, expiry takeovers, nesting
// (which keeps it) and kill -9 restarts of MariaDB, with a lock held across
// the crash.
func TestRowFenceAcrossRestart(t *testing.T) {
	conformance.Parallel(t)
	srv := ownServer(t)
	admin := adminDB(t, srv)
	table := uniqueTable("fence")
	u := mysqlURL(srv, "table="+table)
	ctx := ctxT(t, 3*time.Minute)
	open := func() *distlock.Locker {
		l, err := distlock.Open(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		return l
	}
	a, b := open(), open()
	const key = "fence"
	var tokens []uint64
	take := func(l *distlock.Locker, opts ...distlock.Option) *distlock.Lease {
		t.Helper()
		lease, err := l.Acquire(ctx, key, opts...)
		if err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, lease.Token())
		return lease
	}
	for i := 0; i < 3; i++ {
		_ = take(a).Release(ctx)
		_ = take(b).Release(ctx)
	}
	for i := 0; i < 2; i++ { // takeovers of expired rows
		_ = take(a, distlock.WithTTL(time.Hour), distlock.WithAutoRefresh(false))
		if err := expireRow(ctx, admin, table, key); err != nil {
			t.Fatal(err)
		}
	}
	n1 := take(b, distlock.WithOwner("nest"))
	n2, err := b.TryAcquire(ctx, key, distlock.WithOwner("nest"))
	if err != nil || n2.Token() != n1.Token() {
		t.Fatalf("nested acquire: %v, token %d want %d", err, n2.Token(), n1.Token())
	}
	_ = n2.Release(ctx)
	_ = n1.Release(ctx)
	for crash := 0; crash < 2; crash++ {
		// A TTL far beyond a restart's duration (seconds under load),
		// ended by expireRow once the row was seen to survive.
		held := take(a, distlock.WithTTL(time.Minute), distlock.WithAutoRefresh(false))
		if err := srv.Kill(); err != nil {
			t.Fatal(err)
		}
		killed := time.Now()
		if err := srv.Restart(ctx); err != nil {
			t.Fatal(err)
		}
		t.Logf("restarted in %v", time.Since(killed).Round(time.Millisecond))
		// The row survived the crash: the lock is still held until its TTL.
		if _, err := b.TryAcquire(ctx, key); !errors.Is(err, distlock.ErrNotAcquired) {
			t.Errorf("after kill -9 the held lock answered %v, want busy", err)
		}
		if err := expireRow(ctx, admin, table, key); err != nil {
			t.Fatal(err)
		}
		_ = take(b).Release(ctx)
		_ = held
	}
	_ = take(a).Release(ctx)
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("fences not strictly increasing: %v", tokens)
		}
	}
	t.Logf("fences: %v", tokens)
}

// A TryAcquire whose reply is lost (the response is swallowed and ctx ends)
// may have taken the row: the driver gives the hold back in the background,
// identified by its request id, so the lock is free long before its TTL —
// also for a WithOwner owner whose other nested hold must survive.
func TestRowAmbiguousAcquire(t *testing.T) {
	srv := server(t)
	w := &wire{}
	table := uniqueTable("ambig")
	l := mustNew(t, wiredDB(t, srv, w), mysql.WithTable(table))
	defer l.Close()
	other := mustNew(t, openDB(t, config(t, srv)), mysql.WithTable(table))
	defer other.Close()
	ctx := ctxT(t, time.Minute)

	ambiguous := func(key string, opts ...distlock.Option) {
		t.Helper()
		w.swallow.Store(true)
		actx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		lease, err := l.TryAcquire(actx, key, append(opts, distlock.WithTTL(10*time.Minute))...)
		w.swallow.Store(false)
		if err == nil {
			_ = lease.Release(ctx)
			t.Fatalf("acquire with a swallowed reply succeeded")
		}
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, distlock.ErrUnavailable) {
			t.Errorf("ambiguous acquire: %v, want DeadlineExceeded and ErrUnavailable", err)
		}
	}

	// A random owner: the orphan hold is given back.
	ambiguous("ambig/random")
	start := time.Now()
	lease, err := other.Acquire(ctxT(t, 10*time.Second), "ambig/random")
	if err != nil {
		t.Fatalf("lock of an ambiguous acquire (TTL 10m) still held: %v", err)
	}
	t.Logf("freed %v after the ambiguous acquire", time.Since(start).Round(time.Millisecond))
	_ = lease.Release(ctx)

	// A named owner that already holds the lock: exactly the ambiguous
	// nested hold is given back, the first one stays.
	owner := distlock.WithOwner("ambig-owner")
	first, err := l.TryAcquire(ctx, "ambig/nested", owner, distlock.WithTTL(10*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	ambiguous("ambig/nested", owner)
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := other.Inspect(ctx, "ambig/nested")
		if err != nil {
			t.Fatal(err)
		}
		if info.Holds == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("nested orphan hold not given back: %+v", info)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := first.Refresh(ctx, 10*time.Minute); err != nil {
		t.Fatalf("the surviving hold: %v", err)
	}
	if _, err := other.TryAcquire(ctx, "ambig/nested"); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("first hold lost: %v", err)
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lease, err = other.TryAcquire(ctx, "ambig/nested")
	if err != nil {
		t.Fatalf("after the last release: %v", err)
	}
	_ = lease.Release(ctx)
}

// Keys that look like SQL, long keys and keys that differ only in case or
// trailing spaces are distinct rows, stored verbatim; no SQL is built from
// them.
func TestRowKeys(t *testing.T) {
	srv := server(t)
	admin := adminDB(t, srv)
	table := uniqueTable("keys")
	a := mustNew(t, openDB(t, config(t, srv)), mysql.WithTable(table))
	defer a.Close()
	b := mustNew(t, openDB(t, config(t, srv)), mysql.WithTable(table))
	defer b.Close()
	ctx := ctxT(t, time.Minute)
	long := strings.Repeat("ä", 512) // 1,024 bytes
	keys := []string{
		"'; DROP TABLE `" + table + "`; --", `"; DROP TABLE x; --`, "\\", "\\'", "%", "_", "?",
		"Key", "key", "KEY", "k", "k ", "k  ", " k", "k\t", "k\x00", "ß", "ss", "é", "e\u0301",
		long, long[:1022] + "x", long[:1022] + "X",
	}
	var leases []*distlock.Lease
	for _, k := range keys {
		lease, err := a.TryAcquire(ctx, k)
		if err != nil {
			t.Fatalf("TryAcquire(%q): %v", k, err)
		}
		leases = append(leases, lease)
	}
	for _, k := range keys {
		if _, err := b.TryAcquire(ctx, k); !errors.Is(err, distlock.ErrNotAcquired) {
			t.Errorf("key %q not locked for another client: %v", k, err)
		}
		info, err := b.Inspect(ctx, k)
		if err != nil || info.Key != k || !info.Held {
			t.Errorf("Inspect(%q) = %+v, %v", k, info, err)
		}
	}
	var rows int
	if err := admin.QueryRow("SELECT COUNT(*) FROM `"+table+"` WHERE lock_key = ?", []byte(keys[0])).Scan(&rows); err != nil || rows != 1 {
		t.Errorf("the SQL-looking key is not stored verbatim (table intact?): %d rows, %v", rows, err)
	}
	if err := admin.QueryRow("SELECT COUNT(*) FROM `" + table + "` WHERE lock_key <> ''").Scan(&rows); err != nil || rows != len(keys) {
		t.Errorf("%d rows for %d distinct keys: %v", rows, len(keys), err)
	}
	for _, l := range leases {
		if err := l.Release(ctx); err != nil {
			t.Errorf("Release(%q): %v", l.Key(), err)
		}
	}
}

// Row-mode reentrancy is by owner id in the row: two Lockers (two
// processes, say) with the same WithOwner nest.
func TestRowReentrantAcrossLockers(t *testing.T) {
	srv := server(t)
	table := uniqueTable("reent")
	a := mustNew(t, openDB(t, config(t, srv)), mysql.WithTable(table))
	defer a.Close()
	b := mustNew(t, openDB(t, config(t, srv)), mysql.WithTable(table))
	defer b.Close()
	ctx := ctxT(t, time.Minute)
	owner := distlock.WithOwner("shared-owner")
	l1, err := a.TryAcquire(ctx, "reent", owner)
	if err != nil {
		t.Fatal(err)
	}
	l2, err := b.TryAcquire(ctx, "reent", owner)
	if err != nil {
		t.Fatalf("same owner on another Locker: %v", err)
	}
	if l1.Token() != l2.Token() {
		t.Errorf("nested token %d, want %d", l2.Token(), l1.Token())
	}
	if info, _ := a.Inspect(ctx, "reent"); info.Holds != 2 || info.Owner != "shared-owner" {
		t.Errorf("Inspect = %+v, want 2 holds of shared-owner", info)
	}
	_ = l1.Release(ctx)
	if _, err := a.TryAcquire(ctx, "reent"); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Errorf("freed with a hold left: %v", err)
	}
	_ = l2.Release(ctx)
	if info, _ := a.Inspect(ctx, "reent"); info.Held {
		t.Errorf("still held after both releases: %+v", info)
	}
}

// TTLs are sent in whole microseconds, rounded up: the server never holds a
// lock for less than its TTL.
func TestTTLMicros(t *testing.T) {
	for _, c := range []struct {
		ttl  time.Duration
		want int64
	}{{time.Nanosecond, 1}, {time.Microsecond, 1}, {1500 * time.Nanosecond, 2}, {time.Second, 1e6}, {time.Second + 1, 1e6 + 1}, {distlock.MaxTTL, int64(distlock.MaxTTL / time.Microsecond)}} {
		if got := mysql.TTLMicros(c.ttl); got != c.want {
			t.Errorf("ttlMicros(%v) = %d, want %d", c.ttl, got, c.want)
		}
	}
}

// MaxTTL (a year) fits DATETIME(6) arithmetic.
func TestRowMaxTTL(t *testing.T) {
	srv := server(t)
	l := mustNew(t, openDB(t, config(t, srv)), mysql.WithTable(uniqueTable("maxttl")))
	defer l.Close()
	ctx := ctxT(t, time.Minute)
	lease, err := l.TryAcquire(ctx, "max", distlock.WithTTL(distlock.MaxTTL), distlock.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	info, err := l.Inspect(ctx, "max")
	if err != nil || info.TTL < distlock.MaxTTL-time.Minute {
		t.Errorf("Inspect = %+v, %v", info, err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// Row mode takes every expiry and takeover time from the server's
// UTC_TIMESTAMP(6): two clients whose clocks are 10 minutes ahead of and
// behind the server's see the same lease as an unshifted one would.
func TestRowClientClockSkew(t *testing.T) {
	conformance.Parallel(t)
	srv := server(t)
	table := uniqueTable("skew")
	open := func(shift time.Duration) *distlock.Locker {
		l := mustNew(t, openDB(t, config(t, srv)), mysql.WithTable(table))
		mysql.ShiftClock(l, shift)
		t.Cleanup(func() { _ = l.Close() })
		return l
	}
	sqltest.ClockSkew(t, open(10*time.Minute), open(-10*time.Minute))
}

// The package reads the client's clock only through the hook that
// TestRowClientClockSkew shifts.
func TestClockOnlyThroughHook(t *testing.T) { sqltest.ClockOnlyThroughHook(t, ".") }
