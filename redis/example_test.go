package redis_test

import (
	"context"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/redis"
)

// Waiters of every Locker made WithFair — in this process or any other —
// are served in arrival order, and each release hands the lock straight
// to the next waiter. The URL form is redis://host:6379/0?fair=true.
func ExampleWithFair() {
	ctx := context.Background()
	client := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:6379"})
	locker, err := redis.New(client, redis.WithFair(), redis.WithCloseClient(),
		redis.WithDefaults(distlock.WithTTL(10*time.Second)))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locker.Close()

	lease, err := locker.Acquire(ctx, "report:nightly")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lease.Release(context.WithoutCancel(ctx))
	fmt.Println("fair:", locker.Capabilities().Fair, "token:", lease.Token())
}
