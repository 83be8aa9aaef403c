package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/testkit/slack"
	"github.com/distlock/distlock/internal/testkit/sqltest"
	"github.com/distlock/distlock/mysql"
)

// batchMarker is in the batched refresh statement and in no other.
const batchMarker = "(key_hash, owner, fence) IN"

// grant takes key for owner directly from the driver.
func grant(t *testing.T, ctx context.Context, d backend.Driver, key, owner string, ttl time.Duration) backend.Lock {
	t.Helper()
	l, err := d.TryAcquire(ctx, backend.Request{Key: key, Owner: owner, TTL: ttl})
	if err != nil {
		t.Fatalf("TryAcquire(%q): %v", key, err)
	}
	return l
}

// rowState is a lease row as the database sees it now.
type rowState struct {
	owner     string
	fence     uint64
	held      bool
	remaining time.Duration // by the database clock; meaningful when held
}

// rowStates reads every row of table, by key.
func rowStates(t *testing.T, ctx context.Context, db *sql.DB, table string) map[string]rowState {
	t.Helper()
	rows, err := db.QueryContext(ctx, "SELECT lock_key, owner, fence, holds > 0 AND expires_at > UTC_TIMESTAMP(6), TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at) FROM `"+table+"` WHERE lock_key <> ''")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	m := map[string]rowState{}
	for rows.Next() {
		var key, owner []byte
		var s rowState
		var us int64
		if err := rows.Scan(&key, &owner, &s.fence, &s.held, &us); err != nil {
			t.Fatal(err)
		}
		s.owner, s.remaining = string(owner), time.Duration(us)*time.Microsecond
		m[string(key)] = s
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return m
}

// batchStatements counts the recorded statements that are batched
// refreshes, and the other UPDATEs; carried is how many locks the batched
// ones named (with interpolateParams every hash and owner is a _binary'…'
// literal).
func batchStatements(w *wire) (batched, single, carried int) {
	for _, q := range w.queries() {
		switch i := strings.Index(q, batchMarker); {
		case i >= 0:
			batched++
			carried += strings.Count(q[i:], "_binary'") / 2
		case strings.HasPrefix(strings.TrimSpace(strings.ToUpper(q)), "UPDATE"):
			single++
		}
	}
	return batched, single, carried
}

// A batch of held locks is refreshed by one statement per 512 locks (per
// split): every item succeeds and every row expires a TTL from now. An
// expiry already later than the new TTL does not change the row, so the
// count of changed rows falls short and each lock is refreshed on its own —
// still nil — unless the DSN counts found rows (clientFoundRows).
func TestRowRefreshBatch(t *testing.T) {
	srv := server(t)
	admin := adminDB(t, srv)
	ctx := ctxT(t, 2*time.Minute)
	const n = 300
	for _, c := range []struct {
		name       string
		split      int
		foundRows  bool
		statements int
	}{
		{"default split", 0, false, 1},
		{"split by 128", 128, false, 3},
		{"clientFoundRows", 128, true, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel() // its own table and wire
			w := &wire{}
			cfg := config(t, srv)
			cfg.DialFunc = w.dial
			cfg.ClientFoundRows = c.foundRows
			table := uniqueTable("batch")
			d := mysql.NewRowDriver(openDB(t, cfg), table, c.split)
			defer d.Close()
			// Granted for 30s: the 300 grants take seconds under load, and
			// the refresh to 1m must be seen to lengthen every lease.
			items := make([]backend.RefreshItem, n)
			for i := range items {
				items[i] = backend.RefreshItem{Lock: grant(t, ctx, d, fmt.Sprintf("batch/%d", i), fmt.Sprintf("owner-%d", i), 30*time.Second), TTL: time.Minute}
			}
			before := rowStates(t, ctx, admin, table)

			w.reset()
			errs := d.RefreshBatch(ctx, items)
			trips := w.roundTrips()
			if len(errs) != n {
				t.Fatalf("%d errors for %d items", len(errs), n)
			}
			for i, err := range errs {
				if err != nil {
					t.Fatalf("item %d: %v", i, err)
				}
			}
			batched, single, _ := batchStatements(w)
			if trips != c.statements || batched != c.statements {
				t.Errorf("%d locks: %d round trips, %d batched statements, want %d", n, trips, batched, c.statements)
			}
			after := rowStates(t, ctx, admin, table)
			for i := range n {
				k := fmt.Sprintf("batch/%d", i)
				b, a := before[k], after[k]
				if !a.held || a.remaining <= 50*time.Second || a.remaining > time.Minute || a.remaining <= b.remaining || a.fence != b.fence || a.owner != b.owner {
					t.Fatalf("%s not refreshed to 1m: before %+v, after %+v", k, b, a)
				}
			}
			t.Logf("%d locks refreshed in %d round trip(s), %d single UPDATEs", n, trips, single)

			// A shorter TTL changes no row (the expiry is never shortened).
			for i := range items {
				items[i].TTL = 20 * time.Second
			}
			w.reset()
			errs = d.RefreshBatch(ctx, items)
			for i, err := range errs {
				if err != nil {
					t.Fatalf("shorter TTL, item %d: %v", i, err)
				}
			}
			trips = w.roundTrips()
			batched, single, _ = batchStatements(w)
			want := c.statements + n // each statement's locks one by one
			if c.foundRows {
				want = c.statements
			}
			if trips != want || batched != c.statements || batched+single != want {
				t.Errorf("unchanged rows: %d round trips (%d batched, %d single), want %d", trips, batched, single, want)
			}
			for k, s := range rowStates(t, ctx, admin, table) {
				if !s.held || s.remaining <= 40*time.Second {
					t.Fatalf("%s shortened or lost: %+v", k, s)
				}
			}
			t.Logf("shorter TTL: %d round trips (%d batched, %d single)", trips, batched, single)
		})
	}
}

