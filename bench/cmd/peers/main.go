// Command peers benchmarks distlock against its peers (bsm/redislock,
// go-redsync/redsync, redis/rueidis's rueidislock and a raw go-redis
// floor) on private redis-servers it starts itself, and writes RESULTS.md
// and handoff.svg. See ../../README.md.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
)

var (
	rounds          = flag.Int("rounds", 3, "repetitions; each round runs the libraries in random order; the median of rounds is reported")
	cycles          = flag.Int("cycles", 5000, "uncontended acquire+release cycles per library per round")
	dur             = flag.Duration("dur", 2*time.Second, "duration of each hot-key run")
	hold            = flag.Duration("hold", time.Millisecond, "how long each hot-key holder keeps the lock")
	keysDur         = flag.Duration("keys-dur", 2*time.Second, "duration of each 1,000-key run")
	waitersF        = flag.String("waiters", "2,16,64", "hot-key waiter counts")
	scaleF          = flag.String("scale", "10000,100000", "lease counts for the scale measurement (empty: skip)")
	scaleSmallF     = flag.String("scale-db", "10000,100000", "lease counts for ZooKeeper, MySQL and PostgreSQL row mode")
	scaleAdvisoryF  = flag.String("scale-pg-advisory", "100,250", "lease counts for PostgreSQL advisory mode (one server connection per lease: at most -scale-pg-conns minus the 32 acquirers)")
	scalePGConns    = flag.Int("scale-pg-conns", 290, "pool size of the PostgreSQL advisory scale Locker (the harness's server allows 300 connections)")
	scaleTargetF    = flag.String("scale-targets", "", "comma-separated backends for the scale run (memory,redis,rueidislock,redlock,memcached,zookeeper,mysql,postgres; empty: all); only their servers are started")
	scaleOnly       = flag.Bool("scale-only", false, "run only the scale measurement")
	scaleTTL        = flag.Duration("scale-ttl", 3*time.Second, "TTL of the scale leases (memcached: at least 3s)")
	scaleTTLRedlock = flag.Duration("scale-ttl-redlock", 15*time.Second, "TTL of the Redlock scale leases (5 nodes: 5 refreshes per lease)")
	scaleTTLSQL     = flag.Duration("scale-ttl-mysql", 15*time.Second, "TTL of the MySQL and PostgreSQL scale leases")
	scaleWin        = flag.Duration("scale-window", 3*time.Second, "window over which refresh traffic is counted")
	noRedlock       = flag.Bool("no-redlock", false, "skip redlock (5 nodes) vs redsync (5 pools)")
	redisBin        = flag.String("redis-server", "redis-server", "redis-server binary")
	outMD           = flag.String("out", "RESULTS.md", "Markdown results file")
	outSVG          = flag.String("svg", "handoff.svg", "SVG plot of hot-key handoff p50")
	seed            = flag.Uint64("seed", 0, "shuffle seed (0: random)")
	sectionsF       = flag.String("sections", "uncontended,hotkey,keys,redlock", "comma-separated sections to run besides scale: uncontended, hotkey, keys, redlock; only when named: lockpath (the lock path's scripts through go-redis and rueidis, lockpath.go), wake (client-side-caching vs pub/sub wake-ups, wake.go), scripts (the server's cost of each script of a cycle, scriptcost.go). A subset is for quick side-by-side checks; its report has only those tables")
	cpuProfile      = flag.String("cpuprofile", "", "write this process's CPU profile to the file; the uncontended and 1,000-key cycles carry the pprof label lib=<library> (go tool pprof -tagfocus 'lib=distlock redis$' -top peers FILE); libraries' background goroutines carry none: use -libs for one library per process")
	libsF           = flag.String("libs", "", "sections lockpath and wake: only the rows whose names contain one of these |-separated strings (one per process for a CPU profile of one library)")
	clients         = flag.Int("clients", 4, "clients (connection pools, Lockers) the hot-key and 1,000-key goroutines are spread over")
	nKeys           = 1000
)

