package memcached

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	neturl "net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/testkit/testserver"
	"github.com/stretchr/testify/require"
)

// ctxT returns a context that ends after d or with the test.
func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// openURL opens a Locker by URL and closes it with the test.
func openURL(t testing.TB, url string, opts ...distlock.Option) *distlock.Locker {
	t.Helper()
	l, err := distlock.Open(ctxT(t, 10*time.Second), url, opts...)
	require.NoError(t, err, "Open(%q)", url)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// openDriver opens the driver behind a URL, for tests that call the driver
// directly (below distlock's lease state, so they reach the server).
func openDriver(t testing.TB, url string) *driver {
	t.Helper()
	u, err := neturl.Parse(url)
	require.NoError(t, err)
	d, err := open(ctxT(t, 10*time.Second), u)
	require.NoError(t, err, "open(%q)", url)
	t.Cleanup(func() { _ = d.Close() })
	return d.(*driver)
}

// adminClient is a plain gomemcache client for direct inspection.
func adminClient(t testing.TB, addr string) *memcache.Client {
	c := memcache.New(addr)
	c.Timeout = 5 * time.Second
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func mcURL(srv *testserver.Server, query string) string {
	u := "memcached://" + srv.Addr()
	if query != "" {
		u += "/?" + query
	}
	return u
}

// rawCmd sends one text or meta command to addr and returns the reply up to
// and including the line for which last reports true.
func rawCmd(t testing.TB, addr, cmd string, last func(line string) bool) []string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	require.NoError(t, err, "dial %s", addr)
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprintf(c, "%s\r\n", cmd); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	var out []string
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("%q: %v (so far %q)", cmd, err, out)
		}
		line = strings.TrimRight(line, "\r\n")
		out = append(out, line)
		if last(line) {
			return out
		}
	}
}

// remainingTTL asks the server for an item's remaining TTL in seconds (meta
// mg with the t flag); ok is false on a miss.
func remainingTTL(t testing.TB, addr, key string) (secs int64, ok bool) {
	t.Helper()
	lines := rawCmd(t, addr, "mg "+key+" t", func(string) bool { return true })
	f := strings.Fields(lines[0])
	switch {
	case len(f) == 1 && f[0] == "EN":
		return 0, false
	case len(f) == 2 && f[0] == "HD" && strings.HasPrefix(f[1], "t"):
		n, err := strconv.ParseInt(f[1][1:], 10, 64)
		require.NoError(t, err, "mg reply %q", lines[0])
		return n, true
	}
	t.Fatalf("mg reply %q", lines[0])
	return 0, false
}

// readRecord reads and decodes a lock item directly.
func readRecord(t testing.TB, admin *memcache.Client, key string) (record, *memcache.Item) {
	t.Helper()
	it, err := admin.Get(key)
	require.NoError(t, err, "get %s", key)
	rec, ok := decodeRecord(it.Value)
	require.True(t, ok, "item %s holds %q, not a lock record", key, it.Value)
	return rec, it
}

// req builds a driver request.
func req(key, owner string, ttl time.Duration) backend.Request {
	return backend.Request{Key: key, Owner: owner, TTL: ttl}
}

// waitFor polls cond every 20ms until it holds or d passes.
func waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// pause stops the server with SIGSTOP and waits until every thread of it
// has stopped (the signal is delivered asynchronously: a request sent right
// after kill() can still be served). It skips the test for a server it
// cannot control.
func pause(t testing.TB, srv *testserver.Server) {
	t.Helper()
	if !srv.Controllable() {
		t.Skip("external memcached: cannot pause it")
	}
	require.NoError(t, srv.Pause())
	t.Cleanup(func() { _ = srv.Resume() })
	pid := strconv.Itoa(srv.PID())
	stopped := waitFor(5*time.Second, func() bool {
		tasks, err := os.ReadDir("/proc/" + pid + "/task")
		if err != nil {
			return true // not Linux: trust the signal
		}
		for _, task := range tasks {
			b, err := os.ReadFile("/proc/" + pid + "/task/" + task.Name() + "/stat")
			if err != nil {
				continue
			}
			// pid (comm) state ...: the state follows the last ')'.
			s := string(b)
			i := strings.LastIndexByte(s, ')')
			if i < 0 || i+2 >= len(s) || (s[i+2] != 'T' && s[i+2] != 't') {
				return false
			}
		}
		return true
	})
	require.True(t, stopped, "memcached %s not stopped 5s after SIGSTOP", pid)
}

// classified is err as distlock returns it from the driver (its classify):
// wrapped once in the sentinel of the driver's ErrorCode, unless it already
// wraps a sentinel or a ctx error.
func classified(d *driver, err error) error {
	if err == nil {
		return nil
	}
	for _, s := range []error{backend.ErrNotAcquired, backend.ErrNotHeld, backend.ErrUnavailable, backend.ErrClosed,
		backend.ErrInvalidTTL, backend.ErrInvalidOption, backend.ErrInvalidKey, context.Canceled, context.DeadlineExceeded} {
		if errors.Is(err, s) {
			return err
		}
	}
	return backend.Wrap(d.ErrorCode(err), err)
}

// countingDriver counts acquisition attempts, as they return.
type countingDriver struct {
	*driver
	attempts atomic.Int64
}

func (c *countingDriver) TryAcquire(ctx context.Context, r backend.Request) (backend.Lock, error) {
	l, err := c.driver.TryAcquire(ctx, r)
	c.attempts.Add(1)
	return l, err
}
