package zookeeper

import (
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/conformance"
)

// TestSemaphoreAdmissionReleasedBeforeReturn: an acquisition of a permit
// gives its admission lock back before it returns, so that a TryAcquire
// right after it — here after one refused for its count — is not found
// busy by a leftover admission lock of another session.
func TestSemaphoreAdmissionReleasedBeforeReturn(t *testing.T) {
	conformance.Parallel(t)
	srv := standalone(t)
	base := uniqueBase(t)
	a := dialT(t, []string{srv.Addr()}, WithBasePath(base))
	b := dialT(t, []string{srv.Addr()}, WithBasePath(base))
	c := dialT(t, []string{srv.Addr()}, WithBasePath(base)) // another session: no ordering with b's requests
	ctx := ctxT(t, time.Minute)
	held, err := a.Semaphore("adm", 3)
	if err != nil {
		t.Fatal(err)
	}
	first, err := held.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Release(ctx)
	wrong, _ := c.Semaphore("adm", 2)
	right, _ := b.Semaphore("adm", 3)
	for i := range 10 {
		if _, err := wrong.TryAcquire(ctx); !errors.Is(err, distlock.ErrInvalidOption) {
			t.Fatalf("round %d: another count: %v, want ErrInvalidOption", i, err)
		}
		p, err := right.TryAcquire(ctx)
		if err != nil {
			t.Fatalf("round %d: TryAcquire right after a refused one: %v", i, err)
		}
		if err := p.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
