package postgres_test

import (
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/internal/testkit/slack"
	"github.com/distlock/distlock/postgres"
)

// A server restart (kill -9, start on the same data) while one client holds
// a lock and another waits for it, in both modes: the two never hold it at
// once, the waiter gets it once the holder's tenure is over (advisory: the
// restart ended the holder's session; row: the durable row outlives the
// restart and the holder releases it), with a larger token, and afterwards
// no lock and no pinned session is left.
func TestServerRestartHoldingAndWaiting(t *testing.T) {
	conformance.Parallel(t)
	srv := ownServer(t)
	for _, mode := range []postgres.Mode{postgres.ModeAdvisory, postgres.ModeRow} {
		t.Run(string(mode), func(t *testing.T) {
			table := uniqueTable("rst_" + string(mode))
			ctx := ctxT(t, slack.D(2*time.Minute))
			open := func() *distlock.Locker {
				l := mustNew(t, openPool(t, srv, nil), postgres.WithMode(mode), postgres.WithTable(table),
					postgres.WithCreateTable(true), postgres.WithKeepalive(100*time.Millisecond))
				t.Cleanup(func() { _ = l.Close() })
				return l
			}
			a, b := open(), open()
			// Row mode: a TTL that outlasts the restart, so the holder
			// keeps its lease across it (auto-refresh resumes after).
			first, err := a.TryAcquire(ctx, "k", distlock.WithTTL(slack.D(30*time.Second)))
			if err != nil {
				t.Fatal(err)
			}
			type result struct {
				l   *distlock.Lease
				err error
				at  time.Time
			}
			got := make(chan result, 1)
			go func() {
				l, err := b.Acquire(ctx, "k", distlock.WithRetryUnavailable(true))
				got <- result{l, err, time.Now()}
			}()
			if mode == postgres.ModeAdvisory {
				admin := openPool(t, srv, nil)
				if !waitFor(slack.D(10*time.Second), func() bool { return len(advisoryPIDs(ctx, t, admin, false)) == 1 }) {
					t.Fatal("the waiter is not waiting in the server")
				}
				admin.Close()
			} else {
				time.Sleep(slack.D(200 * time.Millisecond)) // the waiter polls or listens
			}
			if err := srv.Kill(); err != nil {
				t.Fatal(err)
			}
			if err := srv.Restart(ctx); err != nil {
				t.Fatal(err)
			}
			var second result
			if mode == postgres.ModeAdvisory {
				select {
				case second = <-got:
				case <-time.After(slack.D(30 * time.Second)):
					t.Fatal("the waiter did not get the lock the restart freed")
				}
				// The restart ended the holder's session on the server; the
				// holder learns it within its keepalive's detection window,
				// which a restart faster than that window can outrun.
				select {
				case <-first.Done():
				case <-time.After(slack.D(2 * time.Second)):
					t.Fatalf("the waiter got the lock (err %v) and the holder's lease was still live 2s later", second.err)
				}
			} else {
				// The holder's row survives: the waiter must still wait.
				select {
				case second = <-got:
					t.Fatalf("the waiter got the lock (err %v) while the holder's row lease was live (Err %v)", second.err, first.Err())
				case <-time.After(slack.D(2 * time.Second)):
				}
				if err := first.Refresh(ctx, slack.D(30*time.Second)); err != nil {
					t.Fatalf("the holder's durable lease did not survive the restart: %v", err)
				}
				if err := first.Release(ctx); err != nil {
					t.Fatal(err)
				}
				select {
				case second = <-got:
				case <-time.After(slack.D(30 * time.Second)):
					t.Fatal("the waiter did not get the released lock")
				}
			}
			if second.err != nil {
				t.Fatalf("the waiter's Acquire: %v", second.err)
			}
			if second.l.Token() <= first.Token() {
				t.Errorf("token %d after the restart, not above the holder's %d", second.l.Token(), first.Token())
			}
			if err := second.l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			_ = first.Release(ctx)
			if n := len(postgres.PinnedPIDs(a)) + len(postgres.PinnedPIDs(b)); n != 0 {
				t.Errorf("%d sessions still pinned", n)
			}
			admin := openPool(t, srv, nil)
			held := func() []string {
				if mode == postgres.ModeAdvisory {
					k, _ := heldAdvisory(ctx, admin, table)
					return k
				}
				k, _ := heldRows(ctx, admin, table)
				return k
			}
			if k := held(); len(k) != 0 {
				t.Errorf("locks still held on the server: %q", k)
			}
		})
	}
}
