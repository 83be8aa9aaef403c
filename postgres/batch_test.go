package postgres_test

import (
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/postgres"
)

// RefreshBatch extends every live hold (nested holds of one key included,
// TTLs mixed) and answers ErrNotHeld for a hold whose row expired, leaving
// that row alone.
func TestRefreshBatch(t *testing.T) {
	srv := server(t)
	admin := openPool(t, srv, nil)
	table := uniqueTable("batch")
	pool, tr := tracedPool(t, srv)
	l := mustNew(t, pool, postgres.WithTable(table), postgres.WithCreateTable(true))
	defer l.Close()
	d := postgres.Driver(l)
	br, ok := d.(backend.BatchRefresher)
	if !ok {
		t.Fatal("row mode is not a BatchRefresher")
	}
	ctx := ctxT(t, time.Minute)
	acquire := func(key, owner string) backend.Lock {
		lk, err := d.TryAcquire(ctx, backend.Request{Key: key, Owner: owner, TTL: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return lk
	}
	a, a2, b, c := acquire("batch/a", "o"), acquire("batch/a", "o"), acquire("batch/b", "p"), acquire("batch/c", "q")
	if err := expireRow(ctx, admin, table, "batch/b"); err != nil {
		t.Fatal(err)
	}
	before := tr.n.Load()
	errs := br.RefreshBatch(ctx, []backend.RefreshItem{
		{Lock: a, TTL: time.Minute}, {Lock: a2, TTL: time.Minute}, {Lock: b, TTL: time.Minute}, {Lock: c, TTL: 2 * time.Minute},
		{Lock: nil, TTL: time.Minute}, {Lock: c, TTL: 0},
	})
	// One statement for a, b and c; then a2 (a second hold of a's row)
	// and b (not extended) one by one.
	if n := tr.n.Load() - before; n != 3 {
		t.Errorf("RefreshBatch sent %d statements, want 3", n)
	}
	for i, want := range []error{nil, nil, backend.ErrNotHeld, nil, nil, backend.ErrInvalidTTL} {
		switch {
		case want == nil && i != 4 && errs[i] != nil:
			t.Errorf("item %d: %v", i, errs[i])
		case want != nil && !errors.Is(errs[i], want):
			t.Errorf("item %d: %v, want %v", i, errs[i], want)
		case i == 4 && errs[i] == nil:
			t.Errorf("item %d (nil lock): no error", i)
		}
	}
	remaining := func(key string) time.Duration {
		var us int64
		if err := admin.QueryRow(ctx, `SELECT (EXTRACT(EPOCH FROM expires_at - clock_timestamp()) * 1e6)::bigint FROM "`+table+`" WHERE lock_key = $1`, []byte(key)).Scan(&us); err != nil {
			t.Fatal(err)
		}
		return time.Duration(us) * time.Microsecond
	}
	if r := remaining("batch/a"); r < 50*time.Second {
		t.Errorf("batch/a expires in %v after a 1m refresh", r)
	}
	if r := remaining("batch/c"); r < 110*time.Second {
		t.Errorf("batch/c expires in %v after a 2m refresh", r)
	}
	if r := remaining("batch/b"); r > 0 {
		t.Errorf("the expired batch/b was extended: %v left", r)
	}
}
