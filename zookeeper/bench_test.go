package zookeeper

import (
	"context"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testkit/benchkit"
)

// go test -run '^$' -bench . -benchtime 2000x ./zookeeper/

func benchLockers(b *testing.B, n int) []*distlock.Locker {
	c := ensemble(b)
	base := uniqueBase(b)
	ls := make([]*distlock.Locker, n)
	for i := range ls {
		ls[i] = dialT(b, c.Addrs(), WithBasePath(base))
		warm(b, ls[i])
	}
	return ls
}

// BenchmarkAcquireRelease: uncontended Acquire + Release of one key on the
// 3-node ensemble (create, getChildren ∥ exists, delete).
func BenchmarkAcquireRelease(b *testing.B) {
	l := benchLockers(b, 1)[0]
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		lease, err := l.Acquire(ctx, "bench/uncontended")
		if err != nil {
			b.Fatal(err)
		}
		if err := lease.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTryAcquireRelease: uncontended TryAcquire + Release.
func BenchmarkTryAcquireRelease(b *testing.B) {
	l := benchLockers(b, 1)[0]
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		lease, err := l.TryAcquire(ctx, "bench/try")
		if err != nil {
			b.Fatal(err)
		}
		if err := lease.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHotKeyHandoff: 16 goroutines over 4 Lockers (sessions) take
// turns on one key; each op is one acquisition. The handoff latency is the
// time from the start of a holder's Release to the next holder's Acquire
// returning.
func BenchmarkHotKeyHandoff(b *testing.B) {
	const goroutines = 16
	ls := benchLockers(b, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	lockers := make([]*distlock.Locker, len(ls))
	for i, l := range ls {
		lockers[i] = l
	}
	benchkit.Handoff(b, ctx, lockers, "bench/hot", goroutines)
}

// BenchmarkInspect: Locker.Inspect of a held key with one waiter, from
// another session (Sync, getChildren, get).
func BenchmarkInspect(b *testing.B) {
	ls := benchLockers(b, 2)
	ctx := context.Background()
	lease, err := ls[0].TryAcquire(ctx, "bench/inspect", distlock.WithMetadata("bench"))
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = lease.Release(ctx) }()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if info, err := ls[1].Inspect(ctx, "bench/inspect"); err != nil || !info.Held {
			b.Fatal(info, err)
		}
	}
}

// BenchmarkNested: a nested TryAcquire + Release on a held key: each
// writes the new hold count into the node (one setData each).
func BenchmarkNested(b *testing.B) {
	l := benchLockers(b, 1)[0]
	ctx := context.Background()
	outer, err := l.TryAcquire(ctx, "bench/nested", distlock.WithOwner("bench"))
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = outer.Release(ctx) }()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		lease, err := l.TryAcquire(ctx, "bench/nested", distlock.WithOwner("bench"))
		if err != nil {
			b.Fatal(err)
		}
		if err := lease.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
