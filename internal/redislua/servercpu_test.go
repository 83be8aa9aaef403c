package redislua

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/internal/testkit/testserver"
	"github.com/stretchr/testify/require"
)

// BenchmarkScriptServerCPU measures the Redis server's time per script
// call, the figure that bounds a single server's lock throughput: the
// microseconds INFO commandstats counts for EVALSHA and EVAL (the script,
// with the commands it calls), divided by the operations of the phase.
// It depends little on the client or on the machine's load, unlike wall
// time. Run it with a fixed count, e.g.
//
//	go test -run '^$' -bench ScriptServerCPU -benchtime 20000x ./internal/redislua
//
// Each sub-benchmark's metric "server-µs/op" counts only the phase named
// (set-up calls are not counted), and "server-cpu-µs/op" the CPU time of
// the server's main thread (see serverCPU) per operation; "cycle" is one uncontended acquire and
// release of the same key, "floor-setnx-del" the same with a plain SET NX
// and DEL, for comparison.
func BenchmarkScriptServerCPU(b *testing.B) {
	srv := testserver.Redis(b, testserver.RedisConfig{})
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	b.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	holds := NewHoldSource()
	const ttl = time.Minute
	fatal := func(b *testing.B, what string, err error) {
		b.Helper()
		if err != nil {
			b.Fatalf("%s: %v", what, err)
		}
	}
	acquire := func(b *testing.B, k Keys, owner, hold string, want Outcome) AcquireResult {
		b.Helper()
		r, err := Acquire(ctx, c, k, owner, hold, "", ttl)
		fatal(b, "acquire", err)
		if r.Outcome != want {
			b.Fatalf("acquire = %+v, want outcome %d", r, want)
		}
		return r
	}
	release := func(b *testing.B, k Keys, owner string, token uint64, hold string, want ReleaseResult) {
		b.Helper()
		r, err := Release(ctx, c, k, owner, token, hold)
		fatal(b, "release", err)
		if r != want {
			b.Fatalf("release = %d, want %d", r, want)
		}
	}
	// keys returns n distinct locks' keys.
	keys := func(n int) []Keys {
		ks := make([]Keys, n)
		for i := range ks {
			ks[i] = KeysFor("bench:", "lock-"+strconv.Itoa(i))
		}
		return ks
	}
	run := func(name string, setup func(b *testing.B) func(i int), cmds ...string) {
		if len(cmds) == 0 {
			cmds = []string{"evalsha", "eval"}
		}
		b.Run(name, func(b *testing.B) {
			fatal(b, "flushall", c.FlushAll(ctx).Err())
			op := setup(b)
			// Load the scripts (EVALSHA's NOSCRIPT fallback) outside
			// the phase: the set-up calls did.
			fatal(b, "config resetstat", c.ConfigResetStat(ctx).Err())
			cpu := serverCPU(b, c)
			b.ResetTimer()
			for i := range b.N {
				op(i)
			}
			b.StopTimer()
			b.ReportMetric(commandUsec(b, c, cmds...)/float64(b.N), "server-µs/op")
			b.ReportMetric((serverCPU(b, c)-cpu)/float64(b.N), "server-cpu-µs/op")
		})
	}

	run("cycle", func(b *testing.B) func(int) {
		k := KeysFor("bench:", "cycle")
		h := holds.Next()
		r := acquire(b, k, "A", h, Acquired)
		release(b, k, "A", r.Token, h, Freed)
		return func(int) {
			h := holds.Next()
			r := acquire(b, k, "A", h, Acquired)
			release(b, k, "A", r.Token, h, Freed)
		}
	})
	run("acquire-free", func(b *testing.B) func(int) {
		ks := keys(b.N + 1)
		acquire(b, ks[b.N], "A", holds.Next(), Acquired)
		return func(i int) { acquire(b, ks[i], "A", holds.Next(), Acquired) }
	})
	run("release-freed", func(b *testing.B) func(int) {
		ks := keys(b.N + 1)
		hs := make([]string, b.N+1)
		ts := make([]uint64, b.N+1)
		for i := range ks {
			hs[i] = holds.Next()
			ts[i] = acquire(b, ks[i], "A", hs[i], Acquired).Token
		}
		release(b, ks[b.N], "A", ts[b.N], hs[b.N], Freed)
		return func(i int) { release(b, ks[i], "A", ts[i], hs[i], Freed) }
	})
	run("acquire-busy", func(b *testing.B) func(int) {
		k := KeysFor("bench:", "busy")
		acquire(b, k, "A", holds.Next(), Acquired)
		acquire(b, k, "B", holds.Next(), Busy)
		return func(int) { acquire(b, k, "B", holds.Next(), Busy) }
	})
	run("reentrant-cycle", func(b *testing.B) func(int) {
		k := KeysFor("bench:", "nested")
		r := acquire(b, k, "A", holds.Next(), Acquired)
		h := holds.Next()
		acquire(b, k, "A", h, Reentered)
		release(b, k, "A", r.Token, h, HoldsLeft)
		return func(int) {
			h := holds.Next()
			acquire(b, k, "A", h, Reentered)
			release(b, k, "A", r.Token, h, HoldsLeft)
		}
	})
	run("refresh", func(b *testing.B) func(int) {
		k := KeysFor("bench:", "refresh")
		h := holds.Next()
		r := acquire(b, k, "A", h, Acquired)
		// Each refresh extends the lock (its TTL 1ms more than the last),
		// as a refresh a third into the TTL does.
		refresh := func(i int) {
			held, err := Refresh(ctx, c, k, "A", r.Token, h, ttl+time.Duration(i+1)*time.Millisecond)
			fatal(b, "refresh", err)
			if !held {
				b.Fatal("refresh: not held")
			}
		}
		refresh(0)
		return func(i int) { refresh(i + 1) }
	})
	// The floor: a plain SET NX PX and DEL, no script.
	run("floor-setnx-del", func(b *testing.B) func(int) {
		k := KeysFor("bench:", "floor")
		return func(int) {
			ok, err := c.SetNX(ctx, k.Lock, "A", ttl).Result()
			fatal(b, "set nx", err)
			if !ok {
				b.Fatal("set nx: busy")
			}
			fatal(b, "del", c.Del(ctx, k.Lock).Err())
		}
	}, "set", "del")
}

