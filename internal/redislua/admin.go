package redislua

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/distlock/distlock/backend"
	goredis "github.com/redis/go-redis/v9"
)

// LockState is one lock as one Redis node holds it, read atomically by
// Inspect and ForceRelease.
type LockState struct {
	// Held: the lock hash exists (with an owner).
	Held bool
	// Owner, Token, Name and Metadata are the hash's fields; Name and
	// Metadata are "" for a lock written before they were stored.
	Owner    string
	Token    uint64
	Name     string
	Metadata string
	// Holds are the ids of the holds (one per nested acquisition).
	Holds []string
	// PTTL is the lock's remaining time by the server's clock; 0 when not
	// held or without expiry.
	PTTL time.Duration
	// Waiters is the number of live waiters in the fair queue (Keys.Fair),
	// -1 for keys without a queue.
	Waiters int
}

// adminKeys are the KEYS of the inspect and force-release scripts: the
// lock alone, or the fair layout.
func (k Keys) adminKeys() []string {
	if k.Queue != "" {
		return k.fairKeys()
	}
	return []string{k.Lock}
}

// Inspect reads the lock of k in one round trip: its hash, its PTTL and,
// for a fair lock (Keys.Fair), the number of live waiters in its queue.
// It changes nothing but the mark w on a held lock (see Watch), so that
// the holder's release publishes its wake-up: Election.Observe subscribes
// and then looks.
func Inspect(ctx context.Context, c goredis.Scripter, k Keys) (LockState, error) {
	v, err := inspectScript.Run(ctx, c, k.adminKeys()).Slice()
	if err != nil {
		return LockState{}, err
	}
	return parseState(v)
}

// ForceRelease deletes the lock of k whatever its owner and holds, in one
// atomic round trip, and returns its state as it was (Held false: the lock
// was free and nothing changed). A freed lock is handed on as a release
// that frees it would: a fair lock (Keys.Fair) to the first live waiter of
// its queue, or else with the wake-up on k.Channel (if not empty). The
// fencing counter is not touched, so the next token exceeds the evicted
// one; the evicted holds are gone, so their owner's Release and Refresh
// find nothing.
//
// With want's owner set, the lock is deleted only if want holds it (with
// want's token, unless 0); otherwise nothing changes and the error wraps
// backend.ErrNotHeld.
func ForceRelease(ctx context.Context, c goredis.Scripter, k Keys, want backend.Holder) (LockState, error) {
	v, err := forceReleaseScript.Run(ctx, c, k.adminKeys(), k.Channel, k.Name, want.Owner, want.Token).Slice()
	if err != nil {
		return LockState{}, err
	}
	s, err := parseState(v)
	if err != nil {
		return LockState{}, err
	}
	if !want.Matches(backend.LockInfo{Held: s.Held, Owner: s.Owner, Token: s.Token}) {
		return LockState{}, want.Refusal()
	}
	return s, nil
}

// parseState parses state.lua's reply: {fields, pttl, waiters}.
func parseState(v []any) (LockState, error) {
	bad := func() (LockState, error) {
		return LockState{}, fmt.Errorf("redislua: unexpected lock state reply %v", v)
	}
	if len(v) != 3 {
		return bad()
	}
	f, ok1 := v[0].([]any)
	pttl, ok2 := v[1].(int64)
	w, ok3 := v[2].(int64)
	if !ok1 || !ok2 || !ok3 || len(f)%2 != 0 {
		return bad()
	}
	s := LockState{Waiters: int(w)}
	for i := 0; i < len(f); i += 2 {
		name, _ := f[i].(string)
		val, _ := f[i+1].(string)
		switch {
		case name == "o":
			s.Held, s.Owner = true, val
		case name == "t":
			t, err := strconv.ParseUint(val, 10, 64)
			if err != nil {
				return LockState{}, fmt.Errorf("redislua: unexpected token %q in lock hash", val)
			}
			s.Token = t
		case name == "name":
			s.Name = val
		case name == "meta":
			s.Metadata = val
		case checkHold(name) == nil:
			s.Holds = append(s.Holds, name)
		}
	}
	if !s.Held {
		return LockState{Waiters: s.Waiters}, nil
	}
	if pttl > 0 {
		s.PTTL = time.Duration(pttl) * time.Millisecond
	}
	return s, nil
}
