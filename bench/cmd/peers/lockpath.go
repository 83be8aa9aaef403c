package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log"
	"strconv"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/distlock/distlock/internal/async"
	"github.com/distlock/distlock/internal/redislua"
)

// The lock-path prototypes (section "lockpath", not run by default): what
// one uncontended distlock cycle sends to Redis — one EVALSHA of the
// acquire script (fence.lua + acquire.lua: on a free lock TIME, EXISTS,
// INCR of the slot's fencing counter, HSET, PEXPIRE) and one EVALSHA of the release
// script (hold.lua + release.lua: HGETALL, DEL) — with the same keys and
// arguments, issued without a distlock Locker through:
//
//   - go-redis directly (one pooled connection per request in flight);
//   - go-redis with distlock's natural batching (redislua.Batch: what the
//     redis package sends, without the Locker's lease bookkeeping);
//   - rueidis with auto-pipelining (4 connections, its default), and with
//     one connection (PipelineMultiplex -1, as rueidislock configures it).
//
// Beside them, rueidis issuing the floor's cycle (SET NX PX and a
// compare-and-delete script), and the floor's cycle as two scripts through
// both natural batching and rueidis, so that the client's share of a gap
// and the scripts' share can be told apart.

// lockpathOwner is the owner id of every prototype cycle (one per process:
// the keys are distinct, so owners never meet).
var lockpathOwner = func() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "o" + hex.EncodeToString(b[:])
}()

const lockpathPrefix = "bench:lp:"

// lockpathKeys caches the Keys of a lock name (KeysFor hashes the name).
func lockpathKeys(key string) redislua.Keys { return redislua.KeysFor(lockpathPrefix, key) }

// ---- go-redis, direct and batched.

type lpGoredis struct {
	c     *goredis.Client
	g     *async.Group
	b     *redislua.Batch // nil: direct
	holds *redislua.HoldSource
	floor bool // the floor's cycle as two scripts (lpFloorSet, lpFloorDelG) instead of distlock's
}

// The floor's cycle as two scripts, so that go-redis's natural batching
// (which sends scripts) and rueidis run the same cheap cycle.
const (
	lpFloorSetSrc = `return redis.call("SET",KEYS[1],ARGV[1],"NX","PX",ARGV[2])`
	lpFloorDelSrc = `if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end`
)

var (
	lpFloorSetG = goredis.NewScript(lpFloorSetSrc)
	lpFloorDelG = goredis.NewScript(lpFloorDelSrc)
)

type lpGoredisHeld struct {
	in    *lpGoredis
	k     redislua.Keys
	hold  string
	token uint64
}

func (h *lpGoredisHeld) release(ctx context.Context) error {
	if h.in.floor {
		cmd, _, err := h.in.b.Do(ctx, lpFloorDelG, []string{h.k.Name}, []any{h.hold}, nil)
		if err == nil {
			err = cmd.Err()
		}
		return err
	}
	var r redislua.ReleaseResult
	var err error
	if h.in.b != nil {
		r, _, err = h.in.b.Release(ctx, h.k, lockpathOwner, h.token, h.hold, nil)
	} else {
		r, err = redislua.Release(ctx, h.in.c, h.k, lockpathOwner, h.token, h.hold)
	}
	if err == nil && r == redislua.NotHeld {
		err = fmt.Errorf("release of %s: not held", h.k.Name)
	}
	return err
}

func (l *lpGoredis) bind(key string, wait bool) lockFn {
	k := lockpathKeys(key)
	if l.floor {
		k.Name = lockpathPrefix + key
	}
	return func(ctx context.Context) (releaser, error) {
		hold := l.holds.Next()
		if l.floor {
			cmd, _, err := l.b.Do(ctx, lpFloorSetG, []string{k.Name}, []any{hold, lpTTL}, nil)
			if err == nil {
				err = cmd.Err()
			}
			if errors.Is(err, goredis.Nil) {
				return nil, errGaveUp
			}
			if err != nil {
				return nil, err
			}
			return &lpGoredisHeld{l, k, hold, 0}, nil
		}
		var r redislua.AcquireResult
		var err error
		if l.b != nil {
			r, _, err = l.b.Acquire(ctx, k, lockpathOwner, hold, "", benchTTL, nil)
		} else {
			r, err = redislua.Acquire(ctx, l.c, k, lockpathOwner, hold, "", benchTTL)
		}
		if err != nil {
			return nil, err
		}
		if r.Outcome != redislua.Acquired {
			return nil, errGaveUp
		}
		return &lpGoredisHeld{l, k, hold, r.Token}, nil
	}
}

func (l *lpGoredis) close() {
	l.g.Close()
	_ = l.c.Close()
}

