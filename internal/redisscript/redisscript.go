// Package redisscript holds the Redis side of distlock's Redis-based
// backends: the key layout, the Lua scripts, the per-node operations
// (acquire with reentrancy and fencing counter, owner-checked release and
// refresh, batched refresh over a pipeline, release wake-ups over pub/sub
// that wake one waiter at a time) and the background work of a driver
// (round trips whose caller gave up, owner-checked undo of operations whose
// outcome is unknown).
//
// Every function works against one Redis node or one logical Redis (a
// go-redis Client, a Sentinel failover client, or a ClusterClient), so the
// single-Redis backend (package redis) calls them once and a Redlock backend
// calls them against each of its N independent masters. The functions
// return typed outcomes and the go-redis error unchanged; Classify turns the
// latter into distlock's error conventions.
//
// # Data layout
//
// One lock named key lives under three names that share a hash tag, so that
// they sit in one Redis Cluster slot (see KeysFor):
//
//	<prefix>{<tag>}        hash: o=owner, t=token, one field "h…" per hold
//	                       (its value: the server time in ms it was taken)
//	<prefix>{<tag>}:fence  integer: the fencing counter (INCR), never expires
//	<prefix>{<tag>}:wake   pub/sub channel: a message when the lock is freed
//
// <tag> is the unpadded base64url SHA-256 digest of the key (43 bytes), so
// every key of 1 to 1024 bytes with any content, including '{', '}' and NUL,
// maps to fixed-length names and distinct keys stay distinct (a collision
// would need a SHA-256 collision).
//
// Each acquisition adds its own hold field (a unique id from HoldSource) to
// the hash. The hold count of a reentrant owner is the number of hold
// fields; the lock is freed (the hash deleted and a wake-up published) when
// the last one is released. Because a hold id is unique per acquisition, an
// acquisition whose reply was lost can be recognised and undone exactly: a
// retry with the same hold id is idempotent, and Release with the owner and
// hold id (token 0) removes precisely that hold and nothing else.
package redisscript

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/backend"
)

// DefaultPrefix is the key prefix used when none is configured.
const DefaultPrefix = "distlock:"

// Keys names the server-side objects of one lock. All three share one hash
// tag.
type Keys struct {
	// Lock is the hash holding owner ("o"), token ("t") and one field per
	// hold. It carries the lock's expiry.
	Lock string
	// Fence is the fencing counter, incremented for every new acquisition.
	// It has no expiry. Empty: no fencing counter (tokens are 0).
	Fence string
	// Channel is the pub/sub channel on which a release that frees the lock
	// publishes. Empty: no publication.
	Channel string
	// Queue and Waiters are the fair queue's sorted set and entries (see
	// Keys.Fair). Empty: the lock is not fair, and Release ignores them.
	Queue, Waiters string
}

// TagLen is the length of the hash-tag content that KeysFor derives from a key.
const TagLen = 43

// KeysFor returns the names of the lock key under prefix. The names are
// prefix + "{" + tag + "}" (+ ":fence" / ":wake") with tag the unpadded
// base64url SHA-256 of key. Any prefix works: the hashed part of the names
// (Redis Cluster uses the text between the first '{' and the next '}') is
// the same for all three names, so they always share a slot.
func KeysFor(prefix, key string) Keys {
	sum := sha256.Sum256([]byte(key))
	var tag [TagLen]byte
	base64.RawURLEncoding.Encode(tag[:], sum[:])
	// One allocation: "<base>:fence<base>:wake", sliced.
	n := len(prefix) + 2 + TagLen
	buf := make([]byte, 0, 2*n+len(":fence")+len(":wake"))
	buf = append(buf, prefix...)
	buf = append(buf, '{')
	buf = append(buf, tag[:]...)
	buf = append(buf, '}')
	buf = append(buf, ":fence"...)
	buf = append(buf, buf[:n]...)
	buf = append(buf, ":wake"...)
	s := string(buf)
	return Keys{Lock: s[:n], Fence: s[:n+len(":fence")], Channel: s[n+len(":fence"):]}
}

// PX returns ttl in whole milliseconds, the unit of Redis expiries. A TTL
// below 1ms or with a sub-millisecond part gets an error wrapping
// backend.ErrInvalidTTL: go-redis would round it silently, so it is refused
// instead.
func PX(ttl time.Duration) (int64, error) {
	if ttl < time.Millisecond {
		return 0, fmt.Errorf("%w: %v is below Redis's 1ms expiry resolution", backend.ErrInvalidTTL, ttl)
	}
	if ttl%time.Millisecond != 0 {
		return 0, fmt.Errorf("%w: %v is not a whole number of milliseconds (Redis expiries are in ms; no rounding)", backend.ErrInvalidTTL, ttl)
	}
	return int64(ttl / time.Millisecond), nil
}

// HoldSource makes hold ids: unique per acquisition across processes (a
// random 64-bit base per source plus a counter). Safe for concurrent use.
type HoldSource struct {
	base string
	n    atomic.Uint64
}

