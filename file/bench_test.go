package file

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/distlock/distlock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Handoff latency across processes: this process holds the lock, a waiter
// process blocks on it, and the time from this process's release to the
// waiter's report that it holds the lock is measured (ns/op; p50 and p99
// as metrics). The waiter is a distlock Acquire on file:// (it sleeps on
// inotify, then draws its token: a write and an fsync of the fence file),
// or flock(1), which waits in a blocking flock(2) in the kernel:
//
//	go test -run '^$' -bench Handoff -benchtime 200x ./file
func BenchmarkHandoff(b *testing.B) {
	b.Run("file", func(b *testing.B) {
		dir := b.TempDir()
		l := newT(b, dir)
		ctx := context.Background()
		lease, err := l.Acquire(ctx, "h")
		require.NoError(b, err)
		raw, _ := json.Marshal(helperCfg{Mode: "wait1", URL: "file://" + dir, Key: "h"})
		handoffs(b, func() *exec.Cmd {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), helperEnv+"="+string(raw))
			return cmd
		}, func() { _ = lease.Release(ctx) }, func() {
			if lease, err = l.Acquire(ctx, "h"); err != nil {
				b.Fatal(err)
			}
		})
	})
	b.Run("flock1", func(b *testing.B) {
		if _, err := exec.LookPath("flock"); err != nil {
			b.Skip("no flock(1)")
		}
		path := filepath.Join(b.TempDir(), "h.lock")
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
		require.NoError(b, err)
		defer f.Close()
		lock := func(how int) {
			if err := unix.Flock(int(f.Fd()), how); err != nil {
				b.Fatal(err)
			}
		}
		lock(unix.LOCK_EX)
		handoffs(b, func() *exec.Cmd {
			return exec.Command("sh", "-c", `exec 9<>"$1"; echo ready; flock -x 9; echo x`, "sh", path)
		}, func() { lock(unix.LOCK_UN) }, func() { lock(unix.LOCK_EX) })
	})
}

// handoffs runs b.N handoffs to waiter processes made by waiter, which
// print "ready" before they wait and "x" once they hold the lock.
func handoffs(b *testing.B, waiter func() *exec.Cmd, release, reacquire func()) {
	var lat []time.Duration
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		cmd := waiter()
		out, err := cmd.StdoutPipe()
		require.NoError(b, err)
		cmd.Stderr = os.Stderr
		require.NoError(b, cmd.Start())
		r := bufio.NewReader(out)
		if line, _ := r.ReadString('\n'); strings.TrimSpace(line) != "ready" {
			b.Fatalf("waiter said %q", line)
		}
		time.Sleep(20 * time.Millisecond) // the waiter is asleep in its wait
		b.StartTimer()
		start := time.Now()
		release()
		line, _ := r.ReadString('\n')
		d := time.Since(start)
		b.StopTimer()
		require.Equal(b, "x", strings.TrimSpace(line), "waiter said %q", line)
		lat = append(lat, d)
		_, _ = io.Copy(io.Discard, r)
		_ = cmd.Wait()
		reacquire()
		b.StartTimer()
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

// In one process, between two Lockers (no process start, no kernel
// event: the release wakes the waiter directly).
func BenchmarkHandoffInProcess(b *testing.B) {
	dir := b.TempDir()
	a, w := newT(b, dir), newT(b, dir)
	ctx := context.Background()
	var lat []time.Duration
	for range b.N {
		lease, err := a.Acquire(ctx, "h")
		require.NoError(b, err)
		got := make(chan time.Time, 1)
		go func() {
			l, err := w.Acquire(ctx, "h")
			assert.NoError(b, err)
			got <- time.Now()
			_ = l.Release(ctx)
		}()
		time.Sleep(time.Millisecond)
		start := time.Now()
		_ = lease.Release(ctx)
		lat = append(lat, (<-got).Sub(start))
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

var _ *distlock.Locker = (*distlock.Locker)(nil)
