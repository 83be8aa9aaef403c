package distlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/memory"
)

func Example() {
	ctx := context.Background()
	locker, err := distlock.Open(ctx, "mem://example")
	if err != nil {
		panic(err)
	}
	defer locker.Close()

	lease, err := locker.Acquire(ctx, "invoice:42", distlock.WithTTL(10*time.Second))
	if err != nil {
		panic(err)
	}
	fmt.Println("token", lease.Token())

	// Another client finds it held.
	other, _ := distlock.Open(ctx, "mem://example")
	defer other.Close()
	_, err = other.TryAcquire(ctx, "invoice:42")
	fmt.Println(errors.Is(err, distlock.ErrNotAcquired))

	_ = lease.Release(ctx)
	fmt.Println(lease.Release(ctx) != nil) // a second release is refused
	// Output:
	// token 1
	// true
	// true
}

func ExampleWithOwner() {
	ctx := context.Background()
	locker, err := memory.New(memory.NewNamespace(), memory.WithDefaults(distlock.WithTTL(10*time.Second)))
	if err != nil {
		panic(err)
	}
	defer locker.Close()

	outer, _ := locker.Acquire(ctx, "job", distlock.WithOwner("worker-7"))
	inner, _ := locker.Acquire(ctx, "job", distlock.WithOwner("worker-7")) // nests at once
	fmt.Println(outer.Token() == inner.Token())

	_ = inner.Release(ctx)
	_, err = locker.TryAcquire(ctx, "job") // still held by the outer hold
	fmt.Println(errors.Is(err, distlock.ErrNotAcquired))
	_ = outer.Release(ctx)
	// Output:
	// true
	// true
}
