package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distlock/distlock/internal/testkit/testserver"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRunPermitsAcrossProcesses: six `distlock run --permits 2` processes
// on one PostgreSQL; each command marks itself present in a directory while
// it runs and records how many were present: never more than 2.
func TestRunPermitsAcrossProcesses(t *testing.T) {
	t.Parallel()
	url := testserver.PostgresServer(t).DSN() + "&create_table=true&table=cli_permits"
	dir := t.TempDir()
	present := filepath.Join(dir, "present")
	require.NoError(t, os.Mkdir(present, 0o755))
	log := filepath.Join(dir, "log")
	script := `mkdir "$P/$$"; ls "$P" | wc -l >> "$LOG"; sleep 0.2; rmdir "$P/$$"`
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Go(func() {
			r := runBin(t, 2*time.Minute, []string{"P=" + present, "LOG=" + log}, "run", "--backend", url, "--key", "batch", "--permits", "2", "--ttl", "5s", "--", "sh", "-c", script)
			if r.status != 0 {
				t.Errorf("run %d: status %d: %s", i, r.status, r.stderr)
			}
		})
	}
	wg.Wait()
	b, err := os.ReadFile(log)
	require.NoError(t, err)
	lines := strings.Fields(string(b))
	if len(lines) != 6 {
		t.Fatalf("%d commands ran, want 6: %q", len(lines), b)
	}
	most := 0
	for _, l := range lines {
		n, _ := strconv.Atoi(l)
		most = max(most, n)
	}
	t.Logf("at most %d commands at once", most)
	if most > 2 {
		t.Errorf("%d commands ran at once under --permits 2", most)
	}
	// Another count on the same key while held is refused; bad values are
	// usage errors.
	r := runBin(t, time.Minute, nil, "run", "--backend", url, "--key", "k", "--permits", "-1", "--", "true")
	assert.Equal(t, ExitUsage, r.status, "--permits -1: status")
	r = runBin(t, time.Minute, nil, "run", "--backend", url, "--key", "k", "--permits", "2", "--owner", "me", "--", "true")
	assert.Equal(t, ExitUsage, r.status, "--permits with --owner: status")
	r = runBin(t, time.Minute, nil, "run", "--backend", "redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3", "--key", "k", "--permits", "2", "--", "true")
	if r.status == 0 || !strings.Contains(r.stderr, "semaphore") {
		t.Errorf("--permits on redlock: status %d, stderr %q: want a refusal naming semaphores", r.status, r.stderr)
	}
}
