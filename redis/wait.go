package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/async"
	"github.com/distlock/distlock/internal/redislua"
)

// ErrNotReplicated is the error (wrapping distlock.ErrUnavailable) of an
// acquisition or refresh that WithWaitReplicas could not confirm: fewer
// replicas than required acknowledged it within the timeout, or the hold
// was no longer on the node that answered. An acquisition so reported
// holds nothing: its grant is released. A refresh so reported may have
// extended the lock on the primary, but counts for nothing: an
// auto-refreshed lease is lost when its validity runs out without a
// confirmed refresh.
var ErrNotReplicated = fmt.Errorf("%w: redis: not confirmed by enough replicas (WAIT)", backend.ErrUnavailable)

// Limits of WithWaitReplicas.
const (
	maxWaitReplicas = 100
	maxWaitTimeout  = time.Minute
)

// waitPolicy is WithWaitReplicas's setting; n 0: off.
type waitPolicy struct {
	n       int
	timeout time.Duration
}

// WithWaitReplicas makes every lock acquisition and refresh wait, before
// it is reported, until at least n replicas of the primary that granted it
// have acknowledged it (Redis's WAIT n timeout, on the connection of a
// write that follows the grant in the replication stream). A grant not
// acknowledged by n replicas within timeout is released and reported as
// ErrNotReplicated; so is a refresh, which then does not count.
//
// What it guarantees: a lease the Locker reports was, at that moment, on
// the primary and on n replicas; a failover that promotes one of those
// replicas keeps the lock, and its fencing counter at or above the
// lease's token, so tokens do not go backwards. With n equal to the
// number of replicas, every replica that can be promoted has it.
//
// What it does not: WAIT is not consensus. A failover that promotes a
// replica which did not acknowledge (n below the number of replicas, or a
// replica that lost its data in a restart without persistence) can still
// grant the lock again and reissue tokens; the acknowledgement is of the
// replica's memory, not of its disk; and a grant reported not replicated
// may still have reached a replica (it is released, owner-checked, on the
// primary). Each acquisition and refresh costs one more round trip, plus
// the replicas' acknowledgement delay. The timeout must be shorter than
// the client's ReadTimeout (5s by default), and the client a
// *goredis.Client (a Sentinel failover client is one) or a
// *goredis.ClusterClient: New refuses others. Semaphore permits are not
// confirmed. n 0 turns it off; n must be at most 100 and timeout in
// [1ms, 1m].
func WithWaitReplicas(n int, timeout time.Duration) Option {
	return func(c *config) {
		if n < 0 || n > maxWaitReplicas {
			c.invalid("WithWaitReplicas(%d, %v): n must be in [0, %d]", n, timeout, maxWaitReplicas)
		}
		if n > 0 && (timeout < time.Millisecond || timeout > maxWaitTimeout) {
			c.invalid("WithWaitReplicas(%d, %v): timeout must be in [1ms, %v]", n, timeout, maxWaitTimeout)
		}
		c.wait = waitPolicy{n: n, timeout: timeout}
	}
}

// confirmScript rewrites hold ARGV[3]'s field with its own value if ARGV[1]
// holds KEYS[1] with token ARGV[2] ("0": not checked) and that hold, so
// that the connection has a write after the grant in the replication
// stream for WAIT to wait for (WAIT waits for the connection's own last
// write). 1: held and rewritten; 0: not held, nothing written.
const confirmScript = `
local v = redis.call('HMGET', KEYS[1], 'o', 't', ARGV[3])
if v[1] ~= ARGV[1] or not v[3] or (ARGV[2] ~= '0' and v[2] ~= ARGV[2]) then
	return 0
end
redis.call('HSET', KEYS[1], ARGV[3], v[3])
return 1
`

// checkWait refuses a client WithWaitReplicas cannot confirm on (the
// write and the WAIT must go to the node that holds the lock, on one
// connection) and a wait timeout the client's read timeout would cut
// short.
func checkWait(client goredis.UniversalClient, w waitPolicy) error {
	if w.n == 0 {
		return nil
	}
	var readTimeout time.Duration // as go-redis normalized it: 0 or less, none
	switch c := client.(type) {
	case *goredis.Client:
		readTimeout = c.Options().ReadTimeout
	case *goredis.ClusterClient:
		readTimeout = c.Options().ReadTimeout
	default:
		return fmt.Errorf("%w: redis: WithWaitReplicas needs a *goredis.Client (a Sentinel failover client is one) or a *goredis.ClusterClient, got %T", backend.ErrInvalidOption, client)
	}
	if readTimeout > 0 && w.timeout >= readTimeout {
		return fmt.Errorf("%w: redis: WithWaitReplicas timeout %v (%s) must be below the client's read timeout (%v, read_timeout): the reply to WAIT comes after it", backend.ErrInvalidOption, w.timeout, paramWaitTimeout, readTimeout)
	}
	return nil
}

