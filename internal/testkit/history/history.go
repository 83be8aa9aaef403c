package history

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Op is the kind of an event.
type Op string

// The events of one acquisition.
const (
	AcquireCall Op = "acquire-call"
	AcquireOK   Op = "acquire-ok" // Token, Deadline, Nested set
	AcquireFail Op = "acquire-fail"
	ReleaseCall Op = "release-call"
	ReleaseOK   Op = "release-ok"
	ReleaseFail Op = "release-fail"
	Lost        Op = "lost" // the client noticed the loss (Done closed)
	// Beat marks an action taken while the client saw its lease valid
	// (an election leader's work); it carries the lease's deadline then.
	Beat Op = "beat"
)

// Event is one step of one acquisition. Acquisitions are identified by
// (Process, Seq).
type Event struct {
	Process string `json:"p"`
	Seq     int    `json:"s"`
	Op      Op     `json:"op"`
	Key     string `json:"k"`
	Owner   string `json:"o,omitempty"`
	Token   uint64 `json:"t,omitempty"`
	// Time is the CLOCK_MONOTONIC reading in nanoseconds.
	Time int64 `json:"at"`
	// Deadline is the lease's local validity deadline as a
	// CLOCK_MONOTONIC reading; 0 for locks that do not expire. AcquireOK
	// carries the first; ReleaseCall and Lost may carry a later one (the
	// lease was refreshed meanwhile), and the latest counts.
	Deadline int64 `json:"dl,omitempty"`
	// Nested marks an acquisition made while the same owner already held
	// the key (reentrancy).
	Nested bool   `json:"n,omitempty"`
	Err    string `json:"err,omitempty"`
}

// Now returns the CLOCK_MONOTONIC reading in nanoseconds.
func Now() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err) // cannot fail on Linux
	}
	return ts.Nano()
}

// Mono converts a time.Time with a monotonic reading (time.Now, a lease's
// Deadline) to the CLOCK_MONOTONIC scale of Now. Zero stays zero.
func Mono(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return Now() + int64(time.Until(t))
}

// Recorder collects events; it is safe for concurrent use. With a writer it
// also streams every event as a JSON line, so a worker process killed with
// SIGKILL leaves its history up to the last event.
type Recorder struct {
	mu     sync.Mutex
	events []Event
	enc    *json.Encoder
	w      io.Writer
}

// NewRecorder returns a Recorder that also writes JSON lines to w (nil: keep
// in memory only).
func NewRecorder(w io.Writer) *Recorder {
	r := &Recorder{w: w}
	if w != nil {
		r.enc = json.NewEncoder(w)
	}
	return r
}

// Add records e, stamping its Time if it is zero.
func (r *Recorder) Add(e Event) {
	if e.Time == 0 {
		e.Time = Now()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
	if r.enc != nil {
		_ = r.enc.Encode(e)
		if f, ok := r.w.(*os.File); ok {
			_ = f.Sync()
		}
	}
}

// Events returns a copy of the recorded events.
func (r *Recorder) Events() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Event(nil), r.events...)
}

// Read parses JSON lines written by a Recorder. A truncated last line (a
// process killed mid-write) is ignored.
func Read(rd io.Reader) ([]Event, error) {
	var out []Event
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		var e Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			continue
		}
		out = append(out, e)
	}
	return out, sc.Err()
}

// Hold is one acquisition as the checker sees it.
type Hold struct {
	Process, Key, Owner string
	Seq                 int
	Token               uint64
	Nested              bool
	Call, Start, End    int64 // acquire call, acquire return, end of the hold
}

func (h Hold) String() string {
	return fmt.Sprintf("%s#%d owner=%s token=%d [%d, %d]", h.Process, h.Seq, h.Owner, h.Token, h.Start, h.End)
}

// Violation is one breach of the contract.
type Violation struct {
	Rule string // "mutual-exclusion", "fencing", "reentrancy"
	A, B Hold
}

func (v Violation) String() string { return fmt.Sprintf("%s: %v and %v", v.Rule, v.A, v.B) }

