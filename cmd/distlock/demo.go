package main

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/internal/testkit/testserver"
)

func cmdDemo(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("demo", "demo [--local [--run REGEXP] [--parallel N]]", "Shows contention and fencing on the in-process backend, then runs the conformance suite on it; with --local, against throwaway local servers of every backend.", stdout)
	local := fs.Bool("local", false, "start throwaway local servers (redis-server, memcached, ZooKeeper, MariaDB, PostgreSQL, etcd — whichever are installed) and run the conformance suite against every backend")
	run := fs.String("run", "", "with --local: run only the checks matching this regular expression")
	parallel := fs.Int("parallel", demoParallel(), "with --local: how many backends run at once (each with servers of its own)")
	if st := parseFlags(fs, args, stderr); st >= 0 {
		return st
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if *local {
		if dir, ok := demoTmpfs(); ok {
			defer os.RemoveAll(dir)
		}
		return demoLocal(ctx, *run, *parallel, stdout, stderr)
	}
	return demoMemory(ctx, stdout, stderr)
}

// demoMemory shows contention and fencing on the embedded backend, then runs
// the conformance suite on it.
func demoMemory(ctx context.Context, stdout, stderr io.Writer) int {
	url := "mem://distlock-demo"
	fmt.Fprintf(stdout, "distlock demo on %s (in-process; try --local for real servers)\n\n", url)
	const workers, rounds = 4, 3
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		tokens []uint64
	)
	for w := 1; w <= workers; w++ {
		l, err := distlock.Open(ctx, url)
		if err != nil {
			fmt.Fprintf(stderr, "distlock demo: %s\n", errLine(err))
			return exitFor(err)
		}
		defer l.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				lease, err := l.Acquire(ctx, "report:daily")
				if err != nil {
					fmt.Fprintf(stderr, "worker %d: %v\n", w, err)
					return
				}
				mu.Lock()
				tokens = append(tokens, lease.Token())
				fmt.Fprintf(stdout, "worker %d holds report:daily with fencing token %d\n", w, lease.Token())
				mu.Unlock()
				time.Sleep(5 * time.Millisecond)
				_ = lease.Release(ctx)
			}
		}()
	}
	wg.Wait()
	if slices.IsSorted(tokens) && len(tokens) == workers*rounds {
		fmt.Fprintf(stdout, "\n%d critical sections, tokens strictly increasing: a downstream store can reject stale writers.\n\n", len(tokens))
	}
	h, err := cliHarness(ctx, url, 0, 0)
	if err != nil {
		fmt.Fprintf(stderr, "distlock demo: %s\n", errLine(err))
		return exitFor(err)
	}
	fmt.Fprintf(stdout, "conformance suite on %s:\n", url)
	results := conformance.RunChecks(ctx, h, conformance.Options{})
	printResults(stdout, results)
	return statusOf(results)
}

// statusOf is the exit status of a conformance run: ExitFailed if a check
// found a contract violated, else ExitUnavailable if a check was cut short
// by the backend's unavailability, else ExitOK.
func statusOf(results []conformance.Result) int {
	st := ExitOK
	for _, r := range results {
		switch r.Status {
		case conformance.Fail:
			return ExitFailed
		case conformance.Unavailable:
			st = ExitUnavailable
		}
	}
	return st
}

// localBackend starts servers for one backend and returns its URL.
type localBackend struct {
	name   string
	scheme string
	start  func(ctx context.Context) (url string, stop func(), err error)
}

// demoParallel is how many backends demo --local runs at once by default:
// about two per core. On a 2-core machine, 5 at once took 1m50s with every
// check passing, all 9 at once 1m45s–2m11s with timing checks failing
// (redlock's per-node timeout, etcd sessions) for want of CPU.
func demoParallel() int { return min(len(localBackends), 2*runtime.NumCPU()+1) }

// demoSession is the session timeout (ZooKeeper) and session lease TTL
// (etcd) of demo --local: a killed or paused holder's lock is freed this
// long after, so the checks that wait for it take about this long (the
// backends' default is 10 s; 2 s and 4 s lost etcd sessions of live
// holders, and so failed checks, on a 2-core machine with a load of 40–70).
const demoSession = 5 * time.Second

// demoSQLSession is the session timeout of the SQL session modes (mysql
// forupdate, postgres advisory) in demo --local: the server ends a frozen
// holder's session, freeing its lock, after this long without a word
// (their default is 30 s; the holders' keepalive runs every second).
const demoSQLSession = 5 * time.Second

