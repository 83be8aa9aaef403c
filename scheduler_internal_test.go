package distlock

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/distlock/distlock/backend"
	"github.com/stretchr/testify/require"
)

// idleDriver is never called: the schedule tests drive the scheduler's
// heap by hand, on virtual time, and start no refresh worker.
type idleDriver struct {
	validity func(time.Duration) (time.Duration, error)
}

func (idleDriver) TryAcquire(context.Context, backend.Request) (backend.Lock, error) {
	return nil, backend.ErrUnavailable
}
func (idleDriver) Capabilities() backend.Capabilities                  { return backend.Capabilities{Expiring: true} }
func (idleDriver) Close() error                                        { return nil }
func (d idleDriver) Validity(ttl time.Duration) (time.Duration, error) { return d.validity(ttl) }
func (idleDriver) Inspect(context.Context, string) (backend.LockInfo, error) {
	return backend.LockInfo{}, backend.ErrUnavailable
}
func (idleDriver) ForceRelease(context.Context, string, backend.Holder) (backend.LockInfo, error) {
	return backend.LockInfo{}, backend.ErrUnavailable
}

// scheduleTTLs returns TTLs from the smallest that validity accepts to
// MaxTTL: a geometric sweep, every nanosecond around the points where the
// refresh time meets the deadline for the default validity, and random ones.
func scheduleTTLs(r *rand.Rand, min time.Duration) []time.Duration {
	var ttls []time.Duration
	for ttl := min; ttl <= MaxTTL; ttl += max(ttl/100, 1) {
		ttls = append(ttls, ttl)
	}
	ttls = append(ttls, MaxTTL)
	for _, edge := range []time.Duration{3045683, 6185567} { // ttl/3 == validity, validity/2 == ttl/3
		for d := -2000; d <= 2000; d++ {
			if ttl := edge + time.Duration(d); ttl >= min {
				ttls = append(ttls, ttl)
			}
		}
	}
	for range 5000 {
		ttls = append(ttls, min+time.Duration(r.Int64N(int64(MaxTTL-min))))
		ttls = append(ttls, min+time.Duration(r.Int64N(int64(min)*1000)))
	}
	return ttls
}

