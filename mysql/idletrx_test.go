package mysql_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/internal/testkit/netfault"
	"github.com/distlock/distlock/mysql"
)

// Issue 14 defect 8: MariaDB ends a session whose transaction stays idle
// longer than idle_transaction_timeout (or its read-only and write
// variants), which can be far shorter than wait_timeout. A forupdate holder
// keeps its lock while idle (its keepalive runs often enough), and a holder
// cut off from the server reports the loss no later than the server frees
// the lock.
func TestForUpdateIdleTransactionTimeout(t *testing.T) {
	t.Parallel() // its subtests: conformance.Parallel
	for _, variable := range []string{"idle_transaction_timeout", "idle_readonly_transaction_timeout", "idle_write_transaction_timeout"} {
		t.Run(variable, func(t *testing.T) {
			conformance.Parallel(t) // its own table and proxy
			srv := server(t)
			table := uniqueTable("fuidle")
			ctx := ctxT(t, time.Minute)
			b := fuLocker(t, openDB(t, config(t, srv)), table)

			cfg := config(t, srv)
			// wait_timeout stays at the server's default (8 hours).
			cfg.Params = map[string]string{variable: "2"}
			p, err := netfault.Listen(srv.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			cfg.Addr = p.Addr()
			a := fuLocker(t, openDB(t, cfg), table, mysql.WithKeepalive(time.Minute))

			lease, err := a.TryAcquire(ctx, "idle")
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(3 * time.Second) // 1.5 × the idle limit
			if _, err := b.TryAcquire(ctx, "idle"); !errors.Is(err, distlock.ErrNotAcquired) {
				t.Fatalf("the idle holder's lock (lease error %v): %v, want busy", lease.Err(), err)
			}
			if err := lease.Err(); err != nil {
				t.Fatalf("idle holder lost its lock to %s: %v", variable, err)
			}

			p.Blackhole()
			cut := time.Now()
			var lostAt atomic.Int64
			go func() { <-lease.Done(); lostAt.Store(int64(time.Since(cut))) }()
			other, err := b.Acquire(ctxT(t, 4*time.Second), "idle")
			acquired := time.Since(cut)
			lost := time.Duration(lostAt.Load())
			if err != nil {
				// The server did not end the silent session: safe.
				t.Logf("the server kept the cut-off holder's lock %v (%v); the holder declared the loss after %v", acquired.Round(time.Millisecond), err, lost.Round(time.Millisecond))
				p.Heal()
				return
			}
			t.Logf("cut-off holder declared the loss after %v; the server freed the lock after %v", lost.Round(time.Millisecond), acquired.Round(time.Millisecond))
			if lost == 0 || lost > acquired {
				t.Errorf("holder learned of the loss at %v, after the takeover at %v", lost, acquired)
			}
			_ = other.Release(ctx)
			p.Heal()
		})
	}
}
