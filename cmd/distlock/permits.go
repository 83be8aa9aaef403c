package main

import (
	"context"
	"fmt"
	"io"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend"
)

// taker takes what run holds while the command runs: one attempt (try) or
// a wait.
type taker func(ctx context.Context, try bool) (*distlock.Lease, error)

// runTaker returns the taker of the lock key, or with permits > 0 of one
// permit of the semaphore key (--permits).
func runTaker(l *distlock.Locker, key string, permits int, opts []distlock.Option) (taker, error) {
	if permits == 0 {
		return func(ctx context.Context, try bool) (*distlock.Lease, error) {
			if try {
				return l.TryAcquire(ctx, key, opts...)
			}
			return l.Acquire(ctx, key, opts...)
		}, nil
	}
	sem, err := l.Semaphore(key, permits)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, try bool) (*distlock.Lease, error) {
		if try {
			return sem.TryAcquire(ctx, opts...)
		}
		return sem.Acquire(ctx, opts...)
	}, nil
}

// checkPermitArgs returns the exit status of an unusable --permits, or -1.
func checkPermitArgs(permits int, owner string, stderr io.Writer) int {
	switch {
	case permits < 0 || permits > backend.MaxPermits:
		fmt.Fprintf(stderr, "distlock run: --permits must be between 1 and %d (0: the lock)\n", backend.MaxPermits)
		return ExitUsage
	case permits > 0 && owner != "":
		fmt.Fprintln(stderr, "distlock run: --permits and --owner exclude each other: every permit is a holder of its own")
		return ExitUsage
	}
	return -1
}
