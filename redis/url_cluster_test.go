package redis

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/internal/redislua"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBadClusterSentinelURLs: every malformed Cluster or Sentinel URL is
// refused by Open with ErrInvalidOption, on one line, and shows no
// password.
func TestBadClusterSentinelURLs(t *testing.T) {
	bad := []string{
		"redis+cluster://",
		"redis+cluster://h1:6379,,h2:6379",
		"redis+cluster://h1:6379,h2:port",
		"redis+cluster://h1:6379,h2:6379/3",
		"redis+cluster://h1:6379/abc",
		"redis+cluster://h1:6379?nosuch=1",
		"redis+cluster://h1:6379?pool_size=-5",
		"redis+cluster://h1:6379?dial_timeout=soon",
		"redis+cluster://h1:6379?prefix=a&prefix=b",
		"redis+cluster://h1:6379?subscribe_timeout=-1s",
		"redis+cluster://h1:6379?fair=maybe",
		"redis+cluster://h1:6379?master=m",
		"redis+cluster://h1:6379#frag",
		"redis+cluster:h1:6379",
		"rediss+cluster://h1:6379?skip_verify=maybe",
		"redis+cluster://[::1:6379",
		"redis+sentinel://h1:26379,h2:26379",
		"redis+sentinel://h1:26379/0?master=",
		"redis+sentinel://h1:26379/x?master=m",
		"redis+sentinel://h1:26379/0/1?master=m",
		"redis+sentinel://h1:26379/0?master=m&master=n",
		"redis+sentinel://h1:26379/0?master=m&nosuch=1",
		"redis+sentinel://h1:26379/0?master=m&protocol=4",
		"redis+sentinel://h1:26379/0?master=m&db=x",
		"rediss+sentinel://h1:26379/0?master=m&skip_verify=maybe",
		"redis+sentinel://h1:0/0?master=m",
	}
	conformance.RefusesURLs(t, bad...)
	// The password stays out of every error, on one line.
	for _, raw := range []string{
		"redis+cluster://u:s3cretpw@h1:6379,h2:6379/5",
		"redis+sentinel://u:s3cretpw@h1:26379/0?nosuch=1",
		"redis+sentinel://:s3cretpw@h1:26379/0",
	} {
		_, err := distlock.Open(t.Context(), raw)
		if err == nil || !errors.Is(err, distlock.ErrInvalidOption) {
			t.Errorf("Open(%q) = %v, want ErrInvalidOption", backend.RedactURL(raw), err)
			continue
		}
		if msg := err.Error(); strings.Contains(msg, "s3cretpw") || strings.Contains(msg, "\n") {
			t.Errorf("Open: error shows the password or breaks the line: %q", msg)
		}
	}
}

// TestClusterSentinelURLsParse: valid URLs open lazily (no server
// listens), and their parts reach go-redis's options.
func TestClusterSentinelURLsParse(t *testing.T) {
	for _, raw := range []string{
		"redis+cluster://127.0.0.1:1",
		"redis+cluster://u:p%40ss@127.0.0.1:1,127.0.0.1:2/?dial_timeout=1s&pool_size=5&prefix=app:&fair=true",
		"rediss+cluster://127.0.0.1:1,[::1]:2?skip_verify=true",
		"redis+sentinel://127.0.0.1:1,127.0.0.1:2/3?master=mymaster&subscription_linger=0s",
		"rediss+sentinel://u:p@127.0.0.1:1?master=m&skip_verify=true",
	} {
		l, err := distlock.Open(t.Context(), raw)
		if err != nil {
			t.Errorf("Open(%q): %v", raw, err)
			continue
		}
		if caps := l.Capabilities(); !caps.Fencing || !caps.Notify || !caps.Expiring {
			t.Errorf("Open(%q): Capabilities = %+v", raw, caps)
		}
		assert.NoError(t, l.Close(), "Close(%q)", raw)
	}

	u, err := backend.ParseURL("rediss+cluster://user:p%40ss@h1:7000,h2/?dial_timeout=2s&pool_size=7&prefix=x:")
	require.NoError(t, err)
	co, opts, err := parseClusterURL(u)
	require.NoError(t, err)
	c, err := newConfig(opts)
	require.NoError(t, err)
	if strings.Join(co.Addrs, ",") != "h1:7000,h2:6379" || co.Username != "user" || co.Password != "p@ss" ||
		co.DialTimeout != 2*time.Second || co.PoolSize != 7 || co.TLSConfig == nil || co.TLSConfig.ServerName != "" ||
		co.Dialer == nil || !co.ContextTimeoutEnabled || co.DialerRetries != 1 || c.prefix != "x:" ||
		co.ClusterStateReloadInterval != time.Second {
		t.Errorf("cluster options %+v, prefix %q", co, c.prefix)
	}

	u, err = backend.ParseURL("redis+sentinel://:pw@s1,s2:26380/4?master=mm&read_timeout=3s")
	require.NoError(t, err)
	fo, _, err := parseSentinelURL(u)
	require.NoError(t, err)
	if strings.Join(fo.SentinelAddrs, ",") != "s1:26379,s2:26380" || fo.MasterName != "mm" || fo.DB != 4 ||
		fo.Password != "pw" || fo.SentinelPassword != "" || fo.ReadTimeout != 3*time.Second || fo.TLSConfig != nil ||
		!fo.ContextTimeoutEnabled {
		t.Errorf("sentinel options %+v", fo)
	}
}

// TestOpenClusterURL: a redis+cluster:// URL naming one seed node reaches
// every master: locks of many slots are taken through it, exclude a second
// Locker opened from another seed, and their keys sit in the cluster.
func TestOpenClusterURL(t *testing.T) {
	cluster := sharedCluster(t)
	ctx := tctx(t, time.Minute)
	addrs := cluster.Addrs()
	a, err := distlock.Open(ctx, "redis+cluster://"+addrs[0]+"/?prefix=ou:")
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Close() })
	b, err := distlock.Open(ctx, "redis+cluster://"+strings.Join(addrs[1:], ",")+"?prefix=ou:")
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	admin := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { _ = admin.Close() })
	slots := map[int]bool{}
	for i := range 30 {
		key := "open/" + strconv.Itoa(i)
		lease, err := a.TryAcquire(ctx, key, distlock.WithAutoRefresh(false))
		require.NoError(t, err, "%s", key)
		if _, err := b.TryAcquire(ctx, key); !errors.Is(err, distlock.ErrNotAcquired) {
			t.Fatalf("%s: second Locker: %v, want ErrNotAcquired", key, err)
		}
		k := redislua.KeysFor("ou:", key).Lock
		if n, err := admin.Exists(ctx, k).Result(); err != nil || n != 1 {
			t.Fatalf("%s: EXISTS %s = %d, %v", key, k, n, err)
		}
		slots[redislua.Slot(k)] = true
		require.NoError(t, lease.Release(ctx))
	}
	ranges, err := admin.ClusterSlots(ctx).Result()
	require.NoError(t, err)
	nodes := map[string]bool{}
	for s := range slots {
		for _, cs := range ranges {
			if s >= cs.Start && s <= cs.End {
				nodes[cs.Nodes[0].Addr] = true
			}
		}
	}
	if len(nodes) != len(addrs) {
		t.Errorf("locks landed on %d of %d masters", len(nodes), len(addrs))
	}
}
