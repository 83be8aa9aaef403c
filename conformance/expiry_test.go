package conformance_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/internal/async"
)

// linkedLatent is a memory session behind a Link: every TryAcquire's
// request and reply each take the link's latency. fromReply makes its
// locks report the reply's time as the moment their TTL began — the
// deadline defect expiry-not-early exists to catch.
type linkedLatent struct {
	backend.Driver
	lag       *atomic.Int64
	fromReply bool
}

func (l *linkedLatent) Capabilities() backend.Capabilities {
	c := l.Driver.Capabilities()
	c.Notify, c.Fair = false, false
	return c
}

func (l *linkedLatent) TryAcquire(ctx context.Context, req backend.Request) (backend.Lock, error) {
	lag := time.Duration(l.lag.Load())
	if err := async.Sleep(ctx, lag); err != nil {
		return nil, err
	}
	lk, err := l.Driver.TryAcquire(context.WithoutCancel(ctx), req)
	if cerr := async.Sleep(ctx, lag); cerr != nil {
		if err == nil {
			go func() { _ = lk.Release(context.Background()) }()
		}
		return nil, cerr
	}
	switch {
	case err != nil:
	case l.fromReply:
		lk = issuedAt{Lock: lk, at: time.Now()}
	default:
		// The memory lock's own grant time (after the request's delay)
		// stays hidden: a client learns only when it sent.
		lk = struct{ backend.Lock }{lk}
	}
	return lk, err
}

// issuedAt claims its TTL began at at.
type issuedAt struct {
	backend.Lock
	at time.Time
}

func (i issuedAt) IssuedAt() time.Time { return i.at }

// lagLink is the Link of a linkedLatent: only latency is modelled (a
// blackhole or cut is an hour's latency, which this test never uses).
type lagLink struct{ lag *atomic.Int64 }

func (k lagLink) SetLatency(d time.Duration) { k.lag.Store(int64(d)) }
func (k lagLink) Blackhole()                 { k.lag.Store(int64(time.Hour)) }
func (k lagLink) Cut()                       { k.lag.Store(int64(time.Hour)) }
func (k lagLink) Heal()                      { k.lag.Store(0) }

// expiry-not-early, given a link to delay, tells a deadline counted from
// the send (pass) from one counted from the reply (fail), though the
// check's own clock reading comes a scheduling delay before the client's.
func TestExpiryNotEarlyCatchesReplyCounting(t *testing.T) {
	for _, fromReply := range []bool{false, true} {
		ns := memName(t.Name())
		if fromReply {
			ns += "-reply"
		}
		h := conformance.Harness{
			Name: "linked-memory",
			NewLocker: func(context.Context) (*distlock.Locker, error) {
				return distlock.New(memDriver(t, ns), "mem"), nil
			},
			TTL: time.Second,
			Faults: conformance.Faults{NewLinkedLocker: func(context.Context) (*distlock.Locker, conformance.Link, error) {
				lag := new(atomic.Int64)
				return distlock.New(&linkedLatent{Driver: memDriver(t, ns), lag: lag, fromReply: fromReply}, "mem"), lagLink{lag}, nil
			}},
		}
		res := conformance.RunChecks(t.Context(), h, conformance.Options{Match: mustRe("^expiry-not-early$")})
		if len(res) != 1 {
			t.Fatalf("%d results, want expiry-not-early's", len(res))
		}
		want := conformance.Pass
		if fromReply {
			want = conformance.Fail
		}
		if res[0].Status != want {
			t.Errorf("validity counted from the reply: %v; expiry-not-early %s, want %s: %s", fromReply, res[0].Status, want, res[0].Message)
		}
	}
}
