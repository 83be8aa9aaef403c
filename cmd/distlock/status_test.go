package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock/internal/testkit/testserver"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestStatusAndUnlockUsage(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		status int
		want   string
	}{
		{[]string{"status", "--backend", "redis://127.0.0.1:1/0"}, ExitUsage, "no KEY given"},
		{[]string{"status", "k"}, ExitUsage, "$DISTLOCK_BACKEND"},
		{[]string{"status", "--backend", "mem://", "k"}, ExitConfig, "only within one process"},
		{[]string{"status", "--backend", "redis://127.0.0.1:1/0", "--timeout", "2s", "k"}, ExitUnavailable, "unavailable"},
		// A timeout that ends while the client still dials: the backend
		// did not answer (it was a bare "context deadline exceeded", exit
		// 70, whenever a loaded machine stretched the dial retries past 2s).
		{[]string{"status", "--backend", "redis://127.0.0.1:1/0", "--timeout", "1ms", "k"}, ExitUnavailable, "no answer within --timeout 1ms"},
		{[]string{"status", "--backend", "redis://127.0.0.1:1/0", strings.Repeat("k", 1025)}, ExitConfig, "invalid lock key"},
		{[]string{"unlock", "--backend", "redis://127.0.0.1:1/0", "k"}, ExitUsage, "pass --force"},
		{[]string{"unlock", "--force", "--backend", "redis://127.0.0.1:1/0"}, ExitUsage, "exactly one KEY"},
		{[]string{"unlock", "--force", "--backend", "redis://127.0.0.1:1/0", "a", "b"}, ExitUsage, "exactly one KEY"},
		{[]string{"unlock", "--force", "--backend", "mem://", "k"}, ExitConfig, "only within one process"},
		{[]string{"unlock", "--force", "--yes", "--backend", "bogus://x", "k"}, ExitConfig, "unknown backend scheme"},
	} {
		r := runBin(t, time.Minute, nil, tc.args...)
		if r.status != tc.status || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("distlock %q: status %d stderr %q; want %d and %q", tc.args, r.status, r.stderr, tc.status, tc.want)
		}
		if n := strings.Count(strings.TrimSpace(r.stderr), "\n"); n > 0 && tc.status != ExitUnavailable {
			t.Errorf("distlock %q: %d lines of error, want one: %q", tc.args, n+1, r.stderr)
		}
	}
}

// TestStatusJSONUnreadableKey: a key that could not be read has an
// "error" and no "held" in status --json (it said "held": false, which a
// script takes for a free lock).
func TestStatusJSONUnreadableKey(t *testing.T) {
	t.Parallel()
	r := runBin(t, time.Minute, nil, "status", "--json", "--backend", "redis://127.0.0.1:1/0", "--timeout", "2s", "k")
	var entries []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &entries); err != nil || len(entries) != 1 {
		t.Fatalf("status --json: %v: %q (stderr %q)", err, r.stdout, r.stderr)
	}
	if _, ok := entries[0]["held"]; ok || entries[0]["error"] == nil || r.status != ExitUnavailable {
		t.Errorf("status --json of an unreadable key: %v, exit %d; want an error, no held, exit %d", entries[0], r.status, ExitUnavailable)
	}
}

func TestParseInterleaved(t *testing.T) {
	fs := newFlags("status", "", "", os.Stdout)
	asJSON := fs.Bool("json", false, "")
	b := fs.String("backend", "", "")
	keys, st := parseInterleaved(fs, []string{"a", "--backend", "u", "b", "--json", "--", "--c"}, os.Stderr)
	if st >= 0 || !*asJSON || *b != "u" || strings.Join(keys, ",") != "a,b,--c" {
		t.Errorf("parseInterleaved: keys %q json %v backend %q status %d", keys, *asJSON, *b, st)
	}
}

