package zookeeper

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/internal/testkit/testserver"
)

// containerCheckMs is the container reaper interval of the servers these
// tests start. testserver's zoo.cfg has no knob for it and the server reads
// it only as the system property znode.container.checkIntervalMs (a zoo.cfg
// line would become zookeeper.znode...): JAVA_TOOL_OPTIONS, which every JVM
// reads, carries it to the child processes.
const containerCheckMs = 300

func TestMain(m *testing.M) {
	conformance.ServeWorker()
	conformance.ParallelSuites(6) // TestConformance, TestConformanceDurable and four other parallel tests
	opt := fmt.Sprintf("-Dznode.container.checkIntervalMs=%d", containerCheckMs)
	if cur := os.Getenv("JAVA_TOOL_OPTIONS"); cur != "" {
		opt = cur + " " + opt
	}
	os.Setenv("JAVA_TOOL_OPTIONS", opt)
	code := m.Run()
	shared.stop()
	os.Exit(code)
}

// Servers shared by the tests of this package (started on first use,
// stopped by TestMain). With DISTLOCK_ZOOKEEPER_ADDRS set, external servers
// are used instead and fault tests skip.
var shared sharedServers

type sharedServers struct {
	mu       sync.Mutex
	single   *testserver.Server
	ensemble *testserver.Cluster
}

func (s *sharedServers) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.single != nil {
		_ = s.single.Stop()
	}
	if s.ensemble != nil {
		_ = s.ensemble.Stop()
	}
}

func external() bool { return os.Getenv(testserver.EnvZooKeeperAddrs) != "" }

// standalone returns the shared standalone server.
func standalone(t testing.TB) *testserver.Server {
	t.Helper()
	needServer(t)
	if external() {
		return testserver.ZooKeeper(t, testserver.ZooKeeperConfig{})
	}
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.single == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		s, err := testserver.StartZooKeeper(ctx, "", testserver.ZooKeeperConfig{})
		if err != nil {
			t.Fatalf("start zookeeper: %v", err)
		}
		shared.single = s
	}
	return shared.single
}

// ensemble returns the shared 3-node ensemble.
func ensemble(t testing.TB) *testserver.Cluster {
	t.Helper()
	needServer(t)
	if external() {
		return testserver.ZooKeeperEnsemble(t, 3, testserver.ZooKeeperConfig{})
	}
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.ensemble == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		c, err := testserver.StartZooKeeperEnsemble(ctx, "", 3, testserver.ZooKeeperConfig{})
		if err != nil {
			t.Fatalf("start zookeeper ensemble: %v", err)
		}
		shared.ensemble = c
	}
	return shared.ensemble
}

// needServer skips tests that need a ZooKeeper server under -short.
func needServer(t testing.TB) {
	t.Helper()
	testserver.SkipShort(t, "ZooKeeper")
}

func needControl(t testing.TB) {
	t.Helper()
	if external() {
		t.Skip("external ZooKeeper servers cannot be faulted")
	}
}

// adminConn is a plain client for inspecting and breaking things.
func adminConn(t testing.TB, addrs ...string) *zk.Conn {
	t.Helper()
	c, _, err := zk.Connect(addrs, 10*time.Second, zk.WithLogger(DiscardLogger), zk.WithLogInfo(false))
	if err != nil {
		t.Fatalf("zk.Connect: %v", err)
	}
	t.Cleanup(c.Close)
	waitFor(t, 30*time.Second, "admin session", func() bool { return c.State() == zk.StateHasSession })
	return c
}

// waitFor polls cond every 10ms until it holds or d passes.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// uniqueBase returns a base path private to one test.
func uniqueBase(t testing.TB) string {
	name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
	return fmt.Sprintf("/dltest/%s-%d", name, time.Now().UnixNano())
}

