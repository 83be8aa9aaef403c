package redis

import (
	"errors"
	"fmt"

	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/redislua"
	goredis "github.com/redis/go-redis/v9"
)

// ErrorCode implements backend.ErrorClassifier: the driver returns
// go-redis's errors raw, and the classification is redislua.ErrorCode,
// which Redlock's nodes share (transient: refused, reset or timed-out
// connections, pool timeouts, LOADING, READONLY, MASTERDOWN, TRYAGAIN,
// CLUSTERDOWN, BUSY, and for a Cluster client ASK and MOVED; auth: NOAUTH, WRONGPASS, NOPERM; unavailable: TLS failures, other
// error replies; closed: a closed client), plus the TLS handshake failure
// of the URL opener's dialer (unavailable: waiting will not cure it).
func (d *driver) ErrorCode(err error) backend.Code {
	var te *tlsError
	if errors.As(err, &te) {
		return backend.CodeUnavailable
	}
	if _, cluster := d.client.(*goredis.ClusterClient); cluster && redislua.IsRedirect(err) {
		return backend.CodeTransient // a slot migrating: go-redis ran out of redirects
	}
	return redislua.ErrorCode(err)
}

// tlsError is a failed TLS handshake of the URL opener's dialer. It wraps
// ErrUnavailable itself: the handshake's own error may be the dial
// timeout's context.DeadlineExceeded, which distlock leaves unclassified
// (it reads as the caller's ctx), and the run command would see no
// unavailability.
type tlsError struct {
	addr string
	err  error
}

func (e *tlsError) Error() string {
	return fmt.Sprintf("TLS handshake with %s failed (does the server speak TLS on that port?): %v", e.addr, e.err)
}

func (e *tlsError) Unwrap() []error { return []error{backend.ErrUnavailable, e.err} }
