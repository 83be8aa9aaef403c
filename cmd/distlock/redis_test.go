package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redislua"
	"github.com/distlock/distlock/internal/testkit/testserver"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The tests below run several distlock processes against one real
// redis-server.

func redisURL(t *testing.T) (string, *testserver.Server) {
	srv := testserver.Redis(t, testserver.RedisConfig{})
	return "redis://" + srv.Addr() + "/0", srv
}

// TestRunContention: six `distlock run` processes on one key; the commands'
// own output shows they never overlapped and their tokens increased.
func TestRunContention(t *testing.T) {
	url, _ := redisURL(t)
	out := filepath.Join(t.TempDir(), "log")
	script := `echo "start $DISTLOCK_TOKEN" >> "$LOG"; sleep 0.05; echo "end $DISTLOCK_TOKEN" >> "$LOG"`
	var wg sync.WaitGroup
	for i := 0; i < 6; i++ {
		wg.Go(func() {
			r := runBin(t, 2*time.Minute, []string{"LOG=" + out}, "run", "--backend", url, "--key", "batch", "--", "sh", "-c", script)
			if r.status != 0 {
				t.Errorf("run %d: status %d: %s", i, r.status, r.stderr)
			}
		})
	}
	wg.Wait()
	b, err := os.ReadFile(out)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 12 {
		t.Fatalf("%d lines, want 12:\n%s", len(lines), b)
	}
	last := uint64(0)
	for i := 0; i < len(lines); i += 2 {
		var a, z string
		var ta, tz uint64
		fmt.Sscan(lines[i], &a, &ta)
		fmt.Sscan(lines[i+1], &z, &tz)
		if a != "start" || z != "end" || ta != tz {
			t.Fatalf("critical sections overlap at line %d:\n%s", i+1, b)
		}
		if ta <= last {
			t.Fatalf("token %d after %d: not increasing:\n%s", ta, last, b)
		}
		last = ta
	}
}