var localBackends = []localBackend{
	{"redis", "redis", func(ctx context.Context) (string, func(), error) {
		s, err := testserver.StartRedis(ctx, "", testserver.RedisConfig{})
		if err != nil {
			return "", nil, err
		}
		return "redis://" + s.Addr() + "/0", func() { _ = s.Stop() }, nil
	}},
	{"redlock (5 nodes)", "redlock", func(ctx context.Context) (string, func(), error) {
		var addrs []string
		var servers []*testserver.Server
		stop := func() {
			for _, s := range servers {
				_ = s.Stop()
			}
		}
		for i := 0; i < 5; i++ {
			s, err := testserver.StartRedis(ctx, "", testserver.RedisConfig{})
			if err != nil {
				stop()
				return "", nil, err
			}
			servers = append(servers, s)
			addrs = append(addrs, s.Addr())
		}
		return "redlock://" + strings.Join(addrs, ","), stop, nil
	}},
	{"zookeeper", "zookeeper", func(ctx context.Context) (string, func(), error) {
		s, err := testserver.StartZooKeeper(ctx, "", testserver.ZooKeeperConfig{})
		if err != nil {
			return "", nil, err
		}
		return "zookeeper://" + s.Addr() + "/distlock-demo?session_timeout=" + demoSession.String(), func() { _ = s.Stop() }, nil
	}},
	{"etcd", "etcd", func(ctx context.Context) (string, func(), error) {
		s, err := testserver.StartEtcd(ctx, "", testserver.EtcdConfig{})
		if err != nil {
			return "", nil, err
		}
		return "etcd://" + s.Addr() + "/distlock-demo?session_ttl=" + demoSession.String(), func() { _ = s.Stop() }, nil
	}},
	{"memcached", "memcached", func(ctx context.Context) (string, func(), error) {
		s, err := testserver.StartMemcached(ctx, "", testserver.MemcachedConfig{NoEvict: true})
		if err != nil {
			return "", nil, err
		}
		return "memcached://" + s.Addr(), func() { _ = s.Stop() }, nil
	}},
	{"mysql (row)", "mysql", func(ctx context.Context) (string, func(), error) {
		m, err := testserver.StartMariaDB(ctx, "")
		if err != nil {
			return "", nil, err
		}
		return fmt.Sprintf("mysql://%s:%s@%s/%s?mode=row", m.User, m.Password, m.Addr(), m.DB), func() { _ = m.Stop() }, nil
	}},
	{"mysql (forupdate)", "mysql", func(ctx context.Context) (string, func(), error) {
		m, err := testserver.StartMariaDB(ctx, "")
		if err != nil {
			return "", nil, err
		}
		return fmt.Sprintf("mysql://%s:%s@%s/%s?mode=forupdate&session_timeout=%v", m.User, m.Password, m.Addr(), m.DB, demoSQLSession), func() { _ = m.Stop() }, nil
	}},
	{"postgres (advisory)", "postgres", func(ctx context.Context) (string, func(), error) {
		return startPostgres(ctx, "advisory")
	}},
	{"postgres (row)", "postgres", func(ctx context.Context) (string, func(), error) {
		return startPostgres(ctx, "row")
	}},
}

// startPostgres starts a PostgreSQL server (initdb and postgres, run as the
// unprivileged user "postgres" when this process is root) and returns the
// URL of a Locker in mode, creating its table on first use.
func startPostgres(ctx context.Context, mode string) (string, func(), error) {
	p, err := testserver.StartPostgres(ctx, "")
	if err != nil {
		return "", nil, err
	}
	q := url.Values{"mode": {mode}, "create_table": {"true"}, "sslmode": {"disable"}}
	if mode == "advisory" {
		q.Set("session_timeout", demoSQLSession.String())
	}
	u := url.URL{Scheme: "postgres", User: url.UserPassword(p.User, p.Password), Host: p.Addr(), Path: "/" + p.DB, RawQuery: q.Encode()}
	return u.String(), func() { _ = p.Stop() }, nil
}

