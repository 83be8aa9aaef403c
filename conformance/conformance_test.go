package conformance_test

import (
	"context"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/internal/async"
	"github.com/distlock/distlock/memory"
)

// The suite must be able to fail: each broken backend below violates one
// contract line, and the check for that line must report it.

// broken wraps a memory session and breaks one behaviour.
type broken struct {
	backend.Driver
	caps    func(backend.Capabilities) backend.Capabilities
	lock    func(backend.Lock) backend.Lock
	tryWrap func(ctx context.Context, req backend.Request, d backend.Driver) (backend.Lock, error)
}

func (b *broken) Capabilities() backend.Capabilities {
	c := b.Driver.Capabilities()
	c.Notify, c.Fair = false, false // force the root wait loop over TryAcquire
	if b.caps != nil {
		c = b.caps(c)
	}
	return c
}

// Inspect is the wrapped driver's, with the waiters unknown: the root wait
// loop polls TryAcquire, so nobody queues where the driver counts waiters.
func (b *broken) Inspect(ctx context.Context, key string) (backend.LockInfo, error) {
	info, err := b.Driver.Inspect(ctx, key)
	info.Waiters = -1
	return info, err
}

func (b *broken) TryAcquire(ctx context.Context, req backend.Request) (backend.Lock, error) {
	var (
		l   backend.Lock
		err error
	)
	if b.tryWrap != nil {
		l, err = b.tryWrap(ctx, req, b.Driver)
	} else {
		l, err = b.Driver.TryAcquire(ctx, req)
	}
	if err == nil && b.lock != nil {
		l = b.lock(l)
	}
	return l, err
}

type fixedToken struct{ backend.Lock }

func (fixedToken) Token() uint64 { return 7 }

// unchecked reports every refresh as successful, owner or not.
type unchecked struct{ backend.Lock }

func (u unchecked) Refresh(context.Context, time.Duration) error { return nil }

