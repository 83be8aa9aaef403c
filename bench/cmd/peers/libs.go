package main

import (
	"context"
	"errors"
	"strconv"
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

var rawLib = lib{"raw go-redis floor", func(a []string) inst { return &rawInst{newClient(a[0])} }}

// ---- distlock (redis or redlock backend).

type dlInst struct {
	l       distlock.Locker
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

var distlockLib = lib{"distlock redis", func(a []string) inst {
	c := newClient(a[0])
	return &dlInst{dlredis.New(c, dlredis.WithPrefix("bench:"), dlredis.WithDefaults(distlock.WithTTL(benchTTL))), []*goredis.Client{c}}
}}

var redlockLib = lib{"distlock redlock (5 nodes)", func(a []string) inst {
	cs := make([]*goredis.Client, len(a))
	us := make([]goredis.UniversalClient, len(a))
	for i, addr := range a {
		cs[i] = goredis.NewClient(&goredis.Options{Addr: addr, ContextTimeoutEnabled: true})
		us[i] = cs[i]
	}
	return &dlInst{redlock.New(us, redlock.WithPrefix("bench:"), redlock.WithDefaults(distlock.WithTTL(benchTTL))), cs}
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
	return lib{name, func(a []string) inst {
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
	return lib{name, func(a []string) inst {
		cs := make([]*goredis.Client, len(a))
		pools := make([]rsredis.Pool, len(a))
		for i, addr := range a {
			cs[i] = newClient(addr)
			pools[i] = rsgoredis.NewPool(cs[i])
		}
		return &rsInst{cs, redsync.New(pools...), opts}
	}}
}
