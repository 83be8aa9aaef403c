package redislua

import (
	"context"
	"fmt"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Outcome is the result of one acquire attempt.
type Outcome uint8

// The outcomes of Acquire.
const (
	// Busy: another owner holds the lock; nothing was changed.
	Busy Outcome = iota
	// Acquired: the lock was free and is now held with a new token.
	Acquired
	// Reentered: the same owner held it; a hold was added, the holder's
	// token returned, and the expiry extended to at least the TTL.
	Reentered
	// Granted: a fair lock was granted to this waiter's hold while it
	// waited (FairAcquire); PTTL is the time it has left.
	Granted
)

// AcquireResult is what Acquire found.
type AcquireResult struct {
	Outcome Outcome
	// Token is the fencing token (Acquired, Reentered); 0 without a fence
	// key.
	Token uint64
	// PTTL is the holder's remaining time when Busy, or this waiter's when
	// Granted; 0 if unknown (the lock key has no expiry).
	PTTL time.Duration
	// Holder is the current holder's owner id when Busy.
	Holder string
	// Age is, when Busy, how long ago (by the server's clock) the holder's
	// newest hold was taken; negative if unknown. Redlock uses it to tell
	// a minority held by a contender in the middle of its attempt, which
	// it gives back at once, from one left behind until its TTL.
	Age time.Duration
}

// Acquire makes one attempt, in one round trip (EVALSHA, falling back to
// EVAL on NOSCRIPT): if the lock is free it is taken for owner with the
// next fencing token (INCR of k.Fence, raised above k.Legacy where that
// exists), expiry ttl, the lock's name k.Name and metadata (stored only
// when not empty); if owner holds it the
// hold id is added (reentrancy) and the expiry extended to max(remaining,
// ttl); otherwise nothing changes and the holder's remaining time and
// owner are returned. Repeating a call with the same hold id is idempotent, so a retry
// after a lost reply does not add a second hold. hold must come from a
// HoldSource; ttl must be whole milliseconds (see PX).
func Acquire(ctx context.Context, c goredis.Scripter, k Keys, owner, hold, metadata string, ttl time.Duration) (AcquireResult, error) {
	r, err := acquireCall(k, owner, hold, metadata, ttl, false)
	if err != nil {
		return AcquireResult{}, err
	}
	return parseAcquireCmd(acquireScript.Run(ctx, c, r.keys, r.args...))
}

// acquireCall checks Acquire's arguments and returns the script's call.
func acquireCall(k Keys, owner, hold, metadata string, ttl time.Duration, waited bool) (*callArgs, error) {
	px, err := PX(ttl)
	if err != nil {
		return nil, err
	}
	if err := checkHold(hold); err != nil {
		return nil, err
	}
	r := &callArgs{k: [maxCallKeys]string{k.Lock, k.Fence, k.Legacy}, s: [4]string{owner, hold, k.Name, metadata}, n: px}
	nk := 1
	if k.Fence != "" {
		nk = 3
	}
	switch {
	case waited: // other waiters: the new lock is marked for them
		return r.in(nk, &r.s[0], &r.n, &r.s[1], &r.s[2], &r.s[3], "1"), nil
	case metadata == "": // no metadata: not sent, not stored
		return r.in(nk, &r.s[0], &r.n, &r.s[1], &r.s[2]), nil
	}
	return r.in(nk, &r.s[0], &r.n, &r.s[1], &r.s[2], &r.s[3]), nil
}

// maxCallKeys and maxCallArgs bound the keys and arguments that in puts
// in a callArgs.
const (
	maxCallKeys = 3
	maxCallArgs = 6
)

// callArgs holds one script call's keys, arguments and EVALSHA command
// line in one allocation: the arguments are pointers into it, which
// go-redis writes as the values they point to (and boxing a pointer
// allocates nothing, where boxing a string or a large integer would
// allocate once per argument), and, once in has placed them, they sit in cmd
// after the slots of the command's name, SHA1, key count and keys, so that
// evalSha builds the EVALSHA command in place. A callArgs is sent once: a
// retried call is built anew.
type callArgs struct {
	keys    []string // the script's keys
	args    []any    // its arguments
	inPlace bool     // keys are in k and args in cmd (see in)
	cmd     [3 + maxCallKeys + maxCallArgs]any
	k       [maxCallKeys]string
	s       [4]string
	n       int64
	u       uint64
}

// in makes k[:nk] the call's keys and a its arguments, in place, and
// returns r.
func (r *callArgs) in(nk int, a ...any) *callArgs {
	r.keys = r.k[:nk]
	r.args = r.cmd[3+nk : 3+nk+len(a)]
	copy(r.args, a)
	r.inPlace = true
	return r
}

// line is the slice of r that evalSha builds the EVALSHA command line in:
// nil unless r's keys and arguments are in place.
func (r *callArgs) line() []any {
	if r == nil || !r.inPlace {
		return nil
	}
	return r.cmd[:3+len(r.keys)+len(r.args)]
}

func parseAcquireCmd(cmd *goredis.Cmd) (AcquireResult, error) {
	v, err := cmd.Slice()
	if err != nil {
		return AcquireResult{}, err
	}
	return parseAcquire(v)
}

func parseAcquire(v []any) (AcquireResult, error) {
	if len(v) < 2 || len(v) > 4 {
		return AcquireResult{}, fmt.Errorf("redislua: unexpected acquire reply %v", v)
	}
	code, ok := v[0].(int64)
	if !ok {
		return AcquireResult{}, fmt.Errorf("redislua: unexpected acquire reply %v", v)
	}
	var n int64
	switch x := v[1].(type) {
	case int64:
		n = x
	case string:
		var err error
		if n, err = strconv.ParseInt(x, 10, 64); err != nil {
			return AcquireResult{}, fmt.Errorf("redislua: unexpected token %q in lock hash", x)
		}
	default:
		return AcquireResult{}, fmt.Errorf("redislua: unexpected acquire reply %v", v)
	}
	switch code {
	case 1, 2:
		if n < 0 {
			return AcquireResult{}, fmt.Errorf("redislua: negative token %d", n)
		}
		out := Acquired
		if code == 2 {
			out = Reentered
		}
		return AcquireResult{Outcome: out, Token: uint64(n)}, nil
	case 0:
		r := AcquireResult{Outcome: Busy, Age: -1}
		if n > 0 {
			r.PTTL = time.Duration(n) * time.Millisecond
		}
		if len(v) >= 3 {
			r.Holder, _ = v[2].(string)
		}
		if len(v) == 4 {
			if a, ok := v[3].(int64); ok && a >= 0 {
				r.Age = time.Duration(a) * time.Millisecond
			}
		}
		return r, nil
	}
	return AcquireResult{}, fmt.Errorf("redislua: unexpected acquire reply %v", v)
}

// ReleaseResult is the result of Release.
type ReleaseResult uint8

// The outcomes of Release.
const (
	// NotHeld: owner/token/hold do not match the current holder (expired,
	// taken over, or this hold already released); nothing was changed.
	NotHeld ReleaseResult = iota
	// Freed: the last hold was released; the lock key was deleted and a
	// wake-up published on k.Channel.
	Freed
	// HoldsLeft: this hold was released; other holds of the same owner
	// remain, so the lock is still held.
	HoldsLeft
)

// Release removes one hold, owner-checked, in one round trip: it acts only
// if the lock is held by owner with token (token 0: not checked, for undoing
// an acquisition whose reply was lost — the unique hold id identifies it)
// and the hold id is present. When no hold remains it deletes the lock and
// publishes the freed token on k.Channel (if not empty). For a fair lock
// (Keys.Fair) it first takes the hold out of the queue, so it also ends a
// wait (or undoes an attempt), and a freed lock is granted to the first live
// waiter instead.
func Release(ctx context.Context, c goredis.Scripter, k Keys, owner string, token uint64, hold string) (ReleaseResult, error) {
	s, r, err := releaseCall(k, owner, token, hold)
	if err != nil {
		return NotHeld, err
	}
	return parseReleaseCmd(s.Run(ctx, c, r.keys, r.args...))
}

// releaseCall checks Release's arguments and returns the script to run
// and its call.
func releaseCall(k Keys, owner string, token uint64, hold string) (*goredis.Script, *callArgs, error) {
	if err := checkHold(hold); err != nil {
		return nil, nil, err
	}
	if k.Queue != "" {
		return fairReleaseScript, &callArgs{keys: k.fairKeys(), args: []any{owner, token, hold, k.Channel, k.Name}}, nil
	}
	r := &callArgs{k: [maxCallKeys]string{k.Lock}, s: [4]string{owner, hold, k.Channel}, u: token}
	return releaseScript, r.in(1, &r.s[0], &r.u, &r.s[1], &r.s[2]), nil
}

func parseReleaseCmd(cmd *goredis.Cmd) (ReleaseResult, error) {
	n, err := cmd.Int64()
	if err != nil {
		return NotHeld, err
	}
	switch n {
	case 0:
		return NotHeld, nil
	case 1:
		return Freed, nil
	case 2:
		return HoldsLeft, nil
	}
	return NotHeld, fmt.Errorf("redislua: unexpected release reply %d", n)
}

// Refresh extends the lock to at least ttl from now if owner still holds it
// with token and hold (token 0: not checked), in one round trip. It never
// shortens the expiry. It reports whether the lock was held (false: nothing
// was changed).
func Refresh(ctx context.Context, c goredis.Scripter, k Keys, owner string, token uint64, hold string, ttl time.Duration) (bool, error) {
	r, err := refreshCall(k, owner, token, hold, ttl)
	if err != nil {
		return false, err
	}
	return parseRefreshCmd(refreshScript.Run(ctx, c, r.keys, r.args...))
}

// refreshCall checks Refresh's arguments and returns the script's call.
func refreshCall(k Keys, owner string, token uint64, hold string, ttl time.Duration) (*callArgs, error) {
	px, err := PX(ttl)
	if err != nil {
		return nil, err
	}
	if err := checkHold(hold); err != nil {
		return nil, err
	}
	r := &callArgs{k: [maxCallKeys]string{k.Lock}, s: [4]string{owner, hold}, u: token, n: px}
	return r.in(1, &r.s[0], &r.u, &r.s[1], &r.n), nil
}

func parseRefreshCmd(cmd *goredis.Cmd) (bool, error) {
	n, err := cmd.Int64()
	if err != nil {
		return false, err
	}
	return n > 0, nil
}

// RefreshOp is one refresh in a batch.
type RefreshOp struct {
	Keys  Keys
	Owner string
	Token uint64
	Hold  string
	TTL   time.Duration
}

// RefreshResult is the outcome of one RefreshOp: Held as Refresh reports
// it, or Err.
type RefreshResult struct {
	Held bool
	Err  error
}

// RefreshBatch runs many refreshes in one pipeline: one round trip to a
// single node (one per node on a ClusterClient), EVALSHA for each, and a
// second pipeline with EVAL only for those that got NOSCRIPT (after a server
// restart or SCRIPT FLUSH). Results are in the order of ops.
func RefreshBatch(ctx context.Context, c goredis.Cmdable, ops []RefreshOp) []RefreshResult {
	res := make([]RefreshResult, len(ops))
	if len(ops) == 0 {
		return res
	}
	pxs := make([]int64, len(ops))
	valid := 0
	for i, op := range ops {
		px, err := PX(op.TTL)
		if err == nil {
			err = checkHold(op.Hold)
		}
		if err != nil {
			res[i].Err = err
			pxs[i] = -1
			continue
		}
		pxs[i] = px
		valid++
	}
	if valid == 0 {
		return res
	}
	cmds := make([]*goredis.Cmd, len(ops))
	pipe := c.Pipeline()
	for i, op := range ops {
		if pxs[i] < 0 {
			continue
		}
		cmds[i] = refreshScript.EvalSha(ctx, pipe, []string{op.Keys.Lock}, op.Owner, op.Token, op.Hold, pxs[i])
	}
	_, _ = pipe.Exec(ctx) // per-command errors are read below
	var retry []int
	for i, cmd := range cmds {
		if cmd != nil && isNoScript(cmd.Err()) {
			retry = append(retry, i)
		}
	}
	if len(retry) > 0 {
		pipe = c.Pipeline()
		for _, i := range retry {
			op := ops[i]
			cmds[i] = refreshScript.Eval(ctx, pipe, []string{op.Keys.Lock}, op.Owner, op.Token, op.Hold, pxs[i])
		}
		_, _ = pipe.Exec(ctx)
	}
	for i, cmd := range cmds {
		if cmd == nil {
			continue
		}
		n, err := cmd.Int64()
		res[i] = RefreshResult{Held: err == nil && n > 0, Err: err}
	}
	return res
}
