package redisscript

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// # Fair queue
//
// A fair lock adds two names to the layout (see Keys.Fair):
//
//	<prefix>{<tag>}:q  sorted set: the waiters' hold ids in arrival order
//	<prefix>{<tag>}:w  hash: per hold id "deadline seen attempt px owner"
//	                   (server microseconds; the attempt number the waiter
//	                   sent last; the TTL it asked for); "#", the
//	                   arrival counter that orders the sorted set; and per
//	                   owner with queued waiters "c<owner>", their number
//
// A waiter enqueues with its first failed attempt and renews its entry with
// every attempt; an entry whose deadline passed (its waiter crashed, or was
// paused for longer than the queue TTL) is dropped when it reaches the head.
// A free lock goes to the first live waiter only: its own attempt takes it,
// and a release (or any attempt that finds the lock free while another
// waiter is at the head) grants it directly — the lock hash is written for
// that waiter, with its owner, a new token and its TTL, and the grant is
// published on the channel as
//
//	g<hold> <token> <attempt> <µs since that attempt was processed>
//
// so the waiter holds the lock without another round trip. It counts its
// validity from the time it sent that attempt plus the elapsed time (less
// 1% for clock-rate drift), a lower bound of the grant time in its own
// clock. A waiter that missed the message finds the grant with its next
// attempt (outcome Granted). Both queue keys expire twice the queue TTL
// after the last waiter renewed its entry.
//
// Reentrancy overrides the queue: whenever an owner comes to hold the lock
// (granted, or taken by its own attempt), every other live waiter of that
// owner still in the queue, wherever it stands, is given a hold of its own
// at once — the hold a TryAcquire of that owner would get — and its grant
// is published as above. The per-owner count spares the scan of the queue
// unless the owner has another waiter in it.

// fairLib holds the Lua functions the fair scripts share. KEYS[1] lock,
// KEYS[2] fence, KEYS[3] queue, KEYS[4] waiter entries.
const fairLib = `
redis.replicate_commands() -- TIME before writes: a no-op from Redis 5 on, needed on 3.2 and 4
local clock
local function now_us()
	if not clock then
		local t = redis.call('TIME')
		clock = tonumber(t[1]) * 1000000 + tonumber(t[2])
	end
	return clock
end
local function entry(h)
	local e = redis.call('HGET', KEYS[4], h)
	if not e then return nil end
	local dl, seen, att, px, owner = string.match(e, '^(%d+) (%d+) (%d+) (%d+) (.*)$')
	return {dl = tonumber(dl), seen = tonumber(seen), att = att, px = px, owner = owner}
end
-- drop takes h out of the queue, with its entry and its owner's count.
local function drop(h)
	if redis.call('ZREM', KEYS[3], h) == 1 then
		local e = entry(h)
		redis.call('HDEL', KEYS[4], h)
		if e then
			local c = 'c' .. e.owner
			if redis.call('HINCRBY', KEYS[4], c, -1) <= 0 then
				redis.call('HDEL', KEYS[4], c)
			end
		end
	end
end
-- head returns the first waiter whose entry is alive and that entry,
-- dropping dead ones on the way.
local function head()
	while true do
		local h = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
		if not h then return nil end
		local e = entry(h)
		if e and e.dl and e.dl >= now_us() then return h, e end
		drop(h)
	end
end
-- announce publishes on ch that waiter h (entry e) holds the lock with
-- token t.
local function announce(ch, h, e, t)
	if ch ~= '' then
		redis.call('PUBLISH', ch, 'g' .. h .. ' ' .. string.format('%d %s %d', tonumber(t), e.att, now_us() - e.seen))
	end
end
-- nest gives every live queued waiter of owner — who now holds the lock
-- with token t — a hold of its own, as a reentrant acquire would, and
-- announces each on ch; dead ones are dropped.
local function nest(owner, t, ch)
	local n = tonumber(redis.call('HGET', KEYS[4], 'c' .. owner) or '0')
	if n <= 0 then return end
	for _, h in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do
		local e = entry(h)
		if e and e.owner == owner then
			drop(h)
			if e.dl >= now_us() then
				redis.call('HSET', KEYS[1], h, 1)
				if redis.call('PTTL', KEYS[1]) < tonumber(e.px) then
					redis.call('PEXPIRE', KEYS[1], e.px)
				end
				announce(ch, h, e, t)
			end
			n = n - 1
			if n <= 0 then return end
		end
	end
end
-- serve grants the free lock to the first live waiter, and nests that
-- waiter's owner's other waiters, announcing each grant on ch. Returns the
-- owner, or nil if no one waits.
local function serve(ch)
	local h, e = head()
	if not h then return nil end
	drop(h)
	local t = redis.call('INCR', KEYS[2])
	redis.call('HSET', KEYS[1], 'o', e.owner, 't', t, h, 1)
	redis.call('PEXPIRE', KEYS[1], e.px)
	announce(ch, h, e, t)
	nest(e.owner, t, ch)
	return e.owner
end
`

