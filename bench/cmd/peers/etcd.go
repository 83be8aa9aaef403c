package main

// distlock's etcd backend against etcd's own client/v3/concurrency.Mutex on
// one private 3-member etcd cluster (Debian's etcd-server): uncontended
// cycles, hot-key handoff, and many locks held at once. Run with -etcd.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/distlock/distlock/etcd"
	"github.com/distlock/distlock/internal/testkit/testserver"
)

var (
	etcdOnly = flag.Bool("etcd", false, "run only distlock etcd vs concurrency.Mutex on a private 3-member etcd cluster and print the figures")
	etcdHeld = flag.Int("etcd-held", 10000, "with -etcd: locks held at once in the scale measurement")
	etcdWin  = flag.Duration("etcd-window", 10*time.Second, "with -etcd: window over which keepalive traffic is counted while the locks are held")
)

// etcdSessionTTL is the lease TTL of both libraries (concurrency's default
// is 60s; the same TTL on both makes their keepalive traffic comparable).
const etcdSessionTTL = 10

// keepaliveCounter counts the LeaseKeepAlive messages a client sends.
type keepaliveCounter struct{ n atomic.Int64 }

func (k *keepaliveCounter) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil || !strings.HasSuffix(method, "/LeaseKeepAlive") {
		return s, err
	}
	return countingStream{s, &k.n}, nil
}

type countingStream struct {
	grpc.ClientStream
	n *atomic.Int64
}

func (c countingStream) SendMsg(m any) error { c.n.Add(1); return c.ClientStream.SendMsg(m) }

func etcdClient(endpoints []string, kc *keepaliveCounter) *clientv3.Client {
	cfg := clientv3.Config{Endpoints: endpoints, Logger: zap.NewNop(), DialTimeout: 5 * time.Second}
	if kc != nil {
		cfg.DialOptions = []grpc.DialOption{grpc.WithChainStreamInterceptor(kc.stream)}
	}
	c, err := clientv3.New(cfg)
	if err != nil {
		log.Fatal(err)
	}
	return c
}

// distlockEtcdLib: one Locker per instance, its goroutines distinct owners.
func distlockEtcdLib(name string, endpoints []string, opts ...etcd.Option) lib {
	return lib{name: name, make: func([]string) inst {
		l, err := etcd.Dial(endpoints, append([]etcd.Option{etcd.WithSessionTTL(etcdSessionTTL * time.Second), etcd.WithPrefix("/bench-distlock")}, opts...)...)
		if err != nil {
			log.Fatal(err)
		}
		return &dlInst{l: l}
	}}
}

// mutexLib: concurrency.Mutex, one client per instance and one session per
// goroutine (bind): a Mutex's key is its session's lease id, so goroutines
// sharing a session would share the lock.
func mutexLib(endpoints []string) lib {
	return lib{name: "concurrency.Mutex", make: func([]string) inst {
		return &mutexInst{c: etcdClient(endpoints, nil)}
	}}
}

type mutexInst struct {
	c        *clientv3.Client
	mu       sync.Mutex
	sessions []*concurrency.Session
}

type mutexHeld struct{ m *concurrency.Mutex }

func (h mutexHeld) release(ctx context.Context) error { return h.m.Unlock(ctx) }

func (m *mutexInst) bind(key string, wait bool) lockFn {
	s, err := concurrency.NewSession(m.c, concurrency.WithTTL(etcdSessionTTL))
	if err != nil {
		log.Fatal(err)
	}
	m.mu.Lock()
	m.sessions = append(m.sessions, s)
	m.mu.Unlock()
	return func(ctx context.Context) (releaser, error) {
		mx := concurrency.NewMutex(s, "/bench-mutex/"+key)
		if wait {
			if err := mx.Lock(ctx); err != nil {
				return nil, err
			}
			return mutexHeld{mx}, nil
		}
		err := mx.TryLock(ctx)
		if errors.Is(err, concurrency.ErrLocked) {
			return nil, errGaveUp
		}
		if err != nil {
			return nil, err
		}
		return mutexHeld{mx}, nil
	}
}