// TestOperatorCommandsOnEveryBackend runs, on a real server of every
// network backend, statusAndForcedUnlock and minHold.
func TestOperatorCommandsOnEveryBackend(t *testing.T) {
	t.Parallel()
	testserver.SkipShort(t, "every backend's server")
	for _, lb := range localBackends {
		t.Run(lb.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
			defer cancel()
			url, stop, err := lb.start(ctx)
			if errors.Is(err, testserver.ErrMissingBinary) {
				t.Skip(err)
			}
			require.NoError(t, err)
			defer stop()
			t.Run("status-unlock", func(t *testing.T) { statusAndForcedUnlock(t, url) })
			t.Run("min-hold", func(t *testing.T) { minHold(t, url) })
		})
	}
}

// statusAndForcedUnlock: a lock held by `distlock run` shows in `distlock
// status` with run's metadata; `unlock --force` refuses without an answer,
// then frees it with --yes and prints what it evicted; the run whose lock
// was taken ends with status 76; the next holder's token is higher.
func statusAndForcedUnlock(t *testing.T, url string) {
	const key = "nightly/report"
	env := []string{"DISTLOCK_BACKEND=" + url}
	holder := exec.Command(bin, "run", "--key", key, "--ttl", "3s", "--grace", "1s", "--", "sh", "-c", `echo ready; exec sleep 60`)
	holder.Env = append(os.Environ(), env...)
	out, err := holder.StdoutPipe()
	require.NoError(t, err)
	var holderErr strings.Builder
	holder.Stderr = &holderErr
	require.NoError(t, holder.Start())
	defer holder.Process.Kill()
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("holder did not start: %q %v; stderr %s", line, err, holderErr.String())
	}

	r := runBin(t, time.Minute, env, "status", "--json", key, "free/key")
	var entries []StatusEntry
	if r.status != 0 || json.Unmarshal([]byte(r.stdout), &entries) != nil || len(entries) != 2 {
		t.Fatalf("status --json: status %d, stdout %q, stderr %q", r.status, r.stdout, r.stderr)
	}
	held, free := entries[0], entries[1]
	if held.Held == nil || !*held.Held || held.Owner == "" || held.Holds != 1 || !strings.Contains(held.Metadata, "cmd=sh") || !strings.Contains(held.Metadata, "pid=") {
		t.Errorf("status of the held lock: %+v", held)
	}
	if !held.SessionBound && (held.TTLMillis <= 0 || held.TTLMillis > 4000) {
		t.Errorf("status of the held lock: ttl_ms %d, want (0, 4000] for a 3s TTL", held.TTLMillis)
	}
	if free.Held == nil || *free.Held || free.Key != "free/key" {
		t.Errorf("status of a free key: %+v", free)
	}
	if r := runBin(t, time.Minute, env, "status", key); r.status != 0 || !strings.Contains(r.stdout, "METADATA") || !strings.Contains(r.stdout, held.Owner) {
		t.Errorf("status table: status %d, stdout %q, stderr %q", r.status, r.stdout, r.stderr)
	}

	// Without --yes and without a terminal, unlock refuses to ask (it used
	// to print the [y/N] question into the pipe and read "not confirmed").
	refused := exec.Command(bin, "unlock", "--force", key)
	refused.Env = append(os.Environ(), env...)
	refused.Stdin = strings.NewReader("y\n")
	if o, err := refused.CombinedOutput(); exitStatus(err) != ExitUsage || !strings.Contains(string(o), "stdin is not a terminal: pass --yes") || strings.Contains(string(o), "[y/N]") {
		t.Errorf("unlock --force without a terminal: status %d, output %q; want %d and \"stdin is not a terminal: pass --yes\"", exitStatus(err), o, ExitUsage)
	}
	if r := runBin(t, time.Minute, env, "status", "--json", key); !strings.Contains(r.stdout, held.Owner) {
		t.Fatalf("lock not intact after a refused unlock: %s %s", r.stdout, r.stderr)
	}

	r = runBin(t, time.Minute, env, "unlock", "--force", "--yes", key)
	if r.status != 0 || !strings.Contains(r.stdout, "evicted owner "+held.Owner) || !strings.Contains(r.stdout, "cmd=sh") {
		t.Fatalf("unlock --force --yes: status %d, stdout %q, stderr %q", r.status, r.stdout, r.stderr)
	}
	done := make(chan error, 1)
	go func() { done <- holder.Wait() }()
	select {
	case err := <-done:
		if exitStatus(err) != ExitLost {
			t.Errorf("the evicted run exited %d, want %d; stderr %s", exitStatus(err), ExitLost, holderErr.String())
		}
	case <-time.After(30 * time.Second):
		t.Errorf("the evicted run still runs 30s after its lock was freed by force; stderr %s", holderErr.String())
	}

	next := runBin(t, time.Minute, env, "run", "--no-wait", "--key", key, "--", "sh", "-c", `echo $DISTLOCK_TOKEN`)
	if next.status != 0 {
		t.Fatalf("run after the forced release: status %d stderr %q", next.status, next.stderr)
	}
	if tok, err := strconv.ParseUint(strings.TrimSpace(next.stdout), 10, 64); held.Token != 0 && (err != nil || tok <= held.Token) {
		t.Errorf("token after a forced release: %q, the evicted holder's %d: want higher", next.stdout, held.Token)
	}
	if r := runBin(t, time.Minute, env, "unlock", "--force", "--yes", key); r.status != 0 || !strings.Contains(r.stdout, "not held") {
		t.Errorf("unlock of a free lock: status %d stdout %q stderr %q", r.status, r.stdout, r.stderr)
	}
}