func lpGoredisLib(name string, batched, floor bool) lib {
	return lib{name: name, make: func(a []string) inst {
		c := newClient(a[0])
		l := &lpGoredis{c: c, g: async.NewGroup(), holds: redislua.NewHoldSource(), floor: floor}
		if batched || floor {
			l.b = redislua.NewBatch(c, l.g)
		}
		return l
	}}
}

// ---- rueidis: the same scripts, auto-pipelined.

var (
	lpAcquire  = rueidis.NewLuaScript(redislua.Compose("fence.lua", "acquire.lua"))
	lpRelease  = rueidis.NewLuaScript(redislua.Compose("hold.lua", "release.lua"))
	lpFloorDel = rueidis.NewLuaScript(lpFloorDelSrc)
	lpFloorSet = rueidis.NewLuaScript(lpFloorSetSrc)
)

var lpTTL = strconv.FormatInt(benchTTL.Milliseconds(), 10)

type lpRueidis struct {
	c     rueidis.Client
	holds *redislua.HoldSource
	floor bool // SET NX PX + compare-and-delete instead of distlock's scripts
	// floorScript sends the floor's SET NX PX as a script (lpFloorSet)
	floorScript bool
}

type lpRueidisHeld struct {
	in          *lpRueidis
	k           redislua.Keys
	hold, token string
}

func (h *lpRueidisHeld) release(ctx context.Context) error {
	if h.in.floor {
		return lpFloorDel.Exec(ctx, h.in.c, []string{h.k.Name}, []string{h.hold}).Error()
	}
	n, err := lpRelease.Exec(ctx, h.in.c, []string{h.k.Lock}, []string{lockpathOwner, h.token, h.hold, h.k.Channel}).AsInt64()
	if err == nil && n == 0 {
		err = fmt.Errorf("release of %s: not held", h.k.Name)
	}
	return err
}

func (l *lpRueidis) bind(key string, wait bool) lockFn {
	k := lockpathKeys(key)
	if l.floor {
		k.Name = lockpathPrefix + key
	}
	return func(ctx context.Context) (releaser, error) {
		hold := l.holds.Next()
		if l.floor {
			var err error
			if l.floorScript {
				err = lpFloorSet.Exec(ctx, l.c, []string{k.Name}, []string{hold, lpTTL}).Error()
			} else {
				err = l.c.Do(ctx, l.c.B().Set().Key(k.Name).Value(hold).Nx().Px(benchTTL).Build()).Error()
			}
			if rueidis.IsRedisNil(err) {
				return nil, errGaveUp
			}
			if err != nil {
				return nil, err
			}
			return &lpRueidisHeld{l, k, hold, ""}, nil
		}
		v, err := lpAcquire.Exec(ctx, l.c, []string{k.Lock, k.Fence, k.Legacy}, []string{lockpathOwner, lpTTL, hold, k.Name}).ToArray()
		if err != nil {
			return nil, err
		}
		if len(v) < 2 {
			return nil, fmt.Errorf("acquire of %s: short reply", key)
		}
		code, err := v[0].AsInt64()
		if err != nil {
			return nil, err
		}
		if code != 1 {
			return nil, errGaveUp
		}
		t, err := v[1].AsInt64()
		if err != nil {
			return nil, err
		}
		return &lpRueidisHeld{l, k, hold, strconv.FormatInt(t, 10)}, nil
	}
}

func (l *lpRueidis) close() { l.c.Close() }

func lpRueidisLib(name string, multiplex int, floor, floorScript bool) lib {
	return lib{name: name, make: func(a []string) inst {
		c, err := rueidis.NewClient(rueidis.ClientOption{
			InitAddress:       []string{a[0]},
			DisableCache:      true, // the lock path reads nothing it could cache
			PipelineMultiplex: multiplex,
		})
		if err != nil {
			log.Fatal(err)
		}
		return &lpRueidis{c: c, holds: redislua.NewHoldSource(), floor: floor || floorScript, floorScript: floorScript}
	}}
}

// lockpathLibs are the rows of the lockpath tables: the references first
// (the floor, distlock, rueidislock), then the prototypes.
func lockpathLibs() []lib {
	return []lib{
		rawLib,
		distlockLib,
		rueidisLockLib,
		lpGoredisLib("lock path scripts, go-redis direct", false, false),
		lpGoredisLib("lock path scripts, go-redis natural batching", true, false),
		lpRueidisLib("lock path scripts, rueidis (4 conns)", 0, false, false),
		lpRueidisLib("lock path scripts, rueidis (1 conn)", -1, false, false),
		lpRueidisLib("floor cycle, rueidis (4 conns)", 0, true, false),
		lpRueidisLib("floor cycle, rueidis (1 conn)", -1, true, false),
		lpGoredisLib("floor cycle as 2 scripts, go-redis natural batching", true, true),
		lpRueidisLib("floor cycle as 2 scripts, rueidis (1 conn)", -1, false, true),
	}
}
