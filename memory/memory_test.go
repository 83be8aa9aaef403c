package memory_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/memory"
)

func harness(ns *memory.Namespace) conformance.Harness {
	return conformance.Harness{
		Name:      "memory",
		NewLocker: func(context.Context) (distlock.Locker, error) { return memory.New(ns), nil },
		TTL:       300 * time.Millisecond,
		Faults: conformance.Faults{
			Expire: func(_ context.Context, key string) error {
				if !ns.Expire(key) {
					return fmt.Errorf("key %q not held", key)
				}
				return nil
			},
			KillClient: func(l distlock.Locker) error {
				l.(*memory.Locker).Crash()
				return nil
			},
		},
	}
}

func TestConformance(t *testing.T) {
	conformance.Run(t, harness(memory.NewNamespace()))
}