// memDriver opens a memory session on the namespace called name through the
// registry.
func memDriver(t *testing.T, name string) backend.Driver {
	open, err := backend.Lookup("mem")
	if err != nil {
		t.Fatal(err)
	}
	d, err := open(context.Background(), &url.URL{Scheme: "mem", Host: memName(name)})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func run(t *testing.T, mk func(t *testing.T, ns string) *broken, match string) []conformance.Result {
	t.Helper()
	return runDriver(t, func(t *testing.T, ns string) backend.Driver { return mk(t, ns) }, match)
}

// runDriver runs the checks matching match on the drivers mk makes.
func runDriver(t *testing.T, mk func(t *testing.T, ns string) backend.Driver, match string) []conformance.Result {
	t.Helper()
	ns := t.Name()
	h := conformance.Harness{
		Name: "broken",
		NewLocker: func(context.Context) (*distlock.Locker, error) {
			return distlock.New(mk(t, ns), "broken"), nil
		},
		TTL: 200 * time.Millisecond,
		Faults: conformance.Faults{Expire: func(_ context.Context, key string) error {
			memory.Shared(memName(ns)).Expire(key)
			return nil
		}},
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return conformance.RunChecks(ctx, h, conformance.Options{Match: mustRe(match), Destructive: true})
}

func expectFail(t *testing.T, results []conformance.Result, check, contains string) {
	t.Helper()
	for _, r := range results {
		if r.Name != check {
			continue
		}
		if r.Status != conformance.Fail {
			t.Fatalf("check %s = %s on a broken backend, want FAIL (message: %s)", check, r.Status, r.Message)
		}
		if !strings.Contains(r.Message, contains) || !strings.Contains(r.Message, "contract") {
			t.Errorf("check %s failed with %q, want it to name the contract and mention %q", check, r.Message, contains)
		}
		return
	}
	t.Fatalf("check %s did not run", check)
}

func TestSuiteCatchesNoMutualExclusion(t *testing.T) {
	// Every TryAcquire succeeds under a fresh owner's own key: no exclusion.
	res := run(t, func(t *testing.T, ns string) *broken {
		return &broken{Driver: memDriver(t, ns), tryWrap: func(ctx context.Context, req backend.Request, d backend.Driver) (backend.Lock, error) {
			req.Key += "/" + req.Owner
			return d.TryAcquire(ctx, req)
		}}
	}, "^(mutual-exclusion|try-acquire-held)$")
	// Either witness may see it first: the overlap counter, or tokens
	// that fail to increase from one critical section to the next.
	expectFail(t, res, "mutual-exclusion", "")
	expectFail(t, res, "try-acquire-held", "want ErrNotAcquired")
}

func TestSuiteCatchesUncheckedRefresh(t *testing.T) {
	res := run(t, func(t *testing.T, ns string) *broken {
		return &broken{Driver: memDriver(t, ns), lock: func(l backend.Lock) backend.Lock { return unchecked{l} }}
	}, "^(stale-holder)$")
	expectFail(t, res, "stale-holder", "stale holder's Refresh")
}

// TestSuiteCatchesIgnoredMinHold: a lock whose refresh does nothing (the
// release within a minimum hold is a refresh where the driver has no
// backend.DelayedReleaser) frees the lock at its TTL, before the minimum
// hold ends.
func TestSuiteCatchesIgnoredMinHold(t *testing.T) {
	res := run(t, func(t *testing.T, ns string) *broken {
		return &broken{Driver: memDriver(t, ns), lock: func(l backend.Lock) backend.Lock { return unchecked{l} }}
	}, "^min-hold$")
	expectFail(t, res, "min-hold", "within its")
}

func TestSuiteCatchesConstantTokens(t *testing.T) {
	res := run(t, func(t *testing.T, ns string) *broken {
		return &broken{Driver: memDriver(t, ns), lock: func(l backend.Lock) backend.Lock { return fixedToken{l} }}
	}, "^fencing$")
	expectFail(t, res, "fencing", "strictly increasing")
}

func TestSuiteCatchesFalseClaims(t *testing.T) {
	res := run(t, func(t *testing.T, ns string) *broken {
		return &broken{Driver: memDriver(t, ns), caps: func(c backend.Capabilities) backend.Capabilities {
			c.Notify = true // claimed, but the wait loop polls with the caller's policy
			return c
		}}
	}, "^notify$")
	expectFail(t, res, "notify", "woken")
}

func TestSuiteCatchesNoExpiry(t *testing.T) {
	// A backend that claims Expiring but whose locks never expire (TTL
	// stretched to an hour server-side).
	res := run(t, func(t *testing.T, ns string) *broken {
		return &broken{Driver: memDriver(t, ns), tryWrap: func(ctx context.Context, req backend.Request, d backend.Driver) (backend.Lock, error) {
			req.TTL = time.Hour
			return d.TryAcquire(ctx, req)
		}}
	}, "^holder-superseded$")
	expectFail(t, res, "holder-superseded", "TTL")
}

func TestRunChecksReportsSkips(t *testing.T) {
	res := run(t, func(t *testing.T, ns string) *broken {
		return &broken{Driver: memDriver(t, ns), caps: func(c backend.Capabilities) backend.Capabilities {
			return backend.Capabilities{Expiring: true}
		}}
	}, "^(reentrant|fencing|fair|notify|session-bound|durable)$")
	if len(res) != 6 {
		t.Fatalf("got %d results, want 6", len(res))
	}
	for _, r := range res {
		if r.Status != conformance.Skip || !strings.Contains(r.Message, "does not claim") {
			t.Errorf("%s: %s %q, want a skip that names the unclaimed capability", r.Name, r.Status, r.Message)
		}
	}
}

func TestMemoryViaRunChecks(t *testing.T) {
	ns := memory.NewNamespace()
	h := conformance.Harness{
		Name:      "memory",
		NewLocker: func(context.Context) (*distlock.Locker, error) { return memory.MustNew(ns), nil },
		TTL:       200 * time.Millisecond,
	}
	var progress int
	res := conformance.RunChecks(context.Background(), h, conformance.Options{Progress: func(conformance.Result) { progress++ }})
	if len(res) != len(conformance.Checks()) {
		t.Fatalf("%d results for %d checks", len(res), len(conformance.Checks()))
	}
	for _, r := range res {
		switch {
		case r.Status == conformance.Skip:
			// In-process memory has no URL, link or servers to break.
			if !strings.Contains(r.Message, "harness") && !strings.Contains(r.Message, "destructive") {
				t.Errorf("%s: skipped for %q, want only missing-hook skips", r.Name, r.Message)
			}
		case r.Status != conformance.Pass:
			t.Errorf("%s: %s %s", r.Name, r.Status, r.Message)
		}
	}
	if progress < len(res) {
		t.Errorf("progress called %d times for %d results", progress, len(res))
	}
}

// TestPollingMemory runs the whole suite over the memory backend seen only
// through the plain Driver interface: no native wait, no notification. It
// validates distlock's own wait loop, the one the polling backends use.
func TestPollingMemory(t *testing.T) {
	ns := memName(t.Name())
	conformance.Run(t, conformance.Harness{
		Name: "polling-memory",
		NewLocker: func(context.Context) (*distlock.Locker, error) {
			return distlock.New(&broken{Driver: memDriver(t, ns)}, "polling"), nil
		},
		TTL: 300 * time.Millisecond,
		Faults: conformance.Faults{Expire: func(_ context.Context, key string) error {
			memory.Shared(ns).Expire(key)
			return nil
		}},
	})
}

// latent delays every call of a memory session the way a network would:
// the request by req before it reaches the namespace, the reply by reply
// after. The memory backend has no latency of its own, so deadline bugs —
// a validity counted from the reply instead of the send — pass over it
// unseen; here they cannot.
type latent struct {
	backend.Driver
	req, reply time.Duration
}

func (l *latent) Capabilities() backend.Capabilities {
	c := l.Driver.Capabilities()
	c.Notify, c.Fair = false, false // the root wait loop, over TryAcquire
	return c
}

// TryAcquire keeps the driver contract: it returns when ctx ends, and an
// acquisition whose reply ctx cut short is undone in the background.
func (l *latent) TryAcquire(ctx context.Context, req backend.Request) (backend.Lock, error) {
	if err := async.Sleep(ctx, l.req); err != nil {
		return nil, err
	}
	lk, err := l.Driver.TryAcquire(context.WithoutCancel(ctx), req)
	if cerr := async.Sleep(ctx, l.reply); cerr != nil {
		if err == nil {
			go func() { _ = lk.Release(context.Background()) }()
		}
		return nil, cerr
	}
	if err == nil {
		lk = &latentLock{Lock: lk, l: l}
	}
	return lk, err
}

type latentLock struct {
	backend.Lock
	l *latent
}

func (k *latentLock) Refresh(ctx context.Context, ttl time.Duration) error {
	if err := async.Sleep(ctx, k.l.req); err != nil {
		return err
	}
	err := k.Lock.Refresh(context.WithoutCancel(ctx), ttl)
	if cerr := async.Sleep(ctx, k.l.reply); cerr != nil {
		return cerr
	}
	return err
}

func (k *latentLock) Release(ctx context.Context) error {
	if err := async.Sleep(ctx, k.l.req); err != nil {
		return err
	}
	err := k.Lock.Release(context.WithoutCancel(ctx))
	if cerr := async.Sleep(ctx, k.l.reply); cerr != nil {
		return cerr
	}
	return err
}

// latentChecks are the checks whose verdicts hang on when a request was
// sent and a reply heard: the deadline, loss, refresh and ctx checks.
const latentChecks = "^(expiry-not-early|holder-superseded|expired-release|stale-holder|refresh-extends|auto-refresh|refresh-refused|refresh-release-race|acquire-waits|acquire-deadline|acquire-cancel|close|lease-context|observer|min-hold|try-do|reentrant|fencing|multi-cancel|multi-lost-member|semaphore-expiry|semaphore-cancel)$"

// TestLatentMemory runs the latentChecks over memory sessions with
// network-like latency: every other Locker's replies come 40 ms late and
// its requests 5 ms late, the others' 10 and 20 ms, so a check's holder
// often hears the backend later than its rival does, and a validity
// counted from the reply instead of the send shows (expiry-not-early checks
// the deadline itself).
func TestLatentMemory(t *testing.T) {
	ns := memName(t.Name())
	var n atomic.Int64
	h := conformance.Harness{
		Name: "latent-memory",
		NewLocker: func(context.Context) (*distlock.Locker, error) {
			d := &latent{Driver: memDriver(t, ns), req: 20 * time.Millisecond, reply: 10 * time.Millisecond}
			if n.Add(1)%2 == 1 {
				d.req, d.reply = 5*time.Millisecond, 40*time.Millisecond
			}
			return distlock.New(d, "latent"), nil
		},
		TTL: time.Second, // room for the latency, and for a loaded machine
		Faults: conformance.Faults{Expire: func(_ context.Context, key string) error {
			memory.Shared(ns).Expire(key)
			return nil
		}},
	}
	res := conformance.RunChecks(t.Context(), h, conformance.Options{Match: mustRe(latentChecks)})
	if len(res) < 15 {
		t.Fatalf("%d latent checks ran, want every one of %s", len(res), latentChecks)
	}
	for _, r := range res {
		if r.Status == conformance.Fail || r.Status == conformance.Unavailable {
			t.Errorf("%s: %s\n%s", r.Name, r.Status, r.Message)
		}
	}
}
