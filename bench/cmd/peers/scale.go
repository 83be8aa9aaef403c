package main

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"regexp"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	gosql "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testkit/testserver"
	"github.com/distlock/distlock/memcached"
	"github.com/distlock/distlock/memory"
	"github.com/distlock/distlock/postgres"
	dlredis "github.com/distlock/distlock/redis"
	"github.com/distlock/distlock/redlock"

	_ "github.com/distlock/distlock/mysql"
	_ "github.com/distlock/distlock/zookeeper"
)

// pipeHook counts the round trips a go-redis client makes: pipelines (and
// the commands in them) and single commands.
type pipeHook struct{ pipes, pipedCmds, single atomic.Int64 }

func (h *pipeHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (h *pipeHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		h.single.Add(1)
		return next(ctx, cmd)
	}
}
func (h *pipeHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		h.pipes.Add(1)
		h.pipedCmds.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

func (h *pipeHook) trips() int64 { return h.pipes.Load() + h.single.Load() }

// traffic is what the servers of one scale target have done so far.
type traffic struct {
	requests int64 // requests (round trips) the client sent
	refresh  int64 // lease refreshes the server(s) performed
}

// scaleTarget is one backend under the scale measurement.
type scaleTarget struct {
	name string
	ttl  time.Duration
	// addrs are the servers; connections from this process to them are
	// counted. Empty: in-process backend.
	addrs []string
	// open returns a Locker over fresh clients whose keys start with
	// prefix, and a probe for its traffic (nil: no server).
	open func(prefix string) (dlLocker, func() (traffic, error), error)
	// openPeer, if set, is used instead of open: a peer library's locker.
	openPeer func(prefix string) (scaleLocker, func() (traffic, error), error)
	// refreshEvery is how often one lease is refreshed (0: ttl/3, distlock's
	// schedule).
	refreshEvery time.Duration
	// requests and refresh say what the traffic probe counts.
	requests, refresh string
	// sizes are the lease counts to measure (a flag's value).
	sizes string
	// serverPID returns the server's main process id (0: unknown), whose
	// memory, with its children's, is measured as well.
	serverPID func() int
	// note is printed under the table.
	note string
}

type scaleResult struct {
	target          string
	n               int
	ttl             time.Duration
	acquireSec      float64
	heapPerLease    float64
	goroutineDelta  int
	conns, connsAll int // connections to the servers: the Locker's; all of this process's
	dueSec          float64
	requestsSec     float64
	refreshSec      float64
	lost            int
	retries         int // acquisitions retried after ErrUnavailable
	hasTraffic      bool
	// lostWhy is the commonest error of the lost leases (lostWhyN of them).
	lostWhy  string
	lostWhyN int
	// serverPSS is the growth of the server processes' proportional set
	// size with all leases held (hasServerMem: measured).
	serverPSS    int64
	hasServerMem bool
}

// settle is the pause before counting goroutines: idle pooled goroutines
// of the Redis-based drivers exit after 1s.
const settle = 1500 * time.Millisecond

// measureScale acquires n leases with auto-refresh (TTL t.ttl) through one
// Locker, then counts memory, goroutines, connections and, over window, the
// refresh traffic; then closes the Locker (releasing everything).
func measureScale(t scaleTarget, n int, window time.Duration) (r scaleResult, err error) {
	ctx := context.Background()
	r = scaleResult{target: t.name, n: n, ttl: t.ttl}
	prefix := fmt.Sprintf("scale%d-%d/", n, time.Now().UnixNano())
	connsBefore := connections(t.addrs)
	var l scaleLocker
	var probe func() (traffic, error)
	if t.openPeer != nil {
		l, probe, err = t.openPeer(prefix)
	} else {
		var dl dlLocker
		dl, probe, err = t.open(prefix)
		l = dlScale{dl}
	}
	if err != nil {
		return r, err
	}
	defer func() {
		if cerr := l.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("close: %w", cerr)
		}
	}()
	// Warm-up with the acquirers' concurrency, so that connection pools,
	// scripts and tables exist before the baseline; then let pooled idle
	// goroutines exit (internal/async's Group keeps them for 1s).
	const workers = 32
	var wg sync.WaitGroup
	var firstErr atomic.Pointer[error]
	for w := range workers {
		wg.Go(func() {
			for i := range 60 {
				err := warm(t.name, func() error {
					ls, err := l.tryAcquire(ctx, fmt.Sprintf("warm/%d/%d", w, i), t.ttl)
					if err == nil {
						err = ls.release(ctx)
					}
					return err
				})
				if err != nil {
					firstErr.CompareAndSwap(nil, &err)
					return
				}
			}
		})
	}
	wg.Wait()
	if p := firstErr.Load(); p != nil {
		return r, *p
	}
	time.Sleep(settle)
	runtime.GC()
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	g0 := runtime.NumGoroutine()
	var pss0 int64
	if t.serverPID != nil {
		pss0, r.hasServerMem = processPSS(t.serverPID())
	}
	leases := make([]scaleLease, n)
	var retries atomic.Int64
	start := time.Now()
	actx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n && actx.Err() == nil; i += workers {
				key := "lease/" + strconv.Itoa(i)
				ls, err := l.tryAcquire(actx, key, t.ttl)
				// An overloaded machine may time a node out (Redlock's
				// per-node timeout is 50ms). Retry a few times, counted,
				// waiting for the key: the timed-out attempt's holds may
				// still land and are given back in the background.
				for try := 0; err != nil && !errors.Is(err, distlock.ErrInvalidKey) && try < 5 && actx.Err() == nil; try++ {
					retries.Add(1)
					wctx, wcancel := context.WithTimeout(actx, 10*time.Second)
					ls, err = l.acquire(wctx, key, t.ttl)
					wcancel()
				}
				if err != nil {
					err = fmt.Errorf("acquire %d: %w", i, err)
					firstErr.CompareAndSwap(nil, &err)
					cancel()
					return
				}
				leases[i] = ls
			}
		})
	}
	wg.Wait()
	r.acquireSec = time.Since(start).Seconds()
	r.retries = int(retries.Load())
	if p := firstErr.Load(); p != nil {
		return r, *p
	}
	time.Sleep(settle)
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m1)
	r.heapPerLease = (float64(m1.HeapAlloc) - float64(m0.HeapAlloc)) / float64(n)
	r.goroutineDelta = runtime.NumGoroutine() - g0
	if r.hasServerMem {
		var pss1 int64
		pss1, r.hasServerMem = processPSS(t.serverPID())
		r.serverPSS = pss1 - pss0
	}
	if os.Getenv("SCALE_DUMP") == t.name {
		_ = pprof.Lookup("goroutine").WriteTo(os.Stderr, 1)
		if f, err := os.Create("/tmp/scale-heap.pprof"); err == nil {
			_ = pprof.Lookup("heap").WriteTo(f, 0)
			f.Close()
		}
	}
	r.connsAll = connections(t.addrs)
	r.conns = r.connsAll - connsBefore
	every := t.ttl / 3
	if t.refreshEvery > 0 {
		every = t.refreshEvery
	}
	r.dueSec = float64(n) / every.Seconds()
	if probe != nil {
		r.hasTraffic = true
		t0, err := probe()
		if err != nil {
			return r, err
		}
		s := time.Now()
		time.Sleep(window)
		el := time.Since(s).Seconds()
		t1, err := probe()
		if err != nil {
			return r, err
		}
		r.requestsSec = float64(t1.requests-t0.requests) / el
		r.refreshSec = float64(t1.refresh-t0.refresh) / el
	} else {
		time.Sleep(window)
	}
	why := map[string]int{}
	for _, ls := range leases {
		if err := ls.lost(); err != nil {
			r.lost++
			why[keyRE.ReplaceAllString(err.Error(), `"lease/…"`)]++
		}
	}
	for msg, c := range why {
		if c > r.lostWhyN {
			r.lostWhy, r.lostWhyN = msg, c
		}
	}
	runtime.KeepAlive(leases)
	return r, nil
}

