package main

import (
	"context"
	"fmt"
	"log"
	"sync"
	"time"

	"github.com/distlock/distlock"
	_ "github.com/distlock/distlock/memory" // registers mem://
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	locker, err := distlock.Open(ctx, "mem://")
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	fmt.Printf("backend capabilities: %+v\n", locker.Capabilities())

	var wg sync.WaitGroup
	for w := 1; w <= 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 3; i++ {
				err := locker.Do(ctx, "report:daily", func(ctx context.Context) error {
					fmt.Printf("worker %d holds the lock\n", w)
					time.Sleep(10 * time.Millisecond) // the protected work; ctx ends if the lock is lost
					return ctx.Err()
				}, distlock.WithTTL(5*time.Second))
				if err != nil {
					log.Fatal(err)
				}
			}
		}()
	}
	wg.Wait()

	lease, err := locker.TryAcquire(ctx, "report:daily")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("fencing token after 12 critical sections: %d\n", lease.Token())
	_ = lease.Release(ctx)
}
