package file

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/distlock/distlock/conformance"
)

// The built CLI serializes two processes through file://: each command
// writes "in" and "out" lines around a pause, and the lines never
// interleave.
func TestCLIRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the CLI")
	}
	// Mostly the build: beside TestConformance's shared checks, holding
	// its Alone ones off.
	conformance.Parallel(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "distlock")
	build := exec.Command("go", "build", "-o", bin, "github.com/distlock/distlock/cmd/distlock")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	locks := filepath.Join(dir, "locks")
	require.NoError(t, os.Mkdir(locks, 0o755))
	logf := filepath.Join(dir, "log")
	var wg sync.WaitGroup
	for _, p := range []string{"A", "B", "C"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(bin, "run", "--backend", "file://"+locks, "--key", "job", "--",
				"sh", "-c", `echo "$1 in" >> "$2"; sleep 0.2; echo "$1 out" >> "$2"`, "sh", p, logf)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("distlock run %s: %v\n%s", p, err, out)
			}
		}()
	}
	wg.Wait()
	b, err := os.ReadFile(logf)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	require.Equal(t, 6, len(lines), "log:\n%s", b)
	for i := 0; i < len(lines); i += 2 {
		who := strings.Fields(lines[i])[0]
		require.Equal(t, who+" in", lines[i], "log:\n%s", b)
		require.Equal(t, who+" out", lines[i+1], "two commands ran at once; log:\n%s", b)
	}
	out, err := exec.Command(bin, "run", "--backend", "mem://", "--key", "job", "--", "true").CombinedOutput()
	require.Error(t, err, "mem:// is refused: %s", out)
}
