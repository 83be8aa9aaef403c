package mysql_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testkit/netfault"
	"github.com/distlock/distlock/mysql"
)

// Issue 14 defect 6: a WithOwner acquire times out while its statement is
// still on its way to the server (the request, not the reply, is delayed);
// the owner retries after the lost statement has landed, and the retry
// nests in the hold that statement took. The background give-back of the
// lost hold must still find it: after the owner's only Release the lock is
// free (with one id per row, the retry overwrote the lost request's id and
// the lock stayed held for its 10-minute TTL).
func TestRowLostRequestOwnerRetry(t *testing.T) {
	p, l, other := proxiedPair(t, "lostreq")
	// The give-back tries at the timeout and 250ms later (before the
	// delayed statement lands), then not before 4s: the test sees the
	// landed hold and retries before the give-back can find it, whatever
	// the machine's load.
	mysql.SetUndoSchedule(l, 0, 250*time.Millisecond, 4*time.Second, 6*time.Second, 8*time.Second)
	ctx := ctxT(t, time.Minute)
	const key = "lost-request"
	owner := distlock.WithOwner("retrying-owner")
	warm, err := l.TryAcquire(ctx, key, owner)
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Release(ctx); err != nil {
		t.Fatal(err)
	}

	const delay, timeout = 600 * time.Millisecond, 200 * time.Millisecond
	p.DelayRequests(delay)
	// Heal before the ctx ends: the acquire keeps its delay, the
	// give-back statements that follow the timeout pass at once.
	heal := time.AfterFunc(timeout*3/4, p.Heal)
	defer heal.Stop()
	actx, cancel := context.WithTimeout(ctx, timeout)
	start := time.Now()
	_, err = l.Acquire(actx, key, owner, distlock.WithTTL(10*time.Minute))
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("acquire with its request in flight: %v, want the ctx error", err)
	}
	// Wait for the lost statement to land: it holds the row.
	waitInfo(t, other, key, 5*time.Second, "the lost statement's hold", func(i distlock.LockInfo) bool { return i.Held && i.Holds == 1 })
	t.Logf("lost statement landed %v after the acquire started", time.Since(start).Round(time.Millisecond))

	retry, err := l.TryAcquire(ctx, key, owner, distlock.WithTTL(10*time.Minute))
	if err != nil {
		t.Fatalf("the owner's retry: %v", err)
	}
	if info, err := other.Inspect(ctx, key); err != nil || info.Holds < 1 {
		t.Fatalf("after the retry: %+v, %v", info, err)
	} else {
		t.Logf("after the retry: %d holds (2 if it nested before the give-back ran)", info.Holds)
	}
	if err := retry.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// The give-back runs on its schedule (its try 4s after the timeout
	// finds the hold): within 10s the lock must be free for another owner.
	waitInfo(t, other, key, 10*time.Second, "the lock free after the owner's only Release", func(i distlock.LockInfo) bool { return !i.Held })
	lease, err := other.TryAcquire(ctx, key)
	if err != nil {
		t.Fatalf("another owner after the owner's only Release: %v", err)
	}
	_ = lease.Release(ctx)
}

// waitInfo polls Inspect until ok holds, for at most d.
func waitInfo(t *testing.T, l *distlock.Locker, key string, d time.Duration, what string, ok func(distlock.LockInfo) bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		info, err := l.Inspect(ctxT(t, 10*time.Second), key)
		if err != nil {
			t.Fatal(err)
		}
		if ok(info) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %+v", what, d, info)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// proxiedPair returns two row-mode Lockers on one new table: l reaches the
// server through the fault proxy p (closed with the test), other directly.
func proxiedPair(t *testing.T, name string) (p *netfault.Proxy, l, other *distlock.Locker) {
	t.Helper()
	srv := server(t)
	table := uniqueTable(name)
	p, err := netfault.Listen(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	cfg := config(t, srv)
	cfg.Addr = p.Addr()
	l = mustNew(t, openDB(t, cfg), mysql.WithTable(table))
	t.Cleanup(func() { l.Close() })
	other = mustNew(t, openDB(t, config(t, srv)), mysql.WithTable(table))
	t.Cleanup(func() { other.Close() })
	return p, l, other
}
