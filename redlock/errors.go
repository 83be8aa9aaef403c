package redlock

import (
	"context"
	"errors"
	"fmt"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/async"
	"github.com/distlock/distlock/internal/redislua"
)

// NodeError is the failure of one Redis master in a quorum operation. The
// error of an operation without a quorum joins the NodeErrors of the nodes
// that failed, so errors.As reaches each of them and, through Err,
// go-redis's own error.
type NodeError struct {
	// Addr is the node's address (host:port), or "#i" for the i-th client
	// of New whose address is unknown.
	Addr string
	// Err is the cause. It wraps distlock.ErrUnavailable for I/O errors,
	// timeouts and error replies such as LOADING, READONLY or OOM.
	Err error
}

// Error says which node failed and why: "node host:port: cause".
func (e *NodeError) Error() string { return "node " + e.Addr + ": " + e.Err.Error() }

// Unwrap returns Err.
func (e *NodeError) Unwrap() error { return e.Err }

var (
	errNotHeld      = fmt.Errorf("%w: released, expired, or held by another owner on a majority of the nodes", backend.ErrNotHeld)
	errDriverClosed = fmt.Errorf("%w: %w", backend.ErrUnavailable, backend.ErrClosed)
	// errNoAnswer: a node did not answer within the per-node timeout.
	errNoAnswer = errors.New("no answer within the per-node timeout")
)

// nodeError puts a node's failure into distlock's conventions, as a
// *NodeError: a caller's ctx that ended is kept (errors.Is(err, ctx.Err())
// holds); a node that ran out of its per-node time gets ErrUnavailable
// without the context error (the caller's ctx did not end); a WRONGTYPE
// reply (a foreign key under the lock's name) is explained; refused
// credentials wrap ErrAuth; every other failure wraps ErrUnavailable. The
// go-redis error stays reachable with errors.As, but for the per-node
// timeout.
func (d *driver) nodeError(ctx, nctx context.Context, n *node, err error) error {
	if err == nil {
		return nil
	}
	async.Settle(ctx, err)
	ctxErr := ctx.Err()
	if ctxErr == nil && !redislua.IsReply(err) && !errors.Is(err, errWithdrawn) {
		// Unreachable or too slow, not cancelled by the caller (nor
		// spared a request by an attempt decided without it).
		n.markDown(d)
	}
	switch {
	case ctxErr != nil && errors.Is(err, ctxErr):
	case ctxErr != nil: // the client's socket deadline, from ctx's
		err = fmt.Errorf("%w: %w: %w", backend.ErrUnavailable, err, ctxErr)
	case nctx.Err() != nil:
		err = fmt.Errorf("%w: %w (%v)", backend.ErrUnavailable, errNoAnswer, err)
	case goredis.HasErrorPrefix(err, "WRONGTYPE"):
		err = fmt.Errorf("redis key of the lock holds a value of another type (does another application use the key prefix?): %w", err)
	case redislua.ErrorCode(err) == backend.CodeAuth:
		err = fmt.Errorf("%w: %w", backend.ErrAuth, redislua.Explain(err))
	default:
		err = fmt.Errorf("%w: %w", backend.ErrUnavailable, err)
	}
	return &NodeError{Addr: n.addr, Err: err}
}

// unavailable is the error of an operation that could not reach a quorum
// because nodes failed: ErrUnavailable, transient unless the nodes that
// failed for good (refused credentials, TLS, configuration) leave too few
// for a quorum (see ErrorCode).
func (r *round) unavailable(what string) error {
	d, t := r.d, r.tally()
	return r.unavailableMsg(fmt.Sprintf("%s: %d of %d nodes succeeded, quorum is %d", what, t.yes, len(d.nodes), d.quorum))
}

// unavailableMsg is unavailable with the message msg before the nodes'
// outcomes.
func (r *round) unavailableMsg(msg string) error {
	o := r.outcomes()
	err := fmt.Errorf("%s: %w", msg, o)
	switch o.code {
	case backend.CodeTransient:
		return &backend.TransientError{Err: err}
	case backend.CodeAuth:
		return err // the nodes' errors wrap ErrAuth
	}
	return fmt.Errorf("%w: %w", backend.ErrUnavailable, err)
}