// faults is a zk.Dialer with fault injection: a blackhole (nothing passes
// either way, new dials time out, as in a network partition), refused
// dials, and a cut of the connection right after a lock-node create or
// read was sent (the request reaches the server, its answer is lost).
type faults struct {
	mu          sync.Mutex
	blackhole   bool
	refuseUntil time.Time
	cutCreates  int           // cut after this many more lock-node creates
	cutReads    int           // cut after this many more lock-node reads (getData)
	cutSyncs    int           // cut after this many more Syncs
	cutRefuse   time.Duration // refuse re-dials this long after a cut
	conns       []*faultConn
	cuts        int
}

func (f *faults) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	f.mu.Lock()
	bh, refuse := f.blackhole, time.Now().Before(f.refuseUntil)
	f.mu.Unlock()
	switch {
	case bh:
		time.Sleep(timeout)
		return nil, &net.OpError{Op: "dial", Net: network, Err: errors.New("i/o timeout (test blackhole)")}
	case refuse:
		return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
	}
	c, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		return nil, err
	}
	fc := &faultConn{Conn: c, f: f}
	f.mu.Lock()
	f.conns = append(f.conns, fc)
	f.mu.Unlock()
	return fc, nil
}

// setBlackhole partitions (true) or heals (false).
func (f *faults) setBlackhole(on bool) {
	f.mu.Lock()
	f.blackhole = on
	f.mu.Unlock()
}

func (f *faults) blackholed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.blackhole
}

// armCut makes the next lock-node create cut the connection and refuse
// re-dials for refuse.
func (f *faults) armCut(refuse time.Duration) {
	f.mu.Lock()
	f.cutCreates, f.cutRefuse = 1, refuse
	f.mu.Unlock()
}

// armCutRead makes the next read of a lock node's data (the one an attempt
// sends right after its create) cut the connection and refuse re-dials for
// refuse.
func (f *faults) armCutRead(refuse time.Duration) {
	f.mu.Lock()
	f.cutReads, f.cutRefuse = 1, refuse
	f.mu.Unlock()
}

// armCutSync makes the next Sync cut the connection and refuse re-dials
// for refuse.
func (f *faults) armCutSync(refuse time.Duration) {
	f.mu.Lock()
	f.cutSyncs, f.cutRefuse = 1, refuse
	f.mu.Unlock()
}

func (f *faults) cutCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cuts
}

type faultConn struct {
	net.Conn
	f        *faults
	mu       sync.Mutex
	writes   int
	dropping bool // cut: nothing more passes
}

func (c *faultConn) isDropping() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dropping
}

// ZooKeeper request opcodes the fault dialer recognises.
const (
	opCreate  = 1
	opGetData = 4
	opSync    = 9
)

// requestPath returns the path of a request with opcode op in one request
// frame (length, xid, opcode, path, …), false for another request.
func requestPath(p []byte, op int32) (string, bool) {
	if len(p) < 16 || int32(binary.BigEndian.Uint32(p[8:12])) != op {
		return "", false
	}
	n := int(binary.BigEndian.Uint32(p[12:16]))
	if n < 0 || 16+n > len(p) {
		return "", false
	}
	return string(p[16 : 16+n]), true
}

// isLockCreate recognises a create request for a lock node
// ("…/_c_<guid>-lock-").
func isLockCreate(p []byte) bool {
	path, ok := requestPath(p, opCreate)
	return ok && strings.Contains(path, "/_c_") && strings.HasSuffix(path, "-lock-")
}

// isSync recognises a Sync request.
func isSync(p []byte) bool {
	_, ok := requestPath(p, opSync)
	return ok
}

// isLockRead recognises a getData request for a lock node
// ("…/_c_<guid>-lock-<seq>").
func isLockRead(p []byte) bool {
	path, ok := requestPath(p, opGetData)
	return ok && strings.Contains(path, "/_c_") && strings.Contains(path, "-lock-")
}