// A batch of locks in every state gets, item by item in order, what
// Refresh would say: nil for the held ones (which are extended), ErrNotHeld
// for released, expired, taken-over and stale-tenure ones (which are left
// alone), ErrInvalidTTL for a bad TTL, and a plain error for a lock of
// another driver or none.
func TestRowRefreshBatchMixed(t *testing.T) {
	srv := server(t)
	admin := adminDB(t, srv)
	ctx := ctxT(t, 2*time.Minute)
	table := uniqueTable("bmixed")
	w := &wire{}
	a := mysql.NewRowDriver(wiredDB(t, srv, w), table, 0)
	defer a.Close()
	b := mysql.NewRowDriver(openDB(t, config(t, srv)), table, 0)
	defer b.Close()

	type outcome int
	const (
		held outcome = iota
		notHeld
		invalidTTL
		foreign
	)
	const short, long = 200 * time.Millisecond, 5 * time.Second
	var (
		items    []backend.RefreshItem
		wants    []outcome
		keys     []string // the row each item names ("" for none)
		thieves  []string // keys to take over once expired
		expiring []string // keys granted for short
	)
	add := func(l backend.Lock, ttl time.Duration, want outcome, key string) {
		items = append(items, backend.RefreshItem{Lock: l, TTL: ttl})
		wants = append(wants, want)
		keys = append(keys, key)
	}
	for i := range 60 {
		key := fmt.Sprintf("mixed/%d", i)
		owner := "o-" + key
		switch i % 5 {
		case 0:
			add(grant(t, ctx, a, key, owner, long), time.Minute, held, key)
		case 1:
			l := grant(t, ctx, a, key, owner, long)
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			add(l, time.Minute, notHeld, key)
		case 2:
			add(grant(t, ctx, a, key, owner, short), time.Minute, notHeld, key)
			expiring = append(expiring, key)
		case 3:
			add(grant(t, ctx, a, key, owner, short), time.Minute, notHeld, key)
			thieves = append(thieves, key)
			expiring = append(expiring, key)
		case 4: // the same owner's earlier tenure, then its current one
			old := grant(t, ctx, a, key, "same-owner", long)
			if err := old.Release(ctx); err != nil {
				t.Fatal(err)
			}
			cur := grant(t, ctx, a, key, "same-owner", long)
			add(old, time.Minute, notHeld, key)
			add(cur, time.Minute, held, key)
		}
	}
	// Two nested holds of one owner: the same row and tenure twice.
	add(grant(t, ctx, a, "mixed/nested", "nest", long), time.Minute, held, "mixed/nested")
	add(grant(t, ctx, a, "mixed/nested", "nest", long), time.Minute, held, "mixed/nested")
	add(grant(t, ctx, a, "mixed/badttl", "bad", long), 0, invalidTTL, "")
	add(grant(t, ctx, b, "mixed/foreign", "f", long), time.Minute, foreign, "")
	add(nil, time.Minute, foreign, "")
	// Wait until the short leases have expired by the database clock.
	if !sqltest.Until(10*time.Second, func() bool {
		states := rowStates(t, ctx, admin, table)
		for _, key := range expiring {
			if states[key].held {
				return false
			}
		}
		return true
	}) {
		t.Fatal("short leases not expired after 10s")
	}
	for _, key := range thieves {
		grant(t, ctx, b, key, "thief", long)
	}

	w.reset()
	errs := a.RefreshBatch(ctx, items)
	t.Logf("%d items: %d round trips", len(items), w.roundTrips())
	if len(errs) != len(items) {
		t.Fatalf("%d errors for %d items", len(errs), len(items))
	}
	states := rowStates(t, ctx, admin, table)
	for i, err := range errs {
		var ok bool
		switch wants[i] {
		case held:
			ok = err == nil
		case notHeld:
			ok = errors.Is(err, distlock.ErrNotHeld) && errors.Is(err, backend.ErrNotHeld)
		case invalidTTL:
			ok = errors.Is(err, distlock.ErrInvalidTTL)
		case foreign:
			ok = err != nil && !errors.Is(err, distlock.ErrNotHeld)
		}
		if !ok {
			t.Errorf("item %d (%s, want outcome %d): %v", i, keys[i], wants[i], err)
		}
	}
	for key, s := range states {
		var wantHeld, extended bool
		switch {
		case key == "mixed/nested":
			wantHeld, extended = true, true
		case key == "mixed/badttl" || key == "mixed/foreign":
			wantHeld = true
		case strings.HasPrefix(key, "mixed/"):
			var i int
			fmt.Sscanf(key, "mixed/%d", &i)
			switch i % 5 {
			case 0, 4:
				wantHeld, extended = true, true
			case 3:
				wantHeld = true
				if s.owner != "thief" {
					t.Errorf("%s: owner %q, want the thief", key, s.owner)
				}
			}
		}
		switch {
		case s.held != wantHeld:
			t.Errorf("%s: held %v, want %v: %+v", key, s.held, wantHeld, s)
		case extended && s.remaining <= 50*time.Second:
			t.Errorf("%s: not extended: %+v", key, s)
		case wantHeld && !extended && s.remaining > long:
			t.Errorf("%s: extended by a batch that does not hold it: %+v", key, s)
		}
	}
}

