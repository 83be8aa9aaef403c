package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"
)

// ---- redis/rueidis rueidislock: one multiplexed, auto-pipelined
// connection per Locker; a waiter is woken by the client-side-caching
// invalidation of the lock key (CLIENT TRACKING), or locally when a lock
// of the same Locker is released.

type rueidisInst struct{ l rueidislock.Locker }

type rueidisHeld struct{ cancel context.CancelFunc }

// release cancels the lock's context: rueidislock deletes the key
// (owner-checked script) and returns once that is done.
func (h rueidisHeld) release(context.Context) error {
	h.cancel()
	return nil
}

func (r *rueidisInst) bind(key string, wait bool) lockFn {
	return func(ctx context.Context) (releaser, error) {
		var cancel context.CancelFunc
		var err error
		if wait {
			_, cancel, err = r.l.WithContext(ctx, key)
		} else {
			_, cancel, err = r.l.TryWithContext(ctx, key)
		}
		if ctx.Err() == nil {
			if errors.Is(err, rueidislock.ErrNotLocked) {
				return nil, errGaveUp
			}
			if errors.Is(err, context.DeadlineExceeded) {
				// Its own per-key timeout (TryNextAfter, 20ms), not ours.
				return nil, fmt.Errorf("%w: %w", errTimedOut, err)
			}
		}
		if err != nil {
			return nil, err
		}
		return rueidisHeld{cancel}, nil
	}
}

func (r *rueidisInst) close() { r.l.Close() }

// rueidisLockOptions is rueidislock configured as its README says for one
// Redis instance (KeyMajority 1, NoLoopTracking on Redis ≥ 7.0.5), with
// the benchmark's TTL: every lock is one key, extended every ttl/2 by
// default.
func rueidisLockOptions(addr string) rueidislock.LockerOption {
	return rueidislock.LockerOption{
		ClientOption:   rueidis.ClientOption{InitAddress: []string{addr}},
		KeyMajority:    1,
		NoLoopTracking: true,
		KeyValidity:    benchTTL,
	}
}

var rueidisLockLib = lib{name: "rueidislock", make: func(a []string) inst {
	l, err := rueidislock.NewLocker(rueidisLockOptions(a[0]))
	if err != nil {
		log.Fatal(err)
	}
	return &rueidisInst{l}
}}

// rueidisLockTarget measures rueidislock in the scale section: one Locker
// (one connection) holding N locks, each with its KeyValidity = ttl and
// extended every ttl/3 (distlock's refresh schedule, so that both do the
// same refresh work; its default is every ttl/2). Requests are counted as
// writes on its connection(s); refreshes as the EVALSHAs the server ran.
func rueidisLockTarget(addr string, ttl time.Duration) scaleTarget {
	return scaleTarget{
		name: "rueidislock", ttl: ttl, addrs: []string{addr}, refreshEvery: ttl / 3,
		requests: "writes on its connection (auto-pipelined: a write carries every request queued)", refresh: "EVALSHA run by the server",
		note: "rueidislock: KeyMajority 1, NoLoopTracking, KeyValidity = the TTL and ExtendInterval = TTL/3 (distlock's refresh schedule); each held lock has a goroutine of its own (its monitor: extension timer, invalidation watch, release), so goroutines Δ = leases.",
		openPeer: func(prefix string) (scaleLocker, func() (traffic, error), error) {
			var writes atomic.Int64
			opt := rueidisLockOptions(addr)
			opt.KeyPrefix = strings.TrimSuffix(prefix, "/")
			opt.KeyValidity = ttl
			opt.ExtendInterval = ttl / 3
			opt.ClientOption.DialCtxFn = func(ctx context.Context, dst string, d *net.Dialer, _ *tls.Config) (net.Conn, error) {
				c, err := d.DialContext(ctx, "tcp", dst)
				if err != nil {
					return nil, err
				}
				return countingConn{c, &writes}, nil
			}
			l, err := rueidislock.NewLocker(opt)
			if err != nil {
				return nil, nil, err
			}
			return rueidisScale{l}, func() (traffic, error) {
				e, err := commandCalls(addr, "evalsha")
				return traffic{writes.Load(), e}, err
			}, nil
		},
	}
}

// rueidisScale is a rueidislock Locker as a scaleLocker. The ttl argument
// is the Locker's KeyValidity (set at construction).
type rueidisScale struct{ l rueidislock.Locker }

type rueidisScaleLease struct {
	ctx    context.Context
	cancel context.CancelFunc
}

func (r rueidisScaleLease) release(context.Context) error { r.cancel(); return nil }

func (r rueidisScaleLease) lost() error {
	if r.ctx.Err() != nil {
		return fmt.Errorf("lock context ended while held: %w", context.Cause(r.ctx))
	}
	return nil
}

func (r rueidisScale) tryAcquire(ctx context.Context, key string, _ time.Duration) (scaleLease, error) {
	// The lease must outlive the acquiring ctx: rueidislock ties the lock
	// to the ctx passed, so it gets Background. An attempt that its own
	// per-key timeout (TryNextAfter, 20ms) ended on this loaded machine is
	// made again, a bounded number of times, as is one that then finds the
	// key still held by that attempt (deleted in the background).
	var err error
	for try := 0; try < 50 && ctx.Err() == nil; try++ {
		var c context.Context
		var cancel context.CancelFunc
		c, cancel, err = r.l.TryWithContext(context.Background(), key)
		if err == nil {
			return rueidisScaleLease{c, cancel}, nil
		}
		if !errors.Is(err, context.DeadlineExceeded) && (try == 0 || !errors.Is(err, rueidislock.ErrNotLocked)) {
			return nil, err
		}
		time.Sleep(time.Millisecond)
	}
	return nil, err
}

func (r rueidisScale) acquire(ctx context.Context, key string, _ time.Duration) (scaleLease, error) {
	// WithContext would tie the lock to ctx (which the caller cancels after
	// acquiring): wait on ctx, hold on Background.
	for {
		ls, err := r.tryAcquire(ctx, key, 0)
		if err == nil {
			return ls, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (last attempt: %w)", ctx.Err(), err)
		case <-time.After(time.Millisecond):
		}
	}
}

func (r rueidisScale) Close() error { r.l.Close(); return nil }
