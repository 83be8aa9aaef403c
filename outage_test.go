package distlock_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
	_ "github.com/distlock/distlock/redis"
)

// TestRetryUnavailableKeepsCause: an Acquire with WithRetryUnavailable
// whose ctx ends while the backend refuses connections returns an error
// that still says why the backend was unavailable (the last attempt's
// "connection refused", with the address), not only that the ctx ended;
// it satisfies ErrNotAcquired, ErrUnavailable and the ctx error.
func TestRetryUnavailableKeepsCause(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	l, err := distlock.Open(context.Background(), "redis://"+addr+"/0?dial_timeout=5s")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, d := range []time.Duration{300 * time.Millisecond, 1100 * time.Millisecond} {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		_, err = l.Acquire(ctx, "k", distlock.WithRetryUnavailable(true))
		cancel()
		if err == nil {
			t.Fatal("Acquire on a closed port: no error")
		}
		for _, want := range []error{distlock.ErrNotAcquired, distlock.ErrUnavailable, context.DeadlineExceeded} {
			if !errors.Is(err, want) {
				t.Errorf("after %v: %v: not %v", d, err, want)
			}
		}
		if !strings.Contains(err.Error(), "connection refused") || !strings.Contains(err.Error(), addr) {
			t.Errorf("after %v: %q: the last attempt's cause (connection refused, %s) is lost", d, err, addr)
		}
	}
}
