package main

import (
	"context"
	"errors"
	"log"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	rsredis "github.com/go-redsync/redsync/v4/redis"
	rsgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	dlredis "github.com/distlock/distlock/redis"
	"github.com/distlock/distlock/redlock"
)

const benchTTL = 10 * time.Second

var errGaveUp = errors.New("gave up")

// errTimedOut is a library's own timeout of one attempt while the caller's
// ctx is still live (rueidislock's 20ms TryNextAfter): counted, not fatal.
var errTimedOut = errors.New("attempt timed out inside the library")

// releaser releases one acquisition.
type releaser interface {
	release(ctx context.Context) error
}

// lockFn makes one acquisition of a bound key: a single attempt, or a wait
// with the library's configured retry.
type lockFn func(ctx context.Context) (releaser, error)

// inst is one client (connection pool) of a library.
type inst interface {
	bind(key string, wait bool) lockFn
	close()
}

// lib builds instances; each instance has its own go-redis client(s).
type lib struct {
	name string
	make func(addrs []string) inst
	// clients, if positive, overrides -clients in the hot-key runs.
	clients int
}

func newClient(addr string) *goredis.Client {
	return goredis.NewClient(&goredis.Options{Addr: addr})
}

// ---- raw go-redis floor: SET NX PX + EVALSHA compare-and-delete.

var rawDel = goredis.NewScript(`if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end`)

var rawSeq atomic.Uint64

type rawInst struct{ c *goredis.Client }

type rawHeld struct {
	c        *goredis.Client
	key, val string
}

func (h *rawHeld) release(ctx context.Context) error {
	return rawDel.Run(ctx, h.c, []string{h.key}, h.val).Err()
}

func (r *rawInst) bind(key string, wait bool) lockFn {
	return func(ctx context.Context) (releaser, error) {
		val := "raw-" + strconv.FormatUint(rawSeq.Add(1), 36)
		ok, err := r.c.SetNX(ctx, key, val, benchTTL).Result()
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, errGaveUp
		}
		return &rawHeld{r.c, key, val}, nil
	}
}
func (r *rawInst) close() { _ = r.c.Close() }

var rawLib = lib{name: "raw go-redis floor", make: func(a []string) inst { return &rawInst{newClient(a[0])} }}

// ---- distlock (redis or redlock backend).

type dlInst struct {
	l       *distlock.Locker
	clients []*goredis.Client
}

type dlHeld struct{ *distlock.Lease }

func (h dlHeld) release(ctx context.Context) error { return h.Release(ctx) }

func (d *dlInst) bind(key string, wait bool) lockFn {
	if wait {
		return func(ctx context.Context) (releaser, error) {
			l, err := d.l.Acquire(ctx, key)
			if err != nil {
				return nil, err
			}
			return dlHeld{l}, nil
		}
	}
	return func(ctx context.Context) (releaser, error) {
		l, err := d.l.TryAcquire(ctx, key)
		if err != nil {
			return nil, err
		}
		return dlHeld{l}, nil
	}
}
func (d *dlInst) close() {
	_ = d.l.Close()
	for _, c := range d.clients {
		_ = c.Close()
	}
}

var distlockLib = lib{name: "distlock redis", make: func(a []string) inst { return newDistlock(a) }}

// distlockOneClient has every hot-key waiter in one Locker: its waiters
// queue in FIFO order, where waiters in several Lockers (processes) race.
var distlockOneClient = lib{name: "distlock redis, 1 client", make: func(a []string) inst { return newDistlock(a) }, clients: 1}

// distlockFair queues waiters in Redis (redis.WithFair): arrival order
// across clients, and a release hands the lock to the next waiter directly.
var distlockFair = lib{name: "distlock redis, fair queue", make: func(a []string) inst { return newDistlock(a, dlredis.WithFair()) }}

func newDistlock(a []string, opts ...dlredis.Option) inst {
	c := newClient(a[0])
	opts = append([]dlredis.Option{dlredis.WithPrefix("bench:"), dlredis.WithDefaults(distlock.WithTTL(benchTTL))}, opts...)
	l, err := dlredis.New(c, opts...)
	if err != nil {
		log.Fatal(err)
	}
	return &dlInst{l, []*goredis.Client{c}}
}

var redlockLib = lib{name: "distlock redlock (5 nodes)", make: func(a []string) inst {
	cs := make([]*goredis.Client, len(a))
	us := make([]goredis.UniversalClient, len(a))
	for i, addr := range a {
		cs[i] = goredis.NewClient(&goredis.Options{Addr: addr, ContextTimeoutEnabled: true})
		us[i] = cs[i]
	}
	l, err := redlock.New(us, redlock.WithPrefix("bench:"), redlock.WithDefaults(distlock.WithTTL(benchTTL)))
	if err != nil {
		panic(err) // the options are constants: a programming error
	}
	return &dlInst{l, cs}
}}

// ---- bsm/redislock.

type rlInst struct {
	c     *goredis.Client
	cl    *redislock.Client
	retry func() redislock.RetryStrategy
}

type rlHeld struct{ *redislock.Lock }

func (h rlHeld) release(ctx context.Context) error { return h.Release(ctx) }

func (r *rlInst) bind(key string, wait bool) lockFn {
	return func(ctx context.Context) (releaser, error) {
		var opt *redislock.Options
		if wait && r.retry != nil {
			opt = &redislock.Options{RetryStrategy: r.retry()}
		}
		l, err := r.cl.Obtain(ctx, key, benchTTL, opt)
		if errors.Is(err, redislock.ErrNotObtained) {
			return nil, errGaveUp
		}
		if err != nil {
			return nil, err
		}
		return rlHeld{l}, nil
	}
}
func (r *rlInst) close() { _ = r.c.Close() }