// Locks of different TTLs in one batch: one statement per TTL, each row
// extended to its own TTL.
func TestRowRefreshBatchTTLs(t *testing.T) {
	srv := server(t)
	admin := adminDB(t, srv)
	ctx := ctxT(t, time.Minute)
	table := uniqueTable("bttl")
	w := &wire{}
	d := mysql.NewRowDriver(wiredDB(t, srv, w), table, 0)
	defer d.Close()
	ttls := []time.Duration{40 * time.Second, 20 * time.Second, 60 * time.Second}
	const n = 90
	items := make([]backend.RefreshItem, n)
	for i := range items {
		items[i] = backend.RefreshItem{Lock: grant(t, ctx, d, fmt.Sprintf("ttl/%d", i), "o", 5*time.Second), TTL: ttls[i%len(ttls)]}
	}
	w.reset()
	errs := d.RefreshBatch(ctx, items)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("item %d: %v", i, err)
		}
	}
	if batched, single, _ := batchStatements(w); w.roundTrips() != len(ttls) || batched != len(ttls) {
		t.Errorf("%d TTLs: %d round trips (%d batched, %d single), want %d", len(ttls), w.roundTrips(), batched, single, len(ttls))
	}
	states := rowStates(t, ctx, admin, table)
	for i := range n {
		s, ttl := states[fmt.Sprintf("ttl/%d", i)], ttls[i%len(ttls)]
		if !s.held || s.remaining > ttl || s.remaining < ttl-5*time.Second {
			t.Errorf("ttl/%d: %+v, want about %v left", i, s, ttl)
		}
	}
}

