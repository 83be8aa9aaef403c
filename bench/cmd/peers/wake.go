package main

import (
	"context"
	"log"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// ---- raw client-side-caching floor (section "wake", not run by default):
// the pub/sub floor (rawPubSubLib) with the wake-up carried by a
// client-side-caching invalidation instead of a PUBLISH, what rueidislock
// waits on. rueidis, one connection per client, CLIENT TRACKING ON OPTOUT
// (every key a command reads is tracked, once, until its next
// invalidation). An attempt is one script, SET NX PX and a GET of the key
// (the GET tracks it: an attempt that fails is registered for the
// invalidation atomically with its failure); a waiter that failed
// registers in its client's FIFO queue, tries once more, then sleeps until
// an invalidation of the key wakes the head of the queue (one per client
// per release, as with pub/sub: without NOLOOP the releasing client is
// notified too); the release is the compare-and-delete script whose DEL
// invalidates. No fencing, no reentrancy, no lease bookkeeping: the round
// trips and wake-ups alone, as the pub/sub floor.

var (
	cscAcquire = rueidis.NewLuaScript(`local r = redis.call("SET",KEYS[1],ARGV[1],"NX","PX",ARGV[2]); redis.call("GET",KEYS[1]); return r`)
	cscDel     = rueidis.NewLuaScript(`if redis.call("GET",KEYS[1]) == ARGV[1] then return redis.call("DEL",KEYS[1]) end return 0`)
)

type cscInst struct {
	c  rueidis.Client
	mu sync.Mutex
	q  map[string][]chan struct{}
}

// onInvalidations wakes the head of each invalidated key's queue; nil
// (the connection was reset: tracking lost) wakes every head.
func (r *cscInst) onInvalidations(msgs []rueidis.RedisMessage) {
	r.mu.Lock()
	defer r.mu.Unlock()
	wake := func(q []chan struct{}) {
		if len(q) > 0 {
			select {
			case q[0] <- struct{}{}:
			default:
			}
		}
	}
	if msgs == nil {
		for _, q := range r.q {
			wake(q)
		}
		return
	}
	for _, m := range msgs {
		if k, err := m.ToString(); err == nil {
			wake(r.q[k])
		}
	}
}

func (r *cscInst) leave(key string, w chan struct{}) {
	r.mu.Lock()
	r.q[key] = slices.DeleteFunc(r.q[key], func(x chan struct{}) bool { return x == w })
	r.mu.Unlock()
}

type cscHeld struct {
	c        rueidis.Client
	key, val string
}

func (h *cscHeld) release(ctx context.Context) error {
	return cscDel.Exec(ctx, h.c, []string{h.key}, []string{h.val}).Error()
}

var cscTTL = strconv.FormatInt(benchTTL.Milliseconds(), 10)

func (r *cscInst) bind(key string, wait bool) lockFn {
	return func(ctx context.Context) (releaser, error) {
		val := "csc-" + strconv.FormatUint(rawSeq.Add(1), 36)
		var w chan struct{}
		for {
			err := cscAcquire.Exec(ctx, r.c, []string{key}, []string{val, cscTTL}).Error()
			if err == nil || !rueidis.IsRedisNil(err) {
				if w != nil {
					r.leave(key, w)
				}
				if err != nil {
					return nil, err
				}
				return &cscHeld{r.c, key, val}, nil
			}
			if !wait {
				return nil, errGaveUp
			}
			if w == nil {
				w = make(chan struct{}, 1)
				r.mu.Lock()
				r.q[key] = append(r.q[key], w)
				r.mu.Unlock()
				continue // registered: try once more
			}
			t := time.NewTimer(time.Second)
			select {
			case <-w:
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				r.leave(key, w)
				return nil, ctx.Err()
			}
			t.Stop()
		}
	}
}

func (r *cscInst) close() { r.c.Close() }

var cscFloorLib = lib{name: "raw rueidis client-side-caching floor", make: func(a []string) inst {
	r := &cscInst{q: map[string][]chan struct{}{}}
	c, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress:           []string{a[0]},
		ClientTrackingOptions: []string{"OPTOUT"},
		OnInvalidations:       r.onInvalidations,
		PipelineMultiplex:     -1, // one connection: its reads are tracked, its invalidations come back on it
	})
	if err != nil {
		log.Fatal(err)
	}
	r.c = c
	return r
}}

// wakeLibs are the rows of the wake section: the two floors, then the
// libraries that wait on each.
func wakeLibs() []lib {
	return []lib{rawPubSubLib, cscFloorLib, distlockLib, rueidisLockLib}
}
