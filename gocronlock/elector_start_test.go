package gocronlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/gocronlock"
)

// TestElectorStartTwice: a second Start (a scheduler restarted with the
// same Elector, or two call sites) must neither panic (both campaigns
// closed the same Done channel) nor run a second campaign; the first
// campaign keeps going and Done closes once it ends.
func TestElectorStartTwice(t *testing.T) {
	el := memElector(t, "elector-start-twice")
	ctx, stop := context.WithCancel(t.Context())
	el.Start(ctx)
	el.Start(ctx)
	awaitLeader(t, []*gocronlock.Elector{el})
	stop()
	select {
	case <-el.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("Done not closed 30s after Start's ctx ended")
	}
	if err := el.Err(); !errors.Is(err, context.Canceled) {
		t.Errorf("Err after the campaign stopped: %v, want context.Canceled", err)
	}
}

// TestElectorStartWithEndedCtx: Start with a ctx that has already ended
// never leads, and Done closes.
func TestElectorStartWithEndedCtx(t *testing.T) {
	el := memElector(t, "elector-ended")
	ctx, stop := context.WithCancel(t.Context())
	stop()
	el.Start(ctx)
	for stopped := false; !stopped; time.Sleep(time.Millisecond) {
		select {
		case <-el.Done():
			stopped = true
		default:
		}
		if el.IsLeader(t.Context()) == nil {
			t.Fatal("an Elector started with an ended ctx leads")
		}
	}
	if err := el.Err(); !errors.Is(err, context.Canceled) {
		t.Errorf("Err: %v, want context.Canceled", err)
	}
}

// memElector is an Elector on its own mem:// namespace.
func memElector(t *testing.T, ns string) *gocronlock.Elector {
	t.Helper()
	e, err := distlock.NewElection(open(t, "mem://"+ns), "scheduler", "a")
	if err != nil {
		t.Fatal(err)
	}
	el, err := gocronlock.NewElector(e)
	if err != nil {
		t.Fatal(err)
	}
	return el
}