// When ctx has ended before or during the batch, every item gets ctx's
// error as ErrUnavailable — not ErrNotHeld, so the scheduler retries rather
// than dropping the leases — and nothing panics. A statement whose reply is
// lost is not retried lock by lock once ctx is over.
func TestRowRefreshBatchContext(t *testing.T) {
	srv := server(t)
	admin := adminDB(t, srv)
	ctx := ctxT(t, time.Minute)
	table := uniqueTable("bctx")
	w := &wire{}
	d := mysql.NewRowDriver(wiredDB(t, srv, w), table, 0)
	defer d.Close()
	var items []backend.RefreshItem
	for i := range 41 { // a group of 20, one of 20 and one of a single lock
		ttl := time.Minute
		switch {
		case i == 40:
			ttl = 3 * time.Minute
		case i%2 == 1:
			ttl = 2 * time.Minute
		}
		items = append(items, backend.RefreshItem{Lock: grant(t, ctx, d, fmt.Sprintf("ctx/%d", i), "o", 10*time.Second), TTL: ttl})
	}
	check := func(name string, errs []error, cause error) {
		t.Helper()
		if len(errs) != len(items) {
			t.Fatalf("%s: %d errors for %d items", name, len(errs), len(items))
		}
		for i, err := range errs {
			if !errors.Is(err, cause) || !errors.Is(err, distlock.ErrUnavailable) || errors.Is(err, distlock.ErrNotHeld) {
				t.Fatalf("%s: item %d: %v, want %v and ErrUnavailable", name, i, err, cause)
			}
		}
		for k, s := range rowStates(t, ctx, admin, table) {
			if !s.held || s.remaining > 10*time.Second {
				t.Fatalf("%s: %s changed: %+v", name, k, s)
			}
		}
	}

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	w.reset()
	check("cancelled", d.RefreshBatch(cctx, items), context.Canceled)
	if n := w.roundTrips(); n != 0 {
		t.Errorf("cancelled: %d round trips, want 0", n)
	}

	// The first statement is sent but its reply is lost: its outcome is
	// unknown when ctx ends (it may have run), so only the errors are
	// checked, and that nothing more is sent.
	w.reset()
	w.swallow.Store(true)
	dctx, dcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	errs := d.RefreshBatch(dctx, items)
	dcancel()
	w.swallow.Store(false)
	if len(errs) != len(items) {
		t.Fatalf("%d errors for %d items", len(errs), len(items))
	}
	for i, err := range errs {
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, distlock.ErrUnavailable) {
			t.Fatalf("lost reply: item %d: %v, want DeadlineExceeded and ErrUnavailable", i, err)
		}
	}
	if n := w.roundTrips(); n != 1 {
		t.Errorf("lost reply: %d round trips, want 1 (no retry after ctx ended): %.100q", n, w.queries())
	}

	// The driver is still usable.
	if errs := d.RefreshBatch(ctx, items); errors.Join(errs...) != nil {
		t.Fatalf("after the lost reply: %v", errors.Join(errs...))
	}
}

