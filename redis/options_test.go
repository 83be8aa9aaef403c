package redis

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNewChecksOptions (no server: New does not connect): a refused option
// value or a nil client is an ErrInvalidOption from New, on one line naming
// the option and the value; valid options give a *distlock.Locker.
func TestNewChecksOptions(t *testing.T) {
	client := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialerRetries: 1}) // nothing listens: refused at once
	defer client.Close()
	for _, c := range []struct {
		opts []Option
		want string
	}{
		{[]Option{WithSubscribeTimeout(-time.Second)}, "redis: WithSubscribeTimeout(-1s): must be positive"},
		{[]Option{WithPrefix("p:"), WithSubscribeTimeout(0)}, "redis: WithSubscribeTimeout(0s): must be positive"},
	} {
		l, err := New(client, c.opts...)
		if l != nil || !errors.Is(err, distlock.ErrInvalidOption) || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("New = %v, %v; want ErrInvalidOption saying %q", l, err, c.want)
		}
	}
	if l, err := New(nil); l != nil || !errors.Is(err, distlock.ErrInvalidOption) {
		t.Errorf("New(nil) = %v, %v; want ErrInvalidOption", l, err)
	}
	l, err := New(client, WithPrefix(""), WithSubscribeTimeout(time.Nanosecond), WithSubscriptionLinger(-time.Second), WithFair(),
		WithDefaults(distlock.WithTTL(time.Minute)))
	require.NoError(t, err)
	if !l.Capabilities().Fair || driverOf(l).prefix != "" || driverOf(l).owned {
		t.Errorf("Locker %+v: options not applied", driverOf(l))
	}
	require.NoError(t, l.Close())
	assert.NotErrorIs(t, client.Ping(context.Background()).Err(), goredis.ErrClosed, "Close closed the caller's client without WithCloseClient")
}

// TestURLSharesNewChecks (no server): the URL's parameters become the
// Options New takes, so they pass the same checks.
func TestURLSharesNewChecks(t *testing.T) {
	u, _ := url.Parse("redis://127.0.0.1:1/0?subscribe_timeout=0s")
	if _, err := open(context.Background(), u); !errors.Is(err, distlock.ErrInvalidOption) || !strings.Contains(err.Error(), "subscribe_timeout") {
		t.Errorf("subscribe_timeout=0s: %v, want ErrInvalidOption naming the parameter", err)
	}
	u, _ = url.Parse("redis://127.0.0.1:1/0?prefix=x:&fair=true&subscription_linger=0s")
	d, err := open(context.Background(), u)
	require.NoError(t, err)
	defer d.Close()
	f, ok := d.(*fairDriver)
	if !ok || f.prefix != "x:" || !f.owned {
		t.Errorf("open = %T %+v", d, d)
	}
}

// TestErrorCodeTLS (no server): the URL opener's failed TLS handshake is
// CodeUnavailable (waiting will not cure it), whatever it wraps.
func TestErrorCodeTLS(t *testing.T) {
	var d driver
	err := fmt.Errorf("dial: %w", &tlsError{addr: "h:6379", err: context.DeadlineExceeded})
	assert.Equal(t, backend.CodeUnavailable, d.ErrorCode(err), "ErrorCode(%v)", err)
	assert.Equal(t, backend.CodeTransient, d.ErrorCode(goredis.ErrPoolTimeout), "ErrorCode(pool timeout)")
}
