package distlock_test

import (
	"context"
	"fmt"

	"github.com/distlock/distlock/memory"
)

func ExampleLocker_Semaphore() {
	ctx := context.Background()
	locker := memory.MustNew(memory.NewNamespace())
	defer locker.Close()
	sem, err := locker.Semaphore("render-farm", 2)
	if err != nil {
		panic(err)
	}
	a, _ := sem.TryAcquire(ctx)
	b, _ := sem.TryAcquire(ctx)
	_, err = sem.TryAcquire(ctx) // both permits are held
	fmt.Println(a.Token() < b.Token(), err != nil)
	_ = a.Release(ctx)
	c, err := sem.TryAcquire(ctx) // a's permit is free again
	fmt.Println(err == nil, c.Token() > b.Token())
	// Output:
	// true true
	// true true
}

func ExampleLocker_AcquireAll() {
	ctx := context.Background()
	locker := memory.MustNew(memory.NewNamespace())
	defer locker.Close()
	m, err := locker.AcquireAll(ctx, []string{"account:7", "account:3"})
	if err != nil {
		panic(err)
	}
	fmt.Println(m.Keys()) // taken in sorted order
	fmt.Println(m.Release(ctx))
	// Output:
	// [account:3 account:7]
	// <nil>
}
