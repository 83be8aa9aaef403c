package testserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
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
// but nothing is answered until Resume. On Linux it returns once every
// thread of the server has stopped (at most 2 s): a thread caught in the
// middle of a reply would otherwise still send it.
func (s *Server) Pause() error {
	if err := s.signal(syscall.SIGSTOP); err != nil {
		return err
	}
	s.mu.Lock()
	p := s.p
	s.mu.Unlock()
	if p != nil {
		waitStopped(p.cmd.Process.Pid, 2*time.Second)
	}
	return nil
}

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
