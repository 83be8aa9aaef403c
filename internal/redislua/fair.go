package redislua

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// FairAttempt is one attempt of a waiter in the fair queue.
type FairAttempt struct {
	// Hold is the waiter's hold id, the same for all its attempts: it is
	// its place in the queue and, once granted, its hold of the lock.
	Hold string
	// N numbers the attempts of one waiter, from 1; a grant names the last
	// one the server processed (see Grant).
	N uint64
	// Enqueue: join (or stay in) the queue when the lock is not free for
	// this waiter. False for a single try (TryAcquire), which leaves
	// nothing behind.
	Enqueue bool
	// QueueTTL is how long the entry stays alive without another attempt.
	QueueTTL time.Duration
	// Metadata is stored with the lock when this waiter gets it ("":
	// none).
	Metadata string
}

// FairAcquire makes one attempt on a fair lock (k from Keys.Fair), in one
// round trip. A free lock is taken only if no live waiter is queued ahead
// of a.Hold; a free lock with a live waiter at the head is granted to that
// waiter. Outcomes: Acquired, Reentered (owner holds it; the queue is
// bypassed), Granted (granted to a.Hold while it waited; PTTL is its
// remaining time) or Busy (enqueued if a.Enqueue).
func FairAcquire(ctx context.Context, c goredis.Scripter, k Keys, owner string, ttl time.Duration, a FairAttempt) (AcquireResult, error) {
	keys, args, err := fairAcquireCall(k, owner, ttl, a)
	if err != nil {
		return AcquireResult{}, err
	}
	return parseFairAcquireCmd(fairAcquireScript.Run(ctx, c, keys, args...))
}

// fairAcquireCall checks FairAcquire's arguments and returns the script's
// keys and arguments.
func fairAcquireCall(k Keys, owner string, ttl time.Duration, a FairAttempt) ([]string, []any, error) {
	px, err := PX(ttl)
	if err != nil {
		return nil, nil, err
	}
	if err := checkHold(a.Hold); err != nil {
		return nil, nil, err
	}
	if k.Queue == "" || k.Fence == "" {
		return nil, nil, fmt.Errorf("redislua: FairAcquire needs Keys.Fair with a fence key")
	}
	enq := "0"
	if a.Enqueue {
		enq = "1"
	}
	qttl := max(int64(a.QueueTTL/time.Millisecond), 1)
	return k.fairKeys(), []any{owner, px, a.Hold, enq, a.N, qttl, k.Channel, k.Name, a.Metadata}, nil
}

func parseFairAcquireCmd(cmd *goredis.Cmd) (AcquireResult, error) {
	v, err := cmd.Slice()
	if err != nil {
		return AcquireResult{}, err
	}
	if len(v) == 3 {
		if code, _ := v[0].(int64); code == 3 {
			r, err := parseAcquire([]any{int64(1), v[1]})
			if err != nil {
				return r, err
			}
			r.Outcome = Granted
			if p, ok := v[2].(int64); ok && p > 0 {
				r.PTTL = time.Duration(p) * time.Millisecond
			}
			return r, nil
		}
	}
	return parseAcquire(v)
}

// Grant is a grant message: the lock was given to the waiter Hold with
// Token, Elapsed after the server processed the waiter's attempt number
// Attempt.
type Grant struct {
	Hold    string
	Token   uint64
	Attempt uint64
	Elapsed time.Duration
}

// ParseGrant parses a message published on a fair lock's channel. ok is
// false for the plain wake-up of a release that granted nothing.
func ParseGrant(payload string) (g Grant, ok bool) {
	rest, found := strings.CutPrefix(payload, "g")
	if !found {
		return Grant{}, false
	}
	f := strings.Fields(rest)
	if len(f) != 4 || checkHold(f[0]) != nil {
		return Grant{}, false
	}
	tok, err1 := strconv.ParseUint(f[1], 10, 64)
	att, err2 := strconv.ParseUint(f[2], 10, 64)
	us, err3 := strconv.ParseInt(f[3], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || us < 0 {
		return Grant{}, false
	}
	return Grant{Hold: f[0], Token: tok, Attempt: att, Elapsed: time.Duration(us) * time.Microsecond}, true
}

// GrantHold returns the hold id a grant message names, without parsing the
// rest ("" for a plain wake-up).
func GrantHold(payload string) string {
	rest, ok := strings.CutPrefix(payload, "g")
	if !ok {
		return ""
	}
	hold, _, _ := strings.Cut(rest, " ")
	return hold
}
