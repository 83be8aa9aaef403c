package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/internal/redislua"
)

// Section "scripts" (not run by default): the redis-server's own cost of
// each script of one uncontended cycle, distlock's and its peers', on
// distinct free keys. The calls go out in pipelines of scriptPipe (so
// that the client's speed does not matter) and the cost is read from the
// server: INFO commandstats (µs inside the command: the script and the
// commands it runs) and used_cpu_user+sys (everything, socket I/O and
// request parsing included), per call.

const scriptPipe = 100

// scriptCost is one script's server cost per call.
type scriptCost struct {
	name       string
	cmdUS      float64 // commandstats µs per call (EVALSHA/SET)
	innerUS    float64 // of which the commands the script ran
	innerCalls float64 // commands the script ran per call
	cpuUS      float64 // server CPU µs per call
}

// scriptStep is one call of a cycle: its name, and the command for key i.
type scriptStep struct {
	name string
	top  string // the command sent (INFO commandstats name): evalsha, set
	cmd  func(p goredis.Pipeliner, i int)
}

var (
	dlAcquireScript = goredis.NewScript(redislua.Compose("fence.lua", "acquire.lua"))
	dlReleaseScript = goredis.NewScript(redislua.Compose("hold.lua", "release.lua"))
	rlAcquireScript = goredis.NewScript(`local r = redis.call("SET",KEYS[1],ARGV[1],"NX","PXAT",ARGV[2]);redis.call("GET",KEYS[1]);return r`)
	rlDelScript     = goredis.NewScript(`if redis.call("GET",KEYS[1]) == ARGV[1] then return redis.call("DEL",KEYS[1]) end;return 0`)
)

// measureScripts runs n cycles of each library's steps on addr and returns
// the cost of each step.
func measureScripts(addr string, n int) ([]scriptCost, error) {
	ctx := context.Background()
	c := newClient(addr)
	defer c.Close()
	px := strconv.FormatInt(benchTTL.Milliseconds(), 10)
	owner := lockpathOwner
	run := time.Now().UnixNano()
	dlKeys := func(i int) redislua.Keys { return redislua.KeysFor("bench:sc:", fmt.Sprintf("%d/%d", run, i)) }
	hold := func(i int) string { return "h" + strconv.Itoa(i) }
	plain := func(lib string, i int) string { return fmt.Sprintf("bench:sc:%s:%d/%d", lib, run, i) }
	libs := [][]scriptStep{
		{
			{"distlock acquire (fence.lua + acquire.lua)", "evalsha", func(p goredis.Pipeliner, i int) {
				k := dlKeys(i)
				dlAcquireScript.EvalSha(ctx, p, []string{k.Lock, k.Fence, k.Legacy}, owner, px, hold(i), k.Name)
			}},
			{"distlock release (hold.lua + release.lua)", "evalsha", func(p goredis.Pipeliner, i int) {
				k := dlKeys(i)
				dlReleaseScript.EvalSha(ctx, p, []string{k.Lock}, owner, "0", hold(i), k.Channel)
			}},
		},
		{
			{"distlock acquire, no fencing key (acquire.lua's KEYS[1] only)", "evalsha", func(p goredis.Pipeliner, i int) {
				k := dlKeys(i + n)
				dlAcquireScript.EvalSha(ctx, p, []string{k.Lock}, owner, px, hold(i), k.Name)
			}},
			{"distlock release, after it", "evalsha", func(p goredis.Pipeliner, i int) {
				k := dlKeys(i + n)
				dlReleaseScript.EvalSha(ctx, p, []string{k.Lock}, owner, "0", hold(i), k.Channel)
			}},
		},
		{
			{"rueidislock acquire (SET NX PXAT + GET)", "evalsha", func(p goredis.Pipeliner, i int) {
				rlAcquireScript.EvalSha(ctx, p, []string{plain("rl", i)}, owner, strconv.FormatInt(time.Now().Add(benchTTL).UnixMilli(), 10))
			}},
			{"rueidislock release (GET + DEL)", "evalsha", func(p goredis.Pipeliner, i int) {
				rlDelScript.EvalSha(ctx, p, []string{plain("rl", i)}, owner)
			}},
		},
		{
			{"floor acquire (SET NX PX, no script)", "set", func(p goredis.Pipeliner, i int) {
				p.SetNX(ctx, plain("raw", i), owner, benchTTL)
			}},
			{"floor release (compare-and-delete script)", "evalsha", func(p goredis.Pipeliner, i int) {
				rawDel.EvalSha(ctx, p, []string{plain("raw", i)}, owner)
			}},
		},
	}
	for _, s := range []*goredis.Script{dlAcquireScript, dlReleaseScript, rlAcquireScript, rlDelScript, rawDel} {
		if err := s.Load(ctx, c).Err(); err != nil {
			return nil, err
		}
	}
	var out []scriptCost
	for _, steps := range libs {
		for _, st := range steps {
			before, err := serverLoad([]string{addr})
			if err != nil {
				return nil, err
			}
			for i := 0; i < n; i += scriptPipe {
				p := c.Pipeline()
				for j := i; j < min(n, i+scriptPipe); j++ {
					st.cmd(p, j)
				}
				cmds, err := p.Exec(ctx)
				if err != nil && err != goredis.Nil {
					return nil, fmt.Errorf("%s: %w", st.name, err)
				}
				for _, cmd := range cmds {
					if err := cmd.Err(); err != nil && err != goredis.Nil {
						return nil, fmt.Errorf("%s: %w", st.name, err)
					}
				}
			}
			after, err := serverLoad([]string{addr})
			if err != nil {
				return nil, err
			}
			sc := scriptCost{name: st.name, cpuUS: (after.cpu - before.cpu) * 1e6 / float64(n)}
			for k, v := range after.sub(before) {
				switch k {
				case "info": // the harness's own
				case st.top:
					sc.cmdUS += v.usec / float64(n)
				default:
					sc.innerUS += v.usec / float64(n)
					sc.innerCalls += v.calls / float64(n)
				}
			}
			out = append(out, sc)
		}
	}
	return out, nil
}
