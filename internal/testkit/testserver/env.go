package testserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

func withDefaultTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx == nil {
		ctx = context.Background()
	}
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, defaultReadyTimeout)
}

// ---- ports ----

var (
	portMu    sync.Mutex
	portsUsed = map[int]bool{}
)

// freePorts returns n distinct ports that were free on 127.0.0.1 a moment
// ago and were not handed out before in this process. Ports are chosen below
// the kernel's ephemeral range when possible, so that outgoing connections
// cannot take them while a server is down between Kill and Restart.
func freePorts(n int) ([]int, error) {
	lo, hi := portRange()
	portMu.Lock()
	defer portMu.Unlock()
	var out []int
	for tries := 0; len(out) < n && tries < 1000; tries++ {
		var p int
		if hi > lo {
			p = lo + rand.IntN(hi-lo)
			if portsUsed[p] {
				continue
			}
			l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
			if err != nil {
				continue
			}
			l.Close()
		} else {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return nil, err
			}
			p = l.Addr().(*net.TCPAddr).Port
			l.Close()
			if portsUsed[p] {
				continue
			}
		}
		portsUsed[p] = true
		out = append(out, p)
	}
	if len(out) < n {
		return nil, errors.New("testserver: no free port found")
	}
	return out, nil
}

var portRangeOnce = sync.OnceValues(func() (int, int) {
	// Default Linux ephemeral range starts at 32768.
	ephemeralLo := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		f := strings.Fields(string(b))
		if len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil {
				ephemeralLo = v
			}
		}
	}
	const lo = 20000
	if ephemeralLo-lo < 2000 {
		return 0, 0 // too narrow: let the kernel choose
	}
	return lo, ephemeralLo
})

func portRange() (int, int) { return portRangeOnce() }

// ---- helpers ----

// tailFile returns the last n lines (at most 8 KiB) of a file.
func tailFile(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	const max = 8 << 10
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	off := st.Size() - max
	if off < 0 {
		off = 0
	}
	b, _ := io.ReadAll(io.NewSectionReader(f, off, st.Size()-off))
	lines := strings.SplitAfter(string(b), "\n")
	if off > 0 && len(lines) > 1 {
		lines = lines[1:] // drop partial first line
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "")
}

// lookBinary finds a program in PATH or in the usual sbin directories. The
// error wraps ErrMissingBinary and names the Debian package to install.
func lookBinary(pkg string, names ...string) (string, error) {
	for _, name := range names {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
		for _, d := range []string{"/usr/sbin", "/usr/local/sbin", "/sbin", "/usr/libexec"} {
			p := filepath.Join(d, name)
			if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
				return p, nil
			}
		}
	}
	return "", missing(names[0], pkg)
}

func missing(what, pkg string) error {
	return fmt.Errorf("%w: %s not found; install it with: sudo apt-get install -y %s (or run scripts/install-deps.sh)", ErrMissingBinary, what, pkg)
}

// dial connects to addr honouring ctx and sets the connection deadline from
// ctx (or 2 s).
func dial(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Now().Add(2 * time.Second)
	}
	_ = c.SetDeadline(dl)
	return c, nil
}

// splitAddrs splits a comma-separated address list, dropping empty items.
func splitAddrs(v string) []string {
	var out []string
	for _, a := range strings.Split(v, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}