// minHold: two hosts whose cron fires 100ms after the first host's job
// ended run a short job with --no-wait: both run it without a minimum hold
// (the hole), one with --min-hold (the fix), and the lock is free again
// after the minimum hold.
func minHold(t *testing.T, url string) {
	cron := func(key string, extra ...string) int {
		out := filepath.Join(t.TempDir(), "ran")
		env := []string{"DISTLOCK_BACKEND=" + url, "OUT=" + out}
		args := append(append([]string{"run", "--no-wait", "--ttl", "4s", "--key", key}, extra...), "--", "sh", "-c", `echo ran >> "$OUT"`)
		first := exec.Command(bin, args...)
		first.Env = append(os.Environ(), env...)
		require.NoError(t, first.Start())
		exited := make(chan int, 1)
		go func() { exited <- exitStatus(first.Wait()) }()
		// The first job has ended once it wrote its line; without a minimum
		// hold, wait for the first run to exit too (its lock released).
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			b, _ := os.ReadFile(out)
			if len(b) > 0 || time.Now().After(deadline) {
				break
			}
		}
		firstStatus := -1
		if len(extra) == 0 {
			firstStatus = <-exited
		}
		time.Sleep(100 * time.Millisecond)
		r := runBin(t, time.Minute, env, args...)
		if firstStatus == -1 {
			firstStatus = <-exited
		}
		if firstStatus != 0 || (r.status != 0 && r.status != ExitNotAcquired) {
			t.Errorf("distlock %q: statuses %d and %d (stderr %q)", args, firstStatus, r.status, r.stderr)
		}
		b, _ := os.ReadFile(out)
		return strings.Count(string(b), "ran")
	}
	if n := cron("report/plain"); n != 2 {
		t.Errorf("without --min-hold the job ran %d times, want 2 (the second host's cron fired after the first job ended)", n)
	}
	start := time.Now()
	if n := cron("report/min-hold", "--min-hold", "3s"); n != 1 {
		t.Errorf("with --min-hold 3s the job ran %d times, want 1", n)
	}
	r := runBin(t, time.Minute, []string{"DISTLOCK_BACKEND=" + url}, "run", "--wait", "20s", "--key", "report/min-hold", "--", "true")
	if took := time.Since(start); r.status != 0 || took < 3*time.Second {
		t.Errorf("next run after the minimum hold: status %d after %v (stderr %q); want 0, not before 3s", r.status, took, r.stderr)
	}
}

func TestCellQuotesWhatIsNotPrintable(t *testing.T) {
	for in, quoted := range map[string]bool{"host=a pid=1": false, "": false, "a\tb": true, "x\u009b31m": true, "evil\u202ecod": true, "\xff": true, "é ✓": false} {
		got := cell(in)
		assert.Equal(t, quoted, strings.HasPrefix(got, `"`), "cell(%q) = %q, quoted", in, got)
	}
}
