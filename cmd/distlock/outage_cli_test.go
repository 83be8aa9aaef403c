package main

import (
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock/internal/testkit/slack"
	"github.com/distlock/distlock/internal/testkit/sqltest"
	"github.com/stretchr/testify/assert"
)

// TestUnreachableZooKeeper: against a ZooKeeper port where nothing listens,
// run --no-wait, status and unlock --force fail within about the client's
// 1 s retry period (not its 10 s connect timeout) with the unavailable
// status and one line naming the address and the dial error.
func TestUnreachableZooKeeper(t *testing.T) {
	t.Parallel()
	addr := sqltest.ClosedPort(t)
	url := "zookeeper://" + addr + "/"
	for _, args := range [][]string{
		{"run", "--backend", url, "--key", "k", "--no-wait", "--", "true"},
		{"status", "--backend", url, "k"},
		{"unlock", "--backend", url, "--force", "--yes", "k"},
	} {
		start := time.Now()
		r := runBin(t, time.Minute, nil, args...)
		took := time.Since(start)
		if r.status != ExitUnavailable || !strings.Contains(r.stderr, "connection refused") || !strings.Contains(r.stderr, addr) ||
			strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Errorf("%s: status %d, stderr %q; want %d and one line naming %s and connection refused", args[0], r.status, r.stderr, ExitUnavailable, addr)
		}
		if took > slack.D(4*time.Second) {
			t.Errorf("%s took %v; want about a second", args[0], took)
		}
	}
}

// TestRunVerboseOutage: run -v --wait against a backend that refuses
// connections says on stderr that it is waiting the outage out (with the
// dial error) before it gives up, and the give-up line keeps the cause.
func TestRunVerboseOutage(t *testing.T) {
	t.Parallel()
	addr := sqltest.ClosedPort(t)
	r := runBin(t, time.Minute, nil, "run", "-v", "--backend", "redis://"+addr+"/0", "--key", "k", "--wait", "1500ms", "--", "true")
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	last := lines[len(lines)-1]
	if r.status != ExitUnavailable || !strings.Contains(last, "gave up") || !strings.Contains(last, "connection refused") {
		t.Errorf("status %d, stderr %q; want %d and a last line saying it gave up, with connection refused", r.status, r.stderr, ExitUnavailable)
	}
	progress := false
	for _, l := range lines[:len(lines)-1] {
		progress = progress || (strings.HasPrefix(l, "distlock run: ") && strings.Contains(l, "retrying") && strings.Contains(l, "connection refused"))
	}
	assert.True(t, progress, "stderr %q: no progress line (retrying, with the dial error) while waiting out the outage", r.stderr)
}

// TestRunOutageQuiet: without -v, a run that waits out an outage prints
// one line when it gives up, and no log line of the backend's client
// (go-redis's "failed to dial" on stderr, bypassing the Locker's logger).
func TestRunOutageQuiet(t *testing.T) {
	t.Parallel()
	addr := sqltest.ClosedPort(t)
	r := runBin(t, time.Minute, nil, "run", "--backend", "redis://"+addr+"/0", "--key", "k", "--wait", "1500ms", "--", "true")
	if r.status != ExitUnavailable || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 || !strings.HasPrefix(r.stderr, "distlock run: gave up") {
		t.Errorf("status %d, stderr %q; want %d and the one give-up line", r.status, r.stderr, ExitUnavailable)
	}
}
