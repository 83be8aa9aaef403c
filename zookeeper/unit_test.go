package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend"
)

const testGUID = "0123456789abcdef0123456789abcdef"

// name formats a lock node name as ZooKeeper does: the parent's cversion,
// a signed 32-bit int, with %010d (checked against Java's String.format:
// 2147483647 is followed by "-2147483648", -1 is "-000000001").
func name(guid string, seq int32) string {
	return protectedPrefix + guid + lockInfix + javaFormat010d(seq)
}

func javaFormat010d(v int32) string {
	if v < 0 {
		s := strconv.FormatInt(-int64(v), 10)
		if len(s) < 9 {
			s = strings.Repeat("0", 9-len(s)) + s
		}
		return "-" + s
	}
	return fmt.Sprintf("%010d", v)
}

func TestJavaFormat(t *testing.T) {
	for v, want := range map[int32]string{7: "0000000007", -1: "-000000001", 2147483647: "2147483647", -2147483648: "-2147483648", 0: "0000000000"} {
		if got := javaFormat010d(v); got != want {
			t.Errorf("%d: %q, want %q", v, got, want)
		}
	}
}

func TestOrderAcrossWrap(t *testing.T) {
	g := func(i int) string { return fmt.Sprintf("%032x", i) }
	// Creation order across the wrap of the parent's cversion.
	seqs := []int32{2147483645, 2147483646, 2147483647, -2147483648, -2147483647, -2147483646}
	var want, children []string
	for i, s := range seqs {
		n := name(g(i), s)
		want = append(want, n)
		children = append(children, n)
	}
	foreign := []string{
		"foo", "lock-0000000001", "_c_XYZ-lock-0000000001", "_c_" + strings.ToUpper(testGUID) + "-lock-0000000001",
		"_c_" + g(98) + "-lock-abc", "_c_" + g(97) + "-lock-99999999999", "_c_" + g(96) + "-lock-", "_c_" + g(95) + "-read-0000000001",
		"_c_" + g(94)[:31] + "-lock-0000000001", "x_c_" + g(93) + "-lock-0000000001",
	}
	children = append(children, foreign...)
	for round := 0; round < 20; round++ {
		shuffled := slices.Clone(children)
		sort.Slice(shuffled, func(i, j int) bool { return (i*7+j*13+round)%3 == 0 })
		var got []string
		for _, m := range order(shuffled) {
			got = append(got, m.name)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("order = %v\nwant    %v", got, want)
		}
	}
	// A naive numeric order puts the wrapped ones first: the holder
	// would be a later arrival.
	naive := slices.Clone(seqs)
	slices.Sort(naive)
	if naive[0] == seqs[0] {
		t.Fatalf("test data does not wrap")
	}
	// Around zero, and far from the wrap.
	small := []int32{-3, -2, -1, 0, 1, 2}
	var names []string
	for i, s := range small {
		names = append(names, name(g(i), s))
	}
	slices.Reverse(names)
	ms := order(names)
	for i, m := range ms {
		if m.seq != small[i] {
			t.Fatalf("order around zero: %v", ms)
		}
	}
}

func TestParseMember(t *testing.T) {
	m, ok := parseMember(name(testGUID, -2147483648))
	if !ok || m.seq != -2147483648 || m.guid != testGUID {
		t.Fatalf("parseMember = %+v %v", m, ok)
	}
	if _, ok := parseMember("_c_" + testGUID + "-lock-2147483648"); ok {
		t.Errorf("out-of-range sequence accepted")
	}
}