func (m *mutexInst) close() {
	for _, s := range m.sessions {
		_ = s.Close()
	}
	_ = m.c.Close()
}

// etcdScale is one library holding many locks at once.
type etcdScale struct {
	name             string
	held             int
	heapPerLock      float64 // bytes of live heap per held lock
	goroutines       int     // goroutines added while they are held
	keepalivesPerSec float64 // LeaseKeepAlive messages per second while held
	acquireSecs      float64 // time to acquire them all
}

// scaleOpener sets a library up on a client: acquire takes one lock and
// returns its release.
type scaleOpener func(c *clientv3.Client) (acquire func(key string) (func() error, error), teardown func(), err error)

// etcdScaleRuns measures both libraries holding -etcd-held locks: distlock
// with one Locker (one lease), concurrency.Mutex with one Session (one
// lease; distinct keys, so one session is enough).
func etcdScaleRuns(eps []string) []etcdScale {
	openers := []struct {
		name string
		open scaleOpener
	}{
		{"distlock etcd (one Locker)", distlockScale()},
		{"distlock etcd (one Locker, WithHoldWatch(false))", distlockScale(etcd.WithHoldWatch(false))},
		{"concurrency.Mutex (one Session)", func(c *clientv3.Client) (func(string) (func() error, error), func(), error) {
			s, err := concurrency.NewSession(c, concurrency.WithTTL(etcdSessionTTL))
			if err != nil {
				return nil, nil, err
			}
			return func(key string) (func() error, error) {
				m := concurrency.NewMutex(s, "/bench-scale-mutex/"+key)
				if err := m.Lock(context.Background()); err != nil {
					return nil, err
				}
				return func() error { return m.Unlock(context.Background()) }, nil
			}, func() { _ = s.Close() }, nil
		}},
	}
	var out []etcdScale
	for _, o := range openers {
		res, err := measureEtcdScale(o.name, eps, *etcdHeld, *etcdWin, o.open)
		if err != nil {
			log.Printf("scale %s: %v", o.name, err)
			continue
		}
		log.Printf("scale %+v", res)
		out = append(out, res)
	}
	return out
}

// distlockScale opens one distlock Locker on the client.
func distlockScale(opts ...etcd.Option) scaleOpener {
	return func(c *clientv3.Client) (func(string) (func() error, error), func(), error) {
		l, err := etcd.New(c, append([]etcd.Option{etcd.WithSessionTTL(etcdSessionTTL * time.Second), etcd.WithPrefix("/bench-scale-distlock")}, opts...)...)
		if err != nil {
			return nil, nil, err
		}
		return func(key string) (func() error, error) {
			lease, err := l.Acquire(context.Background(), key)
			if err != nil {
				return nil, err
			}
			return func() error { return lease.Release(context.Background()) }, nil
		}, func() { _ = l.Close() }, nil
	}
}

