package main

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"sort"
	"strings"
	"time"
)

type namedU struct {
	name string
	u    uncontended
}
type namedH struct {
	name string
	byW  []handoff
}
type namedK struct {
	name string
	d    distinct
}

// keysTable is one configuration's 1,000-key results.
type keysTable struct {
	run  keyRun
	rows []namedK
}

type report struct {
	seed         uint64
	waiters      []int
	unc, rlU     []namedU
	hot, rlH     []namedH
	wake         []namedH
	scripts      []scriptCost
	keys         []keysTable
	lockpath     []keysTable
	scale        []scaleResult
	scaleTargets []scaleTarget
	scaleErr     []string
	elapsed      time.Duration
	redisVersion string
}

func (r *report) markdown() []byte {
	var b strings.Builder
	p := func(f string, a ...any) { fmt.Fprintf(&b, f, a...) }
	p("# distlock vs peers\n\n")
	p("- date: %s\n", time.Now().UTC().Format(time.RFC3339))
	p("- machine: %d CPUs (nproc), %s\n", runtime.NumCPU(), cpuModel())
	p("- Go: %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	p("- redis: %s (private instances on loopback, `--save \"\" --appendonly no`)\n", r.redisVersion)
	p("- command: `cd bench && go run ./cmd/peers %s` (seed %d, total %s)\n", shellArgs(os.Args[1:]), r.seed, r.elapsed.Round(time.Second))
	p("- every figure is the median of %d rounds; each round runs the libraries (configurations) in a fresh random order\n\n", *rounds)

	if len(r.unc) > 0 {
		r.uncontendedTable(p)
		p("### Server work per uncontended cycle, by command\n\n")
		p("| library | commands/cycle | script µs/cycle | by command: calls × µs per call |\n|---|---:|---:|---|\n")
		for _, u := range r.unc {
			p("%s\n", cmdStatRow(u.name))
		}
		p("\nINFO commandstats deltas around each block of the table above, divided by the cycles and averaged over rounds. The commands a script runs (redis.call) are counted as well as the EVALSHA that ran it, whose µs include theirs; \"script µs\" is the EVALSHA and EVAL time per cycle. What the redis-server CPU column counts beyond the commands is the event loop and socket I/O.\n\n")
	}
	if len(r.scripts) > 0 {
		p("## 1b. Server cost per script call (%d calls each, in pipelines of %d, on distinct free keys)\n\n", 4**cycles, scriptPipe)
		p("| call | µs in the command (commandstats) | of which the commands it ran | commands it ran | Lua and call overhead µs | redis-server CPU µs per call |\n|---|---:|---:|---:|---:|---:|\n")
		for _, sc := range r.scripts {
			p("| %s | %.2f | %.2f | %.1f | %.2f | %.2f |\n", sc.name, sc.cmdUS, sc.innerUS, sc.innerCalls, sc.cmdUS-sc.innerUS, sc.cpuUS)
		}
		p("\nThe redis-server's own figures: INFO commandstats µs of the EVALSHA (or SET) sent, which include the commands the script ran (listed apart), and used_cpu_user+sys over the calls, which adds request parsing and socket I/O (spread over pipelines of %d, so less per call than in the cycles above). \"Lua and call overhead\" is the command's µs less its inner commands': the interpreter running the script body and EVALSHA's fixed cost. The keys are distlock's (KeysFor: the lock hash, the slot's fencing counter, the legacy counter) or plain strings for the peers; each acquire finds its key free and each release its own hold.\n\n", scriptPipe)
	}

	if len(r.hot) > 0 {
		r.hotTable(p)
	}

	if len(r.wake) > 0 {
		p("## 2b. Wake-ups: client-side-caching invalidation vs pub/sub (hold time %s, waiters over %d clients, %s per run)\n\n", *hold, *clients, *dur)
		p("| library / config | waiters | handoffs/s | release→next acquire p50 µs | p99 µs | p50 vs pub/sub floor | wait p99 ms | server cmds/handoff | server CPU µs/handoff |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, h := range r.wake {
			for i, w := range r.waiters {
				x := h.byW[i]
				p("| %s | %d | %.0f | %.1f | %.1f | %s | %.1f | %.1f | %.0f |\n", h.name, w, x.perSec, x.p50, x.p99, ratio(x.p50, r.wake[0].byW[i].p50), x.waitP99/1000, x.cmds, x.cpu)
			}
		}
		p("\nThe two floors differ only in what carries the wake-up: \"raw go-redis pub/sub floor\" as in section 2 (SET NX PX; a waiter registers in its client's FIFO, tries once more, and sleeps until its client's subscriber connection receives the PUBLISH of the compare-and-delete release), \"raw rueidis client-side-caching floor\" the same FIFO woken by the invalidation of the key that the release's DEL sends to every client that read it (CLIENT TRACKING ON OPTOUT, one connection per client; an attempt is one script, SET NX PX + GET, so a failed attempt is tracked atomically with its failure). Same harness as section 2; \"p50 vs pub/sub floor\" is over the first row's p50 at the same waiter count.\n\n")
	}

	for i, t := range r.keys {
		p("## 3%s. 1,000 distinct keys, %d goroutines over %d client%s (%s per run)\n\n", string(rune('a'+i)), t.run.goroutines, t.run.clients, plural(t.run.clients), *keysDur)
		keysRows(p, t)
	}
	if len(r.keys)+len(r.lockpath) > 0 {
		p("Every goroutine cycles through its own keys with a ctx that has a deadline (the run's end); a cycle is one acquisition and its release, and its p50/p99 are over every cycle of the run (median of rounds). \"vs floor\" is the row's cycles/s over the raw go-redis floor's. Throughput on 2 cores is bounded by CPU: the redis-server is single-threaded, so when it nears 100%% of a core its µs per cycle sets the rate. distlock sends the requests that one Locker makes to one server while another is in flight as one pipeline (natural batching: no timer, a lone request goes out at once), which is what the 64-goroutine, 1-Locker table exercises. rueidislock writes every request of a Locker to one connection while others are in flight (auto-pipelining: a writer and a reader goroutine per connection); \"failed attempts\" counts the attempts a library ended itself at a timeout of its own while the run's ctx was live (rueidislock's per-key TryNextAfter, 20ms by default), and the attempts that then found their key still held by such an attempt whose SET had landed (rueidislock deletes it in the background): they are not cycles, and the goroutine goes on with its next key.\n\n")
	}

	for i, t := range r.lockpath {
		p("## 3%s. Lock-path prototypes: 1,000 distinct keys, %d goroutines over %d client%s (%s per run)\n\n", string(rune('a'+len(r.keys)+i)), t.run.goroutines, t.run.clients, plural(t.run.clients), *keysDur)
		keysRows(p, t)
	}
	if len(r.lockpath) > 0 {
		p("The lock-path rows send what one distlock cycle sends (an EVALSHA of the acquire script — fence.lua + acquire.lua — and one of the release script — hold.lua + release.lua — with distlock's keys and arguments) without a distlock Locker: through go-redis directly (a pooled connection per request in flight), through go-redis with distlock's natural batching (redislua.Batch, the redis package's transport), and through rueidis (auto-pipelining; 4 connections, its default, or 1, as rueidislock has). The \"floor cycle, rueidis\" rows send the floor's cycle (SET NX PX, then a compare-and-delete script) through rueidis; the \"floor cycle as 2 scripts\" rows send it as two scripts (SET NX PX inside a script), through go-redis natural batching and through rueidis: the two transports on a cycle whose server cost is small. Same harness as 3a/3b (\"vs floor\": over the raw go-redis floor).\n\n")
	}

	if len(r.rlU) > 0 {
		p("## 4. Redlock, 5 nodes: distlock redlock vs redsync (5 pools)\n\n| library | p50 µs | p99 µs | allocs/cycle | client CPU µs/cycle | redis-server CPU µs/cycle (5 nodes) |\n|---|---:|---:|---:|---:|---:|\n")
		for _, u := range r.rlU {
			p("| %s | %.1f | %.1f | %.1f | %.1f | %.1f |\n", u.name, u.u.p50, u.u.p99, u.u.allocs, u.u.client, u.u.server)
		}
		if len(r.unc) > 1 {
			p("\ndistlock redlock (5 nodes) p50 here / distlock redis (1 node) p50 in section 1 = %.2f× (both measured among peers of the same weight: interleaving redlock's 5-node fan-out with single-node cycles keeps this 2-core VM busy, and a busy VM answers a single-node round trip about 3× faster than an idle one, which would make the ratio meaningless)\n", r.rlU[0].u.p50/r.unc[1].u.p50)
		}
		p("\n| hot key, 16 waiters | handoffs/s | release→next acquire p50 µs | p99 µs | p50 vs distlock | wait p99 ms | server cmds/handoff (5 nodes) | server CPU µs/handoff | gave up |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, h := range r.rlH {
			x := h.byW[0]
			p("| %s | %.0f | %.1f | %.1f | %s | %.1f | %.1f | %.0f | %.0f |\n", h.name, x.perSec, x.p50, x.p99, ratio(x.p50, r.rlH[0].byW[0].p50), x.waitP99/1000, x.cmds, x.cpu, x.failures)
		}
		p("\n")
	}

	if len(r.scale) > 0 || len(r.scaleErr) > 0 {
		p("## 5. Scale: N leases held at once with auto-refresh, one Locker per backend\n\n")
		p("| backend | leases | TTL | acquire all (s) | heap B/lease | marginal B/lease | goroutines Δ | connections (Δ) | refreshes due/s N/(ttl/3) | lease refreshes/s on server | requests/s | leases per request | lost |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for i, s := range r.scale {
			marginal := "–"
			if i > 0 && r.scale[i-1].target == s.target && r.scale[i-1].n < s.n {
				q := r.scale[i-1]
				marginal = fmt.Sprintf("%.0f", (s.heapPerLease*float64(s.n)-q.heapPerLease*float64(q.n))/float64(s.n-q.n))
			}
			p("| %s | %d | %s | %.1f | %.0f | %s | %d | %d (%+d) | ", s.target, s.n, s.ttl, s.acquireSec, s.heapPerLease, marginal, s.goroutineDelta, s.connsAll, s.conns)
			switch {
			case !s.hasTraffic:
				p("%.0f | in-process | – | – | %d |\n", s.dueSec, s.lost)
			case s.refreshSec == 0:
				p("none (session) | 0 | %.1f | – | %d |\n", s.requestsSec, s.lost)
			default:
				p("%.0f | %.0f | %.1f | %s | %d |\n", s.dueSec, s.refreshSec, s.requestsSec, ratio(s.refreshSec, s.requestsSec), s.lost)
			}
		}
		for _, e := range r.scaleErr {
			p("\n- failed: %s\n", e)
		}
		for _, s := range r.scale {
			if s.retries > 0 {
				p("\n- %s, %d leases: %d acquisitions were retried after ErrUnavailable (node timeouts on the loaded machine)\n", s.target, s.n, s.retries)
			}
		}
		for _, s := range r.scale {
			if s.lost > 0 {
				p("\n- %s, %d leases: %d lost; %d of them with: %s\n", s.target, s.n, s.lost, s.lostWhyN, s.lostWhy)
			}
		}
		for _, s := range r.scale {
			if s.hasServerMem {
				p("\n- %s, %d leases: server PSS %+.1f MiB (%.1f KiB per lease): the server processes' proportional set size with all leases held minus before\n", s.target, s.n, float64(s.serverPSS)/(1<<20), float64(s.serverPSS)/1024/float64(s.n))
			}
		}
		for _, t := range r.scaleTargets {
			if t.note != "" {
				p("\n- %s\n", t.note)
			}
		}
		p("\nOne process, one Locker (one client or pool) per backend; 32 goroutines acquire the N keys, then the leases stay held for a window of max(%s, ttl/3) while the Locker's refresh scheduler keeps them alive. heap = HeapAlloc after GC with all leases held minus before, / N (includes the caller's []*Lease; for memory it includes the in-process lock table, the \"server\"; it also includes connection buffers a pool opened during the acquisition, about 64 KiB per go-redis connection, which is why \"marginal B/lease\" — the heap growth from the smaller to the larger N, divided by the extra leases — is the cost of one more lease). goroutines Δ and connections are counted with all leases held, after the acquiring goroutines ended; connections are this process's established TCP connections to the backend's servers (all of them, including the stats probe's) and, in brackets, the change from before the Locker was opened: the pool, not the lease count, bounds them. What each traffic column counts:\n\n", *scaleWin)
		for _, t := range r.scaleTargets {
			if t.requests != "" {
				p("- %s: lease refreshes = %s; requests = %s\n", t.name, t.refresh, t.requests)
			}
		}
		p("\n")
	}
	return []byte(b.String())
}

// uncontendedTable writes section 1's table and its notes.
func (r *report) uncontendedTable(p func(string, ...any)) {
	p("## 1. Uncontended acquire+release (one goroutine, one key, %d cycles)\n\n", *cycles)
	p("| library | p50 µs | p99 µs | allocs/cycle | client CPU µs/cycle | redis-server CPU µs/cycle | p50 vs floor |\n|---|---:|---:|---:|---:|---:|---:|\n")
	floor := 0.0
	if len(r.unc) > 0 {
		floor = r.unc[0].u.p50
	}
	for _, u := range r.unc {
		p("| %s | %.1f | %.1f | %.1f | %.1f | %.1f | %.2f× |\n", u.name, u.u.p50, u.u.p99, u.u.allocs, u.u.client, u.u.server, u.u.p50/floor)
	}
	p("\nfloor = SET NX PX + EVALSHA compare-and-delete; distlock = TryAcquire+Release (ctx Background, default auto-refresh on, TTL 10s); redislock = Obtain+Release; redsync = TryLockContext+UnlockContext on a reused Mutex; rueidislock = TryWithContext, then its cancel function, which returns once the owner-checked delete is done. The libraries run interleaved in blocks of %d cycles, in a fresh random order per block, so that each samples the same machine states. Allocations are process-wide mallocs during the loop / cycles (the harness adds ~1-2 per cycle to every row). Client CPU is this process's user+system time (getrusage) over the loop, redis-server CPU its used_cpu_user+sys (INFO) / cycles: where a latency gap comes from. On this 2-core VM the latency of a lone sequential client is dominated by how long an idle vCPU takes to wake (the same cycle runs about 3× faster while other work keeps the CPUs busy, and p50s move between runs with that state); the CPU columns are the steadier comparison. The two rows \"(master with 1 replica)\" run against a redis-server of their own that has one replica (asynchronous replication, both on this machine): distlock as is, and with redis.WithWaitReplicas(1, %v) (URL wait_replicas=1), whose every acquisition is confirmed before it is reported — a write that follows the grant and WAIT 1 on the same connection, one more round trip plus the replica's acknowledgement; the difference between the two rows is the cost of wait_replicas=1.\n\n", uncBlock, benchWaitTimeout)

}

// hotTable writes section 2's table and its notes.
func (r *report) hotTable(p func(string, ...any)) {
	p("## 2. Hot key: handoffs (hold time %s, waiters over %d clients, %s per run)\n\n", *hold, *clients, *dur)
	p("| library / config | waiters | handoffs/s | release→next acquire p50 µs | p99 µs | p50 vs distlock | wait p99 ms | server cmds/handoff | server CPU µs/handoff | gave up (per run) |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	var ours []handoff
	if len(r.hot) > 0 {
		ours = r.hot[0].byW
	}
	for _, h := range r.hot {
		for i, w := range r.waiters {
			x := h.byW[i]
			p("| %s | %d | %.0f | %.1f | %.1f | %s | %.1f | %.1f | %.0f | %.0f |\n", h.name, w, x.perSec, x.p50, x.p99, ratio(x.p50, ours[i].p50), x.waitP99/1000, x.cmds, x.cpu, x.failures)
		}
	}
	p("\ndistlock uses its default (pub/sub wake-up, no attempt limit). redislock's default is no retry; \"default\" is the README/example retry `LimitRetry(LinearBackoff(100ms), 3)`. redsync's default is 32 tries with 50–250ms random delay (gives up after ~4.6s of contention). Every goroutine loops acquire → hold → release → wait until another goroutine has acquired → acquire again, so every acquisition is a handoff to a goroutine that wanted the lock, and the hold gives the others time to start waiting; without the wait-for-another rule a polling releaser re-grabs the free key at once and its waiters starve, which flatters pollers' throughput and latency. release→next acquire runs from just before the holder's Release call to the return of the next holder's Acquire, counted when that Acquire had started before the release (a real waiter). \"p50 vs distlock\" is the peer's p50 over distlock's at the same waiter count. \"wait p99\" is the 99th percentile of the whole Acquire call (queueing behind other waiters included). \"server cmds/handoff\" and \"server CPU µs/handoff\" are the redis-server's total_commands_processed and used_cpu_user+sys (INFO) over the run / handoffs: the price of short polling intervals. \"gave up\" counts acquisitions that returned ErrNotObtained / ErrFailed / ErrTaken; the waiter then tries again. \"distlock redis, 1 client\" puts every waiter in one Locker, whose waiters queue first-come first-served; in every other row the waiters are spread over %d clients, and distlock's waiters in different Lockers race for each release, in the order Redis delivers the release message to the subscribed connections (the cause of the higher wait p99). \"distlock redis, fair queue\" is redis.WithFair: the waiters queue in Redis in arrival order across clients, and the release grants the lock to the first waiter and publishes the grant, so the handoff needs no acquire round trip (the row's commands include the queue's inner script calls). rueidislock waits with WithContext: a waiter is woken by the client-side-caching invalidation of the key (CLIENT TRACKING, NOLOOP), or at once by its own Locker when the release was made through it; it has no attempt limit.\n\n", *clients)
	p("![handoff p50](handoff.svg)\n\n")
}

// shellArgs joins args as a shell would need them typed: empty ones and
// ones with spaces or quotes single-quoted.
func shellArgs(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " '\"|()$*") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		out[i] = a
	}
	return strings.Join(out, " ")
}

