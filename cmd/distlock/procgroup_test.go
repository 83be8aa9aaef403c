package main

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/internal/redislua"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// alive reports whether pid is a live process (a zombie is not).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return syscall.Kill(pid, 0) == nil
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}

// waitGone polls until pid is gone or d passes; it reports whether it went.
func waitGone(pid int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if !alive(pid) {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return !alive(pid)
}

// startRun starts `distlock run` with script and returns the command and
// the first line the script prints.
func startRun(t *testing.T, args []string, script string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(bin, append(append([]string{"run"}, args...), "--", "sh", "-c", script)...)
	cmd.Env = append(os.Environ(), "DISTLOCK_BACKEND=")
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	cmd.WaitDelay = 5 * time.Second // a surviving grandchild must not hold Wait up
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(out).ReadString('\n')
		line <- strings.TrimSpace(s)
	}()
	select {
	case l := <-line:
		if l == "" {
			t.Fatalf("the command printed nothing; stderr %q", stderr.String())
		}
		return cmd, l
	case <-time.After(time.Minute):
		t.Fatalf("the command did not start; stderr %q", stderr.String())
	}
	return nil, ""
}

// TestRunKillsGroupOnLoss: the command starts a background loop that
// ignores SIGTERM and exits itself on SIGTERM; after the lease is lost the
// loop is gone within --grace (it used to keep running: only the direct
// child was signalled).
func TestRunKillsGroupOnLoss(t *testing.T) {
	url, srv := redisURL(t)
	admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer admin.Close()
	ticks := filepath.Join(t.TempDir(), "ticks")
	const grace = 2 * time.Second
	script := `(trap '' TERM; while :; do echo tick >> "` + ticks + `"; sleep 0.05; done) >/dev/null 2>&1 & echo $!; trap 'exit 0' TERM; while :; do sleep 0.05; done`
	cmd, line := startRun(t, []string{"--backend", url, "--key", "group", "--grace", grace.String()}, script)
	pid, err := strconv.Atoi(line)
	require.NoError(t, err, "grandchild pid %q", line)
	if n, err := admin.Del(context.Background(), redislua.KeysFor(redislua.DefaultPrefix, "group").Lock).Result(); err != nil || n != 1 {
		t.Fatalf("delete the lock key: %d %v", n, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		assert.Equal(t, ExitLost, exitStatus(err), "status")
	case <-time.After(time.Minute):
		t.Fatal("distlock did not exit after the loss")
	}
	// Generous bound for a loaded machine; the grandchild is killed when
	// the command exits, well within grace.
	if !waitGone(pid, grace+10*time.Second) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		t.Fatalf("background process %d of the command still runs after the lease was lost", pid)
	}
}

// TestRunChildDiesWithDistlock: after kill -9 of distlock, its command is
// gone (Linux parent-death signal); it used to run on without the lock.
func TestRunChildDiesWithDistlock(t *testing.T) {
	url, _ := redisURL(t)
	cmd, line := startRun(t, []string{"--backend", url, "--key", "pdeath"}, `echo $$; while :; do sleep 0.05; done`)
	pid, err := strconv.Atoi(line)
	require.NoError(t, err, "child pid %q", line)
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()
	if !waitGone(pid, 30*time.Second) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		t.Fatalf("command %d still runs after distlock was killed with SIGKILL", pid)
	}
}