// measureEtcdScale acquires n distinct keys with one client of the library
// (32 goroutines), then measures live heap, goroutines and keepalive
// messages over the window, and releases them.
func measureEtcdScale(name string, endpoints []string, n int, window time.Duration, open scaleOpener) (etcdScale, error) {
	kc := &keepaliveCounter{}
	c := etcdClient(endpoints, kc)
	defer c.Close()
	acquire, teardown, err := open(c)
	if err != nil {
		return etcdScale{}, err
	}
	defer teardown()
	// Warm up: one lock, so that sessions and connections exist.
	rel, err := acquire("warm")
	if err != nil {
		return etcdScale{}, err
	}
	if err := rel(); err != nil {
		return etcdScale{}, err
	}
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	g0 := runtime.NumGoroutine()
	releases := make([]func() error, n)
	start := time.Now()
	var (
		next  atomic.Int64
		first error
		emu   sync.Mutex
		wg    sync.WaitGroup
	)
	for range 32 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				r, err := acquire(fmt.Sprintf("scale/%d", i))
				if err != nil {
					emu.Lock()
					first = cmpOr(first, err)
					emu.Unlock()
					return
				}
				releases[i] = r
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	if first != nil {
		return etcdScale{}, first
	}
	runtime.GC()
	runtime.ReadMemStats(&m1)
	g1 := runtime.NumGoroutine()
	k0 := kc.n.Load()
	time.Sleep(window)
	k1 := kc.n.Load()
	for _, r := range releases {
		if err := r(); err != nil {
			return etcdScale{}, err
		}
	}
	return etcdScale{name: name, held: n, heapPerLock: float64(int64(m1.HeapAlloc)-int64(m0.HeapAlloc)) / float64(n),
		goroutines: g1 - g0, keepalivesPerSec: float64(k1-k0) / window.Seconds(), acquireSecs: took.Seconds()}, nil
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// runEtcdPeers is the -etcd run.
func runEtcdPeers(rng *rand.Rand, waiters []int) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	c, err := testserver.StartEtcdCluster(ctx, "", 3, testserver.EtcdConfig{Heartbeat: 100 * time.Millisecond, ElectionTimeout: time.Second})
	cancel()
	if err != nil {
		log.Fatal(err)
	}
	defer c.Stop()
	eps := c.Addrs()
	st, _ := testserver.EtcdMemberStatus(context.Background(), eps[0])
	log.Printf("etcd %s, 3 members: %s", st.Version, strings.Join(eps, ","))
	libs := []lib{distlockEtcdLib("distlock etcd", eps), distlockEtcdLib("distlock etcd, WithHoldWatch(false)", eps, etcd.WithHoldWatch(false)), mutexLib(eps)}

	uRes := map[string][]uncontended{}
	for r := range *rounds {
		res, err := measureUncontended(libs, make([][]string, len(libs)), fmt.Sprintf("u/%d", r), *cycles, rng)
		if err != nil {
			log.Fatal(err)
		}
		for i, l := range libs {
			logU(r, l, res[i])
			uRes[l.name] = append(uRes[l.name], res[i])
		}
	}
	hRes := map[string][]handoff{}
	for r := range *rounds {
		for _, w := range waiters {
			for _, i := range rng.Perm(len(libs)) {
				l := libs[i]
				res, err := measureHandoff(l, nil, fmt.Sprintf("hot/%d/%d", r, w), *clients, w, *hold, *dur)
				if err != nil {
					log.Fatal(err)
				}
				log.Printf("hot-key r%d w=%-3d %-20s %8.0f handoffs/s p50 %9.1fµs p99 %9.1fµs wait p99 %9.1fµs errs %.0f", r, w, l.name, res.perSec, res.p50, res.p99, res.waitP99, res.errs)
				hRes[hkey(l.name, w)] = append(hRes[hkey(l.name, w)], res)
			}
		}
	}

	scales := etcdScaleRuns(eps)

	fmt.Printf("\n## distlock etcd vs concurrency.Mutex (3-member etcd %s, %d rounds, median)\n\n", st.Version, *rounds)
	fmt.Printf("| library | uncontended p50 | p99 |\n|---|---|---|\n")
	for _, l := range libs {
		u := medU(uRes[l.name])
		fmt.Printf("| %s | %.0f µs | %.0f µs |\n", l.name, u.p50, u.p99)
	}
	fmt.Printf("\n| library |")
	for _, w := range waiters {
		fmt.Printf(" handoff p50 / p99, %d waiters |", w)
	}
	fmt.Printf("\n|---|%s\n", strings.Repeat("---|", len(waiters)))
	for _, l := range libs {
		fmt.Printf("| %s |", l.name)
		for _, w := range waiters {
			h := medH(hRes[hkey(l.name, w)])
			fmt.Printf(" %.0f / %.0f µs (%.0f/s) |", h.p50, h.p99, h.perSec)
		}
		fmt.Println()
	}
	fmt.Printf("\n| %d held locks | live heap per lock | goroutines added | keepalive msgs/s | acquire all |\n|---|---|---|---|---|\n", *etcdHeld)
	for _, s := range scales {
		fmt.Printf("| %s | %.0f B | %d | %.2f | %.1f s |\n", s.name, s.heapPerLock, s.goroutines, s.keepalivesPerSec, s.acquireSecs)
	}
}
