package testserver

import (
	"bytes"
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
	"syscall"
	"time"
)

// ErrNotControllable is returned by the fault-injection methods (Kill, Pause,
// Resume, Restart) of a Server that points at an external server configured
// through an environment variable.
var ErrNotControllable = errors.New("testserver: server is external and not controllable")

// ErrMissingBinary is wrapped by start errors when a server binary or jar is
// not installed. The wrapping error names the apt-get command that installs it.
var ErrMissingBinary = errors.New("testserver: required binary not installed")

// ErrNotRunning is returned by Pause and Resume when the server process is not
// running (after Kill or Stop).
var ErrNotRunning = errors.New("testserver: server process is not running")

// ErrStopped is returned by Restart after Stop.
var ErrStopped = errors.New("testserver: server was stopped")

// errAddrInUse marks a start that failed because a port was taken by someone
// else between choosing it and the server binding it; callers retry with
// new ports.
var errAddrInUse = errors.New("address already in use")

// defaultReadyTimeout bounds readiness polling when ctx has no deadline.
const defaultReadyTimeout = 60 * time.Second

// startAttempts bounds the retries with fresh ports after a bind failure.
const startAttempts = 5

// Server is one server process (or an external server, see Controllable).
// All methods are safe for concurrent use.
type Server struct {
	kind     string
	external bool
	addr     string // fixed for the life of the Server once started

	dir     string   // data directory, kept across Kill/Restart
	ownsDir bool     // dir was created by us and is removed by Stop
	ports   []int    // ports[0] is the client port
	logPath string   // captured stdout+stderr
	logs    []string // extra log files written by the server itself
	bin     string
	// args builds the command line from the current ports.
	args func() []string
	// prepare runs before every start (write config files etc.).
	prepare func() error
	// probe answers nil when the server is ready; one attempt.
	probe func(ctx context.Context) error
	// cleanup runs once on Stop after the process is gone.
	cleanup []func()
	// procAttr, if set, adjusts the child's attributes (for example the
	// credentials of an unprivileged user).
	procAttr func(*syscall.SysProcAttr)
	// tree, if set, signals the server's processes that leave the
	// leader's process group (PostgreSQL's backends); the leader's group
	// is signalled as usual. For SIGKILL it runs before the leader is
	// killed.
	tree func(pid int, sig syscall.Signal) error

	mu      sync.Mutex
	p       *proc
	stopped bool
}

// proc is one running child process.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed after Wait returned
	err  error         // Wait result, valid after done is closed
	logf *os.File
}

// Addr returns the client address, "127.0.0.1:port" for local servers.
func (s *Server) Addr() string { return s.addr }

// Kind names the server kind: "redis", "memcached", "zookeeper", "mariadb".
func (s *Server) Kind() string { return s.kind }

// Dir returns the server's data directory ("" for external servers).
func (s *Server) Dir() string { return s.dir }

// Controllable reports whether the server is a local process that the
// fault-injection methods can act on. It is false for external servers given
// by environment variables.
func (s *Server) Controllable() bool { return !s.external }

// PID returns the process id of the running server process, or 0 if it is
// not running or external.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p == nil {
		return 0
	}
	return s.p.cmd.Process.Pid
}

// String describes the server for log messages.
func (s *Server) String() string {
	if s.external {
		return s.kind + "(external " + s.addr + ")"
	}
	return s.kind + "(" + s.addr + ")"
}

