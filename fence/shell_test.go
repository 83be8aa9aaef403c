package fence_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/distlock/distlock/fence"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestShellInstallInteroperates: testdata/fenced-install.sh (the shell
// pattern docs/FENCING.md shows) and Dir share the token file and the
// flock, so either refuses what the other made stale.
func TestShellInstallInteroperates(t *testing.T) {
	if _, err := exec.LookPath("flock"); err != nil {
		t.Skip("no flock(1)")
	}
	ctx := ctxT(t)
	dir := t.TempDir()
	d, _ := fence.OpenDir(dir)
	must(t, d.WriteFile(ctx, "out", 5, []byte("go 5"), 0o644))
	install := func(tok uint64, content string) int {
		src := filepath.Join(dir, "src.tmp")
		must(t, os.WriteFile(src, []byte(content), 0o644))
		cmd := exec.CommandContext(ctx, "testdata/fenced-install.sh", src, dir, "out")
		cmd.Env = append(os.Environ(), "DISTLOCK_TOKEN="+strconv.FormatUint(tok, 10))
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		return 0
	}
	read := func() string { b, _ := os.ReadFile(filepath.Join(dir, "out")); return string(b) }
	if c := install(4, "sh 4"); c != 3 || read() != "go 5" {
		t.Fatalf("shell install with token 4 after 5: status %d, out %q", c, read())
	}
	require.Equal(t, 64, install(0, "sh 0"), "shell install with token 0: status")
	if c := install(5, "sh 5"); c != 0 || read() != "sh 5" {
		t.Fatalf("shell install with the same token: status %d, out %q", c, read())
	}
	if c := install(7, "sh 7"); c != 0 || read() != "sh 7" {
		t.Fatalf("shell install with token 7: status %d, out %q", c, read())
	}
	require.ErrorIs(t, d.WriteFile(ctx, "out", 6, []byte("go 6"), 0o644), fence.ErrStale, "Dir write with token 6 after the script's 7")
	if h, err := d.Highest(); err != nil || h != 7 || read() != "sh 7" {
		t.Fatalf("highest %d, %v, out %q", h, err, read())
	}
}

// TestFencingDocQuotesScripts: docs/FENCING.md shows the shell pattern
// verbatim.
func TestFencingDocQuotesScripts(t *testing.T) {
	doc, err := os.ReadFile("../docs/FENCING.md")
	require.NoError(t, err)
	script, err := os.ReadFile("testdata/fenced-install.sh")
	require.NoError(t, err)
	assert.Contains(t, string(doc), string(script), "docs/FENCING.md does not quote fence/testdata/fenced-install.sh verbatim")
}
