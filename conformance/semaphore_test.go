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
	pm backend.Permitter
}

func (o overIssuing) PermitCapabilities() (backend.Capabilities, error) {
	return o.pm.PermitCapabilities()
}

func overIssue(ctx context.Context, req backend.Request, d backend.Driver) (backend.Lock, error) {
	req.Permits *= 2
	return d.TryAcquire(ctx, req)
}

func TestSuiteCatchesOverIssuedPermits(t *testing.T) {
	res := runDriver(t, func(t *testing.T, ns string) backend.Driver {
		d := memDriver(t, ns)
		return overIssuing{&broken{Driver: d, tryWrap: overIssue}, d.(backend.Permitter)}
	}, "^(semaphore-permits|semaphore-mutex)$")
	expectFail(t, res, "semaphore-permits", "violations")
	expectFail(t, res, "semaphore-mutex", "want ErrNotAcquired")
}
