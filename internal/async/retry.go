package async

import (
	"context"
	"time"
)

// Schedule says when the tries of a Retry happen.
type Schedule interface {
	// Next returns when try number n (1 for the second try) should start,
	// given when the first try started and when the previous one ended;
	// false ends the retry.
	Next(n int, first, prevEnd time.Time) (time.Time, bool)
}

// At is a Schedule of fixed offsets from the first try, for undoing a
// request that may still be on its way: one early try can come before the
// request lands, so the tries are spread out. The first try runs at once
// whatever At[0] is; a schedule ends after its last offset.
type At []time.Duration

// Next implements Schedule.
func (a At) Next(n int, first, _ time.Time) (time.Time, bool) {
	if n >= len(a) {
		return time.Time{}, false
	}
	return first.Add(a[n]), true
}

// Backoff is a Schedule of pauses after each try: First, doubling up to
// Max, without end (bound the Retry with its ctx or Within).
type Backoff struct{ First, Max time.Duration }

// Next implements Schedule.
func (b Backoff) Next(n int, _, prevEnd time.Time) (time.Time, bool) {
	p := b.First
	for i := 1; i < n && p < b.Max; i++ {
		p *= 2
	}
	return prevEnd.Add(min(p, b.Max)), true
}

// Retry repeats one try on a schedule.
type Retry struct {
	Schedule Schedule
	// Within bounds the whole retry from the first try (0: only ctx
	// bounds it). No try starts at or after the bound.
	Within time.Duration
	// TryTimeout bounds each try's ctx (0: only Within and ctx bound it).
	TryTimeout time.Duration
	// Quit, when closed (a Group's Quit), cuts the current wait short:
	// one more try runs at once, and then the retry ends.
	Quit <-chan struct{}
}

// Do calls try until it reports done, the schedule ends, Within passes,
// ctx ends (no try starts then) or Quit closes (after one last try). Each
// try gets a ctx bounded by ctx, Within and TryTimeout. Do returns whether
// a try reported done.
func (r Retry) Do(ctx context.Context, try func(ctx context.Context) (done bool)) bool {
	first := time.Now()
	if r.Within > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, first.Add(r.Within))
		defer cancel()
	}
	for n := 0; ; n++ {
		if n > 0 {
			at, ok := r.Schedule.Next(n, first, time.Now())
			if !ok {
				return false
			}
			if d, has := ctx.Deadline(); has && !at.Before(d) {
				return false
			}
			if !r.wait(ctx, at) {
				return false
			}
		}
		if ctx.Err() != nil || past(ctx) {
			return false
		}
		tctx, cancel := ctx, context.CancelFunc(func() {})
		if r.TryTimeout > 0 {
			tctx, cancel = context.WithTimeout(ctx, r.TryTimeout)
		}
		done := try(tctx)
		cancel()
		if done {
			return true
		}
		if r.quitting() {
			return false
		}
	}
}

// wait sleeps until at; false if ctx ended. A closed Quit ends the wait
// early with true: the caller makes its last try.
func (r Retry) wait(ctx context.Context, at time.Time) bool {
	d := time.Until(at)
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Quit:
		return ctx.Err() == nil
	case <-ctx.Done():
		return false
	}
}

func (r Retry) quitting() bool {
	if r.Quit == nil {
		return false
	}
	select {
	case <-r.Quit:
		return true
	default:
		return false
	}
}

// Slots bounds how many optional jobs run at once.
type Slots chan struct{}

// NewSlots returns Slots for n jobs at once.
func NewSlots(n int) Slots { return make(Slots, n) }

// TryTake takes a slot if one is free.
func (s Slots) TryTake() bool {
	select {
	case s <- struct{}{}:
		return true
	default:
		return false
	}
}

// Give returns a slot taken with TryTake.
func (s Slots) Give() { <-s }

// GoBounded runs fn on g in a slot of s: false, without running fn, when no
// slot is free or g is closed. child as for Group.GoChild.
func GoBounded(g *Group, s Slots, child bool, fn func()) bool {
	if !s.TryTake() {
		return false
	}
	run := func() {
		defer s.Give()
		fn()
	}
	var ok bool
	if child {
		ok = g.GoChild(run)
	} else {
		ok = g.Go(run)
	}
	if !ok {
		s.Give()
	}
	return ok
}

// past reports whether ctx's deadline has passed by the clock: ctx.Err()
// says so only once the deadline's timer has run, which on a loaded
// machine can be later than a wait that overslept (a try would then start
// after Within).
func past(ctx context.Context) bool {
	d, ok := ctx.Deadline()
	return ok && !time.Now().Before(d)
}