// keysRows writes the table of one 1,000-key configuration; "vs floor" is
// over its first row.
func keysRows(p func(string, ...any), t keysTable) {
	p("| library | cycles/s | vs floor | cycle p50 µs | cycle p99 µs | client CPU %% of a core | client CPU µs/cycle | redis-server CPU %% | redis-server CPU µs/cycle | failed attempts (per run) |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	floor := t.rows[0].d.perSec
	for _, k := range t.rows {
		p("| %s | %.0f | %.2f× | %.1f | %.1f | %.0f | %.1f | %.0f | %.1f | %.0f |\n", k.name, k.d.perSec, k.d.perSec/floor, k.d.p50, k.d.p99, k.d.clientPct, k.d.clientUS, k.d.serverPct, k.d.serverUS, k.d.timeouts)
	}
	p("\n")
}

// svg plots hot-key p50 (log y) against waiters (log x).
func (r *report) svg() []byte {
	const W, H, L, R, T, B = 820, 460, 70, 330, 30, 50
	pw, ph := float64(W-L-R), float64(H-T-B)
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, h := range r.hot {
		for _, x := range h.byW {
			if x.p50 > 0 {
				lo, hi = math.Min(lo, x.p50), math.Max(hi, x.p50)
			}
		}
	}
	if math.IsInf(lo, 0) {
		lo, hi = 1, 10
	}
	ylo, yhi := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
	if yhi == ylo {
		yhi++
	}
	xlo, xhi := math.Log2(float64(r.waiters[0])), math.Log2(float64(r.waiters[len(r.waiters)-1]))
	if xhi == xlo {
		xhi++
	}
	X := func(w int) float64 { return float64(L) + (math.Log2(float64(w))-xlo)/(xhi-xlo)*pw }
	Y := func(v float64) float64 { return float64(T) + (yhi-math.Log10(v))/(yhi-ylo)*ph }
	var b strings.Builder
	p := func(f string, a ...any) { fmt.Fprintf(&b, f, a...) }
	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", W, H)
	p(`<rect width="100%%" height="100%%" fill="white"/>` + "\n")
	p(`<text x="%d" y="18" font-size="14">Hot-key handoff: release→next-acquire p50 (µs, log scale) by waiters</text>`+"\n", L)
	for e := ylo; e <= yhi; e++ {
		y := Y(math.Pow(10, e))
		p(`<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>`+"\n", L, y, W-R, y)
		p(`<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", L-6, y+4, fmtUS(math.Pow(10, e)))
	}
	for _, w := range r.waiters {
		x := X(w)
		p(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>`+"\n", x, T, x, H-B)
		p(`<text x="%.1f" y="%d" text-anchor="middle">%d</text>`+"\n", x, H-B+18, w)
	}
	p(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", L, H-B, W-R, H-B)
	p(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", L, T, L, H-B)
	p(`<text x="%.1f" y="%d" text-anchor="middle">waiters</text>`+"\n", float64(L)+pw/2, H-12)
	colors := []string{"#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf", "#e377c2", "#7f7f7f"}
	for i, h := range r.hot {
		c := colors[i%len(colors)]
		var pts []string
		for j, w := range r.waiters {
			if v := h.byW[j].p50; v > 0 {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", X(w), Y(v)))
				p(`<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", X(w), Y(v), c)
			}
		}
		p(`<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", strings.Join(pts, " "), c)
		ly := T + 20 + i*20
		p(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"/>`+"\n", W-R+15, ly, W-R+40, ly, c)
		p(`<text x="%d" y="%d">%s</text>`+"\n", W-R+45, ly+4, esc(h.name))
	}
	p("</svg>\n")
	return []byte(b.String())
}

// ratio formats a/b as "N×", or "–" when either is missing.
func ratio(a, b float64) string {
	if a <= 0 || b <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f×", a/b)
}

func fmtUS(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%gs", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%gms", v/1e3)
	}
	return fmt.Sprintf("%gµs", v)
}

func esc(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// cmdStatRow is the uncontended table's commandstats row of library name.
func cmdStatRow(name string) string {
	cmdStatsMu.Lock()
	defer cmdStatsMu.Unlock()
	m := cmdStats[name]
	type kv struct {
		k string
		v cmdStat
	}
	var all []kv
	var calls, scripts float64
	for k, v := range m {
		v = cmdStat{v.calls / float64(*rounds), v.usec / float64(*rounds)}
		if k == "info" || v.calls < 0.005 {
			continue // the harness's own INFO
		}
		all = append(all, kv{k, v})
		calls += v.calls
		if k == "evalsha" || k == "eval" {
			scripts += v.usec
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].v.usec > all[j].v.usec })
	var parts []string
	for _, e := range all {
		parts = append(parts, fmt.Sprintf("%s %.2f × %.2f", e.k, e.v.calls, e.v.usec/e.v.calls))
	}
	return fmt.Sprintf("| %s | %.1f | %.1f | %s |", name, calls, scripts, strings.Join(parts, "; "))
}