// keyRun is one configuration of the 1,000-key measurement: goroutines
// spread over clients instances.
type keyRun struct{ goroutines, clients int }

// keyRuns: 16 goroutines over -clients Lockers, and 64 over one Locker
// (the case where one client's concurrent requests to one server can share
// round trips).
func keyRuns() []keyRun { return []keyRun{{16, *clients}, {64, 1}} }

var (
	redislockDefault = redislockLib("redislock default (LimitRetry(LinearBackoff(100ms),3))",
		func() redislock.RetryStrategy {
			return redislock.LimitRetry(redislock.LinearBackoff(100*time.Millisecond), 3)
		})
	redislockBest = redislockLib("redislock best (LinearBackoff(1ms))",
		func() redislock.RetryStrategy { return redislock.LinearBackoff(time.Millisecond) })
	redsyncDefault = redsyncLib("redsync default (32 tries, 50-250ms)")
	redsyncBest    = redsyncLib("redsync best (1M tries, 1ms)", redsync.WithTries(1_000_000), redsync.WithRetryDelay(time.Millisecond))
	redislockPlain = redislockLib("bsm/redislock", nil)
	redsyncPlain   = redsyncLib("redsync (1 pool)")
)

func main() {
	flag.Parse()
	log.SetFlags(log.Ltime)
	s := *seed
	if s == 0 {
		s = rand.Uint64()
	}
	rng := rand.New(rand.NewPCG(s, 1))
	var waiters []int
	for _, f := range strings.Split(*waitersF, ",") {
		w, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || w < 1 {
			log.Fatalf("bad -waiters %q", *waitersF)
		}
		waiters = append(waiters, w)
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			log.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Fatal(err)
		}
		defer func() { pprof.StopCPUProfile(); _ = f.Close() }()
	}
	if *etcdOnly { // etcd.go: distlock etcd vs concurrency.Mutex only
		runEtcdPeers(rng, waiters)
		return
	}
	// wantScale reports whether the scale run measures backend.
	wantScale := func(backend string) bool {
		if *scaleF == "" {
			return false
		}
		if *scaleTargetF == "" {
			return true
		}
		for _, t := range strings.Split(*scaleTargetF, ",") {
			if strings.TrimSpace(t) == backend {
				return true
			}
		}
		return false
	}
	nodes := 1
	if !*noRedlock {
		nodes = 6
	}
	if *scaleOnly {
		// Only the scale targets that use them need redis-servers.
		nodes = 0
		if wantScale("redis") || wantScale("rueidislock") {
			nodes = 1
		}
		if wantScale("redlock") {
			nodes = 6
		}
	}
	var srvs []*server
	defer func() {
		for _, s := range srvs {
			s.stop()
		}
	}()
	for range nodes {
		sv, err := startRedis(*redisBin)
		if err != nil {
			for _, s := range srvs {
				s.stop()
			}
			log.Fatal(err)
		}
		srvs = append(srvs, sv)
	}
	var one, five []string
	if len(srvs) > 0 {
		one = []string{srvs[0].addr}
		for _, s := range srvs[1:] {
			five = append(five, s.addr)
		}
	}
	fail := func(err error) {
		for _, s := range srvs {
			s.stop()
		}
		log.Fatal(err)
	}
	start := time.Now()
	rep := &report{seed: s, waiters: waiters}

	if !*scaleOnly {
		// 1. uncontended
		uLibs := []lib{rawLib, distlockLib, distlockFair, redislockPlain, redsyncPlain, rueidisLockLib}
		// The cost of WAIT (wait.go): two more rows on a master with a
		// replica of its own.
		wLibs := []lib{distlockReplicated, distlockWait1}
		var replicated []string
		if wantSection("uncontended") {
			m, r, err := startReplicated(*redisBin)
			if err != nil {
				fail(err)
			}
			srvs = append(srvs, m, r)
			replicated = []string{m.addr}
		}
		allU := append(slices.Clip(uLibs), wLibs...)
		uAddrs := append(slices.Repeat([][]string{one}, len(uLibs)), slices.Repeat([][]string{replicated}, len(wLibs))...)
		uRes := map[string][]uncontended{}
		for r := range *rounds {
			if !wantSection("uncontended") {
				break
			}
			res, err := measureUncontended(allU, uAddrs, fmt.Sprintf("u/%d", r), *cycles, rng)
			if err != nil {
				fail(err)
			}
			for i, l := range allU {
				logU(r, l, res[i])
				uRes[l.name] = append(uRes[l.name], res[i])
			}
		}
		for _, l := range allU {
			if wantSection("uncontended") {
				rep.unc = append(rep.unc, namedU{l.name, medU(uRes[l.name])})
			}
		}

		// 1b. the server's cost of each script (scriptcost.go)
		if wantSection("scripts") {
			rep.scripts = runScripts(one[0], fail)
		}

		// 2. hot key
		hLibs := []lib{distlockLib, distlockFair, distlockOneClient, rawPubSubLib, redislockDefault, redsyncDefault, redislockBest, redsyncBest, rueidisLockLib}
		if wantSection("hotkey") {
			rep.hot = runHot(hLibs, "hot", waiters, rng, one, fail)
		}
		// 2'. wake-ups: client-side-caching invalidation vs pub/sub (wake.go)
		if wantSection("wake") {
			rep.wake = runHot(filterLibs(wakeLibs()), "wake", waiters, rng, one, fail)
		}

		// 3. 1,000 distinct keys
		if wantSection("keys") {
			rep.keys = runKeys(uLibs, "k", rng, one, fail)
		}
		// 3'. the lock-path prototypes on the same shapes (lockpath.go)
		if wantSection("lockpath") {
			rep.lockpath = runKeys(filterLibs(lockpathLibs()), "lp", rng, one, fail)
		}

		// 4. redlock vs redsync, 5 nodes
		if !*noRedlock && wantSection("redlock") {
			rLibs := []lib{redlockLib, redsyncLib("redsync (5 pools)")}
			rU := map[string][]uncontended{}
			rH := map[string][]handoff{}
			hL := []lib{redlockLib, redsyncLib("redsync 5 pools default (32 tries, 50-250ms)"),
				redsyncLib("redsync 5 pools best (1M tries, 1ms)", redsync.WithTries(1_000_000), redsync.WithRetryDelay(time.Millisecond))}
			for r := range *rounds {
				res, err := measureUncontended(rLibs, [][]string{five, five}, fmt.Sprintf("ru/%d", r), *cycles, rng)
				if err != nil {
					fail(err)
				}
				for i, l := range rLibs {
					logU(r, l, res[i])
					rU[l.name] = append(rU[l.name], res[i])
				}
				for _, i := range rng.Perm(len(hL)) {
					l := hL[i]
					res, err := measureHandoff(l, five, fmt.Sprintf("rh/%d/%d", r, i), *clients, 16, *hold, *dur)
					if err != nil {
						fail(err)
					}
					log.Printf("5-node hot-key r%d w=16 %-50s %8.0f handoffs/s p50 %9.1fµs p99 %9.1fµs wait p99 %9.1fµs cmds %.1f cpu %.0fµs gave-up %.0f errs %.0f", r, l.name, res.perSec, res.p50, res.p99, res.waitP99, res.cmds, res.cpu, res.failures, res.errs)
					rH[l.name] = append(rH[l.name], res)
				}
			}
			for _, l := range rLibs {
				rep.rlU = append(rep.rlU, namedU{l.name, medU(rU[l.name])})
			}
			for _, l := range hL {
				rep.rlH = append(rep.rlH, namedH{l.name, []handoff{medH(rH[l.name])}})
			}
		}
	}

	// 5. scale
	if *scaleF != "" {
		redisAddr := ""
		if len(one) > 0 {
			redisAddr = one[0]
		}
		targets, stop, err := scaleTargets(wantScale, redisAddr, five)
		if err != nil {
			fail(err)
		}
		rep.scaleTargets = targets
		for _, t := range targets {
			sizes := *scaleF
			if t.sizes != "" {
				sizes = t.sizes
			}
			for _, f := range strings.Split(sizes, ",") {
				n, err := strconv.Atoi(strings.TrimSpace(f))
				if err != nil || n < 1 {
					stop()
					fail(fmt.Errorf("bad -scale %q", sizes))
				}
				res, err := measureScale(t, n, max(*scaleWin, t.ttl/3))
				if err != nil {
					log.Printf("scale %s %d: %v", t.name, n, err)
					rep.scaleErr = append(rep.scaleErr, fmt.Sprintf("%s, %d leases: %v", t.name, n, err))
					continue
				}
				log.Printf("scale %s %d: %+v", t.name, n, res)
				rep.scale = append(rep.scale, res)
			}
		}
		stop()
	}
	rep.elapsed = time.Since(start)
	rep.redisVersion = redisVersion(*redisBin)
	if err := os.WriteFile(*outMD, rep.markdown(), 0o644); err != nil {
		fail(err)
	}
	if err := os.WriteFile(*outSVG, rep.svg(), 0o644); err != nil {
		fail(err)
	}
	log.Printf("wrote %s and %s in %s", *outMD, *outSVG, rep.elapsed.Round(time.Second))
}

