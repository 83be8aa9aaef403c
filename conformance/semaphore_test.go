package conformance_test

import (
	"context"
	"testing"

	"github.com/distlock/distlock/backend"
)

// overIssuing is a memory session whose semaphores admit twice their
// permit count: a backend that counts holders wrongly.
type overIssuing struct {
	*broken
	sem backend.Semaphorer
}

func (o overIssuing) TryAcquirePermit(ctx context.Context, req backend.Request, permits int) (backend.Lock, error) {
	return o.sem.TryAcquirePermit(ctx, req, 2*permits)
}

func (o overIssuing) PermitCapabilities() backend.Capabilities { return o.sem.PermitCapabilities() }

func TestSuiteCatchesOverIssuedPermits(t *testing.T) {
	res := runDriver(t, func(t *testing.T, ns string) backend.Driver {
		d := memDriver(t, ns)
		return overIssuing{&broken{Driver: d}, d.(backend.Semaphorer)}
	}, "^(semaphore-permits|semaphore-mutex)$")
	expectFail(t, res, "semaphore-permits", "violations")
	expectFail(t, res, "semaphore-mutex", "want ErrNotAcquired")
}