// scaleLocker is what measureScale needs of a locker: distlock's (dlScale)
// or a peer's.
type scaleLocker interface {
	tryAcquire(ctx context.Context, key string, ttl time.Duration) (scaleLease, error)
	acquire(ctx context.Context, key string, ttl time.Duration) (scaleLease, error)
	Close() error
}

// scaleLease is one held lease of a scaleLocker.
type scaleLease interface {
	release(ctx context.Context) error
	// lost returns why the lease ended while held (nil: still held).
	lost() error
}

// dlScale is a distlock Locker as a scaleLocker.
type dlScale struct{ dlLocker }

type dlScaleLease struct{ *distlock.Lease }

func (l dlScaleLease) release(ctx context.Context) error { return l.Release(ctx) }
func (l dlScaleLease) lost() error                       { return l.Err() }

func (d dlScale) tryAcquire(ctx context.Context, key string, ttl time.Duration) (scaleLease, error) {
	ls, err := d.TryAcquire(ctx, key, distlock.WithTTL(ttl))
	if err != nil {
		return nil, err
	}
	return dlScaleLease{ls}, nil
}

func (d dlScale) acquire(ctx context.Context, key string, ttl time.Duration) (scaleLease, error) {
	ls, err := d.Acquire(ctx, key, distlock.WithTTL(ttl))
	if err != nil {
		return nil, err
	}
	return dlScaleLease{ls}, nil
}

