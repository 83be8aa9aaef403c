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
// locks report the reply's time as the moment their TTL began, and
// shortBy makes the backend's TTL that much shorter than asked — the two
// defects expiry-not-early exists to catch.
type linkedLatent struct {
	backend.Driver
	lag       *atomic.Int64
	fromReply bool
	shortBy   time.Duration
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
	req.TTL -= l.shortBy
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

// expiry-not-early, given a link to delay, passes a client that counts
// its deadline from the send, and fails one that counts it from the reply
// and a backend that ends the TTL 40 ms early — though the check's own
// clock reading comes a scheduling delay before the client's, and the
// holder's request reaches the backend a link delay after it.
func TestExpiryNotEarlyCatchesReplyCounting(t *testing.T) {
	for _, c := range []struct {
		name      string
		fromReply bool
		shortBy   time.Duration
		want      conformance.Status
	}{
		{"send", false, 0, conformance.Pass},
		{"reply", true, 0, conformance.Fail},
		{"early", false, 40 * time.Millisecond, conformance.Fail},
	} {
		ns := memName(t.Name()) + "-" + c.name
		h := conformance.Harness{
			Name: "linked-memory",
			NewLocker: func(context.Context) (*distlock.Locker, error) {
				return distlock.New(memDriver(t, ns), "mem"), nil
			},
			TTL: time.Second,
			Faults: conformance.Faults{NewLinkedLocker: func(context.Context) (*distlock.Locker, conformance.Link, error) {
				lag := new(atomic.Int64)
				return distlock.New(&linkedLatent{Driver: memDriver(t, ns), lag: lag, fromReply: c.fromReply, shortBy: c.shortBy}, "mem"), lagLink{lag}, nil
			}},
		}
		res := conformance.RunChecks(t.Context(), h, conformance.Options{Match: mustRe("^expiry-not-early$")})
		if len(res) != 1 {
			t.Fatalf("%d results, want expiry-not-early's", len(res))
		}
		if res[0].Status != c.want {
			t.Errorf("%s: expiry-not-early %s, want %s: %s", c.name, res[0].Status, c.want, res[0].Message)
		}
	}
}