// Kill sends SIGKILL to the server's process group and waits until the
// process is gone, which frees its ports. The data directory is kept, so
// Restart can bring the server back. Kill is idempotent.
func (s *Server) Kill() error {
	if s.external {
		return ErrNotControllable
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.killLocked()
}

func (s *Server) killLocked() error {
	p := s.p
	if p == nil {
		return nil
	}
	s.p = nil
	if s.tree != nil && !p.exited() {
		_ = s.tree(p.cmd.Process.Pid, syscall.SIGKILL)
	}
	return p.kill()
}

// Pause sends SIGSTOP to the server's process group: connections stay open
// but nothing is answered until Resume.
func (s *Server) Pause() error { return s.signal(syscall.SIGSTOP) }

// Resume sends SIGCONT to the server's process group after Pause.
func (s *Server) Resume() error { return s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) error {
	if s.external {
		return ErrNotControllable
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p == nil {
		return ErrNotRunning
	}
	if s.tree != nil {
		if err := s.tree(s.p.cmd.Process.Pid, sig); err != nil {
			return fmt.Errorf("testserver: %s: %v: %w", s, sig, err)
		}
	}
	if err := syscall.Kill(-s.p.cmd.Process.Pid, sig); err != nil {
		return fmt.Errorf("testserver: %s: %v: %w", s, sig, err)
	}
	return nil
}

// Restart starts the server again on the same port(s) with the same data
// directory and waits until it is ready. A running (or paused) server is
// killed first. The readiness wait is bounded by ctx, or by 60 s if ctx has
// no deadline.
//
// A member of a ZooKeeper ensemble or Redis Cluster is ready only when it
// has rejoined a working ensemble or cluster. To bring back several members
// of a cluster that has lost its quorum, call RestartNoWait on each of them
// and then WaitReady.
func (s *Server) Restart(ctx context.Context) error {
	if s.external {
		return ErrNotControllable
	}
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	for {
		p, err := s.restart()
		if err != nil {
			return err
		}
		err = s.waitReady(ctx, p)
		if !errors.Is(err, errAddrInUse) {
			return err
		}
		// Someone else holds our port for the moment: retry on the same
		// port until ctx expires.
		select {
		case <-ctx.Done():
			return err
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// RestartNoWait is Restart without the readiness wait: it kills the process
// if it is running and starts it again on the same port(s) and data
// directory. Use WaitReady afterwards.
func (s *Server) RestartNoWait() error {
	if s.external {
		return ErrNotControllable
	}
	_, err := s.restart()
	return err
}

// WaitReady waits until the running server answers, bounded by ctx (60 s if
// ctx has no deadline). It fails at once if the process is not running or
// exits. For external servers it polls the server's protocol.
func (s *Server) WaitReady(ctx context.Context) error {
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	if s.external {
		return s.pollExternal(ctx)
	}
	s.mu.Lock()
	p := s.p
	s.mu.Unlock()
	if p == nil {
		return fmt.Errorf("testserver: %s: %w", s, ErrNotRunning)
	}
	return s.waitReady(ctx, p)
}

// Stop terminates the server for good: it kills the process group, waits
// for it and removes what the Server created (its temporary directory if it
// made one). Stop is idempotent; for external servers it does nothing.
func (s *Server) Stop() error {
	if s.external {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return nil
	}
	s.stopped = true
	err := s.killLocked()
	for i := len(s.cleanup) - 1; i >= 0; i-- {
		s.cleanup[i]()
	}
	s.cleanup = nil
	return err
}

// LogTail returns the last lines of the server's captured output and log
// files, for diagnostics.
func (s *Server) LogTail() string {
	var b strings.Builder
	for _, f := range append([]string{s.logPath}, s.logs...) {
		if f == "" {
			continue
		}
		t := tailFile(f, 40)
		if t == "" {
			continue
		}
		fmt.Fprintf(&b, "--- %s ---\n%s", f, t)
		if !strings.HasSuffix(t, "\n") {
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// restart kills the current process (if any) and starts a new one.
func (s *Server) restart() (*proc, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return nil, fmt.Errorf("testserver: %s: %w", s, ErrStopped)
	}
	if err := s.killLocked(); err != nil {
		return nil, err
	}
	return s.startLocked()
}

// startLocked starts the process; s.mu must be held and no process running.
func (s *Server) startLocked() (*proc, error) {
	if s.prepare != nil {
		if err := s.prepare(); err != nil {
			return nil, fmt.Errorf("testserver: %s: prepare: %w", s, err)
		}
	}
	// Keep one previous generation of every log for diagnostics.
	for _, f := range append([]string{s.logPath}, s.logs...) {
		if _, err := os.Stat(f); err == nil {
			_ = os.Rename(f, f+".prev")
		}
	}
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("testserver: %s: %w", s, err)
	}
	cmd := exec.Command(s.bin, s.args()...)
	cmd.Dir = s.dir
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = sysProcAttr()
	if s.procAttr != nil {
		s.procAttr(cmd.SysProcAttr)
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("testserver: %s: start %s: %w", s, s.bin, err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{}), logf: logf}
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	s.p = p
	return p, nil
}

// kill SIGKILLs the process group and waits (bounded) for the process.
func (p *proc) kill() error {
	pid := p.cmd.Process.Pid
	_ = killPG(pid)
	_ = p.cmd.Process.Kill()
	select {
	case <-p.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("testserver: process %d did not exit 10s after SIGKILL", pid)
	}
}

// killPG sends SIGKILL to the process group led by pid.
func killPG(pid int) error { return syscall.Kill(-pid, syscall.SIGKILL) }

// exited reports whether the process has exited.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// waitReady polls s.probe until it succeeds, ctx expires or p exits.
func (s *Server) waitReady(ctx context.Context, p *proc) error {
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	var last error
	lastLogCheck := time.Now()
	for {
		if p.exited() {
			return s.exitError(p)
		}
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		err := s.probe(pctx)
		pcancel()
		if err == nil {
			if p.exited() { // answered, but not our process
				return s.exitError(p)
			}
			return nil
		}
		last = err
		if time.Since(lastLogCheck) > time.Second {
			// Some servers (ZooKeeper quorum ports) log a bind
			// failure and keep running: give up early.
			lastLogCheck = time.Now()
			if s.logsContain("Address already in use") {
				return fmt.Errorf("testserver: %s: %w\n%s", s, errAddrInUse, s.LogTail())
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testserver: %s not ready: %w (last probe error: %v)\n%s", s, ctx.Err(), last, s.LogTail())
		case <-p.done:
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (s *Server) exitError(p *proc) error {
	<-p.done
	if s.logsContain("Address already in use") {
		return fmt.Errorf("testserver: %s exited during startup (%v): %w\n%s", s, p.err, errAddrInUse, s.LogTail())
	}
	return fmt.Errorf("testserver: %s exited during startup: %v\n%s", s, p.err, s.LogTail())
}

func (s *Server) logsContain(sub string) bool {
	for _, f := range append([]string{s.logPath}, s.logs...) {
		b, err := os.ReadFile(f)
		if err == nil && bytes.Contains(b, []byte(sub)) {
			return true
		}
	}
	return false
}

// pollExternal waits until an external server answers its probe.
func (s *Server) pollExternal(ctx context.Context) error {
	var last error
	for {
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		last = s.probe(pctx)
		pcancel()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testserver: %s not ready: %w (last probe error: %v)", s, ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// launch does the first start: it picks fresh ports, starts the process and
// waits until it is ready, retrying with new ports when a port was taken.
// On failure the process is gone and the Server's cleanup has run.
func (s *Server) launch(ctx context.Context, nports int) error {
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	var err error
	for attempt := 0; attempt < startAttempts; attempt++ {
		var ports []int
		ports, err = freePorts(nports)
		if err != nil {
			break
		}
		s.mu.Lock()
		s.ports = ports
		s.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
		var p *proc
		p, err = s.startLocked()
		s.mu.Unlock()
		if err != nil {
			break
		}
		err = s.waitReady(ctx, p)
		if err == nil {
			return nil
		}
		s.mu.Lock()
		_ = s.killLocked()
		s.mu.Unlock()
		if !errors.Is(err, errAddrInUse) || ctx.Err() != nil {
			break
		}
	}
	_ = s.Stop()
	return err
}

// newServer prepares a Server in dir (a new temporary directory if dir is
// empty).
func newServer(kind, dir string) (*Server, error) {
	s := &Server{kind: kind}
	if dir == "" {
		d, err := os.MkdirTemp("", "distlock-"+kind+"-")
		if err != nil {
			return nil, err
		}
		dir = d
		s.ownsDir = true
		s.cleanup = append(s.cleanup, func() { _ = os.RemoveAll(d) })
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	s.dir = abs
	s.logPath = filepath.Join(abs, kind+".log")
	return s, nil
}

// external returns a non-controllable Server for addr.
func externalServer(kind, addr string, probe func(ctx context.Context, addr string) error) *Server {
	s := &Server{kind: kind, external: true, addr: addr}
	s.probe = func(ctx context.Context) error { return probe(ctx, addr) }
	return s
}

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

// Cluster is a group of servers forming one Redis Cluster or ZooKeeper
// ensemble.
type Cluster struct {
	// Servers are the members, in node order.
	Servers []*Server

	cleanup     func() // removes the directory the cluster created, if any
	cleanupOnce sync.Once
}

// Addrs returns the client addresses of all members.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Servers))
	for i, s := range c.Servers {
		out[i] = s.Addr()
	}
	return out
}

// Stop stops all members in parallel and returns their errors joined.
func (c *Cluster) Stop() error {
	errs := make([]error, len(c.Servers))
	var wg sync.WaitGroup
	for i, s := range c.Servers {
		wg.Go(func() { errs[i] = s.Stop() })
	}
	wg.Wait()
	if c.cleanup != nil {
		c.cleanupOnce.Do(c.cleanup)
	}
	return errors.Join(errs...)
}

// WaitReady waits until every member is ready (see Server.WaitReady).
func (c *Cluster) WaitReady(ctx context.Context) error {
	errs := make([]error, len(c.Servers))
	var wg sync.WaitGroup
	for i, s := range c.Servers {
		wg.Go(func() { errs[i] = s.WaitReady(ctx) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Controllable reports whether all members are local processes.
func (c *Cluster) Controllable() bool {
	for _, s := range c.Servers {
		if !s.Controllable() {
			return false
		}
	}
	return len(c.Servers) > 0
}
