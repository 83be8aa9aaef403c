package postgres_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/postgres"
)

// New over an existing pool: a lease row with a 30s TTL, refreshed while
// held; the fencing token goes with every write to the protected resource.
func ExampleNew() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app:secret@db:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	ddl, _ := postgres.DDL(postgres.ModeRow, "")
	if _, err := pool.Exec(ctx, ddl); err != nil { // or WithCreateTable(true)
		log.Fatal(err)
	}
	locker, err := postgres.New(pool, postgres.WithDefaults(distlock.WithTTL(30*time.Second)))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	lease, err := locker.Acquire(ctx, "report:nightly")
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(context.WithoutCancel(ctx))
	fmt.Println("fencing token", lease.Token())
}

// Advisory mode by URL: the server frees the lock when the holder's session
// ends; never through a transaction-pooling proxy.
func ExampleWithMode() {
	ctx := context.Background()
	locker, err := distlock.Open(ctx, "postgres://app:secret@db:5432/app?mode=advisory&create_table=true&session_timeout=30s")
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	lease, err := locker.TryAcquire(ctx, "migrations")
	if err != nil {
		log.Fatal(err) // errors.Is(err, distlock.ErrNotAcquired): someone else migrates
	}
	defer lease.Release(context.WithoutCancel(ctx))
}