// NewHoldSource returns a HoldSource with a fresh random base.
func NewHoldSource() *HoldSource {
	var b [9]byte
	_, _ = rand.Read(b[:]) // crypto/rand never fails
	return &HoldSource{base: "h" + base64.RawURLEncoding.EncodeToString(b[:])}
}

// Next returns a new hold id. Hold ids begin with 'h', so they never clash
// with the hash's "o" and "t" fields.
func (h *HoldSource) Next() string {
	return h.base + strconv.FormatUint(h.n.Add(1), 36)
}

func checkHold(hold string) error {
	if hold == "" || hold[0] != 'h' {
		return fmt.Errorf("redisscript: hold id %q does not come from a HoldSource", hold)
	}
	return nil
}

// The scripts. KEYS and ARGV are documented above each one. Redis runs a
// script atomically; PTTL and PEXPIRE inside it see one frozen clock.

// acquireSrc: KEYS[1] lock, KEYS[2] fence (optional); ARGV[1] owner,
// ARGV[2] ttl ms, ARGV[3] hold id. Each hold field's value is the server
// time (ms) at which it was added.
// Returns {1, token} new lock, {2, token} reentrant hold, {0, pttl, holder,
// age} busy, with age the ms since the holder's newest hold was added (-1:
// unknown, such as a hold written by a fair script, whose value is 1).
const acquireSrc = `
redis.replicate_commands() -- TIME before writes: a no-op from Redis 5 on, needed on 3.2 and 4
local tm = redis.call('TIME')
local ms = tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)
local o = redis.call('HGET', KEYS[1], 'o')
if not o then
	local t = 0
	if KEYS[2] then t = redis.call('INCR', KEYS[2]) end
	redis.call('HSET', KEYS[1], 'o', ARGV[1], 't', t, ARGV[3], ms)
	redis.call('PEXPIRE', KEYS[1], ARGV[2])
	return {1, t}
end
if o == ARGV[1] then
	redis.call('HSET', KEYS[1], ARGV[3], ms)
	if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
		redis.call('PEXPIRE', KEYS[1], ARGV[2])
	end
	return {2, redis.call('HGET', KEYS[1], 't')}
end
local age = -1
local f = redis.call('HGETALL', KEYS[1])
for i = 1, #f, 2 do
	local v = tonumber(f[i + 1])
	if string.sub(f[i], 1, 1) == 'h' and v and v > 1 and (age < 0 or ms - v < age) then
		age = math.max(ms - v, 0)
	end
end
return {0, redis.call('PTTL', KEYS[1]), o, age}
`

// releaseSrc: KEYS[1] lock; ARGV[1] owner, ARGV[2] token ("0": not
// checked), ARGV[3] hold id, ARGV[4] channel ("": no publication).
// Returns 0 not held (nothing changed), 1 freed, 2 hold released and others
// of the same owner remain.
const releaseSrc = `
local v = redis.call('HMGET', KEYS[1], 'o', 't', ARGV[3])
if v[1] ~= ARGV[1] or not v[3] or (ARGV[2] ~= '0' and v[2] ~= ARGV[2]) then
	return 0
end
if redis.call('HLEN', KEYS[1]) > 3 then
	redis.call('HDEL', KEYS[1], ARGV[3])
	return 2
end
redis.call('DEL', KEYS[1])
if ARGV[4] ~= '' then
	redis.call('PUBLISH', ARGV[4], v[2])
end
return 1
`

// refreshSrc: KEYS[1] lock; ARGV[1] owner, ARGV[2] token ("0": not
// checked), ARGV[3] hold id, ARGV[4] ttl ms.
// Returns 0 not held (nothing changed), else the remaining ms after the
// refresh, which never shortens the expiry: max(pttl, ttl).
const refreshSrc = `
local v = redis.call('HMGET', KEYS[1], 'o', 't', ARGV[3])
if v[1] ~= ARGV[1] or not v[3] or (ARGV[2] ~= '0' and v[2] ~= ARGV[2]) then
	return 0
end
local p = redis.call('PTTL', KEYS[1])
local ttl = tonumber(ARGV[4])
if p < ttl then
	redis.call('PEXPIRE', KEYS[1], ARGV[4])
	return ttl
end
return p
`

var (
	acquireScript = goredis.NewScript(acquireSrc)
	releaseScript = goredis.NewScript(releaseSrc)
	refreshScript = goredis.NewScript(refreshSrc)
)

