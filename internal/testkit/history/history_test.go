package history

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// ev builds an event at time t (arbitrary units).
func ev(p string, seq int, op Op, t int64, owner string, token uint64) Event {
	return Event{Process: p, Seq: seq, Op: op, Key: "k", Owner: owner, Token: token, Time: t}
}

// acq is a complete acquisition: call at c, return at s, release call at r.
func acq(p string, seq int, owner string, token uint64, c, s, r int64) []Event {
	return []Event{
		ev(p, seq, AcquireCall, c, owner, 0),
		ev(p, seq, AcquireOK, s, owner, token),
		ev(p, seq, ReleaseCall, r, owner, 0),
		ev(p, seq, ReleaseOK, r+1, owner, 0),
	}
}

func join(parts ...[]Event) []Event {
	var out []Event
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func rules(v []Violation) string {
	var s []string
	for _, x := range v {
		s = append(s, x.Rule)
	}
	return strings.Join(s, ",")
}

func TestCheck(t *testing.T) {
	nested := func(e []Event) []Event { e[1].Nested = true; return e }
	withDeadline := func(e []Event, dl int64) []Event { e[1].Deadline = dl; return e }
	for _, tc := range []struct {
		name   string
		events []Event
		want   string
	}{
		{"sequential", join(acq("a", 1, "A", 1, 0, 1, 5), acq("b", 1, "B", 2, 2, 6, 9)), ""},
		{"overlap", join(acq("a", 1, "A", 1, 0, 1, 5), acq("b", 1, "B", 2, 2, 4, 9)), "mutual-exclusion"},
		{"touching is not overlap", join(acq("a", 1, "A", 1, 0, 1, 5), acq("b", 1, "B", 2, 2, 5, 9)), ""},
		{"token not increasing", join(acq("a", 1, "A", 2, 0, 1, 5), acq("b", 1, "B", 2, 6, 7, 9)), "fencing"},
		{"token decreasing", join(acq("a", 1, "A", 5, 0, 1, 5), acq("b", 1, "B", 3, 6, 7, 9)), "fencing"},
		{"concurrent calls may order either way", join(acq("a", 1, "A", 2, 0, 3, 4), acq("b", 1, "B", 1, 1, 2, 2)), ""},
		{"reentrant keeps token", join(acq("a", 1, "A", 4, 0, 1, 9), nested(acq("a", 2, "A", 4, 2, 3, 5))), ""},
		{"reentrant new token", join(acq("a", 1, "A", 4, 0, 1, 9), nested(acq("a", 2, "A", 5, 2, 3, 5))), "reentrancy"},
		{"same owner overlap allowed", join(acq("a", 1, "A", 4, 0, 1, 9), nested(acq("b", 1, "A", 4, 2, 3, 5))), ""},
		{"lease deadline ends the hold", join(withDeadline(acq("a", 1, "A", 1, 0, 1, 50), 5), acq("b", 1, "B", 2, 2, 6, 9)), ""},
		{"lease deadline after takeover", join(withDeadline(acq("a", 1, "A", 1, 0, 1, 50), 7), acq("b", 1, "B", 2, 2, 6, 9)), "mutual-exclusion"},
		{"refreshed deadline extends the hold", join(func() []Event {
			e := withDeadline(acq("a", 1, "A", 1, 0, 1, 50), 5)
			e[2].Deadline = 60
			return e
		}(), acq("b", 1, "B", 2, 2, 6, 9)), "mutual-exclusion"},
		{"lost ends the hold", join([]Event{ev("a", 1, AcquireCall, 0, "A", 0), ev("a", 1, AcquireOK, 1, "A", 1), ev("a", 1, Lost, 4, "A", 0)}, acq("b", 1, "B", 2, 2, 5, 9)), ""},
		{"crashed holder holds to its deadline", join([]Event{ev("a", 1, AcquireCall, 0, "A", 0), func() Event { e := ev("a", 1, AcquireOK, 1, "A", 1); e.Deadline = 20; return e }()}, acq("b", 1, "B", 2, 2, 10, 30)), "mutual-exclusion"},
		{"failed acquire holds nothing", join([]Event{ev("a", 1, AcquireCall, 0, "A", 0), ev("a", 1, AcquireFail, 3, "A", 0)}, acq("b", 1, "B", 1, 1, 2, 9)), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := rules(Check(Holds(tc.events, 100)))
			if got != tc.want {
				t.Errorf("violations %q, want %q", got, tc.want)
			}
		})
	}
}

func TestRecorderRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	r := NewRecorder(&buf)
	r.Add(Event{Process: "w1", Seq: 1, Op: AcquireCall, Key: "k"})
	r.Add(Event{Process: "w1", Seq: 1, Op: AcquireOK, Key: "k", Token: 3, Deadline: Mono(time.Now().Add(time.Second))})
	buf.WriteString(`{"p":"w1","s":2,"op":"acq`) // a write cut by SIGKILL
	evs, err := Read(&buf)
	if err != nil || len(evs) != 2 || evs[1].Token != 3 || evs[0].Time == 0 || evs[1].Deadline <= evs[1].Time {
		t.Fatalf("Read = %+v, %v", evs, err)
	}
}

func TestMonoMatchesNow(t *testing.T) {
	a := Now()
	m := Mono(time.Now().Add(time.Second))
	if d := m - a - int64(time.Second); d < 0 || d > int64(50*time.Millisecond) {
		t.Errorf("Mono(now+1s) - Now() = %v, want about 1s", time.Duration(m-a))
	}
}