// keyRE matches a scale lease's key in an error message.
var keyRE = regexp.MustCompile(`"lease/[0-9]+"`)

// connections counts this host's established TCP connections to addrs
// (the client ends: remote port is a server's); the servers are local.
func connections(addrs []string) int {
	if len(addrs) == 0 {
		return 0
	}
	ports := map[string]bool{}
	for _, a := range addrs {
		if _, p, err := net.SplitHostPort(a); err == nil {
			n, _ := strconv.Atoi(p)
			ports[fmt.Sprintf("%04X", n)] = true
		}
	}
	count := 0
	for _, f := range []string{"/proc/self/net/tcp", "/proc/self/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(line)
			if len(fs) < 4 || fs[3] != "01" { // ESTABLISHED
				continue
			}
			if _, port, ok := strings.Cut(fs[2], ":"); ok && ports[port] {
				count++
			}
		}
	}
	return count
}

// ---- the targets.

func redisTarget(addr string, ttl time.Duration) scaleTarget {
	return scaleTarget{
		name: "redis", ttl: ttl, addrs: []string{addr},
		requests: "pipelines + single commands sent", refresh: "EVALSHA run by the server",
		open: func(prefix string) (dlLocker, func() (traffic, error), error) {
			client := goredis.NewClient(&goredis.Options{Addr: addr})
			hook := &pipeHook{}
			client.AddHook(hook)
			l, err := dlredis.New(client, dlredis.WithPrefix(prefix), dlredis.WithCloseClient())
			if err != nil {
				return nil, nil, err
			}
			return l, func() (traffic, error) {
				e, err := commandCalls(addr, "evalsha")
				return traffic{hook.trips(), e}, err
			}, nil
		},
	}
}

func redlockTarget(addrs []string, ttl time.Duration) scaleTarget {
	return scaleTarget{
		name: fmt.Sprintf("redlock (%d nodes)", len(addrs)), ttl: ttl, addrs: addrs,
		requests: "pipelines + single commands sent, per node", refresh: "EVALSHA run, per node",
		open: func(prefix string) (dlLocker, func() (traffic, error), error) {
			clients := make([]goredis.UniversalClient, len(addrs))
			hook := &pipeHook{}
			for i, a := range addrs {
				c := goredis.NewClient(&goredis.Options{Addr: a, ContextTimeoutEnabled: true})
				c.AddHook(hook)
				clients[i] = c
			}
			l, err := redlock.New(clients, redlock.WithPrefix(prefix), redlock.WithCloseClients())
			if err != nil {
				return nil, nil, err
			}
			return l, func() (traffic, error) {
				var total int64
				for _, a := range addrs {
					e, err := commandCalls(a, "evalsha")
					if err != nil {
						return traffic{}, err
					}
					total += e
				}
				n := int64(len(addrs))
				return traffic{hook.trips() / n, total / n}, nil
			}, nil
		},
	}
}