// ScriptHashes returns the SHA-1 digests of the acquire, release and refresh
// scripts, as EVALSHA sends them (for tests and diagnostics).
func ScriptHashes() (acquire, release, refresh string) {
	return acquireScript.Hash(), releaseScript.Hash(), refreshScript.Hash()
}

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
// next fencing token (INCR of k.Fence) and expiry ttl; if owner holds it the
// hold id is added (reentrancy) and the expiry extended to max(remaining,
// ttl); otherwise nothing changes and the holder's remaining time and
// owner are returned. Repeating a call with the same hold id is idempotent, so a retry
// after a lost reply does not add a second hold. hold must come from a
// HoldSource; ttl must be whole milliseconds (see PX).
func Acquire(ctx context.Context, c goredis.Scripter, k Keys, owner, hold string, ttl time.Duration) (AcquireResult, error) {
	px, err := PX(ttl)
	if err != nil {
		return AcquireResult{}, err
	}
	if err := checkHold(hold); err != nil {
		return AcquireResult{}, err
	}
	var keys []string
	if k.Fence != "" {
		keys = []string{k.Lock, k.Fence}
	} else {
		keys = []string{k.Lock}
	}
	v, err := acquireScript.Run(ctx, c, keys, owner, px, hold).Slice()
	if err != nil {
		return AcquireResult{}, err
	}
	return parseAcquire(v)
}

func parseAcquire(v []any) (AcquireResult, error) {
	if len(v) < 2 || len(v) > 4 {
		return AcquireResult{}, fmt.Errorf("redisscript: unexpected acquire reply %v", v)
	}
	code, ok := v[0].(int64)
	if !ok {
		return AcquireResult{}, fmt.Errorf("redisscript: unexpected acquire reply %v", v)
	}
	var n int64
	switch x := v[1].(type) {
	case int64:
		n = x
	case string:
		var err error
		if n, err = strconv.ParseInt(x, 10, 64); err != nil {
			return AcquireResult{}, fmt.Errorf("redisscript: unexpected token %q in lock hash", x)
		}
	default:
		return AcquireResult{}, fmt.Errorf("redisscript: unexpected acquire reply %v", v)
	}
	switch code {
	case 1, 2:
		if n < 0 {
			return AcquireResult{}, fmt.Errorf("redisscript: negative token %d", n)
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
	return AcquireResult{}, fmt.Errorf("redisscript: unexpected acquire reply %v", v)
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
	if err := checkHold(hold); err != nil {
		return NotHeld, err
	}
	var n int64
	var err error
	if k.Queue != "" {
		n, err = fairReleaseScript.Run(ctx, c, k.fairKeys(), owner, token, hold, k.Channel).Int64()
	} else {
		n, err = releaseScript.Run(ctx, c, []string{k.Lock}, owner, token, hold, k.Channel).Int64()
	}
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
	return NotHeld, fmt.Errorf("redisscript: unexpected release reply %d", n)
}

// Refresh extends the lock to at least ttl from now if owner still holds it
// with token and hold (token 0: not checked), in one round trip. It never
// shortens the expiry. It reports whether the lock was held (false: nothing
// was changed).
func Refresh(ctx context.Context, c goredis.Scripter, k Keys, owner string, token uint64, hold string, ttl time.Duration) (bool, error) {
	px, err := PX(ttl)
	if err != nil {
		return false, err
	}
	if err := checkHold(hold); err != nil {
		return false, err
	}
	n, err := refreshScript.Run(ctx, c, []string{k.Lock}, owner, token, hold, px).Int64()
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

func isNoScript(err error) bool {
	return err != nil && (errors.Is(err, goredis.ErrNoScript) || goredis.HasErrorPrefix(err, "NOSCRIPT"))
}

// IsReply reports whether err is an error reply from the Redis server (the
// command reached the server and was refused), as opposed to a network,
// pool or context error after which the command may or may not have run.
func IsReply(err error) bool {
	var re goredis.Error
	return errors.As(err, &re)
}

// Ambiguous reports whether a command that failed with err may nevertheless
// have run on the server: any error that is not a server reply, except a
// failure to connect (the command was never sent).
func Ambiguous(err error) bool {
	return err != nil && !IsReply(err) && !errors.Is(err, backend.ErrInvalidTTL) && !isDialError(err)
}

// isDialError reports whether err is a failure to open a connection.
func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// Classify puts a go-redis error into distlock's conventions:
//
//   - nil stays nil;
//   - an error caused by ctx ending is returned so that errors.Is(err,
//     ctx.Err()) holds (wrapped with backend.ErrUnavailable as well when
//     the client reported a network timeout rather than the context error);
//   - a WRONGTYPE reply (a foreign key under the lock's name) is returned as
//     is, wrapped in an explanation;
//   - every other failure — connection refused or reset, I/O timeout, pool
//     timeout, closed client, and server replies such as LOADING, READONLY,
//     OOM, CLUSTERDOWN, BUSY — wraps backend.ErrUnavailable.
//
// The go-redis error stays reachable with errors.As / errors.Is.
func Classify(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, backend.ErrInvalidTTL) {
		return err
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		if errors.Is(err, ctxErr) {
			return err
		}
		return fmt.Errorf("%w: %w: %w", backend.ErrUnavailable, err, ctxErr)
	}
	if goredis.HasErrorPrefix(err, "WRONGTYPE") {
		return fmt.Errorf("redis key of the lock holds a value of another type (does another application use the key prefix?): %w", err)
	}
	return fmt.Errorf("%w: %w", backend.ErrUnavailable, err)
}