// demoLocal runs the suite against every backend whose servers can be
// started here, parallel backends at once (demoParallel by default): each has
// servers of its own, so their checks do not interfere, and the run takes
// about as long as the slowest backend. The session-bound backends get short session timeouts
// (the checks that kill or pause a holder wait one out). Progress
// goes to stderr, a line per backend as it starts and ends; each backend's
// results go to stdout in one piece when it ends.
func demoLocal(ctx context.Context, run string, parallel int, stdout, stderr io.Writer) int {
	re, err := matchChecks(run)
	if err != nil {
		fmt.Fprintf(stderr, "distlock demo: --run: %s\n", errLine(err))
		return ExitUsage
	}
	if parallel < 1 {
		fmt.Fprintln(stderr, "distlock demo: --parallel must be at least 1")
		return ExitUsage
	}
	slots := make(chan struct{}, parallel)
	registered := backend.Schemes()
	rows := make([]demoRow, len(localBackends))
	var (
		wg  sync.WaitGroup
		out sync.Mutex // stdout and stderr, a backend's section at a time
	)
	for i, lb := range localBackends {
		wg.Go(func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			rows[i] = demoBackend(ctx, lb, re, slices.Contains(registered, lb.scheme), func(w func(stdout, stderr io.Writer)) {
				out.Lock()
				defer out.Unlock()
				w(stdout, stderr)
			}, fmt.Sprintf("[%d/%d]", i+1, len(localBackends)))
		})
	}
	wg.Wait()
	status := ExitOK
	for _, r := range rows {
		if r.status == ExitFailed || (r.status != ExitOK && status == ExitOK) {
			status = r.status
		}
	}
	fmt.Fprintln(stdout, "\nconformance on local servers:")
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "BACKEND\tPASS\tFAIL\tSKIP\tTIME\tNOTE")
	for _, r := range rows {
		if r.outcome == "ran" {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%v\t%s\n", r.name, r.pass, r.fail, r.skip, r.took.Round(time.Second), r.url)
		} else {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t%s\n", r.name, r.outcome)
		}
	}
	_ = tw.Flush()
	return status
}

// demoRow is one backend's line of demo --local's table.
type demoRow struct {
	name, url, outcome string
	pass, fail, skip   int
	took               time.Duration
	status             int
}

// demoBackend starts lb's servers, runs the suite's checks matching re on
// them and stops them. It writes through print, which serializes writers.
func demoBackend(ctx context.Context, lb localBackend, re *regexp.Regexp, built bool, print func(func(stdout, stderr io.Writer)), tag string) demoRow {
	r := demoRow{name: lb.name}
	began := time.Now()
	if !built {
		r.outcome = "not built into this binary"
		return r
	}
	print(func(_, stderr io.Writer) {
		fmt.Fprintf(stderr, "distlock demo: %s %s: starting servers…\n", tag, lb.name)
	})
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	url, stopServers, err := lb.start(sctx)
	cancel()
	if err != nil {
		r.outcome = "server not started: " + firstLine(err.Error())
		return r
	}
	defer stopServers()
	r.url = redactURL(url)
	var section strings.Builder
	fmt.Fprintf(&section, "\n### %s at %s\n", lb.name, r.url)
	h, err := cliHarness(ctx, url, 0, 0)
	if err != nil {
		r.outcome = "open failed: " + firstLine(err.Error())
		r.status = ExitFailed
		return r
	}
	opts := conformance.Options{Match: re, Progress: func(res conformance.Result) {
		if res.Status != "" {
			fmt.Fprintf(&section, "--- %s %s (%v)\n", strings.ToUpper(string(res.Status)), res.Name, res.Duration.Round(time.Millisecond))
		}
	}}
	results := conformance.RunChecks(ctx, h, opts)
	printFailures(&section, results)
	for _, res := range results {
		switch res.Status {
		case conformance.Pass:
			r.pass++
		case conformance.Fail, conformance.Unavailable:
			r.fail++
		case conformance.Skip:
			r.skip++
		}
	}
	r.status = statusOf(results)
	r.outcome = "ran"
	r.took = time.Since(began)
	print(func(stdout, stderr io.Writer) {
		_, _ = io.WriteString(stdout, section.String())
		fmt.Fprintf(stderr, "distlock demo: %s %s: %d passed, %d failed, %d skipped in %v\n", tag, lb.name, r.pass, r.fail, r.skip, r.took.Round(time.Second))
	})
	return r
}

// demoTmpfs points TMPDIR, where the servers of demo --local keep their
// data, at a fresh directory on /dev/shm when the machine has a writable
// tmpfs there, and returns it: an fsync on a VM's disk costs ~10 ms, and
// etcd, ZooKeeper and the SQL servers make many.
func demoTmpfs() (string, bool) {
	dir, err := os.MkdirTemp("/dev/shm", "distlock-demo-")
	if err != nil {
		return "", false
	}
	// PostgreSQL runs as an unprivileged user: it must traverse it.
	if os.Chmod(dir, 0o755) != nil || os.Setenv("TMPDIR", dir) != nil {
		_ = os.RemoveAll(dir)
		return "", false
	}
	return dir, true
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