// holdLock takes key from this process and returns the lease.
func holdLock(t *testing.T, url, key string) *distlock.Lease {
	l, err := distlock.Open(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	lease, err := l.TryAcquire(context.Background(), key, distlock.WithTTL(time.Minute))
	require.NoError(t, err)
	return lease
}

func TestRunNotAcquired(t *testing.T) {
	url, _ := redisURL(t)
	holdLock(t, url, "busy")
	r := runBin(t, time.Minute, nil, "run", "--backend", url, "--key", "busy", "--no-wait", "--", "echo", "ran")
	if r.status != ExitNotAcquired || strings.Contains(r.stdout, "ran") || !strings.Contains(r.stderr, "held by another owner") {
		t.Errorf("--no-wait on a held lock: status %d stdout %q stderr %q; want %d and the command not run", r.status, r.stdout, r.stderr, ExitNotAcquired)
	}
	start := time.Now()
	r = runBin(t, time.Minute, nil, "run", "--backend", url, "--key", "busy", "--wait", "500ms", "--", "echo", "ran")
	if took := time.Since(start); r.status != ExitNotAcquired || took < 500*time.Millisecond || strings.Contains(r.stdout, "ran") {
		t.Errorf("--wait 500ms on a held lock: status %d after %v, stderr %q; want %d after >= 500ms", r.status, took, r.stderr, ExitNotAcquired)
	}
	r = runBin(t, time.Minute, nil, "run", "--backend", "redis://127.0.0.1:1/0", "--key", "x", "--wait", "1s", "--", "true")
	if r.status != ExitUnavailable {
		t.Errorf("unreachable backend: status %d, stderr %q; want %d", r.status, r.stderr, ExitUnavailable)
	}
}

// TestRunLostLease: the lock is taken from under a running command (its key
// deleted on the server, as an expiry during a pause would): the command is
// sent SIGTERM and distlock exits 76.
func TestRunLostLease(t *testing.T) {
	url, srv := redisURL(t)
	admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer admin.Close()
	cmd := exec.Command(bin, "run", "--backend", url, "--key", "lost", "--ttl", "1500ms", "--grace", "2s", "--",
		"sh", "-c", `trap 'echo got TERM; exit 0' TERM; echo ready; while :; do sleep 0.05; done`)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	defer cmd.Process.Kill()
	buf := make([]byte, 6)
	if _, err := out.Read(buf); err != nil || string(buf) != "ready\n" {
		t.Fatalf("command did not start: %q %v", buf, err)
	}
	if n, err := admin.Del(context.Background(), redislua.KeysFor(redislua.DefaultPrefix, "lost").Lock).Result(); err != nil || n != 1 {
		t.Fatalf("delete the lock key: %d %v", n, err)
	}
	rest := make([]byte, 64)
	n, _ := out.Read(rest)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if st := exitStatus(err); st != ExitLost || !strings.Contains(string(rest[:n]), "got TERM") || !strings.Contains(stderr.String(), "lost") {
			t.Errorf("lost lease: status %d, command output %q, stderr %q; want %d and the command terminated", st, rest[:n], stderr.String(), ExitLost)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("distlock did not end after its lease was lost")
	}
}

// TestConformanceCommandOnRedis runs the CLI's conformance against a local
// redis-server, worker processes included (the binary serves them).
func TestConformanceCommandOnRedis(t *testing.T) {
	t.Parallel()
	url, _ := redisURL(t)
	r := runBin(t, 5*time.Minute, nil, "conformance", "--backend", url, "--run", "^(mutual-exclusion|stale-holder|keys|notify|fencing|processes|crash-holder|durable)$")
	if r.status != 0 {
		t.Fatalf("status %d\n%s\n%s", r.status, r.stdout, r.stderr)
	}
	for _, want := range []string{"mutual-exclusion  pass", "processes         pass", "crash-holder      pass", "notify            pass", "durable           skip"} {
		assert.Contains(t, r.stdout, want, "table lacks %q:\n%s", want, r.stdout)
	}
	assert.Contains(t, r.stdout, strconv.Itoa(0)+" failed", "summary line missing:\n%s", r.stdout)
}

// TestRunTLSAgainstPlainServer: rediss:// naming a plain-text redis-server
// fails within the dial timeout and says TLS failed, even with a long
// --wait (it used to hang until the context ended, then said only
// "context deadline exceeded"). A TLS failure is not an outage to wait out.
func TestRunTLSAgainstPlainServer(t *testing.T) {
	_, srv := redisURL(t)
	start := time.Now()
	r := runBin(t, 2*time.Minute, nil, "run", "--backend", "rediss://"+srv.Addr()+"/0?dial_timeout=1s", "--key", "tls", "--wait", "60s", "--", "echo", "ran")
	took := time.Since(start)
	if r.status != ExitUnavailable || !strings.Contains(r.stderr, "TLS handshake") || strings.Contains(r.stdout, "ran") {
		t.Errorf("status %d, stderr %q; want %d and a TLS handshake error", r.status, r.stderr, ExitUnavailable)
	}
	if took >= 60*time.Second {
		t.Errorf("took %v: the TLS failure was waited out like an outage", took)
	}
	if n := strings.Count(strings.TrimSpace(r.stderr), "\n"); n > 0 {
		t.Errorf("%d lines of error: %q", n+1, r.stderr)
	}
}

// TestRunWaitsOutOutage: with --wait, run rides out a backend that is down
// when it starts and comes up within the wait (it used to fail at once).
func TestRunWaitsOutOutage(t *testing.T) {
	srv := testserver.Redis(t, testserver.RedisConfig{})
	addr := srv.Addr()
	require.NoError(t, srv.Kill())
	done := make(chan result, 1)
	go func() {
		done <- runBin(t, 3*time.Minute, nil, "run", "--backend", "redis://"+addr+"/0", "--key", "outage", "--wait", "2m", "--", "echo", "ran")
	}()
	time.Sleep(1500 * time.Millisecond) // distlock is retrying against the stopped server
	require.NoError(t, srv.Restart(context.Background()))
	r := <-done
	if r.status != 0 || strings.TrimSpace(r.stdout) != "ran" {
		t.Errorf("status %d, stdout %q, stderr %q; want the command run once the server is back", r.status, r.stdout, r.stderr)
	}
	// Without --wait the outage fails at once with the unavailable status.
	require.NoError(t, srv.Kill())
	r = runBin(t, time.Minute, nil, "run", "--backend", "redis://"+addr+"/0", "--key", "outage", "--no-wait", "--", "echo", "ran")
	if r.status != ExitUnavailable || strings.Count(r.stderr, "backend unavailable") != 1 {
		t.Errorf("--no-wait against a stopped server: status %d, stderr %q; want %d and one \"backend unavailable\"", r.status, r.stderr, ExitUnavailable)
	}
}

// TestRunZooKeeperTTLNote: on ZooKeeper, whose locks do not expire, an
// explicit --ttl draws one note on stderr (it used to be ignored silently);
// without --ttl there is none.
func TestRunZooKeeperTTLNote(t *testing.T) {
	t.Parallel()
	srv := testserver.ZooKeeper(t, testserver.ZooKeeperConfig{})
	url := "zookeeper://" + srv.Addr() + "/distlock-cli"
	r := runBin(t, 2*time.Minute, nil, "run", "--backend", url, "--key", "zk", "--ttl", "30s", "--", "echo", "ran")
	if r.status != 0 || strings.TrimSpace(r.stdout) != "ran" || strings.Count(r.stderr, "--ttl is ignored") != 1 {
		t.Errorf("--ttl on zookeeper: status %d, stdout %q, stderr %q; want the command run and one note", r.status, r.stdout, r.stderr)
	}
	r = runBin(t, 2*time.Minute, nil, "run", "--backend", url, "--key", "zk", "--", "echo", "ran")
	if r.status != 0 || r.stderr != "" {
		t.Errorf("zookeeper without --ttl: status %d, stderr %q; want no note", r.status, r.stderr)
	}
}

// TestRunRedlockErrorOneLine: a Redlock error joins one error per node;
// run prints it on one line, "backend unavailable" not doubled by run.
func TestRunRedlockErrorOneLine(t *testing.T) {
	r := runBin(t, time.Minute, nil, "run", "--backend", "redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3", "--key", "k", "--no-wait", "--", "true")
	if r.status != ExitUnavailable || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, "; node ") {
		t.Errorf("status %d, stderr %q; want %d and one line joining the node errors", r.status, r.stderr, ExitUnavailable)
	}
	assert.False(t, strings.HasPrefix(r.stderr, "distlock run: backend unavailable:"), "run adds its own \"backend unavailable\": %q", r.stderr)
}
