package etcd

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testkit/slack"
	"github.com/distlock/distlock/internal/testkit/testserver"
)

// closedPort is a loopback address on which nothing listens.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// TestUnreachableEndpoint: with nothing listening on the endpoint,
// acquisitions, Inspect and ForceRelease fail at once (not after a
// timeout) with ErrUnavailable, in one line that names the address and the
// dial error.
func TestUnreachableEndpoint(t *testing.T) {
	t.Parallel()
	addr := closedPort(t)
	l, err := distlock.Open(ctxT(t, 10*time.Second), "etcd://"+addr+"/x?session_ttl=10s")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	check := func(op string, call func(ctx context.Context) error) {
		t.Helper()
		start := time.Now()
		err := call(ctxT(t, 30*time.Second))
		took := time.Since(start)
		switch {
		case err == nil:
			t.Errorf("%s on %s: no error", op, addr)
		case !errors.Is(err, distlock.ErrUnavailable):
			t.Errorf("%s: %v, want ErrUnavailable", op, err)
		case !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), "connection refused"):
			t.Errorf("%s: %q names not both the address %s and the cause", op, err, addr)
		case strings.Contains(err.Error(), "\n"):
			t.Errorf("%s: error of several lines: %q", op, err)
		}
		if took > slack.D(2*time.Second) {
			t.Errorf("%s took %v, want at most about a second", op, took)
		}
	}
	check("TryAcquire", func(ctx context.Context) error { _, err := l.TryAcquire(ctx, "k"); return err })
	check("Acquire", func(ctx context.Context) error { _, err := l.Acquire(ctx, "k"); return err })
	check("Inspect", func(ctx context.Context) error { _, err := l.Inspect(ctx, "k"); return err })
	check("ForceRelease", func(ctx context.Context) error { _, err := l.ForceRelease(ctx, "k"); return err })
}

// TestAcquireRidesOutOutage: an Acquire with WithRetryUnavailable and a
// long deadline, on a Locker opened while etcd is down (the CLI's `run
// --wait 30s`), waits the outage out and gets the lock when etcd is back
// 4 s later — longer than the session TTL of 3 s, which bounds the wait for
// a session lease.
func TestAcquireRidesOutOutage(t *testing.T) {
	t.Parallel()
	s := ownMember(t, testserver.EtcdConfig{}, "an external etcd cannot be stopped")
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	l, err := distlock.Open(ctxT(t, 10*time.Second), "etcd://"+s.Addr()+"/ride?session_ttl=3s")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	got := make(chan error, 1)
	start := time.Now()
	go func() {
		lease, err := l.Acquire(ctxT(t, 30*time.Second), "k", distlock.WithRetryUnavailable(true))
		if err == nil {
			err = lease.Release(ctxT(t, 10*time.Second))
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("Acquire returned %v after %v, while etcd was down", err, time.Since(start).Round(time.Millisecond))
	case <-time.After(4 * time.Second):
	}
	if err := s.Restart(ctxT(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("Acquire after the outage: %v", err)
	}
	t.Logf("acquired %v after the stop", time.Since(start).Round(time.Millisecond))
}
