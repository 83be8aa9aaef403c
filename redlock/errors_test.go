package redlock

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend"
)

// reply is an error reply of a Redis server, as go-redis returns it.
type reply string

func (r reply) Error() string { return string(r) }
func (reply) RedisError()     {}

var _ goredis.Error = reply("")

// TestErrorCode: one node's errors, raw or as a *NodeError, get the code
// the root's outage patterns gave them ("LOADING ", "READONLY ",
// "MASTERDOWN ", "TRYAGAIN ", "CLUSTERDOWN ", "BUSY ", "connection
// refused", "i/o timeout"), so that the root can stop matching messages.
func TestErrorCode(t *testing.T) {
	d := offlineDriver(t)
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}
	for _, c := range []struct {
		err  error
		want backend.Code
	}{
		{reply("LOADING Redis is loading the dataset in memory"), backend.CodeTransient},
		{reply("READONLY You can't write against a read only replica."), backend.CodeTransient},
		{reply("MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."), backend.CodeTransient},
		{reply("TRYAGAIN Multiple keys request during rehashing of slot"), backend.CodeTransient},
		{reply("CLUSTERDOWN The cluster is down"), backend.CodeTransient},
		{reply("BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSCRIPT."), backend.CodeTransient},
		{refused, backend.CodeTransient},
		{errors.New("dial tcp 127.0.0.1:1: connect: connection refused"), backend.CodeTransient},
		{&net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}, backend.CodeTransient},
		{errors.New("read tcp 127.0.0.1:5->127.0.0.1:6379: i/o timeout"), backend.CodeTransient},
		{fmt.Errorf("%w: %w", backend.ErrUnavailable, &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}), backend.CodeTransient},
		{goredis.ErrPoolTimeout, backend.CodeTransient},
		{&NodeError{Addr: "h:1", Err: fmt.Errorf("%w: %w (%v)", backend.ErrUnavailable, errNoAnswer, "50ms")}, backend.CodeTransient},
		{&NodeError{Addr: "h:1", Err: fmt.Errorf("%w: %w", backend.ErrUnavailable, reply("LOADING Redis is loading"))}, backend.CodeTransient},
		{reply("WRONGPASS invalid username-password pair or user is disabled."), backend.CodeAuth},
		{reply("NOAUTH Authentication required."), backend.CodeAuth},
		{reply("NOPERM User has no permissions to run the 'evalsha' command"), backend.CodeAuth},
		{reply("OOM command not allowed when used memory > 'maxmemory'."), backend.CodeUnavailable},
		{goredis.ErrNoScript, backend.CodeUnavailable},
		{&NodeError{Addr: "h:1", Err: fmt.Errorf("%w: %w", backend.ErrUnavailable, reply("WRONGPASS invalid"))}, backend.CodeAuth},
		{x509.UnknownAuthorityError{}, backend.CodeUnavailable},
		{&net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "nohost.invalid", IsNotFound: true}}, backend.CodeUnavailable},
		{goredis.ErrClosed, backend.CodeClosed},
		{errDriverClosed, backend.CodeClosed},
		{reply("NOREPLICAS Not enough good replicas to write."), backend.CodeTransient},
		{reply("ERR max number of clients reached"), backend.CodeTransient},
		{reply("WRONGTYPE Operation against a key holding the wrong kind of value"), backend.CodeUnknown},
		{&NodeError{Addr: "h:1", Err: fmt.Errorf("redis key of the lock holds a value of another type: %w", reply("WRONGTYPE Operation"))}, backend.CodeUnknown},
		{errors.New("something else"), backend.CodeUnavailable},
	} {
		if got := d.ErrorCode(c.err); got != c.want {
			t.Errorf("ErrorCode(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// TestLostQuorumCode: a quorum lost to node failures is transient unless
// the nodes that failed for good (here: refused credentials) are too many
// for a quorum once the others recover; the error says so to errors.Is,
// backend.IsTransient and ErrorCode, on one line.
func TestLostQuorumCode(t *testing.T) {
	d := offlineNodes(t, 5)
	lasting := func(i int) nodeResult {
		return nodeResult{i: i, out: failed, nerr: &NodeError{Addr: d.nodes[i].addr, Err: fmt.Errorf("%w: %w", backend.ErrUnavailable, reply("WRONGPASS invalid"))}}
	}
	passing := func(i int) nodeResult {
		return nodeResult{i: i, out: failed, nerr: &NodeError{Addr: d.nodes[i].addr, Err: fmt.Errorf("%w: %w", backend.ErrUnavailable, reply("LOADING Redis is loading"))}}
	}
	ok := func(i int) nodeResult { return nodeResult{i: i, out: yes} }
	for name, c := range map[string]struct {
		rs   []nodeResult
		want backend.Code
	}{
		"3 loading":            {[]nodeResult{ok(0), ok(1), passing(2), passing(3), passing(4)}, backend.CodeTransient},
		"2 auth, 1 loading":    {[]nodeResult{ok(0), ok(1), lasting(2), lasting(3), passing(4)}, backend.CodeTransient},
		"3 auth":               {[]nodeResult{ok(0), ok(1), lasting(2), lasting(3), lasting(4)}, backend.CodeAuth},
		"3 auth, 2 loading":    {[]nodeResult{passing(0), passing(1), lasting(2), lasting(3), lasting(4)}, backend.CodeAuth},
		"1 auth, 2 no answers": {[]nodeResult{ok(0), ok(1), lasting(2)}, backend.CodeTransient},
	} {
		r := &round{d: d, f: &fanout{expired: true, got: make([]bool, 5)}, rs: c.rs}
		for _, x := range c.rs {
			r.f.got[x.i] = true
		}
		err := r.unavailable("acquire")
		if !errors.Is(err, distlock.ErrUnavailable) || backend.IsTransient(err) != (c.want == backend.CodeTransient) || d.ErrorCode(err) != c.want {
			t.Errorf("%s: %v (transient %v, code %v), want ErrUnavailable of code %v", name, err, backend.IsTransient(err), d.ErrorCode(err), c.want)
		}
		if msg := err.Error(); strings.ContainsAny(msg, "\n\r") || strings.Count(msg, "node 127.0.0.1:") != 5 {
			t.Errorf("%s: error not one line naming the 5 nodes: %q", name, msg)
		}
		var ne *NodeError
		if !errors.As(err, &ne) {
			t.Errorf("%s: no *NodeError reachable in %v", name, err)
		}
	}
}
