package file

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/stretchr/testify/require"
)

// The test binary doubles as a helper process (helperEnv set): it opens
// the backend by URL and acquires as told, reporting on stdout.
const helperEnv = "DISTLOCK_FILE_HELPER"

type helperCfg struct {
	Mode string `json:"mode"` // "wait1": acquire Key once, print "x", exit; "hold": hold N keys Key/0.. until stdin closes
	URL  string `json:"url"`
	Key  string `json:"key"`
	N    int    `json:"n"`
}

// serveHelper runs the helper and exits, if this process is one.
func serveHelper() {
	raw := os.Getenv(helperEnv)
	if raw == "" {
		return
	}
	var c helperCfg
	if err := json.Unmarshal([]byte(raw), &c); err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	ctx := context.Background()
	l, err := distlock.Open(ctx, c.URL)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	out := bufio.NewWriter(os.Stdout)
	switch c.Mode {
	case "wait1":
		fmt.Fprintln(out, "ready")
		out.Flush()
		lease, err := l.Acquire(ctx, c.Key)
		if err != nil {
			fmt.Fprintln(out, "error", err)
			out.Flush()
			os.Exit(1)
		}
		os.Stdout.Write([]byte("x\n"))
		_ = lease.Release(ctx)
	case "hold":
		for i := range c.N {
			if _, err := l.TryAcquire(ctx, fmt.Sprintf("%s/%d", c.Key, i)); err != nil {
				fmt.Fprintln(out, "error", err)
				out.Flush()
				os.Exit(1)
			}
		}
		fmt.Fprintln(out, "held")
		out.Flush()
		_, _ = io.Copy(io.Discard, os.Stdin)
	}
	_ = l.Close()
	os.Exit(0)
}

// helper is a running helper process.
type helper struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines *bufio.Scanner
}

func startHelper(t testing.TB, c helperCfg) *helper {
	t.Helper()
	raw, _ := json.Marshal(c)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+string(raw))
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return &helper{cmd: cmd, stdin: stdin, lines: bufio.NewScanner(stdout)}
}

// expect reads the helper's next line and fails unless it is want.
func (h *helper) expect(t testing.TB, want string, within time.Duration) {
	t.Helper()
	got := make(chan string, 1)
	go func() {
		if h.lines.Scan() {
			got <- h.lines.Text()
		} else {
			got <- "EOF"
		}
	}()
	select {
	case line := <-got:
		require.Equal(t, want, line, "helper said")
	case <-time.After(within):
		t.Fatalf("helper silent for %v, want %q", within, want)
	}
}