// serverCPU returns the CPU time, in µs, that the server's main thread
// has used (INFO cpu: user and system), reading and writing the client's
// requests and replies included. Unlike the commands' time in
// commandstats, which is wall time, it leaves out the time the thread
// waited for a core on a loaded machine.
func serverCPU(b *testing.B, c *goredis.Client) float64 {
	b.Helper()
	info, err := c.Info(context.Background(), "cpu").Result()
	require.NoError(b, err, "info cpu")
	var total float64
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_user_main_thread" || k == "used_cpu_sys_main_thread") {
			n, err := strconv.ParseFloat(v, 64)
			require.NoError(b, err, "info cpu: %q", line)
			total += n * 1e6
		}
	}
	return total
}

// commandUsec returns the microseconds the server spent in the commands
// cmds (lower case) since its statistics were last reset, from INFO
// commandstats. A script's time includes that of the commands it calls.
func commandUsec(b testing.TB, c *goredis.Client, cmds ...string) float64 {
	b.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	require.NoError(b, err, "info commandstats")
	var total float64
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		name, _, _ := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":")
		if !strings.HasPrefix(line, "cmdstat_") || !slices.Contains(cmds, name) {
			continue
		}
		for _, kv := range strings.Split(line[strings.IndexByte(line, ':')+1:], ",") {
			if v, ok := strings.CutPrefix(kv, "usec="); ok {
				n, err := strconv.ParseFloat(v, 64)
				require.NoError(b, err, "commandstats: %q", line)
				total += n
			}
		}
	}
	return total
}
