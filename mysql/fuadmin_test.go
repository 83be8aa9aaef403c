package mysql_test

import (
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/mysql"
)

// ForceRelease kills a connection only when InnoDB shows it holding the
// row lock: with the record naming another live connection (as a record
// left by a holder whose pooled connection went on to other work would),
// that connection survives, the holder keeps the lock, and the call fails
// instead of evicting an unreported holder. With the record right, the
// holder is evicted and reported.
func TestForUpdateForceReleaseChecksHolder(t *testing.T) {
	srv := server(t)
	admin := adminDB(t, srv)
	table := uniqueTable("fuforce")
	ctx := ctxT(t, time.Minute)
	l := mustNew(t, openDB(t, config(t, srv)), mysql.WithMode(mysql.ModeForUpdate), mysql.WithTable(table))
	defer l.Close()
	lease, err := l.TryAcquire(ctx, "k", distlock.WithMetadata("m"))
	if err != nil {
		t.Fatal(err)
	}
	bystander, err := admin.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer bystander.Close()
	var id int64
	if err := bystander.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
		t.Fatal(err)
	}
	h := mysqlKeyHash("k")
	if _, err := admin.ExecContext(ctx, "UPDATE `"+table+"` SET conn_id = ? WHERE key_hash = ? AND kind = 1", id, h[:]); err != nil {
		t.Fatal(err)
	}
	if _, err := l.ForceRelease(ctx, "k"); !errors.Is(err, distlock.ErrUnavailable) {
		t.Errorf("ForceRelease with a stale record: %v, want ErrUnavailable", err)
	}
	if err := bystander.PingContext(ctx); err != nil {
		t.Errorf("the connection named by the stale record was killed: %v", err)
	}
	if err := lease.Refresh(ctx, time.Minute); err != nil {
		t.Errorf("the holder lost its lock: %v", err)
	}
	holder, _ := mysql.PinnedConnID(l, "k")
	if _, err := admin.ExecContext(ctx, "UPDATE `"+table+"` SET conn_id = ? WHERE key_hash = ? AND kind = 1", holder, h[:]); err != nil {
		t.Fatal(err)
	}
	info, err := l.ForceRelease(ctx, "k")
	if err != nil || !info.Held || info.Token != lease.Token() || info.Metadata != "m" || !info.SessionBound {
		t.Errorf("ForceRelease = %+v, %v", info, err)
	}
	next, err := l.TryAcquire(ctx, "k")
	if err != nil || next.Token() <= lease.Token() {
		t.Fatalf("TryAcquire after the eviction: %v (token %v, evicted %d)", err, next, lease.Token())
	}
	_ = next.Release(ctx)
	select {
	case <-lease.Done():
	case <-time.After(10 * time.Second):
		t.Error("the evicted lease is not Done")
	}
}

// Inspect shows the forupdate holder from another Locker, nested holds
// counted; a free key is not held.
func TestForUpdateInspect(t *testing.T) {
	srv := server(t)
	table := uniqueTable("fuinspect")
	ctx := ctxT(t, time.Minute)
	l := mustNew(t, openDB(t, config(t, srv)), mysql.WithMode(mysql.ModeForUpdate), mysql.WithTable(table))
	defer l.Close()
	op := mustNew(t, openDB(t, config(t, srv)), mysql.WithMode(mysql.ModeForUpdate), mysql.WithTable(table))
	defer op.Close()
	a, err := l.TryAcquire(ctx, "k", distlock.WithOwner("o"), distlock.WithMetadata("first"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := l.TryAcquire(ctx, "k", distlock.WithOwner("o"), distlock.WithMetadata("second"))
	if err != nil {
		t.Fatal(err)
	}
	info, err := op.Inspect(ctx, "k")
	if err != nil || !info.Held || info.Owner != "o" || info.Metadata != "first" || info.Holds != 2 || info.Token != a.Token() || !info.SessionBound || info.TTL != 0 {
		t.Errorf("Inspect = %+v, %v", info, err)
	}
	_ = b.Release(ctx)
	_ = a.Release(ctx)
	if info, err := op.Inspect(ctx, "k"); err != nil || info.Held {
		t.Errorf("Inspect after release = %+v, %v", info, err)
	}
}