// runScripts measures the scripts' server cost -rounds times, 4×-cycles
// calls each, and returns the medians.
func runScripts(addr string, fail func(error)) []scriptCost {
	var all [][]scriptCost
	for r := range *rounds {
		res, err := measureScripts(addr, 4**cycles)
		if err != nil {
			fail(err)
		}
		for _, sc := range res {
			log.Printf("scripts r%d %-60s %.2fµs (inner %.1f commands %.2fµs) server cpu %.2fµs", r, sc.name, sc.cmdUS, sc.innerCalls, sc.innerUS, sc.cpuUS)
		}
		all = append(all, res)
	}
	out := make([]scriptCost, len(all[0]))
	for i := range out {
		var a, b, c, d []float64
		for _, res := range all {
			a, b, c, d = append(a, res[i].cmdUS), append(b, res[i].innerUS), append(c, res[i].innerCalls), append(d, res[i].cpuUS)
		}
		out[i] = scriptCost{name: all[0][i].name, cmdUS: median(a), innerUS: median(b), innerCalls: median(c), cpuUS: median(d)}
	}
	return out
}

// runHot measures libs at every waiter count, each round in a fresh
// random order of (library, waiters) jobs, and returns the medians.
func runHot(libs []lib, tag string, waiters []int, rng *rand.Rand, one []string, fail func(error)) []namedH {
	hRes := map[string][]handoff{}
	for r := range *rounds {
		type job struct {
			l lib
			w int
		}
		var jobs []job
		for _, l := range libs {
			for _, w := range waiters {
				jobs = append(jobs, job{l, w})
			}
		}
		rng.Shuffle(len(jobs), func(i, j int) { jobs[i], jobs[j] = jobs[j], jobs[i] })
		for i, j := range jobs {
			res, err := measureHandoff(j.l, one, fmt.Sprintf("%s/%d/%d", tag, r, i), *clients, j.w, *hold, *dur)
			if err != nil {
				fail(err)
			}
			log.Printf("%s r%d w=%-3d %-55s %8.0f handoffs/s p50 %9.1fµs p99 %9.1fµs wait p99 %9.1fµs cmds %.1f cpu %.0fµs gave-up %.0f errs %.0f", tag, r, j.w, j.l.name, res.perSec, res.p50, res.p99, res.waitP99, res.cmds, res.cpu, res.failures, res.errs)
			k := hkey(j.l.name, j.w)
			hRes[k] = append(hRes[k], res)
		}
	}
	var out []namedH
	for _, l := range libs {
		row := namedH{name: l.name}
		for _, w := range waiters {
			row.byW = append(row.byW, medH(hRes[hkey(l.name, w)]))
		}
		out = append(out, row)
	}
	return out
}

