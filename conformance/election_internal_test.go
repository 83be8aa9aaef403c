package conformance

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock/internal/testkit/history"
)

// recT records what a check reports.
type recT struct {
	errs []string
}

func (r *recT) Helper()                   {}
func (r *recT) Logf(string, ...any)       {}
func (r *recT) Errorf(f string, a ...any) { r.errs = append(r.errs, fmt.Sprintf(f, a...)) }
func (r *recT) Fatalf(f string, a ...any) { r.errs = append(r.errs, fmt.Sprintf(f, a...)) }
func (r *recT) Skipf(string, ...any)      {}
func (r *recT) Failed() bool              { return len(r.errs) > 0 }
func (r *recT) Cleanup(func())            {}
func (r *recT) Context() context.Context  { return context.Background() }
func (r *recT) has(s string) bool         { return strings.Contains(strings.Join(r.errs, "\n"), s) }

// term is a recorded term: granted at start (ms) with the lease valid until
// dl, beats at the given times (each extending the deadline to beat+ttl),
// ended (Lost) at end, 0 for never.
func term(p string, token uint64, start, dl int64, beats []int64, ttl, end int64) []history.Event {
	ms := int64(time.Millisecond)
	ev := history.Event{Process: p, Seq: 1, Key: "k", Owner: p, Token: token}
	out := []history.Event{with(ev, history.AcquireOK, start*ms, dl*ms)}
	for _, b := range beats {
		out = append(out, with(ev, history.Beat, b*ms, (b+ttl)*ms))
	}
	if end != 0 {
		out = append(out, with(ev, history.Lost, end*ms, 0))
	}
	return out
}

func TestCheckTermsCatchesBrokenElections(t *testing.T) {
	cases := []struct {
		name   string
		events [][]history.Event
		want   string // "" for a clean history
	}{
		{"handover", [][]history.Event{
			term("a", 1, 100, 500, []int64{200, 300}, 400, 350),
			term("b", 2, 400, 800, nil, 0, 0)}, ""},
		{"paused leader ends at its deadline, not when it noticed", [][]history.Event{
			term("a", 1, 100, 500, []int64{200}, 300, 2000), // deadline 500
			term("b", 2, 600, 1000, nil, 0, 0)}, ""},
		{"two leaders at once", [][]history.Event{
			term("a", 1, 100, 500, []int64{200, 300}, 400, 0), // refreshed to 700
			term("b", 2, 600, 1000, nil, 0, 0)}, "mutual-exclusion"},
		{"acted after its deadline", [][]history.Event{
			term("a", 1, 100, 300, []int64{200}, 100, 0),
			{with(history.Event{Process: "a", Seq: 1, Key: "k", Owner: "a"}, history.Beat, 400*int64(time.Millisecond), 300*int64(time.Millisecond))}},
			"acted as leader"},
		{"token went back", [][]history.Event{
			term("a", 5, 100, 300, nil, 0, 250),
			term("b", 4, 400, 800, nil, 0, 0)}, "fencing"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var evs []history.Event
			for _, e := range c.events {
				evs = append(evs, e...)
			}
			r := &recT{}
			checkTerms(r, evs)
			switch {
			case c.want == "" && r.Failed():
				t.Errorf("clean history reported: %v", r.errs)
			case c.want != "" && !r.has(c.want):
				t.Errorf("want a %q report, got %v", c.want, r.errs)
			}
		})
	}
}
