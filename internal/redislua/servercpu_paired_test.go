package redislua

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/internal/testkit/testserver"
	"github.com/stretchr/testify/require"
)

// TestScriptServerCPUPaired compares the server's time per operation of
// the embedded scripts with a baseline: the same .lua files from the
// directory named by DISTLOCK_LUA_BASELINE (skipped without it), e.g.
// another commit's:
//
//	mkdir -p /tmp/lua-base && git archive REV internal/redislua/lua | tar -x -C /tmp/lua-base --strip-components=3
//	DISTLOCK_LUA_BASELINE=/tmp/lua-base go test -run TestScriptServerCPUPaired -v ./internal/redislua
//
// Both sets run against one server in alternating blocks of 200
// operations, 61 rounds (which set goes first alternates). Each figure is INFO commandstats' EVALSHA and
// EVAL µs per operation: the median of the baseline's blocks, of the
// embedded scripts', and of the paired differences (embedded − baseline,
// each pair moments apart). On a loaded machine BenchmarkScriptServerCPU's
// figures drift by tens of percent between runs; a pair's two blocks see
// the same load, so the paired median shows a change of a µs.
func TestScriptServerCPUPaired(t *testing.T) {
	dir := os.Getenv("DISTLOCK_LUA_BASELINE")
	if dir == "" {
		t.Skip("DISTLOCK_LUA_BASELINE (a directory of baseline .lua files) not set")
	}
	srv := testserver.Redis(t, testserver.RedisConfig{})
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()

	type scripts struct{ acquire, release, refresh, fairAcquire, fairRelease *goredis.Script }
	baseline := func(parts []string) *goredis.Script {
		var src []byte
		for _, p := range parts {
			b, err := os.ReadFile(filepath.Join(dir, p))
			require.NoError(t, err)
			src = append(src, b...)
			if len(b) > 0 && b[len(b)-1] != '\n' {
				src = append(src, '\n')
			}
		}
		return goredis.NewScript(string(src))
	}
	sets := [2]scripts{
		{baseline(acquireParts), baseline(releaseParts), baseline(refreshParts), baseline(fairAcquireParts), baseline(fairReleaseParts)},
		{acquireScript, releaseScript, refreshScript, fairAcquireScript, fairReleaseScript},
	}
	holds := NewHoldSource()
	const ttl = 10 * time.Minute // outlasts the run: the busy, nested and refreshed locks stay held
	must := func(what string, ok bool, err error) {
		t.Helper()
		if err != nil || !ok {
			t.Fatalf("%s: ok %v, %v", what, ok, err)
		}
	}
	acquire := func(s scripts, k Keys, owner, hold string, ttl time.Duration) AcquireResult {
		t.Helper()
		call, err := acquireCall(k, owner, hold, "", ttl, false)
		must("acquire call", true, err)
		r, err := parseAcquireCmd(s.acquire.Run(ctx, c, call.keys, call.args...))
		must("acquire", true, err)
		return r
	}
	release := func(s scripts, k Keys, owner string, token uint64, hold string) ReleaseResult {
		t.Helper()
		_, call, err := releaseCall(k, owner, token, hold)
		must("release call", true, err)
		r, err := parseReleaseCmd(s.release.Run(ctx, c, call.keys, call.args...))
		must("release", true, err)
		return r
	}
	k := KeysFor("paired:", "cycle")
	busy := KeysFor("paired:", "busy")
	acquire(sets[0], busy, "A", holds.Next(), ttl)
	nested := KeysFor("paired:", "nested")
	outer := acquire(sets[0], nested, "A", holds.Next(), ttl)
	refreshed, refreshHold := KeysFor("paired:", "refresh"), holds.Next()
	refreshToken := acquire(sets[0], refreshed, "A", refreshHold, ttl).Token
	refreshes := 0
	fair := KeysFor("paired:", "fair").Fair()

	phases := []struct {
		name string
		op   func(s scripts)
	}{
		{"cycle (acquire free + release)", func(s scripts) {
			h := holds.Next()
			r := acquire(s, k, "A", h, ttl)
			must("cycle", r.Outcome == Acquired && release(s, k, "A", r.Token, h) == Freed, nil)
		}},
		{"acquire free (then a plain DEL)", func(s scripts) {
			must("acquire free", acquire(s, k, "A", holds.Next(), ttl).Outcome == Acquired, nil)
			must("del", true, c.Del(ctx, k.Lock).Err())
		}},
		{"release freeing (lock set by HSET)", func(s scripts) {
			h := holds.Next()
			must("hset", true, c.HSet(ctx, k.Lock, "o", "A", "t", "7", h, "1764350000000", "name", k.Name).Err())
			must("pexpire", true, c.PExpire(ctx, k.Lock, ttl).Err())
			must("release freeing", release(s, k, "A", 7, h) == Freed, nil)
		}},
		{"acquire busy", func(s scripts) {
			r := acquire(s, busy, "B", holds.Next(), ttl)
			must("busy", r.Outcome == Busy && r.Age >= 0, nil)
		}},
		{"reentrant acquire + release", func(s scripts) {
			h := holds.Next()
			r := acquire(s, nested, "A", h, ttl)
			must("reentrant", r.Outcome == Reentered && release(s, nested, "A", outer.Token, h) == HoldsLeft, nil)
		}},
		{"refresh (extending)", func(s scripts) {
			refreshes++
			call, err := refreshCall(refreshed, "A", refreshToken, refreshHold, ttl+time.Duration(refreshes)*time.Millisecond)
			must("refresh call", true, err)
			held, err := parseRefreshCmd(s.refresh.Run(ctx, c, call.keys, call.args...))
			must("refresh", held, err)
		}},
		{"fair cycle (acquire free + release)", func(s scripts) {
			h := holds.Next()
			keys, args, err := fairAcquireCall(fair, "A", ttl, FairAttempt{Hold: h, N: 1})
			must("fair acquire call", true, err)
			r, err := parseFairAcquireCmd(s.fairAcquire.Run(ctx, c, keys, args...))
			must("fair acquire", r.Outcome == Acquired, err)
			_, call, err := releaseCall(fair, "A", r.Token, h)
			must("fair release call", true, err)
			n, err := s.fairRelease.Run(ctx, c, call.keys, call.args...).Int64()
			must("fair release", n == 1, err)
		}},
	}
	const block, rounds = 200, 61
	for _, p := range phases {
		var per [2][]float64
		var diff []float64
		for round := range rounds {
			for j := range sets {
				i := j ^ round&1 // alternate which set goes first
				s := sets[i]
				p.op(s) // loads the script (NOSCRIPT → EVAL) outside the block
				must("config resetstat", true, c.ConfigResetStat(ctx).Err())
				for range block {
					p.op(s)
				}
				per[i] = append(per[i], commandUsec(t, c, "evalsha", "eval")/block)
			}
			diff = append(diff, per[1][len(per[1])-1]-per[0][len(per[0])-1])
		}
		median := func(v []float64) float64 { v = slices.Clone(v); slices.Sort(v); return v[len(v)/2] }
		t.Logf("%-38s baseline %6.2f  embedded %6.2f  paired difference %+6.2f server-µs/op", p.name, median(per[0]), median(per[1]), median(diff))
	}
}