// runKeys measures libs on every keyRun, each round in a fresh random
// order, and returns the tables of medians.
func runKeys(libs []lib, tag string, rng *rand.Rand, one []string, fail func(error)) []keysTable {
	var out []keysTable
	for _, kr := range keyRuns() {
		kRes := map[string][]distinct{}
		for r := range *rounds {
			for _, i := range rng.Perm(len(libs)) {
				l := libs[i]
				v, err := measureDistinct(l, one, fmt.Sprintf("%s/%d/%d/%d", tag, kr.goroutines, r, i), kr.clients, kr.goroutines, nKeys, *keysDur)
				if err != nil {
					fail(err)
				}
				log.Printf("1000 keys %dx%d r%d %-40s %8.0f cycles/s p50 %.1fµs p99 %.1fµs cpu client %.0f%% %.1fµs server %.0f%% %.1fµs failed %.0f", kr.goroutines, kr.clients, r, l.name, v.perSec, v.p50, v.p99, v.clientPct, v.clientUS, v.serverPct, v.serverUS, v.timeouts)
				kRes[l.name] = append(kRes[l.name], v)
			}
		}
		t := keysTable{run: kr}
		for _, l := range libs {
			var a, b, c, d, e, f, g, h []float64
			for _, v := range kRes[l.name] {
				a, b, c, d, e = append(a, v.perSec), append(b, v.clientPct), append(c, v.clientUS), append(d, v.serverPct), append(e, v.serverUS)
				f, g, h = append(f, v.p50), append(g, v.p99), append(h, v.timeouts)
			}
			t.rows = append(t.rows, namedK{l.name, distinct{perSec: median(a), p50: median(f), p99: median(g), clientPct: median(b), clientUS: median(c), serverPct: median(d), serverUS: median(e), timeouts: median(h)}})
		}
		out = append(out, t)
	}
	return out
}

