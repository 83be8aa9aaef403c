package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/internal/testkit/sqltest"
	"github.com/distlock/distlock/postgres"
)

// 100 concurrent takeovers of one expired row, from 100 owners over 4
// pools: exactly one wins, with the next fencing token.
func TestTakeoverRace(t *testing.T) {
	srv := server(t)
	admin := openPool(t, srv, nil)
	table := uniqueTable("race")
	ls := make([]*distlock.Locker, 4)
	for i := range ls {
		ls[i] = mustNew(t, openPool(t, srv, nil), postgres.WithTable(table), postgres.WithCreateTable(true))
		defer ls[i].Close()
	}
	ctx := ctxT(t, 2*time.Minute)
	for round := 0; round < 3; round++ {
		first, err := ls[0].TryAcquire(ctx, "race/key", distlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		if err := expireRow(ctx, admin, table, "race/key"); err != nil {
			t.Fatal(err)
		}
		const n = 100
		var wg sync.WaitGroup
		start := make(chan struct{})
		wins := make(chan *distlock.Lease, n)
		errs := make(chan error, n)
		for i := 0; i < n; i++ {
			wg.Go(func() {
				<-start
				l, err := ls[i%len(ls)].TryAcquire(ctx, "race/key", distlock.WithTTL(time.Minute))
				switch {
				case err == nil:
					wins <- l
				case !errors.Is(err, distlock.ErrNotAcquired):
					errs <- err
				}
			})
		}
		close(start)
		wg.Wait()
		close(wins)
		close(errs)
		for err := range errs {
			t.Errorf("round %d: TryAcquire: %v", round, err)
		}
		var won []*distlock.Lease
		for l := range wins {
			won = append(won, l)
		}
		if len(won) != 1 {
			t.Fatalf("round %d: %d winners of one expired row", round, len(won))
		}
		if won[0].Token() != first.Token()+1 {
			t.Errorf("round %d: winner's token %d, want %d", round, won[0].Token(), first.Token()+1)
		}
		if err := first.Release(ctx); !errors.Is(err, distlock.ErrNotHeld) {
			t.Errorf("round %d: the superseded holder's Release: %v", round, err)
		}
		if err := won[0].Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// trickyKeys look like SQL, hold quotes, NUL, control and non-ASCII
// characters; each must name its own lock and be stored as it is.
var trickyKeys = []string{
	"'; DROP TABLE distlock_leases; --",
	`"quoted" key`,
	"a\x00b",
	"a\\b",
	"$1",
	"%s %d %% _",
	"ключ",
	"鍵🔒",
	"e\u0301", // e + combining accent
	"\u00e9",  // é precomposed: a distinct key
	"trailing ",
	"TRAILING ",
	strings.Repeat("ü", 512), // 1,024 bytes
}

// SQL-looking and non-ASCII keys in both modes: each is held on its own,
// busy for another owner, stored with its exact bytes, and released.
func TestTrickyKeys(t *testing.T) {
	srv := server(t)
	admin := openPool(t, srv, nil)
	for _, mode := range []postgres.Mode{postgres.ModeRow, postgres.ModeAdvisory} {
		t.Run(string(mode), func(t *testing.T) {
			table := uniqueTable("keys")
			a := mustNew(t, openPool(t, srv, nil), postgres.WithMode(mode), postgres.WithTable(table), postgres.WithCreateTable(true))
			defer a.Close()
			b := mustNew(t, openPool(t, srv, nil), postgres.WithMode(mode), postgres.WithTable(table), postgres.WithCreateTable(true))
			defer b.Close()
			ctx := ctxT(t, time.Minute)
			var leases []*distlock.Lease
			for _, k := range trickyKeys {
				l, err := a.TryAcquire(ctx, k)
				if err != nil {
					t.Fatalf("TryAcquire(%q): %v", k, err)
				}
				leases = append(leases, l)
				if _, err := b.TryAcquire(ctx, k); !errors.Is(err, distlock.ErrNotAcquired) {
					t.Errorf("second owner on %q: %v", k, err)
				}
			}
			var held []string
			var err error
			if mode == postgres.ModeRow {
				held, err = heldRows(ctx, admin, table)
			} else {
				held, err = heldAdvisory(ctx, admin, table)
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(held) != len(trickyKeys) {
				t.Errorf("%d locks held in the server, want %d: %q", len(held), len(trickyKeys), held)
			}
			for _, k := range trickyKeys {
				found := false
				for _, h := range held {
					found = found || h == k
				}
				if !found {
					t.Errorf("key %q not stored with its exact bytes", k)
				}
			}
			for _, l := range leases {
				if err := l.Release(ctx); err != nil {
					t.Error(err)
				}
			}
			var n int
			if err := admin.QueryRow(ctx, `SELECT count(*) FROM "`+table+`"`).Scan(&n); err != nil || n != len(trickyKeys) {
				t.Errorf("%d rows in the table (%v), want %d: one per key", n, err, len(trickyKeys))
			}
		})
	}
}

// A URL's password never appears in an error: not for a refused login, not
// for a malformed URL, not for an unreachable server.
func TestURLErrorsHideThePassword(t *testing.T) {
	srv := server(t)
	const secret = "s3cr3t-Pa55"
	ctx := ctxT(t, time.Minute)
	urls := []string{
		"postgres://distlock:" + secret + "@" + srv.Addr() + "/distlock?sslmode=disable",
		"postgres://distlock:" + secret + "@" + srv.Addr() + "/distlock?mode=bogus",
		"postgres://distlock:" + secret + "@" + srv.Addr() + "/distlock?pool_max_conns=0",
		"postgres://distlock:" + secret + "@h1:1,h2:2/distlock",
		"postgres://distlock:" + secret + "@" + srv.Addr(),
		closedPortURL(t)[:len("postgres://u:")] + secret + closedPortURL(t)[len("postgres://u:p"):],
	}
	for _, u := range urls {
		l, err := distlock.Open(ctx, u)
		if err == nil {
			_ = l.Close()
			t.Errorf("Open(%s) succeeded with a wrong password or a bad URL", strings.ReplaceAll(u, secret, "***"))
			continue
		}
		if strings.Contains(err.Error(), secret) || strings.Contains(fmt.Sprintf("%+v", err), secret) {
			t.Errorf("the error of Open repeats the password: %v", strings.ReplaceAll(err.Error(), secret, "***"))
		}
	}
}

// The typed constructor refuses what it cannot use without panicking:
// ErrInvalidOption from New, on one line naming the option and its value.
// No server is needed (the pool is never dialled).
func TestNewBadInput(t *testing.T) {
	pool, err := pgxpool.New(context.Background(), "postgres://u@127.0.0.1:1/db")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	for _, c := range []struct {
		name, want string
		pool       *pgxpool.Pool
		opts       []postgres.Option
	}{
		{"nil pool", "New: nil *pgxpool.Pool", nil, nil},
		{"nil opt", "New: nil *pgxpool.Pool", nil, []postgres.Option{nil}},
		{"bad mode", `postgres: WithMode("bogus")`, nil, []postgres.Option{postgres.WithMode("bogus")}},
		{"bad table", `postgres: WithTable("x; drop")`, pool, []postgres.Option{postgres.WithTable("x; drop")}},
		{"keepalive", "postgres: WithKeepalive(-1s)", pool, []postgres.Option{postgres.WithKeepalive(-time.Second)}},
		{"keepalive 0", "postgres: WithKeepalive(0s)", pool, []postgres.Option{postgres.WithKeepalive(0)}},
	} {
		l, err := postgres.New(c.pool, c.opts...)
		if !errors.Is(err, distlock.ErrInvalidOption) || l != nil {
			t.Errorf("%s: New = %v, %v; want ErrInvalidOption", c.name, l, err)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, c.want) || strings.Contains(msg, "\n") {
			t.Errorf("%s: error %q does not say %q on one line", c.name, msg, c.want)
		}
	}
	l, err := postgres.New(pool, nil, postgres.WithMode(postgres.ModeAdvisory), postgres.WithTable("s.t"), postgres.WithKeepalive(time.Millisecond))
	if err != nil || modeOf(l) != postgres.ModeAdvisory {
		t.Fatalf("valid options: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Error(err)
	}
	for _, table := range []string{"", "a.b.c", "Upper", "1x", strings.Repeat("a", 64), `x"y`} {
		if _, err := postgres.DDL(postgres.ModeRow, table); table != "" && !errors.Is(err, distlock.ErrInvalidOption) {
			t.Errorf("DDL(%q): %v", table, err)
		}
	}
	if _, err := postgres.DDL("bogus", ""); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Errorf("DDL of an unknown mode: %v", err)
	}
}

// The give-back of a lost acquire removes exactly that request's hold (one
// request id per hold, not per owner): a WithOwner acquire whose reply was
// lost, followed by the caller's retry that nests on it, leaves — once the
// lost one is given back and the retry released — a free row. (With one
// request id per row, as MySQL's row mode had (issue 14, defect 6), the
// retry would overwrite the lost request's id, the give-back would match
// nothing, and the lock would stay held after the caller's only Release.)
func TestAbandonIsPerHold(t *testing.T) {
	srv := server(t)
	admin := openPool(t, srv, nil)
	table := uniqueTable("abandon")
	l := mustNew(t, openPool(t, srv, nil), postgres.WithTable(table), postgres.WithCreateTable(true))
	defer l.Close()
	ctx := ctxT(t, time.Minute)
	lost := []byte("0123456789abcdef")
	if err := postgres.RowAcquireRaw(ctx, l, "abandon/key", "o", lost, 10*time.Minute); err != nil {
		t.Fatal(err)
	}
	retry, err := l.TryAcquire(ctx, "abandon/key", distlock.WithOwner("o"), distlock.WithTTL(10*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	postgres.RowAbandon(l, "abandon/key", "o", lost, 10*time.Minute)
	holds := func() int {
		var n int
		if err := admin.QueryRow(ctx, `SELECT cardinality(holds) FROM "`+table+`" WHERE lock_key = $1`, []byte("abandon/key")).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if !waitFor(10*time.Second, func() bool { return holds() == 1 }) {
		t.Fatalf("%d holds after the lost acquire was given back, want the retry's 1", holds())
	}
	if err := retry.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if held, err := heldRows(ctx, admin, table); err != nil || len(held) != 0 {
		t.Fatalf("held after the caller's only Release: %q (%v)", held, err)
	}
}

// Lockers of a new table created at once: each creates the table, and
// every first acquisition succeeds (the creations race in the catalog).
func TestCreateTableRace(t *testing.T) {
	srv := server(t)
	ctx := ctxT(t, time.Minute)
	for round := 0; round < 10; round++ {
		table := uniqueTable("create")
		const n = 8
		ls := make([]*distlock.Locker, n)
		for i := range ls {
			pool := openPool(t, srv, nil)
			if err := pool.Ping(ctx); err != nil { // connected before the start
				t.Fatal(err)
			}
			ls[i] = mustNew(t, pool, postgres.WithTable(table), postgres.WithCreateTable(true))
		}
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i, l := range ls {
			wg.Go(func() {
				defer l.Close()
				<-start
				lease, err := l.TryAcquire(ctx, fmt.Sprintf("create/%d", i))
				if err != nil {
					t.Errorf("round %d, locker %d: %v", round, i, err)
					return
				}
				_ = lease.Release(ctx)
			})
		}
		close(start)
		wg.Wait()
	}
}

// Without create_table the table is not created, and the error says how to
// create it; with DDL's statement applied, the Locker works.
func TestMissingTable(t *testing.T) {
	srv := server(t)
	admin := openPool(t, srv, nil)
	ctx := ctxT(t, time.Minute)
	for _, mode := range []postgres.Mode{postgres.ModeRow, postgres.ModeAdvisory} {
		table := uniqueTable("missing")
		l := mustNew(t, openPool(t, srv, nil), postgres.WithMode(mode), postgres.WithTable(table))
		_, err := l.TryAcquire(ctx, "missing/key")
		if err == nil || !strings.Contains(err.Error(), "create_table=true") {
			t.Errorf("%s: TryAcquire without the table: %v", mode, err)
		}
		ddl, err := postgres.DDL(mode, table)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := admin.Exec(ctx, ddl); err != nil {
			t.Fatal(err)
		}
		lease, err := l.TryAcquire(ctx, "missing/key")
		if err != nil {
			t.Fatalf("%s: TryAcquire after DDL: %v", mode, err)
		}
		_ = lease.Release(ctx)
		_ = l.Close()
	}
}

// Expiry runs on the database clock and in absolute time: a Locker whose
// sessions use a +14h time zone and an observer at -10h see the same
// remaining time, equal to the TTL (the client sends only durations, so
// its own clock and zone play no part).
func TestExpiryOnDatabaseClock(t *testing.T) {
	srv := server(t)
	admin := openPool(t, srv, map[string]string{"timezone": "America/Adak"})
	table := uniqueTable("clock")
	l := mustNew(t, openPool(t, srv, map[string]string{"timezone": "Pacific/Kiritimati"}), postgres.WithTable(table), postgres.WithCreateTable(true))
	defer l.Close()
	ctx := ctxT(t, time.Minute)
	lease, err := l.TryAcquire(ctx, "clock/key", distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)
	var us int64
	if err := admin.QueryRow(ctx, `SELECT (EXTRACT(EPOCH FROM expires_at - clock_timestamp()) * 1e6)::bigint FROM "`+table+`" WHERE lock_key = $1`, []byte("clock/key")).Scan(&us); err != nil {
		t.Fatal(err)
	}
	if left := time.Duration(us) * time.Microsecond; left < 50*time.Second || left > time.Minute {
		t.Errorf("the row expires in %v by the database clock, want just under the 1m TTL", left)
	}
}

// Row mode takes every expiry and takeover time from the server's
// clock_timestamp(): two clients whose clocks are 10 minutes ahead of and
// behind the server's see the same lease as an unshifted one would.
func TestRowClientClockSkew(t *testing.T) {
	conformance.Parallel(t)
	srv := server(t)
	table := uniqueTable("skew")
	open := func(shift time.Duration) *distlock.Locker {
		l := mustNew(t, openPool(t, srv, nil), postgres.WithTable(table), postgres.WithCreateTable(true))
		postgres.ShiftClock(l, shift)
		t.Cleanup(func() { _ = l.Close() })
		return l
	}
	sqltest.ClockSkew(t, open(10*time.Minute), open(-10*time.Minute))
}

// The package reads the client's clock only through the hook that
// TestRowClientClockSkew shifts.
func TestClockOnlyThroughHook(t *testing.T) { sqltest.ClockOnlyThroughHook(t, ".") }