func memoryTarget(ttl time.Duration) scaleTarget {
	return scaleTarget{
		name: "memory", ttl: ttl,
		open: func(prefix string) (dlLocker, func() (traffic, error), error) {
			return memory.MustNew(memory.NewNamespace()), nil, nil
		},
	}
}

func memcachedTarget(addr string, ttl time.Duration) scaleTarget {
	return scaleTarget{
		name: "memcached", ttl: ttl, addrs: []string{addr},
		requests: "writes on the client's connections (each a request: a pipelined batch of cas is one)", refresh: "cas_hits (stats)",
		open: func(prefix string) (dlLocker, func() (traffic, error), error) {
			ss := new(memcache.ServerList)
			if err := ss.SetServers(addr); err != nil {
				return nil, nil, err
			}
			mc := memcache.NewFromSelector(ss)
			mc.Timeout = time.Second
			var writes atomic.Int64
			mc.DialContext = func(ctx context.Context, network, address string) (net.Conn, error) {
				c, err := (&net.Dialer{}).DialContext(ctx, network, address)
				if err != nil {
					return nil, err
				}
				return countingConn{c, &writes}, nil
			}
			l, err := memcached.New(mc, memcached.WithSelector(ss), memcached.WithPrefix(strings.ReplaceAll(prefix, "/", ":")), memcached.WithCloseClient())
			if err != nil {
				return nil, nil, err
			}
			return l, func() (traffic, error) {
				st, err := textStats(addr, "stats\r\n", "END\r\n")
				return traffic{writes.Load(), st["cas_hits"]}, err
			}, nil
		},
	}
}

// countingConn counts the writes on a connection.
type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

func zookeeperTarget(addr string, ttl time.Duration) scaleTarget {
	return scaleTarget{
		name: "zookeeper", ttl: ttl, addrs: []string{addr},
		requests: "zk_packets_received (mntr)", refresh: "none: ephemeral nodes live as long as the session",
		open: func(prefix string) (dlLocker, func() (traffic, error), error) {
			l, err := distlock.Open(context.Background(), "zookeeper://"+addr+"/"+strings.Trim(prefix, "/"))
			return l, func() (traffic, error) {
				st, err := textStats(addr, "mntr", "")
				return traffic{st["zk_packets_received"], 0}, err
			}, err
		},
	}
}

func mysqlTarget(db *testserver.MariaDB, ttl time.Duration, sizes string) scaleTarget {
	dsn := db.DSN()
	return scaleTarget{
		name: "mysql (row)", ttl: ttl, addrs: []string{db.Addr()},
		requests: "Com_update (statements)", refresh: "Handler_update (rows)",
		sizes: sizes, serverPID: db.PID,
		open: func(prefix string) (dlLocker, func() (traffic, error), error) {
			cfg, err := gosql.ParseDSN(dsn)
			if err != nil {
				return nil, nil, err
			}
			table := "scale_" + strings.NewReplacer("/", "", "-", "_").Replace(prefix)
			u := fmt.Sprintf("mysql://%s:%s@%s/%s?mode=row&table=%s", cfg.User, cfg.Passwd, cfg.Addr, cfg.DBName, table)
			l, err := distlock.Open(context.Background(), u)
			if err != nil {
				return nil, nil, err
			}
			db, err := sql.Open("mysql", dsn)
			if err != nil {
				_ = l.Close()
				return nil, nil, err
			}
			db.SetMaxOpenConns(1)
			return closeAlso{l, db.Close}, func() (traffic, error) {
				var t traffic
				rows, err := db.Query("SHOW GLOBAL STATUS WHERE Variable_name IN ('Com_update', 'Handler_update')")
				if err != nil {
					return t, err
				}
				defer rows.Close()
				for rows.Next() {
					var k string
					var v int64
					if err := rows.Scan(&k, &v); err != nil {
						return t, err
					}
					switch k {
					case "Com_update":
						t.requests = v
					case "Handler_update":
						t.refresh = v
					}
				}
				return t, rows.Err()
			}, nil
		},
	}
}