// outcomes says what every node answered by the decision, in node order,
// with the errors of the nodes that failed or timed out.
func (r *round) outcomes() nodeOutcomes {
	d := r.d
	o := nodeOutcomes{parts: make([]string, len(d.nodes))}
	for i, nd := range d.nodes {
		o.parts[i] = "node " + nd.addr + ": no answer yet when the attempt was decided"
	}
	for _, x := range r.rs {
		switch x.out {
		case failed:
			o.parts[x.i] = x.nerr.Error()
			o.errs = append(o.errs, x.nerr)
		case no:
			o.parts[x.i] = "node " + d.nodes[x.i].addr + ": refused (held by another owner)"
		default:
			o.parts[x.i] = "node " + d.nodes[x.i].addr + ": ok"
		}
	}
	for _, i := range r.f.timedOut() {
		ne := &NodeError{Addr: d.nodes[i].addr, Err: fmt.Errorf("%w: %w (%v)", backend.ErrUnavailable, errNoAnswer, r.deadline.Sub(r.started))}
		o.parts[i] = ne.Error()
		o.errs = append(o.errs, ne)
	}
	o.code = quorumCode(o.errs, len(d.nodes)-d.quorum)
	return o
}

// nodeOutcomes says what every node of one attempt answered, in the order
// of the nodes, on one line; it unwraps to the *NodeError of each node that
// failed, so errors.Is and errors.As see them.
type nodeOutcomes struct {
	parts []string
	errs  []error
	code  backend.Code // of the quorum lost to errs
}

func (o nodeOutcomes) Error() string   { return strings.Join(o.parts, "; ") }
func (o nodeOutcomes) Unwrap() []error { return o.errs }

// quorumCode is the code of a quorum lost to the node errors errs when
// spare nodes may fail without losing it: CodeTransient, unless more than
// spare nodes failed for a reason waiting will not cure.
func quorumCode(errs []error, spare int) backend.Code {
	lasting, auth := 0, 0
	for _, err := range errs {
		switch nodeCode(err) {
		case backend.CodeTransient:
		case backend.CodeAuth:
			lasting++
			auth++
		default:
			lasting++
		}
	}
	if auth > spare {
		return backend.CodeAuth // enough nodes refuse us to lose the quorum
	}
	if lasting > spare {
		return backend.CodeUnavailable
	}
	return backend.CodeTransient
}

// ErrorCode implements backend.ErrorClassifier. A quorum lost to node
// failures is CodeTransient, unless the nodes that failed for good leave
// too few for a quorum: CodeUnavailable. One node's error (a *NodeError, a
// go-redis error):
//
//   - CodeTransient: no answer within the per-node timeout, a refused,
//     reset or timed-out connection (any net.Error, io.EOF, "connection
//     refused", "i/o timeout"), a pool timeout, and the replies of a server
//     that is starting, failing over or busy: LOADING, READONLY,
//     MASTERDOWN, TRYAGAIN, CLUSTERDOWN, BUSY, NOREPLICAS, "max number of
//     clients reached";
//   - CodeAuth: refused credentials (NOAUTH, WRONGPASS, NOPERM); a quorum
//     lost to nodes that refuse them is CodeAuth too;
//   - CodeUnavailable, which waiting will not cure: a TLS handshake or certificate failure,
//     a host name that does not resolve, every other error reply (OOM,
//     MISCONF, ERR ...) and any other error;
//   - CodeClosed: a closed client or driver;
//   - CodeUnknown: a WRONGTYPE reply (a foreign key under the lock's name).
func (d *driver) ErrorCode(err error) backend.Code {
	var o nodeOutcomes
	if errors.As(err, &o) {
		return o.code
	}
	return nodeCode(err)
}

// nodeCode classifies one node's error (see ErrorCode).
func nodeCode(err error) backend.Code {
	switch {
	case err == nil:
		return backend.CodeUnknown
	case errors.Is(err, backend.ErrClosed):
		return backend.CodeClosed
	case errors.Is(err, errNoAnswer), errors.Is(err, context.DeadlineExceeded):
		return backend.CodeTransient
	}
	return redislua.ErrorCode(err) // go-redis and the server, as package redis classifies them
}
