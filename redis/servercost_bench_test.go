package redis

import (
	"context"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testkit/benchkit"
	"github.com/distlock/distlock/internal/testkit/testserver"
	"github.com/stretchr/testify/require"
)

// BenchmarkServerCost measures what one uncontended cycle costs the
// redis-server, the figure issue #22 is about: each sub-benchmark runs
// its cycle b.N times against one local redis-server, with CONFIG
// RESETSTAT before and INFO after, and reports per cycle
//
//   - server-µs: used_cpu_user+used_cpu_sys (the whole process: event
//     loop, parsing, replies, scripts);
//   - script-µs: the usec of EVAL/EVALSHA in INFO commandstats (inner
//     calls included);
//   - cmds: every command in INFO commandstats, the calls scripts make
//     included (INFO and CONFIG left out);
//
// and the same per handoff of a hot key (handoff: 8 goroutines over 2
// Lockers, zero hold time, benchkit.Handoff).
//
// The per-command calls and usec_per_call are logged (-v). Run the
// sub-benchmarks side by side in one run and compare ratios:
//
//	go test -run '^$' -bench 'BenchmarkServerCost' -count 3 ./redis
func BenchmarkServerCost(b *testing.B) {
	srv := testserver.Redis(b, testserver.RedisConfig{})
	url := "redis://" + srv.Addr() + "/0"
	ctx := context.Background()
	admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer admin.Close()
	open := func(b *testing.B, url string) *distlock.Locker {
		l, err := distlock.Open(ctx, url)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = l.Close() })
		return l
	}
	locker := func(l *distlock.Locker, key string, opts ...distlock.Option) func() error {
		return func() error {
			lease, err := l.TryAcquire(ctx, key, opts...)
			if err != nil {
				return err
			}
			return lease.Release(ctx)
		}
	}

	b.Run("floor", func(b *testing.B) {
		c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
		defer c.Close()
		del := goredis.NewScript(floorDelSrc)
		serverCost(b, admin, func() error {
			val := randomValue()
			if err := c.SetNX(ctx, "bench/cost/floor", val, 15001*time.Millisecond).Err(); err != nil {
				return err
			}
			return del.Run(ctx, c, []string{"bench/cost/floor"}, val).Err()
		})
	})
	b.Run("try+release", func(b *testing.B) {
		serverCost(b, admin, locker(open(b, url), "bench/cost/try"))
	})
	b.Run("try+release/metadata", func(b *testing.B) {
		serverCost(b, admin, locker(open(b, url), "bench/cost/meta", distlock.WithMetadata("host=worker-17.example pid=4242 job=nightly-report")))
	})
	b.Run("try+release/fair", func(b *testing.B) {
		serverCost(b, admin, locker(open(b, url+"?fair=true"), "bench/cost/fair"))
	})
	b.Run("handoff", func(b *testing.B) {
		ls := []*distlock.Locker{open(b, url), open(b, url)}
		for _, l := range ls { // scripts loaded, subscriptions dialled
			require.NoError(b, locker(l, "bench/cost/hot")())
		}
		require.NoError(b, admin.ConfigResetStat(ctx).Err())
		cpu0 := serverCPU(b, admin)
		benchkit.Handoff(b, ctx, ls, "bench/cost/hot", 8)
		cpu1 := serverCPU(b, admin)
		calls, scriptUS := totals(commandStats(b, admin))
		n := float64(b.N)
		b.ReportMetric((cpu1-cpu0)*1e6/n, "server-µs/handoff")
		b.ReportMetric(scriptUS/n, "script-µs/handoff")
		b.ReportMetric(calls/n, "cmds/handoff")
	})
}

// serverCost runs cycle b.N times (after a warm-up that loads the
// scripts), in blocks of costBlock cycles with the server's statistics
// reset before each, and reports the median over the blocks of the
// server's cost per cycle (see BenchmarkServerCost): on a shared machine a
// block the server spent preempted only moves one sample.
func serverCost(b *testing.B, admin *goredis.Client, cycle func() error) {
	ctx := context.Background()
	for range 10 {
		require.NoError(b, cycle())
	}
	var cpus, scripts, cmds []float64
	var last map[string]cmdStat
	b.ResetTimer()
	for done := 0; done < b.N; {
		n := min(costBlock, b.N-done)
		b.StopTimer()
		require.NoError(b, admin.ConfigResetStat(ctx).Err())
		cpu0 := serverCPU(b, admin)
		b.StartTimer()
		for range n {
			require.NoError(b, cycle())
		}
		b.StopTimer()
		cpu1 := serverCPU(b, admin)
		last = commandStats(b, admin)
		calls, scriptUS := totals(last)
		cpus = append(cpus, (cpu1-cpu0)*1e6/float64(n))
		scripts = append(scripts, scriptUS/float64(n))
		cmds = append(cmds, calls/float64(n))
		done += n
		b.StartTimer()
	}
	b.StopTimer()
	names := make([]string, 0, len(last))
	for name := range last {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if s := last[name]; s.calls > 0 {
			b.Logf("%-18s %8.0f calls %6.2f usec/call", name, s.calls, s.usec/s.calls)
		}
	}
	b.ReportMetric(median(cpus), "server-µs/cycle")
	b.ReportMetric(median(scripts), "script-µs/cycle")
	b.ReportMetric(median(cmds), "cmds/cycle")
}

// totals sums stats: the calls of every command (the scripts' inner calls
// included; INFO and CONFIG, the measurement's own, left out) and the usec
// of the scripts (EVAL, EVALSHA: their inner calls included).
func totals(stats map[string]cmdStat) (calls, scriptUS float64) {
	for name, s := range stats {
		switch name {
		case "info", "config|resetstat", "config":
		case "evalsha", "eval":
			scriptUS += s.usec
			calls += s.calls
		default:
			calls += s.calls
		}
	}
	return calls, scriptUS
}

// costBlock is the number of cycles between two resets of the server's
// statistics in serverCost.
const costBlock = 500

func median(v []float64) float64 {
	sort.Float64s(v)
	return v[len(v)/2]
}

// serverCPU is the server's used_cpu_user + used_cpu_sys, in seconds.
func serverCPU(b *testing.B, c *goredis.Client) float64 {
	s, err := c.Info(context.Background(), "cpu").Result()
	require.NoError(b, err)
	var cpu float64
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_user" || k == "used_cpu_sys") {
			f, _ := strconv.ParseFloat(v, 64)
			cpu += f
		}
	}
	return cpu
}

// cmdStat is one line of INFO commandstats.
type cmdStat struct{ calls, usec float64 }

// commandStats parses INFO commandstats: per command (lower case, with
// its subcommand as "config|resetstat"), its calls and total usec.
func commandStats(tb testing.TB, c *goredis.Client) map[string]cmdStat {
	s, err := c.Info(context.Background(), "commandstats").Result()
	require.NoError(tb, err)
	out := map[string]cmdStat{}
	for _, line := range strings.Split(s, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		var st cmdStat
		for _, f := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(f, "=")
			switch k {
			case "calls":
				st.calls, _ = strconv.ParseFloat(v, 64)
			case "usec":
				st.usec, _ = strconv.ParseFloat(v, 64)
			}
		}
		out[strings.TrimPrefix(name, "cmdstat_")] = st
	}
	return out
}