// filterLibs keeps the libs whose names contain one of -libs's
// |-separated parts (empty: all; names contain commas).
func filterLibs(libs []lib) []lib {
	if *libsF == "" {
		return libs
	}
	var out []lib
	for _, l := range libs {
		for _, f := range strings.Split(*libsF, "|") {
			if f = strings.TrimSpace(f); f != "" && strings.Contains(l.name, f) {
				out = append(out, l)
				break
			}
		}
	}
	return out
}

// wantSection reports whether -sections names section.
func wantSection(section string) bool {
	for _, s := range strings.Split(*sectionsF, ",") {
		if strings.TrimSpace(s) == section {
			return true
		}
	}
	return false
}

func logU(r int, l lib, u uncontended) {
	log.Printf("uncontended r%d %-40s p50 %.1fµs p99 %.1fµs allocs %.1f cpu client %.1fµs server %.1fµs", r, l.name, u.p50, u.p99, u.allocs, u.client, u.server)
}

func hkey(name string, w int) string { return name + "#" + strconv.Itoa(w) }

func medU(rs []uncontended) uncontended {
	var a, b, c, d, e []float64
	for _, r := range rs {
		a, b, c, d, e = append(a, r.p50), append(b, r.p99), append(c, r.allocs), append(d, r.client), append(e, r.server)
	}
	return uncontended{median(a), median(b), median(c), median(d), median(e)}
}

func medH(rs []handoff) handoff {
	var a, b, c, d, e, w, m, u []float64
	for _, r := range rs {
		a, b, c, d, e = append(a, r.perSec), append(b, r.p50), append(c, r.p99), append(d, r.failures), append(e, r.errs)
		w, m, u = append(w, r.waitP99), append(m, r.cmds), append(u, r.cpu)
	}
	return handoff{perSec: median(a), p50: median(b), p99: median(c), waitP99: median(w), cmds: median(m), cpu: median(u), failures: median(d), errs: median(e)}
}

func redisVersion(bin string) string {
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}

func cpuModel() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for _, line := range bytes.Split(b, []byte("\n")) {
		if k, v, ok := strings.Cut(string(line), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

var _ = runtime.Version