func (c *faultConn) Write(p []byte) (int, error) {
	if c.f.blackholed() || c.isDropping() {
		return len(p), nil // lost on the way
	}
	c.mu.Lock()
	c.writes++
	first := c.writes == 1 // the connect request
	c.mu.Unlock()
	cut := false
	if !first {
		c.f.mu.Lock()
		var armed *int
		switch {
		case isLockCreate(p):
			armed = &c.f.cutCreates
		case isLockRead(p):
			armed = &c.f.cutReads
		case isSync(p):
			armed = &c.f.cutSyncs
		}
		if armed != nil && *armed > 0 {
			*armed--
			c.f.cuts++
			c.f.refuseUntil = time.Now().Add(c.f.cutRefuse)
			cut = true
		}
		c.f.mu.Unlock()
	}
	n, err := c.Conn.Write(p)
	if cut {
		// Let the server apply the request, drop its answer, then cut.
		c.mu.Lock()
		c.dropping = true
		c.mu.Unlock()
		time.AfterFunc(150*time.Millisecond, func() { _ = c.Conn.Close() })
	}
	return n, err
}

func (c *faultConn) Read(p []byte) (int, error) {
	for {
		n, err := c.Conn.Read(p)
		if err != nil || !(c.f.blackholed() || c.isDropping()) {
			return n, err
		}
		// blackholed: the bytes never arrive
	}
}

// lockNodes lists the lock nodes under the parent of key.
func lockNodes(t testing.TB, admin *zk.Conn, base, key string) []string {
	t.Helper()
	children, _, err := admin.Children(base + "/" + encodeKey(key))
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	if err != nil {
		t.Fatalf("Children: %v", err)
	}
	var out []string
	for _, m := range order(children) {
		out = append(out, m.name)
	}
	return out
}

// srvrMode returns the "Mode:" of a server's srvr four-letter word.
func srvrMode(addr string) (string, error) {
	out, err := fourLetterWord(addr, "srvr")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(out, "\n") {
		if m, ok := strings.CutPrefix(line, "Mode: "); ok {
			return strings.TrimSpace(m), nil
		}
	}
	return "", fmt.Errorf("no mode in %q", out)
}

// fourLetterWord sends a four-letter word to addr and returns the answer.
func fourLetterWord(addr, word string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte(word)); err != nil {
		return "", err
	}
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := c.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			return b.String(), nil
		}
	}
}

// cutNow resets every open connection and refuses re-dials for refuse.
func (f *faults) cutNow(refuse time.Duration) {
	f.mu.Lock()
	f.refuseUntil = time.Now().Add(refuse)
	conns := f.conns
	f.conns = nil
	f.mu.Unlock()
	for _, c := range conns {
		if tc, ok := c.Conn.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = c.Conn.Close()
	}
}

// dialT opens a Locker on addrs that is closed when the test ends.
func dialT(t testing.TB, addrs []string, opts ...Option) *distlock.Locker {
	t.Helper()
	l, err := Dial(addrs, append([]Option{WithLogger(DiscardLogger)}, opts...)...)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// warm makes l establish its session.
func warm(t testing.TB, l *distlock.Locker) {
	t.Helper()
	lease, err := l.TryAcquire(ctxT(t, 30*time.Second), "warm-up/"+t.Name())
	if err != nil {
		t.Fatalf("warm-up: %v", err)
	}
	if err := lease.Release(ctxT(t, 10*time.Second)); err != nil {
		t.Fatalf("warm-up release: %v", err)
	}
}

// contactSince reports whether l's current session has been in touch with
// the ensemble since t, on a live connection.
func contactSince(l *distlock.Locker, t time.Time) bool {
	s := driverOf(l).current()
	if s == nil || s.conn.State() != zk.StateHasSession {
		return false
	}
	driverOf(l).mu.Lock()
	defer driverOf(l).mu.Unlock()
	return s.lastContactLocked().After(t)
}

// connState describes the driver's connection, for failure messages.
func (d *driver) connState() string {
	d.mu.Lock()
	conn := d.conn
	d.mu.Unlock()
	if conn == nil {
		return "no connection"
	}
	return fmt.Sprintf("%v session 0x%x", conn.State(), conn.SessionID())
}