// Through the public API: a Locker holding 200 auto-refreshed leases with a
// 600ms TTL for 4 TTLs loses none, and its refreshes go in batches: far
// fewer UPDATEs than leases × refresh rounds.
func TestRowAutoRefreshBatched(t *testing.T) {
	srv := server(t)
	w := &wire{}
	table := uniqueTable("bauto")
	l := mustNew(t, wiredDB(t, srv, w), mysql.WithTable(table))
	defer l.Close()
	ctx := ctxT(t, time.Minute)
	// The TTL must outlast a grant's round trip and a refresh batch's:
	// under -race on a loaded machine each took over 600ms.
	const n = 200
	ttl := slack.D(2 * time.Second)
	// The scheduler batches the refreshes that are due together, so the
	// leases are granted together: by 20 goroutines at once.
	leases := make([]*distlock.Lease, n)
	granted := time.Now()
	var wg sync.WaitGroup
	errc := make(chan error, n)
	for g := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < n; i += 20 {
				lease, err := l.TryAcquire(ctx, fmt.Sprintf("auto/%d", i), distlock.WithTTL(ttl))
				if err != nil {
					errc <- err
					return
				}
				leases[i] = lease
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	t.Logf("%d leases granted in %v", n, time.Since(granted).Round(time.Millisecond))
	w.reset()
	start := time.Now()
	hold := 3 * ttl
	for time.Since(start) < hold {
		time.Sleep(50 * time.Millisecond)
		for i, lease := range leases {
			if err := lease.Err(); err != nil {
				t.Fatalf("lease %d lost after %v: %v", i, time.Since(start), err)
			}
		}
	}
	held := time.Since(start)
	batched, single, carried := batchStatements(w)
	for i := range leases {
		info, err := l.Inspect(ctx, fmt.Sprintf("auto/%d", i))
		if err != nil || !info.Held || info.TTL <= 0 {
			t.Fatalf("auto/%d after %v: %+v, %v", i, held, info, err)
		}
	}
	rounds := int(held / (ttl / 3))
	t.Logf("%d leases held %v (~%d refresh rounds, %d refreshes): %d batched UPDATEs carrying %d refreshes, %d single UPDATEs",
		n, held.Round(time.Millisecond), rounds, n*rounds, batched, carried, single)
	// The scheduler batches only the refreshes due at the same moment, so
	// batches are smaller than the 200 leases; one UPDATE per refresh would
	// be n*rounds statements.
	if batched == 0 || batched+single > n*rounds/3 {
		t.Errorf("%d batched + %d single UPDATEs for %d leases × %d rounds: not batched", batched, single, n, rounds)
	}
	for _, lease := range leases {
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// The batched statement reads the rows it names by primary key, not by a
// scan of the table.
func TestRowRefreshBatchPlan(t *testing.T) {
	srv := server(t)
	admin := adminDB(t, srv)
	ctx := ctxT(t, 2*time.Minute)
	table := uniqueTable("bplan")
	d := mysql.NewRowDriver(admin, table, 0)
	defer d.Close()
	grant(t, ctx, d, "plan/0", "o", time.Minute) // creates the table
	const rows = 10000
	for i := 0; i < rows; i += 1000 {
		var sb strings.Builder
		sb.WriteString("INSERT INTO `" + table + "` (key_hash, lock_key, owner, holds, expires_at, fence) VALUES ")
		var args []any
		for j := i; j < i+1000; j++ {
			if j > i {
				sb.WriteString(",")
			}
			sb.WriteString("(?, ?, 'o', 1, UTC_TIMESTAMP(6) + INTERVAL 1 MINUTE, 1)")
			key := fmt.Sprintf("fill/%d", j)
			h := mysqlKeyHash(key)
			args = append(args, h[:], key)
		}
		if _, err := admin.ExecContext(ctx, sb.String(), args...); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := admin.ExecContext(ctx, "ANALYZE TABLE `"+table+"`"); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{2, 128, mysql.RowBatchMax} {
		args := []any{int64(60e6)}
		var tuples []any
		for j := range n {
			key := fmt.Sprintf("fill/%d", j*7)
			h := mysqlKeyHash(key)
			args = append(args, h[:])
			tuples = append(tuples, h[:], []byte("o"), uint64(1))
		}
		args = append(args, tuples...)
		rs, err := admin.QueryContext(ctx, "EXPLAIN "+mysql.RefreshBatchSQL(table, n), args...)
		if err != nil {
			t.Fatal(err)
		}
		cols, _ := rs.Columns()
		for rs.Next() {
			vals := make([]sql.NullString, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rs.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			row := map[string]string{}
			var line []string
			for i, c := range cols {
				row[c] = vals[i].String
				line = append(line, c+"="+vals[i].String)
			}
			t.Logf("n=%d, %d rows: EXPLAIN %s", n, rows+1, strings.Join(line, " "))
			var est int
			fmt.Sscan(row["rows"], &est)
			if (row["type"] != "range" && row["type"] != "eq_ref" && row["type"] != "const") || row["key"] != "PRIMARY" || est > 2*n {
				t.Errorf("n=%d: not a primary key lookup: %v", n, line)
			}
		}
		if err := rs.Err(); err != nil {
			t.Fatal(err)
		}
		rs.Close()
	}
}
