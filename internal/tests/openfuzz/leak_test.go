package openfuzz

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
	_ "github.com/distlock/distlock/etcd"
	_ "github.com/distlock/distlock/memcached"
	_ "github.com/distlock/distlock/memory"
	_ "github.com/distlock/distlock/mysql"
	_ "github.com/distlock/distlock/postgres"
	_ "github.com/distlock/distlock/redis"
	_ "github.com/distlock/distlock/redlock"
	_ "github.com/distlock/distlock/zookeeper"
	"github.com/stretchr/testify/assert"
)

func TestOpenErrorsHidePassword(t *testing.T) {
	for _, raw := range MalformedURLs {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		l, err := distlock.Open(ctx, raw)
		cancel()
		if err == nil {
			_ = l.Close()
			if strings.Contains(raw, "mem:") { // mem: opaque forms may open; nothing printed
				continue
			}
			t.Errorf("Open(%q) succeeded, want an error", raw)
			continue
		}
		msg := err.Error()
		t.Logf("%q -> %s", raw, msg)
		assert.False(t, Leaks(msg), "Open(%q): error shows the password: %s", raw, msg)
		assert.NotContains(t, msg, "\n", "Open(%q): error of several lines: %q", raw, msg)
		if !errors.Is(err, distlock.ErrInvalidOption) && !errors.Is(err, distlock.ErrUnavailable) {
			t.Errorf("Open(%q): %v, want ErrInvalidOption or ErrUnavailable", raw, err)
		}
	}
}
