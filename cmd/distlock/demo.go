package main

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
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
	fs := newFlags("demo", "demo [--local] [--run REGEXP]", "Shows contention and fencing on the in-process backend, then runs the conformance suite on it; with --local, against throwaway local servers of every backend.", stdout)
	local := fs.Bool("local", false, "start throwaway local servers (redis-server, memcached, ZooKeeper, MariaDB, PostgreSQL, etcd — whichever are installed) and run the conformance suite against every backend")
	run := fs.String("run", "", "with --local: run only the checks matching this regular expression")
	if st := parseFlags(fs, args, stderr); st >= 0 {
		return st
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if *local {
		return demoLocal(ctx, *run, stdout, stderr)
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
		return "zookeeper://" + s.Addr() + "/distlock-demo", func() { _ = s.Stop() }, nil
	}},
	{"etcd", "etcd", func(ctx context.Context) (string, func(), error) {
		s, err := testserver.StartEtcd(ctx, "", testserver.EtcdConfig{})
		if err != nil {
			return "", nil, err
		}
		return "etcd://" + s.Addr() + "/distlock-demo", func() { _ = s.Stop() }, nil
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
		return fmt.Sprintf("mysql://%s:%s@%s/%s?mode=forupdate", m.User, m.Password, m.Addr(), m.DB), func() { _ = m.Stop() }, nil
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
	u := url.URL{Scheme: "postgres", User: url.UserPassword(p.User, p.Password), Host: p.Addr(), Path: "/" + p.DB,
		RawQuery: url.Values{"mode": {mode}, "create_table": {"true"}, "sslmode": {"disable"}}.Encode()}
	return u.String(), func() { _ = p.Stop() }, nil
}

// demoLocal runs the suite against every backend whose servers can be
// started here.
func demoLocal(ctx context.Context, run string, stdout, stderr io.Writer) int {
	re, err := matchChecks(run)
	if err != nil {
		fmt.Fprintf(stderr, "distlock demo: --run: %s\n", errLine(err))
		return ExitUsage
	}
	opts := conformance.Options{Match: re}
	registered := backend.Schemes()
	type row struct {
		name, url, outcome string
		pass, fail, skip   int
	}
	var rows []row
	status := ExitOK
	for i, lb := range localBackends {
		r := row{name: lb.name}
		began := time.Now()
		fmt.Fprintf(stderr, "distlock demo: [%d/%d] %s: starting servers…\n", i+1, len(localBackends), lb.name)
		if !slices.Contains(registered, lb.scheme) {
			r.outcome = "not built into this binary"
			rows = append(rows, r)
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		url, stopServers, err := lb.start(sctx)
		cancel()
		if err != nil {
			r.outcome = "server not started: " + firstLine(err.Error())
			rows = append(rows, r)
			continue
		}
		r.url = redactURL(url)
		fmt.Fprintf(stdout, "\n### %s at %s\n", lb.name, r.url)
		h, err := cliHarness(ctx, url, 0, 0)
		if err != nil {
			stopServers()
			r.outcome = "open failed: " + firstLine(err.Error())
			status = ExitFailed
			rows = append(rows, r)
			continue
		}
		opts.Progress = func(res conformance.Result) {
			if res.Status != "" {
				fmt.Fprintf(stdout, "--- %s %s (%v)\n", strings.ToUpper(string(res.Status)), res.Name, res.Duration.Round(time.Millisecond))
			}
		}
		results := conformance.RunChecks(ctx, h, opts)
		stopServers()
		printFailures(stdout, results)
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
		if st := statusOf(results); st != ExitOK && status != ExitFailed {
			status = st
		}
		r.outcome = "ran"
		rows = append(rows, r)
		fmt.Fprintf(stderr, "distlock demo: [%d/%d] %s: %d passed, %d failed, %d skipped in %v\n", i+1, len(localBackends), lb.name, r.pass, r.fail, r.skip, time.Since(began).Round(time.Second))
		if ctx.Err() != nil {
			break
		}
	}
	fmt.Fprintln(stdout, "\nconformance on local servers:")
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "BACKEND\tPASS\tFAIL\tSKIP\tNOTE")
	for _, r := range rows {
		if r.outcome == "ran" {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\n", r.name, r.pass, r.fail, r.skip, r.url)
		} else {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t%s\n", r.name, r.outcome)
		}
	}
	_ = tw.Flush()
	return status
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