// fairAcquireSrc: KEYS as fairLib; ARGV[1] owner, ARGV[2] ttl ms, ARGV[3]
// hold id, ARGV[4] "1" to enqueue when busy, ARGV[5] attempt number,
// ARGV[6] queue TTL ms, ARGV[7] channel.
// Returns {1, token} new lock, {2, token} reentrant hold, {3, token, pttl}
// granted to this hold while it waited, {0, pttl, holder} busy.
const fairAcquireSrc = fairLib + `
local o = redis.call('HGET', KEYS[1], 'o')
if not o then
	local h = head()
	if not h or h == ARGV[3] then
		local t = redis.call('INCR', KEYS[2])
		redis.call('HSET', KEYS[1], 'o', ARGV[1], 't', t, ARGV[3], 1)
		redis.call('PEXPIRE', KEYS[1], ARGV[2])
		if h then
			drop(h)
			nest(ARGV[1], t, ARGV[7])
		end
		return {1, t}
	end
	o = serve(ARGV[7]) -- the head's turn; it may be this owner's other hold
end
if o == ARGV[1] then
	local v = redis.call('HMGET', KEYS[1], 't', ARGV[3])
	if v[2] then
		return {3, v[1], redis.call('PTTL', KEYS[1])}
	end
	redis.call('HSET', KEYS[1], ARGV[3], 1)
	if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
		redis.call('PEXPIRE', KEYS[1], ARGV[2])
	end
	drop(ARGV[3])
	return {2, v[1]}
end
if ARGV[4] == '1' then
	if not redis.call('ZSCORE', KEYS[3], ARGV[3]) then
		redis.call('ZADD', KEYS[3], redis.call('HINCRBY', KEYS[4], '#', 1), ARGV[3])
		redis.call('HINCRBY', KEYS[4], 'c' .. ARGV[1], 1)
	end
	local qttl = tonumber(ARGV[6])
	local now = now_us()
	redis.call('HSET', KEYS[4], ARGV[3], string.format('%d %d %s %s ', now + qttl * 1000, now, ARGV[5], ARGV[2]) .. ARGV[1])
	redis.call('PEXPIRE', KEYS[3], 2 * qttl)
	redis.call('PEXPIRE', KEYS[4], 2 * qttl)
end
return {0, redis.call('PTTL', KEYS[1]), o}
`

// fairReleaseSrc: KEYS as fairLib; ARGV[1] owner, ARGV[2] token ("0": not
// checked), ARGV[3] hold id, ARGV[4] channel. It first takes the hold out of
// the queue (a waiter leaving, or the undo of an attempt), then releases
// as releaseSrc does; a freed lock goes to the first live waiter, and only
// without one is the plain wake-up published. A lock found free (expired)
// is served too.
// Returns 0 not held, 1 freed, 2 hold released and others remain.
const fairReleaseSrc = fairLib + `
drop(ARGV[3])
local v = redis.call('HMGET', KEYS[1], 'o', 't', ARGV[3])
if v[1] ~= ARGV[1] or not v[3] or (ARGV[2] ~= '0' and v[2] ~= ARGV[2]) then
	if not v[1] then serve(ARGV[4]) end
	return 0
end
if redis.call('HLEN', KEYS[1]) > 3 then
	redis.call('HDEL', KEYS[1], ARGV[3])
	return 2
end
redis.call('DEL', KEYS[1])
if not serve(ARGV[4]) and ARGV[4] ~= '' then
	redis.call('PUBLISH', ARGV[4], v[2])
end
return 1
`

var (
	fairAcquireScript = goredis.NewScript(fairAcquireSrc)
	fairReleaseScript = goredis.NewScript(fairReleaseSrc)
)

// Fair returns k with the fair queue's names set (Queue, Waiters): Acquire
// and Release then keep the queue (see FairAcquire).
func (k Keys) Fair() Keys {
	s := k.Lock + ":q" + k.Lock + ":w" // one allocation, sliced
	n := len(k.Lock) + 2
	k.Queue, k.Waiters = s[:n], s[n:]
	return k
}

func (k Keys) fairKeys() []string { return []string{k.Lock, k.Fence, k.Queue, k.Waiters} }

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
}

// FairAcquire makes one attempt on a fair lock (k from Keys.Fair), in one
// round trip. A free lock is taken only if no live waiter is queued ahead
// of a.Hold; a free lock with a live waiter at the head is granted to that
// waiter. Outcomes: Acquired, Reentered (owner holds it; the queue is
// bypassed), Granted (granted to a.Hold while it waited; PTTL is its
// remaining time) or Busy (enqueued if a.Enqueue).
func FairAcquire(ctx context.Context, c goredis.Scripter, k Keys, owner string, ttl time.Duration, a FairAttempt) (AcquireResult, error) {
	px, err := PX(ttl)
	if err != nil {
		return AcquireResult{}, err
	}
	if err := checkHold(a.Hold); err != nil {
		return AcquireResult{}, err
	}
	if k.Queue == "" || k.Fence == "" {
		return AcquireResult{}, fmt.Errorf("redisscript: FairAcquire needs Keys.Fair with a fence key")
	}
	enq := "0"
	if a.Enqueue {
		enq = "1"
	}
	qttl := max(int64(a.QueueTTL/time.Millisecond), 1)
	v, err := fairAcquireScript.Run(ctx, c, k.fairKeys(), owner, px, a.Hold, enq, a.N, qttl, k.Channel).Slice()
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