// nodeFor returns the client of the node that serves key: the client
// itself, or the Cluster master of key's slot (as the client's slot map
// has it; a stale map shows as a MOVED error, and the confirmation fails).
func nodeFor(ctx context.Context, client goredis.UniversalClient, key string) (*goredis.Client, error) {
	switch c := client.(type) {
	case *goredis.ClusterClient:
		return c.MasterForKey(ctx, key)
	case *goredis.Client:
		return c, nil
	}
	return nil, fmt.Errorf("%w: redis: WithWaitReplicas: %T", errors.ErrUnsupported, client)
}

// confirm waits, as WithWaitReplicas says, until the hold of l is on
// enough replicas; nil at once when the option is off.
func (d *driver) confirm(ctx context.Context, l *lock) error {
	if d.wait.n == 0 {
		return nil
	}
	run := func(ctx context.Context) (int64, error) {
		node, err := nodeFor(ctx, d.client, l.keys.Lock)
		if err != nil {
			return 0, err
		}
		pipe := node.Pipeline()
		held := pipe.Eval(ctx, confirmScript, []string{l.keys.Lock}, l.owner, strconv.FormatUint(l.token, 10), l.hold)
		acks := pipe.Do(ctx, "WAIT", d.wait.n, d.wait.timeout.Milliseconds())
		if _, err := pipe.Exec(ctx); err != nil {
			if herr := held.Err(); herr != nil {
				return 0, herr
			}
			return 0, err
		}
		if held.Val() != int64(1) {
			return -1, nil
		}
		return acks.Int64()
	}
	var (
		n   int64
		err error
	)
	if ctx.Done() == nil {
		n, err = run(ctx)
	} else {
		n, _, err = async.Call(d.bg.Group(), ctx, run, nil)
	}
	switch {
	case err != nil:
		return redislua.OpError(ctx, err)
	case n < 0:
		return errConfirmNotHeld
	case n < int64(d.wait.n):
		return fmt.Errorf("%w: %d of %d replicas acknowledged within %v", ErrNotReplicated, n, d.wait.n, d.wait.timeout)
	}
	return nil
}

// errConfirmNotHeld: the node that answered the confirmation does not
// have the hold (it expired, or the node is a promoted replica that never
// had it).
var errConfirmNotHeld = fmt.Errorf("%w: the hold is not on the node that answered (expired, or failed over before it was replicated)", ErrNotReplicated)

// confirmRefresh confirms a refresh of l: ErrNotHeld (and not
// ErrUnavailable, which a refresher would wait out) if the hold is gone.
func (d *driver) confirmRefresh(ctx context.Context, l *lock) error {
	err := d.confirm(ctx, l)
	if errors.Is(err, errConfirmNotHeld) {
		return fmt.Errorf("%w: the hold is not on the node that confirmed the refresh (failed over before it was replicated?)", errNotHeld)
	}
	return err
}

// confirmGrant confirms a new grant of l; one not confirmed is released
// in the background, owner-checked, and its error returned.
func (d *driver) confirmGrant(ctx context.Context, l *lock, req backend.Request) error {
	err := d.confirm(ctx, l)
	if err == nil {
		return nil
	}
	d.undo(l.keys, req, l.hold, false, false)
	if errors.Is(err, ErrNotReplicated) {
		return err
	}
	// The confirmation itself failed: the grant is given up all the same.
	return fmt.Errorf("%w: %w", ErrNotReplicated, err)
}

// defaultWaitTimeout is wait_timeout's default.
const defaultWaitTimeout = 500 * time.Millisecond

// waitOption reads wait_replicas= and wait_timeout=: nil when
// wait_replicas is absent (wait_timeout alone is an error).
func waitOption(p *backend.Params) (Option, error) {
	if !p.Has(paramWaitReplicas) {
		if p.Has(paramWaitTimeout) {
			return nil, fmt.Errorf("%w: parameter %s without %s", backend.ErrInvalidOption, paramWaitTimeout, paramWaitReplicas)
		}
		return nil, nil
	}
	n := backend.Parse(p, paramWaitReplicas, 0, strconv.Atoi)
	timeout := backend.Parse(p, paramWaitTimeout, defaultWaitTimeout, time.ParseDuration)
	return WithWaitReplicas(n, timeout), nil
}
