package redis

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/stretchr/testify/require"
)

// testLocker is a Locker over its own client, with the driver at hand.
type testLocker struct {
	*distlock.Locker
	d      *driver
	client *goredis.Client
}

func newTestLocker(t *testing.T, o *goredis.Options, opts ...Option) *testLocker {
	t.Helper()
	client := goredis.NewClient(o)
	c, err := newConfig(append(opts, WithCloseClient()))
	require.NoError(t, err)
	d, err := newDriver(client, c)
	require.NoError(t, err)
	l := &testLocker{Locker: distlock.New(d.backend(), "redis", c.defaults...), d: d, client: client}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func adminClient(t *testing.T, addr string) *goredis.Client {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func tctx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// eventually polls cond every 20ms until it holds or d passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// scanKeys returns every key of the current database.
func scanKeys(t *testing.T, c *goredis.Client) []string {
	t.Helper()
	var keys []string
	iter := c.Scan(tctx(t, 10*time.Second), 0, "*", 100).Iterator()
	for iter.Next(t.Context()) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatalf("SCAN: %v", err)
	}
	return keys
}

// holds returns the hold fields of a lock hash.
func holds(h map[string]string) []string {
	var out []string
	for f := range h {
		if strings.HasPrefix(f, "h") {
			out = append(out, f)
		}
	}
	return out
}

// pubsubClients returns the CLIENT LIST entries in pub/sub mode.
func pubsubClients(t *testing.T, admin *goredis.Client) []string {
	t.Helper()
	var out []string
	for _, line := range strings.Split(admin.ClientList(t.Context()).Val(), "\n") {
		for _, f := range strings.Fields(line) {
			if strings.HasPrefix(f, "flags=") && strings.Contains(f, "P") {
				out = append(out, line)
			}
		}
	}
	return out
}

// cmdCounter counts the commands a client sends that match.
type cmdCounter struct {
	match func(goredis.Cmder) bool
	n     atomic.Int64 // commands sent
	// landed counts the commands whose reply came: the server ran them.
	landed atomic.Int64
}

// newAcquireCounter counts the acquire scripts (EVALSHA of the plain acquire).
func newAcquireCounter() *cmdCounter {
	return &cmdCounter{match: func(cmd goredis.Cmder) bool {
		args := cmd.Args()
		return len(args) > 1 && args[1] == acquireSHA
	}}
}

// newScriptCounter counts every script (EVALSHA or EVAL).
func newScriptCounter() *cmdCounter {
	return &cmdCounter{match: func(cmd goredis.Cmder) bool { n := cmd.Name(); return n == "evalsha" || n == "eval" }}
}

func (c *cmdCounter) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (c *cmdCounter) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if !c.match(cmd) {
			return next(ctx, cmd)
		}
		c.n.Add(1)
		defer c.landed.Add(1)
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook counts the matching commands of a pipeline too: the
// driver batches concurrent requests into one.
func (c *cmdCounter) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		n := int64(0)
		for _, cmd := range cmds {
			if c.match(cmd) {
				n++
			}
		}
		c.n.Add(n)
		defer c.landed.Add(n)
		return next(ctx, cmds)
	}
}

func goroutineRunning(fn string) bool {
	buf := make([]byte, 1<<20)
	return strings.Contains(string(buf[:runtime.Stack(buf, true)]), fn)
}

// pipelineCounter counts round trips of a client: single commands and
// pipelines.
type pipelineCounter struct {
	single, pipelines, piped atomic.Int64
}

func (c *pipelineCounter) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (c *pipelineCounter) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		c.single.Add(1)
		return next(ctx, cmd)
	}
}

func (c *pipelineCounter) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		c.pipelines.Add(1)
		c.piped.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

func commandCalls(t *testing.T, admin *goredis.Client, cmd string) int64 {
	t.Helper()
	for _, line := range strings.Split(admin.Info(t.Context(), "commandstats").Val(), "\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_"+cmd+":calls="); ok {
			n, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
			return n
		}
	}
	return 0
}
