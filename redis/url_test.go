package redis

import (
	"net/url"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/conformance"
	"github.com/stretchr/testify/assert"
)

func TestBadURLs(t *testing.T) {
	conformance.RefusesURLs(t,
		"redis://127.0.0.1:6379/abc",
		"redis://127.0.0.1:6379/0/1",
		"redis://127.0.0.1:6379/0?nosuch=1",
		"redis://127.0.0.1:6379/0?dial_timeout=soon",
		"redis://127.0.0.1:6379/0?pool_size=many",
		"redis://127.0.0.1:6379/0?prefix=a&prefix=b",
		"redis://127.0.0.1:6379/0?subscribe_timeout=-1s",
		"redis://127.0.0.1:6379/0?subscribe_timeout=x",
		"redis://127.0.0.1:6379/0?subscription_linger=x",
		"redis://127.0.0.1:6379/0?db=x",
		"redis://h1:6379,h2:6379/0",
		"redis://127.0.0.1:6379/0#frag",
		"redis:127.0.0.1:6379",
		"redis://127.0.0.1:port/0",
		"redis://[::1/0",
		"rediss://127.0.0.1:6379?skip_verify=maybe",
		"redis://127.0.0.1:6379/0?%zz",
		"redis://%zz@127.0.0.1/0",
	)
	// Valid URLs open (lazily) and close.
	for _, u := range []string{
		"redis://127.0.0.1:1",
		"redis://user:p%40ss@127.0.0.1:1/3?dial_timeout=1s&pool_size=5&prefix=app:&client_name=x",
		"rediss://127.0.0.1:1/0?skip_verify=true&subscribe_timeout=3s&subscription_linger=0s",
		"redis://[::1]:1/2?max_retries=-1&protocol=2",
	} {
		l, err := distlock.Open(t.Context(), u)
		if err != nil {
			t.Errorf("Open(%q): %v", u, err)
			continue
		}
		if caps := l.Capabilities(); !caps.Fencing || !caps.Reentrant || !caps.Notify || !caps.Expiring || caps.Durable || caps.Fair || caps.SessionBound {
			t.Errorf("Capabilities = %+v", caps)
		}
		assert.NoError(t, l.Close(), "Close(%q)", u)
	}
	u, _ := parseURLForTest("redis://127.0.0.1:1/0?prefix=app:&subscribe_timeout=3s&subscription_linger=0s&dial_timeout=2s")
	if u.c.prefix != "app:" || u.c.confirmTimeout != 3*time.Second || u.c.linger >= 0 || u.opt.DialTimeout != 2*time.Second || u.opt.Addr != "127.0.0.1:1" {
		t.Errorf("parsed %+v / %+v", u.c, u.opt)
	}
}

type parsed struct {
	opt *goredis.Options
	c   config
}

func parseURLForTest(raw string) (parsed, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return parsed{}, err
	}
	opt, opts, err := parseURL(u)
	if err != nil {
		return parsed{}, err
	}
	c, err := newConfig(opts)
	return parsed{opt, c}, err
}