// Holds turns events into holds. A hold without an end — its process died,
// or the history ends while it is held — lasts until its deadline, or until
// end for locks without one.
func Holds(events []Event, end int64) []Hold {
	type id struct {
		p string
		s int
	}
	byID := map[id]*Hold{}
	var order []id
	evs := append([]Event(nil), events...)
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].Time < evs[j].Time })
	deadline := map[id]int64{}
	for _, e := range evs {
		k := id{e.Process, e.Seq}
		switch e.Op {
		case AcquireCall:
			byID[k] = &Hold{Process: e.Process, Seq: e.Seq, Key: e.Key, Owner: e.Owner, Call: e.Time}
		case AcquireOK:
			h := byID[k]
			if h == nil {
				h = &Hold{Process: e.Process, Seq: e.Seq, Key: e.Key, Owner: e.Owner, Call: e.Time}
				byID[k] = h
			}
			h.Start, h.Token, h.Nested = e.Time, e.Token, e.Nested
			if e.Owner != "" {
				h.Owner = e.Owner
			}
			deadline[k] = e.Deadline
			order = append(order, k)
		case ReleaseCall, Lost:
			if h := byID[k]; h != nil && h.Start != 0 && h.End == 0 {
				h.End = e.Time
			}
			if e.Deadline > deadline[k] {
				deadline[k] = e.Deadline // refreshed since the grant
			}
		case Beat:
			if e.Deadline > deadline[k] {
				deadline[k] = e.Deadline
			}
		}
	}
	out := make([]Hold, 0, len(order))
	for _, k := range order {
		h := *byID[k]
		dl := deadline[k]
		if h.End == 0 {
			h.End = end
			if dl != 0 {
				h.End = dl
			}
		}
		if dl != 0 && dl < h.End {
			h.End = dl
		}
		out = append(out, h)
	}
	return out
}

// LateBeats returns the Beats taken at or after the deadline their lease
// had then (beyond slack, the error of Mono's conversion): actions of a
// client that should have known it no longer held the lock.
func LateBeats(events []Event, slack time.Duration) []Event {
	var late []Event
	for _, e := range events {
		if e.Op == Beat && e.Deadline != 0 && e.Time >= e.Deadline+int64(slack) {
			late = append(late, e)
		}
	}
	return late
}

// Check returns every violation in the holds.
func Check(holds []Hold) []Violation {
	var v []Violation
	byKey := map[string][]Hold{}
	for _, h := range holds {
		byKey[h.Key] = append(byKey[h.Key], h)
	}
	for _, hs := range byKey {
		v = append(v, checkKey(hs)...)
	}
	return v
}

func checkKey(hs []Hold) []Violation {
	var v []Violation
	sort.Slice(hs, func(i, j int) bool { return hs[i].Start < hs[j].Start })
	// A nested hold joins the tenure of the same owner's hold active at its
	// start and must carry its token. One with no such tenure (it expired
	// meanwhile) was a fresh acquisition and is checked as one.
	fresh := make([]bool, len(hs))
	for i, b := range hs {
		fresh[i] = true
		if !b.Nested {
			continue
		}
		for _, a := range hs[:i] {
			if a.Owner == b.Owner && !a.Nested && a.End > b.Start {
				fresh[i] = false
				if a.Token != b.Token {
					v = append(v, Violation{"reentrancy", a, b})
				}
				break
			}
		}
	}
	// Mutual exclusion: sweep by start time over the active holds.
	sweep(hs, func(active []Hold, h Hold) {
		for _, a := range active {
			if a.Owner != h.Owner {
				v = append(v, Violation{"mutual-exclusion", a, h})
			}
		}
	})
	return append(v, checkFencing(hs, fresh)...)
}

// sweep calls visit for each hold of hs (sorted by Start) with the holds
// active at its start: begun before it and not ended by then.
func sweep(hs []Hold, visit func(active []Hold, h Hold)) {
	var active []Hold
	for _, h := range hs {
		kept := active[:0]
		for _, a := range active {
			if a.End > h.Start {
				kept = append(kept, a)
			}
		}
		active = kept
		visit(active, h)
		active = append(active, h)
	}
}

// checkFencing checks that a fresh acquisition b (fresh[i]) gets a token
// larger than that of every hold that had returned before b was called. hs
// is sorted by Start.
func checkFencing(hs []Hold, fresh []bool) []Violation {
	var v []Violation
	var calls []int
	for i := range hs {
		if fresh[i] && hs[i].Token != 0 {
			calls = append(calls, i)
		}
	}
	sort.Slice(calls, func(x, y int) bool { return hs[calls[x]].Call < hs[calls[y]].Call })
	var (
		maxTok  uint64
		maxHold Hold
		next    int // hs is sorted by Start
	)
	for _, bi := range calls {
		b := hs[bi]
		for next < len(hs) && hs[next].Start < b.Call {
			if hs[next].Token > maxTok {
				maxTok, maxHold = hs[next].Token, hs[next]
			}
			next++
		}
		if b.Token <= maxTok {
			v = append(v, Violation{"fencing", maxHold, b})
		}
	}
	return v
}