// pgCounter is a pgx tracer counting the statements a pool's connections
// send and the rows the server reports updated (the UPDATE command tags).
type pgCounter struct{ statements, updated atomic.Int64 }

func (c *pgCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.statements.Add(1)
	return ctx
}

func (c *pgCounter) TraceQueryEnd(_ context.Context, _ *pgx.Conn, d pgx.TraceQueryEndData) {
	if d.Err == nil && d.CommandTag.Update() {
		c.updated.Add(d.CommandTag.RowsAffected())
	}
}

// postgresTarget measures one mode of the PostgreSQL backend: a Locker
// (postgres.New) over a pgx pool of maxConns connections whose statements a
// tracer counts, on a table of its own created on first use.
func postgresTarget(s *testserver.Postgres, ttl time.Duration, mode postgres.Mode, maxConns int32, sizes, note string) scaleTarget {
	t := scaleTarget{
		name: fmt.Sprintf("postgres (%s)", mode), ttl: ttl, addrs: []string{s.Addr()},
		requests: "statements sent (pgx tracer)", refresh: "rows in the UPDATE command tags the server returned",
		sizes: sizes, serverPID: s.PID, note: note,
		open: func(prefix string) (dlLocker, func() (traffic, error), error) {
			cfg, err := pgxpool.ParseConfig(s.DSN())
			if err != nil {
				return nil, nil, err
			}
			cfg.MaxConns = maxConns
			counter := &pgCounter{}
			cfg.ConnConfig.Tracer = counter
			pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
			if err != nil {
				return nil, nil, err
			}
			table := "scale_" + strings.NewReplacer("/", "", "-", "_").Replace(prefix)
			l, err := postgres.New(pool, postgres.WithMode(mode), postgres.WithTable(table), postgres.WithCreateTable(true))
			if err != nil {
				pool.Close()
				return nil, nil, err
			}
			return closeAlso{l, func() error { pool.Close(); return nil }}, func() (traffic, error) {
				return traffic{counter.statements.Load(), counter.updated.Load()}, nil
			}, nil
		},
	}
	if mode == postgres.ModeAdvisory {
		t.requests = "statements sent (pgx tracer): the keepalive's SELECT pg_backend_pid() on every pinned connection, each second"
		t.refresh = "none: the session holds the lock"
	}
	return t
}

// processPSS returns the proportional set size of process pid and of its
// children (PostgreSQL's backends are the postmaster's children), from
// /proc/*/smaps_rollup; ok is false when pid's cannot be read.
func processPSS(pid int) (bytes int64, ok bool) {
	if pid <= 0 {
		return 0, false
	}
	pss := func(p int) (int64, bool) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", p))
		if err != nil {
			return 0, false
		}
		for _, line := range strings.Split(string(b), "\n") {
			if rest, found := strings.CutPrefix(line, "Pss:"); found {
				kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
				return kb * 1024, err == nil
			}
		}
		return 0, false
	}
	total, ok := pss(pid)
	if !ok {
		return 0, false
	}
	for _, c := range testserver.ChildPIDs(pid) {
		if v, ok := pss(c); ok {
			total += v
		}
	}
	return total, true
}

// dlLocker is what the held-lease scale measurement uses of a distlock
// Locker: a *distlock.Locker, or one that also closes a stats connection.
type dlLocker interface {
	Acquire(ctx context.Context, key string, opts ...distlock.Option) (*distlock.Lease, error)
	TryAcquire(ctx context.Context, key string, opts ...distlock.Option) (*distlock.Lease, error)
	Close() error
}

// closeAlso is a Locker that also closes a stats connection.
type closeAlso struct {
	*distlock.Locker
	also func() error
}

func (c closeAlso) Close() error { return errors.Join(c.Locker.Close(), c.also()) }

// commandCalls returns the calls of cmd in INFO commandstats of addr.
func commandCalls(addr, cmd string) (int64, error) {
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	defer c.Close()
	s, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(s, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":calls="); ok {
			n, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
			return n, nil
		}
	}
	return 0, nil
}

