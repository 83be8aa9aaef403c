package mysql_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/internal/testkit/netfault"
	"github.com/distlock/distlock/internal/testkit/slack"
)

// TestForUpdateWaitEndsWhenKilledReplyIsLost: a waiting Acquire's locking
// read is stopped at its ctx's end by KILL QUERY from another connection.
// The KILL succeeds, but the killed statement's error reply, on the
// waiting connection, never comes (that connection's replies are held by
// the network). The Acquire must still return shortly after its ctx, by
// closing the waiting connection, not when the network heals.
func TestForUpdateWaitEndsWhenKilledReplyIsLost(t *testing.T) {
	conformance.Parallel(t)
	srv := server(t)
	table := uniqueTable("fusilent")
	ctx := ctxT(t, time.Minute)
	holder := fuLocker(t, openDB(t, config(t, srv)), table)
	held, err := holder.TryAcquire(ctx, "busy")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = held.Release(context.Background()) }()

	p, err := netfault.Listen(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	cfg := config(t, srv)
	cfg.Addr = p.Addr()
	db := openDB(t, cfg)
	db.SetMaxIdleConns(1)
	waiter := fuLocker(t, db, table)
	// One open connection (index 0): the waiting read runs on it; the
	// KILL opens another.
	lease, err := waiter.TryAcquire(ctx, "free")
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(slack.D(5 * time.Second))
	for p.Conns() != 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := p.Conns(); n != 1 {
		t.Fatalf("%d open connections, want 1", n)
	}

	const wait = 500 * time.Millisecond
	got := make(chan error, 1)
	start := time.Now()
	go func() {
		actx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		_, err := waiter.Acquire(actx, "busy")
		got <- err
	}()
	time.Sleep(wait / 2) // the locking read waits for the row in the server
	if !p.SilenceReplies(0) {
		t.Fatal("the waiting connection closed before the silence")
	}
	bound := wait + slack.D(750*time.Millisecond)
	select {
	case err := <-got:
		if !errors.Is(err, distlock.ErrNotAcquired) {
			t.Errorf("Acquire = %v, want ErrNotAcquired", err)
		}
		if d := time.Since(start); d > bound {
			t.Errorf("Acquire returned after %v, want within %v", d, bound)
		}
	case <-time.After(bound + slack.D(5*time.Second)):
		p.Heal()
		t.Fatalf("Acquire still waiting %v after its ctx of %v ended: the killed statement's lost reply is awaited", time.Since(start), wait)
	}
	p.Heal()
}