func TestSeqBefore(t *testing.T) {
	cases := []struct {
		a, b int32
		want bool
	}{
		{1, 2, true}, {2, 1, false}, {2147483647, -2147483648, true}, {-2147483648, 2147483647, false},
		{-1, 0, true}, {2147483000, -2147483000, true}, {5, 5, false},
	}
	for _, c := range cases {
		if got := seqBefore(c.a, c.b); got != c.want {
			t.Errorf("seqBefore(%d, %d) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}

func TestEncodeKey(t *testing.T) {
	keys := []string{
		"a", "A", "a ", " a", "a/b", "a%2Fb", "..", ".", "/", "🔒", "\uE000", "\U0010FFFD", "\x00", "a\x01b", "\x7f", "ключ",
		strings.Repeat("é", 512), strings.Repeat("x", 1024), strings.Repeat("p", 260) + "x", strings.Repeat("p", 260) + "y", "k-", "%",
	}
	seen := map[string]string{}
	for _, k := range keys {
		e := encodeKey(k)
		if prev, dup := seen[e]; dup {
			t.Errorf("%q and %q both encode to %q", prev, k, e)
		}
		seen[e] = k
		if e == "." || e == ".." || strings.Contains(e, "/") {
			t.Errorf("%q encodes to an unsafe component %q", k, e)
		}
		for i := 0; i < len(e); i++ {
			if e[i] <= 0x20 || e[i] >= 0x7f {
				t.Errorf("%q encodes to non-printable-ASCII %q", k, e)
				break
			}
		}
		if err := validateBasePath("/" + e); err != nil {
			t.Errorf("%q: %v", k, err)
		}
		if d, ok := decodeKey(e); !ok || d != k {
			t.Errorf("decodeKey(encodeKey(%q)) = %q, %v", k, d, ok)
		}
	}
}

func TestValidateBasePath(t *testing.T) {
	for _, p := range []string{"/distlock", "/a/b/c", "/a b", "/ключи", "/a.b", "/..a", "/zookeeperx", "/x/zookeeper"} {
		if err := validateBasePath(p); err != nil {
			t.Errorf("%q: %v", p, err)
		}
	}
	for _, p := range []string{"", "a", "/", "/a/", "//a", "/a//b", "/.", "/a/..", "/zookeeper", "/zookeeper/x", "/🔒", "/\uE000", "/a\x00", "/a\x1f", "/\u0085", "/\ufff0", "/bad\xff"} {
		if err := validateBasePath(p); !errors.Is(err, distlock.ErrInvalidOption) {
			t.Errorf("%q: %v, want ErrInvalidOption", p, err)
		}
	}
}

func TestBadOptions(t *testing.T) {
	if _, err := Dial(nil); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Errorf("Dial(nil) = %v", err)
	}
	bad := []struct {
		name string
		opt  Option
	}{
		{"WithSessionTimeout(0s)", WithSessionTimeout(0)}, {"WithSessionTimeout(-1s)", WithSessionTimeout(-time.Second)},
		{"WithSessionMargin(-1ns)", WithSessionMargin(-1)}, {"WithLossPolicy(7)", WithLossPolicy(7)}, {"WithACL([])", WithACL(nil)},
		{"WithConnectTimeout(0s)", WithConnectTimeout(0)}, {`WithBasePath("relative")`, WithBasePath("relative")},
	}
	for _, o := range bad {
		if _, err := Dial([]string{"127.0.0.1:1"}, o.opt); !errors.Is(err, distlock.ErrInvalidOption) || !strings.Contains(err.Error(), o.name) {
			t.Errorf("Dial with %s = %v, want ErrInvalidOption naming it", o.name, err)
		}
		if _, _, err := Connect([]string{"127.0.0.1:1"}, o.opt); !errors.Is(err, distlock.ErrInvalidOption) {
			t.Errorf("Connect with %s = %v, want ErrInvalidOption", o.name, err)
		}
	}
	if _, _, err := Connect(nil); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Errorf("Connect(nil) = %v", err)
	}
	// New checks at once: nil conn, every option value, and a session
	// timeout it cannot read back are errors of New, not of later
	// acquisitions.
	if l, err := New(nil); !errors.Is(err, distlock.ErrInvalidOption) || l != nil {
		t.Errorf("New(nil) = %v, %v, want ErrInvalidOption", l, err)
	}
	conn, _, err := zk.Connect([]string{"127.0.0.1:1"}, time.Second, zk.WithLogger(DiscardLogger))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// Not made by Connect, no WithSessionTimeout.
	if l, err := New(conn); !errors.Is(err, distlock.ErrInvalidOption) || !strings.Contains(err.Error(), "WithSessionTimeout") || l != nil {
		t.Errorf("New(plain conn) = %v, %v, want ErrInvalidOption naming WithSessionTimeout", l, err)
	}
	for _, o := range bad {
		if l, err := New(conn, WithSessionTimeout(time.Second), o.opt); !errors.Is(err, distlock.ErrInvalidOption) || !strings.Contains(err.Error(), o.name) || strings.Contains(err.Error(), "\n") {
			t.Errorf("New with %s = %v, %v, want ErrInvalidOption naming it on one line", o.name, l, err)
		}
	}
	// A bad default acquisition option: the error an acquisition would
	// have returned, at construction (distlock.CheckOptions).
	if l, err := New(conn, WithSessionTimeout(time.Second), WithDefaults(distlock.WithTTL(-time.Second))); !errors.Is(err, distlock.ErrInvalidTTL) || l != nil {
		t.Errorf("New with WithDefaults(WithTTL(-1s)) = %v, %v, want ErrInvalidTTL", l, err)
	}
	if _, err := Dial([]string{"127.0.0.1:1"}, WithDefaults(distlock.WithOwner(""))); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Errorf("Dial with WithDefaults(WithOwner(\"\")) = %v, want ErrInvalidOption", err)
	}
	l, err := New(conn, WithSessionTimeout(time.Second))
	if err != nil {
		t.Fatalf("New(plain conn, WithSessionTimeout): %v", err)
	}
	if err := l.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

func TestBadURLs(t *testing.T) {
	ctx := context.Background()
	for _, u := range []string{
		"zookeeper://", "zookeeper:///x", "zookeeper://:2181/x", "zookeeper://h:99999/x", "zookeeper://h:0/x", "zookeeper://h:-1/x",
		"zookeeper://h:2181,,h2/x", "zookeeper://[::1/x", "zookeeper:opaque", "zookeeper://u:p@h/x", "zookeeper://h/x#f",
		"zookeeper://h/a//b", "zookeeper://h/a/", "zookeeper://h/./a", "zookeeper://h/zookeeper", "zookeeper://h/%F0%9F%94%92",
		"zookeeper://h/x?session_timeout=", "zookeeper://h/x?session_timeout=-1s", "zookeeper://h/x?session_timeout=1",
		"zookeeper://h/x?session_margin=x", "zookeeper://h/x?session_timeout=4s&session_margin=2s", "zookeeper://h/x?loss_policy=",
		"zookeeper://h/x?connect_timeout=0s", "zookeeper://h/x?log=maybe", "zookeeper://h/x?unknown=1", "zk://h/x?session_timeout=1s&session_timeout=2s",
	} {
		l, err := distlock.Open(ctx, u)
		if err == nil {
			_ = l.Close()
			t.Errorf("Open(%q) succeeded", u)
			continue
		}
		if !errors.Is(err, distlock.ErrInvalidOption) {
			t.Errorf("Open(%q) = %v, want ErrInvalidOption", u, err)
		}
		var de *distlock.Error
		if !errors.As(err, &de) {
			t.Errorf("Open(%q) = %T, want *distlock.Error", u, err)
		}
	}
	// Good URLs open without connecting (acquisitions connect).
	for _, u := range []string{
		"zookeeper://127.0.0.1:1", "zk://127.0.0.1:1/", "zookeeper://127.0.0.1:1,127.0.0.1:2/a/b?session_timeout=4s&session_margin=500ms&loss_policy=disconnect&connect_timeout=1s&log=false",
		"zookeeper://[::1]:1/x", "zookeeper://localhost/x",
	} {
		l, err := distlock.Open(ctx, u)
		if err != nil {
			t.Errorf("Open(%q): %v", u, err)
			continue
		}
		if caps := l.Capabilities(); !caps.Fencing || caps.Expiring || !caps.SessionBound {
			t.Errorf("capabilities %+v", caps)
		}
		_ = l.Close()
	}
}

// TestErrorCode: go-zookeeper's connection errors (every message the
// root's outage patterns knew: "zk: could not connect", "zk: connection
// closed", "zk: no server") and the driver's own "no session in time" are
// transient; refused credentials and a closed *zk.Conn are not.
func TestErrorCode(t *testing.T) {
	d := &driver{}
	cases := []struct {
		err  error
		want backend.Code
	}{
		{zk.ErrConnectionClosed, backend.CodeTransient},
		{zk.ErrNoServer, backend.CodeTransient},
		{zk.ErrNothing, backend.CodeTransient},
		{zk.ErrSessionExpired, backend.CodeTransient},
		{zk.ErrSessionMoved, backend.CodeTransient},
		{fmt.Errorf("context: %w", zk.ErrNoServer), backend.CodeTransient},
		{errRestart, backend.CodeTransient},
		{fmt.Errorf("%w within 1s (client state StateConnecting)", errNoSession), backend.CodeTransient},
		{fmt.Errorf("%w under /x 10 times: %w", errCreateFailed, zk.ErrNoNode), backend.CodeTransient},
		{&net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, backend.CodeTransient},
		{zk.ErrNoAuth, backend.CodeAuth},
		{zk.ErrAuthFailed, backend.CodeAuth},
		{zk.ErrInvalidACL, backend.CodeMisconfigured},
		{zk.ErrClosing, backend.CodeUnavailable},
		{zk.ErrNoNode, backend.CodeUnknown},
		{zk.ErrBadArguments, backend.CodeUnknown},
		{errors.New("something else"), backend.CodeUnknown},
	}
	for _, c := range cases {
		if got := d.ErrorCode(c.err); got != c.want {
			t.Errorf("ErrorCode(%v) = %v, want %v", c.err, got, c.want)
		}
	}
	for _, pattern := range []string{"zk: could not connect", "zk: connection closed", "zk: no server"} {
		for _, e := range []error{zk.ErrNoServer, zk.ErrConnectionClosed, zk.ErrNothing} {
			if strings.Contains(e.Error(), pattern) && d.ErrorCode(e) != backend.CodeTransient {
				t.Errorf("%q (%v) not transient", pattern, e)
			}
		}
	}
	var _ backend.ErrorClassifier = d
}

// TestCtxErrorShape: a request cut off by its ctx returns the ctx error
// with its cause, and also ErrUnavailable naming the client's state when
// the client was not connected.
func TestCtxErrorShape(t *testing.T) {
	cause := errors.New("closing")
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(cause)
	conn, _, err := zk.Connect([]string{"127.0.0.1:1"}, time.Second, zk.WithLogger(DiscardLogger))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, c := range []struct {
		conn        *zk.Conn
		unavailable bool
	}{{nil, false}, {conn, true}} {
		err := ctxError(ctx, c.conn)
		if !errors.Is(err, context.Canceled) || !errors.Is(err, cause) || errors.Is(err, distlock.ErrUnavailable) != c.unavailable {
			t.Errorf("ctxError(conn %v) = %v, want Canceled, its cause, ErrUnavailable %v", c.conn != nil, err, c.unavailable)
		}
		if c.unavailable && !strings.Contains(err.Error(), "zookeeper client State") {
			t.Errorf("ctxError of a disconnected client = %v, want its state", err)
		}
	}
}
