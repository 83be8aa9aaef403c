package fence_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/fence"
	"github.com/distlock/distlock/memory"
)

// The seeds' scenario, on the in-process backend and a directory guard:
// client 1 pauses past its lease, client 2 acquires and writes, client 1
// wakes and writes with its old token and is refused.
func Example_pausedHolder() {
	ctx := context.Background()
	ns := memory.NewNamespace()
	locker := memory.MustNew(ns)
	defer locker.Close()
	dir, _ := os.MkdirTemp("", "fence-example-")
	defer os.RemoveAll(dir)
	guard, _ := fence.OpenDir(dir)

	// Client 1 acquires the lock...
	c1, _ := locker.Acquire(ctx, "report", distlock.WithAutoRefresh(false))
	// ...and pauses (GC, SIGSTOP, a swapped-out VM) until its lease expires.
	// It is not told.
	ns.Expire("report")

	// Client 2 acquires the lock and writes.
	c2, _ := locker.Acquire(ctx, "report")
	defer c2.Release(ctx)
	err := guard.WriteFile(ctx, "report.txt", c2.Token(), []byte("from client 2"), 0o644)
	fmt.Println("client 2 writes with token", c2.Token(), "->", err)

	// Client 1 wakes up and writes, still believing it holds the lock.
	err = guard.WriteFile(ctx, "report.txt", c1.Token(), []byte("from client 1"), 0o644)
	fmt.Println("client 1 writes with token", c1.Token(), "-> stale:", errors.Is(err, fence.ErrStale))

	b, _ := os.ReadFile(filepath.Join(dir, "report.txt"))
	fmt.Println("report.txt:", string(b))
	// Output:
	// client 2 writes with token 2 -> <nil>
	// client 1 writes with token 1 -> stale: true
	// report.txt: from client 2
}