// minTTL is the smallest TTL l accepts.
func minTTL(l *Locker) time.Duration {
	lo, hi := time.Duration(1), MaxTTL // hi accepted
	for lo < hi {
		mid := lo + (hi-lo)/2
		if _, err := l.validityFor(mid); err == nil {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// TestRefreshScheduleEveryTTL (issue 14, defect 3): for every TTL the API
// accepts, under several validity policies, an automatically refreshed
// lease is due for refresh after its request (strictly, unless the
// validity is 1ns) and strictly before
// its deadline, at most ttl/3 after it; the scheduler queues it once
// whenever it runs between that time and the deadline (and never loops);
// and the same holds after each refresh.
func TestRefreshScheduleEveryTTL(t *testing.T) {
	watchdog := time.AfterFunc(5*time.Minute, func() { panic("TestRefreshScheduleEveryTTL: the scheduler did not return (stuck in collect)") })
	t.Cleanup(func() { watchdog.Stop() }) // after the parallel subtests, not when this function returns
	policies := map[string]func(time.Duration) (time.Duration, error){
		"default": backend.DefaultValidity,
		"quarter": func(ttl time.Duration) (time.Duration, error) { return max(ttl/4, 1), nil },
		"exact":   func(ttl time.Duration) (time.Duration, error) { return ttl, nil },
		"less-1s": func(ttl time.Duration) (time.Duration, error) {
			if ttl <= 1500*time.Millisecond {
				return 0, fmt.Errorf("%w: below 1.5s", ErrInvalidTTL)
			}
			return ttl - time.Second, nil
		},
	}
	r := rand.New(rand.NewPCG(14, 3))
	names := slices.Sorted(maps.Keys(policies))
	lockers := make([]*Locker, len(names))
	ttls := make([][]time.Duration, len(names))
	for i, name := range names { // the TTLs drawn in one order, whatever runs first
		lockers[i] = New(idleDriver{policies[name]}, "idle")
		ttls[i] = scheduleTTLs(r, minTTL(lockers[i]))
	}
	for i, name := range names {
		t.Run(name, func(t *testing.T) {
			t.Parallel() // CPU only, a Locker of its own
			l := lockers[i]
			s := &l.sched
			base := time.Now().Add(10 * 365 * 24 * time.Hour) // virtual time: no real timer fires during the test
			for _, ttl := range ttls[i] {
				v, err := l.validityFor(ttl)
				require.NoError(t, err, "ttl %v", ttl)
				require.Empty(t, checkSchedule(s, l, ttl, v, base), "ttl %d (%v), validity %v", ttl, ttl, v)
			}
			s.stop()
			t.Logf("%d TTLs from %v to %v", len(ttls[i]), minTTL(l), MaxTTL)
		})
	}
}

// checkSchedule runs three refresh rounds of one lease on virtual time,
// with the scheduler running at each interesting moment of each round, and
// each round ending with a successful automatic refresh sent at its
// refresh time.
func checkSchedule(s *scheduler, l *Locker, ttl, v time.Duration, base time.Time) string {
	ls := newLease(l, &request{settings: settings{ttl: ttl, autoRefresh: true}, validity: v})
	if !s.add(ls, base) {
		return "add refused"
	}
	defer s.remove(ls)
	sent := base
	for round := range 3 {
		s.mu.Lock()
		refreshAt, deadline := ls.slot.refreshAt, ls.slot.deadline
		s.mu.Unlock()
		switch {
		case !deadline.Equal(sent.Add(v)):
			return fmt.Sprintf("round %d: deadline %v after the request, want the validity", round, deadline.Sub(sent))
		case refreshAt.Before(sent) || (v >= 2 && !refreshAt.After(sent)):
			return fmt.Sprintf("round %d: refresh at %v after the request, not after it", round, refreshAt.Sub(sent))
		case !refreshAt.Before(deadline):
			return fmt.Sprintf("round %d: refresh at %v, not before the deadline at %v", round, refreshAt.Sub(sent), deadline.Sub(sent))
		case refreshAt.Sub(sent) > max(ttl/3, 1):
			return fmt.Sprintf("round %d: refresh at %v, later than ttl/3", round, refreshAt.Sub(sent))
		}
		for _, now := range []time.Time{refreshAt.Add(-coalesce(ttl)), refreshAt, refreshAt.Add(deadline.Sub(refreshAt) / 2), deadline.Add(-1)} {
			if msg := collectOnce(s, ls, now); msg != "" {
				return fmt.Sprintf("round %d, scheduler at %v: %s", round, now.Sub(sent), msg)
			}
			s.mu.Lock()
			ls.slot.inflight = false // as if the refresh failed and was not retried yet
			ls.setNext()
			s.mu.Unlock()
		}
		if msg := collectOnce(s, ls, refreshAt); msg != "" {
			return fmt.Sprintf("round %d, scheduler at the refresh time: %s", round, msg)
		}
		if !s.refreshed(ls, refreshAt, ttl, v, true) {
			return fmt.Sprintf("round %d: refresh not recorded", round)
		}
		sent = refreshAt
	}
	return ""
}

// collectOnce runs the scheduler at now with ls the only lease and checks
// that ls is queued for refresh once, not expired, and not again.
func collectOnce(s *scheduler, ls *Lease, now time.Time) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queue = nil
	expired, due := s.collect(now)
	if len(expired) > 0 || due != 1 || len(s.queue) != 1 || !ls.slot.inflight {
		return fmt.Sprintf("%d expired, %d due, %d queued; want the lease queued once", len(expired), due, len(s.queue))
	}
	if expired, due = s.collect(now); len(expired) > 0 || due != 0 {
		return fmt.Sprintf("run again: %d expired, %d due; want nothing", len(expired), due)
	}
	s.queue = nil
	return ""
}