func redislockLib(name string, retry func() redislock.RetryStrategy) lib {
	return lib{name: name, make: func(a []string) inst {
		c := newClient(a[0])
		return &rlInst{c, redislock.New(c), retry}
	}}
}

// ---- go-redsync/redsync.

type rsInst struct {
	cs   []*goredis.Client
	rs   *redsync.Redsync
	opts []redsync.Option
}

type rsHeld struct{ m *redsync.Mutex }

func (h rsHeld) release(ctx context.Context) error {
	_, err := h.m.UnlockContext(ctx)
	return err
}

func (r *rsInst) bind(key string, wait bool) lockFn {
	m := r.rs.NewMutex(key, append([]redsync.Option{redsync.WithExpiry(benchTTL)}, r.opts...)...)
	return func(ctx context.Context) (releaser, error) {
		var err error
		if wait {
			err = m.LockContext(ctx)
		} else {
			err = m.TryLockContext(ctx)
		}
		if err != nil {
			if ctx.Err() == nil {
				var taken *redsync.ErrTaken
				if errors.Is(err, redsync.ErrFailed) || errors.As(err, &taken) {
					return nil, errGaveUp
				}
			}
			return nil, err
		}
		return rsHeld{m}, nil
	}
}
func (r *rsInst) close() {
	for _, c := range r.cs {
		_ = c.Close()
	}
}

func redsyncLib(name string, opts ...redsync.Option) lib {
	return lib{name: name, make: func(a []string) inst {
		cs := make([]*goredis.Client, len(a))
		pools := make([]rsredis.Pool, len(a))
		for i, addr := range a {
			cs[i] = newClient(addr)
			pools[i] = rsgoredis.NewPool(cs[i])
		}
		return &rsInst{cs, redsync.New(pools...), opts}
	}}
}

// ---- raw pub/sub floor: what a notified hot-key handoff costs at least
// with go-redis on these servers. SET NX PX; a waiter that failed
// registers in its client's FIFO queue, tries once more, then sleeps until
// its client's subscriber wakes the head of the queue on a release message
// (one per client per release, as distlock does); release is one EVALSHA
// compare-and-delete that PUBLISHes. No fencing, no reentrancy, no lease
// bookkeeping: the round trips and wake-ups alone.

var rawPubDel = goredis.NewScript(`if redis.call("get",KEYS[1]) == ARGV[1] then redis.call("del",KEYS[1]); redis.call("publish",KEYS[2],"1"); return 1 end return 0`)

type rawPSInst struct {
	c    *goredis.Client
	ps   *goredis.PubSub
	mu   sync.Mutex
	subs map[string]bool
	q    map[string][]chan struct{}
}

func (r *rawPSInst) subscribe(ch string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.subs[ch] {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.ps.Subscribe(ctx, ch); err != nil {
		return err
	}
	r.subs[ch] = true
	return nil
}

func (r *rawPSInst) dispatch() {
	for {
		msg, err := r.ps.Receive(context.Background())
		if err != nil {
			return
		}
		if m, ok := msg.(*goredis.Message); ok {
			r.mu.Lock()
			if q := r.q[m.Channel]; len(q) > 0 {
				select {
				case q[0] <- struct{}{}:
				default:
				}
			}
			r.mu.Unlock()
		}
	}
}

func (r *rawPSInst) leave(ch string, w chan struct{}) {
	r.mu.Lock()
	r.q[ch] = slices.DeleteFunc(r.q[ch], func(x chan struct{}) bool { return x == w })
	r.mu.Unlock()
}

type rawPSHeld struct {
	c            *goredis.Client
	key, ch, val string
}

func (h *rawPSHeld) release(ctx context.Context) error {
	return rawPubDel.Run(ctx, h.c, []string{h.key, h.ch}, h.val).Err()
}

func (r *rawPSInst) bind(key string, wait bool) lockFn {
	ch := key + ":wake"
	return func(ctx context.Context) (releaser, error) {
		val := "rawps-" + strconv.FormatUint(rawSeq.Add(1), 36)
		var w chan struct{}
		for {
			ok, err := r.c.SetNX(ctx, key, val, benchTTL).Result()
			if err != nil || ok {
				if w != nil {
					r.leave(ch, w)
				}
				if err != nil {
					return nil, err
				}
				return &rawPSHeld{r.c, key, ch, val}, nil
			}
			if !wait {
				return nil, errGaveUp
			}
			if w == nil {
				if err := r.subscribe(ch); err != nil {
					return nil, err
				}
				w = make(chan struct{}, 1)
				r.mu.Lock()
				r.q[ch] = append(r.q[ch], w)
				r.mu.Unlock()
				continue // registered: try once more
			}
			t := time.NewTimer(time.Second)
			select {
			case <-w:
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				r.leave(ch, w)
				return nil, ctx.Err()
			}
			t.Stop()
		}
	}
}

func (r *rawPSInst) close() {
	_ = r.ps.Close()
	_ = r.c.Close()
}

var rawPubSubLib = lib{name: "raw go-redis pub/sub floor", make: func(a []string) inst {
	c := newClient(a[0])
	r := &rawPSInst{c: c, ps: c.Subscribe(context.Background()), subs: map[string]bool{}, q: map[string][]chan struct{}{}}
	go r.dispatch()
	return r
}}