// textStats sends cmd to a memcached ("STAT k v" lines up to end) or
// ZooKeeper four-letter word ("k\tv" lines up to EOF) server and returns
// the integer values.
func textStats(addr, cmd, end string) (map[string]int64, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(cmd)); err != nil {
		return nil, err
	}
	st := map[string]int64{}
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		line := sc.Text()
		if end != "" && line+"\r\n" == end {
			return st, nil
		}
		fs := strings.Fields(strings.TrimPrefix(line, "STAT "))
		if len(fs) == 2 {
			if v, err := strconv.ParseInt(fs[1], 10, 64); err == nil {
				st[fs[0]] = v
			}
		}
	}
	if end != "" {
		return st, fmt.Errorf("stats from %s: no %q: %v", addr, strings.TrimSpace(end), sc.Err())
	}
	return st, sc.Err()
}

// scaleTargets returns the scale targets selected by want (a backend's
// name: the first word of the target's): redis and redlock on the given
// servers, and memcached, ZooKeeper, MariaDB and PostgreSQL started here with
// the project's test harness, only when selected; stop stops those.
func scaleTargets(want func(backend string) bool, redisAddr string, redlockAddrs []string) (ts []scaleTarget, stop func(), err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var stops []func() error
	stop = func() {
		for _, s := range stops {
			_ = s()
		}
	}
	defer func() {
		if err != nil {
			stop()
		}
	}()
	ttl := *scaleTTL
	if want("memory") {
		ts = append(ts, memoryTarget(ttl))
	}
	if want("redis") && redisAddr != "" {
		ts = append(ts, redisTarget(redisAddr, ttl))
	}
	if want("rueidislock") && redisAddr != "" {
		ts = append(ts, rueidisLockTarget(redisAddr, ttl))
	}
	if want("redlock") && len(redlockAddrs) > 0 {
		ts = append(ts, redlockTarget(redlockAddrs, *scaleTTLRedlock))
	}
	if want("memcached") {
		mc, err := testserver.StartMemcached(ctx, "", testserver.MemcachedConfig{MemoryMB: 512})
		if err != nil {
			return nil, nil, err
		}
		stops = append(stops, mc.Stop)
		ts = append(ts, memcachedTarget(mc.Addr(), max(ttl, 3*time.Second)))
	}
	if want("zookeeper") {
		zk, err := testserver.StartZooKeeper(ctx, "", testserver.ZooKeeperConfig{})
		if err != nil {
			return nil, nil, err
		}
		stops = append(stops, zk.Stop)
		t := zookeeperTarget(zk.Addr(), ttl)
		t.sizes = *scaleSmallF
		ts = append(ts, t)
	}
	if want("mysql") {
		db, err := testserver.StartMariaDB(ctx, "")
		if err != nil {
			return nil, nil, err
		}
		stops = append(stops, db.Stop)
		ts = append(ts, mysqlTarget(db, *scaleTTLSQL, *scaleSmallF))
	}
	if want("postgres") {
		pg, err := testserver.StartPostgres(ctx, "")
		if err != nil {
			return nil, nil, err
		}
		stops = append(stops, pg.Stop)
		ts = append(ts,
			postgresTarget(pg, *scaleTTLSQL, postgres.ModeRow, 32, *scaleSmallF, ""),
			postgresTarget(pg, *scaleTTLSQL, postgres.ModeAdvisory, int32(*scalePGConns), *scaleAdvisoryF, fmt.Sprintf(advisoryNote, *scalePGConns)),
		)
	}
	return ts, stop, nil
}

// advisoryNote says why advisory mode is measured with fewer leases.
var advisoryNote = "postgres (advisory) holds each lease on a connection of its own, pinned for the lease's life: one PostgreSQL server process (backend) per held lock, so the lease count is bounded by the pool (-scale-pg-conns, here %d) and by the server's max_connections (300 on the harness's server, 100 by default): 10,000 or 100,000 advisory leases need as many server processes and are not measured. Its TTL is ignored (the session holds the lock; the column shows the flag's value), and each pinned connection has a keepalive goroutine (goroutines Δ = leases)."
