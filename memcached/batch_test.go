package memcached

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/testkit/slack"
	"github.com/distlock/distlock/internal/testkit/testserver"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// writeCounter counts the writes on every connection a client (and the
// driver's own pool, which dials through the client's DialContext) opens,
// per server: one write is one request, or one pipeline of requests.
type writeCounter struct {
	mu     sync.Mutex
	writes map[string]int
}

func (w *writeCounter) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &countedConn{Conn: nc, w: w, addr: addr}, nil
}

func (w *writeCounter) snapshot() map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]int, len(w.writes))
	for k, v := range w.writes {
		out[k] = v
	}
	return out
}

type countedConn struct {
	net.Conn
	w    *writeCounter
	addr string
}

func (c *countedConn) Write(p []byte) (int, error) {
	c.w.mu.Lock()
	c.w.writes[c.addr]++
	c.w.mu.Unlock()
	return c.Conn.Write(p)
}

// countedClient is a client over addrs, with its selector, whose writes are
// counted.
func countedClient(t testing.TB, addrs ...string) (*memcache.Client, *memcache.ServerList, *writeCounter) {
	t.Helper()
	ss := new(memcache.ServerList)
	require.NoError(t, ss.SetServers(addrs...))
	w := &writeCounter{writes: map[string]int{}}
	c := memcache.NewFromSelector(ss)
	c.Timeout = 2 * time.Second
	c.MaxIdleConns = 16
	c.DialContext = w.dial
	return c, ss, w
}

// countedDriver is a driver that knows its selector (as the URL opener
// makes it), with counted writes.
func countedDriver(t testing.TB, addrs ...string) (*driver, *writeCounter) {
	t.Helper()
	c, ss, w := countedClient(t, addrs...)
	d, err := newDriver(c, []Option{WithSelector(ss), WithCloseClient()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Close() })
	return d, w
}

// twoServers starts two memcached servers (skipping the test when the
// environment points at one external server).
func twoServers(t *testing.T) (*testserver.Server, *testserver.Server) {
	t.Helper()
	s1 := testserver.Memcached(t, testserver.MemcachedConfig{NoEvict: true})
	s2 := testserver.Memcached(t, testserver.MemcachedConfig{NoEvict: true})
	if s1.Addr() == s2.Addr() {
		t.Skip("needs two memcached servers")
	}
	return s1, s2
}

// serverStats returns the numeric general statistics of a server.
func serverStats(t testing.TB, addr string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, line := range rawCmd(t, addr, "stats", func(l string) bool { return l == "END" }) {
		f := strings.Fields(line)
		if len(f) != 3 || f[0] != "STAT" {
			continue
		}
		if n, err := strconv.ParseInt(f[2], 10, 64); err == nil {
			out[f[1]] = n
		}
	}
	return out
}

func statDelta(before, after map[string]int64, name string) int64 { return after[name] - before[name] }

// acquire takes n locks named prefix/i through the driver.
func acquireN(t testing.TB, d *driver, prefix, owner string, n int, ttl time.Duration) []*lock {
	t.Helper()
	ctx := ctxT(t, time.Minute)
	locks := make([]*lock, n)
	for i := range n {
		l, err := d.TryAcquire(ctx, req(fmt.Sprintf("%s/%d", prefix, i), owner, ttl))
		require.NoError(t, err, "acquire %s/%d", prefix, i)
		locks[i] = l.(*lock)
	}
	return locks
}

func itemsOf(locks []*lock, ttl time.Duration) []backend.RefreshItem {
	items := make([]backend.RefreshItem, len(locks))
	for i, l := range locks {
		items[i] = backend.RefreshItem{Lock: l, TTL: ttl}
	}
	return items
}

// A batch of 300 held locks over two servers: every item nil, every item
// extended (the record's expiry and the server's TTL), and two requests per
// server — one gets, one pipeline of cas — instead of two per lock.
func TestRefreshBatch(t *testing.T) {
	s1, s2 := twoServers(t)
	d, w := countedDriver(t, s1.Addr(), s2.Addr())
	const n = 300
	locks := acquireN(t, d, "batch", "A", n, 10*time.Second)
	perServer := map[string]int{}
	for _, l := range locks {
		a, err := d.sel.PickServer(l.key)
		require.NoError(t, err)
		perServer[a.String()]++
	}
	require.Len(t, perServer, 2, "300 keys on %d servers", len(perServer))
	admin1, admin2 := adminClient(t, s1.Addr()), adminClient(t, s2.Addr())
	st1, st2 := serverStats(t, s1.Addr()), serverStats(t, s2.Addr())
	w0 := w.snapshot()
	start := time.Now()
	errs := d.RefreshBatch(ctxT(t, 30*time.Second), itemsOf(locks, time.Minute))
	took := time.Since(start)
	w1 := w.snapshot()
	for i, err := range errs {
		assert.NoError(t, err, "item %d", i)
	}
	for _, s := range []struct {
		addr   string
		before map[string]int64
	}{{s1.Addr(), st1}, {s2.Addr(), st2}} {
		after := serverStats(t, s.addr)
		keys := int64(perServer[s.addr])
		writes := w1[s.addr] - w0[s.addr]
		t.Logf("server %s: %d locks, %d requests (writes), cmd_get +%d, cas_hits +%d, cas_badval +%d, cas_misses +%d",
			s.addr, keys, writes, statDelta(s.before, after, "cmd_get"), statDelta(s.before, after, "cas_hits"),
			statDelta(s.before, after, "cas_badval"), statDelta(s.before, after, "cas_misses"))
		if writes > 2 {
			t.Errorf("server %s: %d requests for %d locks, want 2 (one gets, one cas pipeline)", s.addr, writes, keys)
		}
		if got := statDelta(s.before, after, "cas_hits"); got != keys {
			t.Errorf("server %s: cas_hits +%d, want +%d", s.addr, got, keys)
		}
		if got := statDelta(s.before, after, "cmd_get"); got != keys {
			t.Errorf("server %s: cmd_get +%d, want +%d (each key read once)", s.addr, got, keys)
		}
	}
	t.Logf("batch of %d took %v", n, took)
	now := time.Now().UnixMilli()
	for i, l := range locks {
		admin := admin1
		if a, _ := d.sel.PickServer(l.key); a.String() == s2.Addr() {
			admin = admin2
		}
		rec, _ := readRecord(t, admin, l.key)
		if rec.expMs < now+55_000 || len(rec.holds) != 1 || rec.holds[0] != l.hold {
			t.Errorf("lock %d: record %+v not extended to a minute", i, rec)
		}
		if got := time.Duration(l.ttl.Load()); got != time.Minute {
			t.Errorf("lock %d: ttl %v after a refresh to 1m", i, got)
		}
		if i%50 == 0 {
			addr := s1.Addr()
			if admin == admin2 {
				addr = s2.Addr()
			}
			// Expiry 61 (a minute and a tick) sent at start or later,
			// counted down since: a loaded machine takes seconds to
			// read 300 records.
			low := 58 - int64(time.Since(start)/time.Second)
			if secs, ok := remainingTTL(t, addr, l.key); !ok || secs < low || secs > 62 {
				t.Errorf("lock %d: server TTL %ds (found %v), want %d to 62 (61 sent %v ago)", i, secs, ok, low, time.Since(start).Round(time.Millisecond))
			}
		}
	}
	// Never shorter: a batch with a shorter TTL leaves the expiry alone.
	errs = d.RefreshBatch(ctxT(t, 30*time.Second), itemsOf(locks[:10], 2*time.Second))
	for i, err := range errs {
		assert.NoError(t, err, "short refresh item %d", i)
		if secs, _ := remainingTTL(t, s1.Addr(), locks[i].key); secs > 0 && secs < 55 {
			t.Errorf("lock %d shortened to %ds", i, secs)
		}
		if secs, _ := remainingTTL(t, s2.Addr(), locks[i].key); secs > 0 && secs < 55 {
			t.Errorf("lock %d shortened to %ds", i, secs)
		}
	}
}

// A mixed batch: each item gets exactly what its Refresh would answer —
// ErrNotHeld for released, expired and taken-over locks, nil for held ones
// (among them two nested holds of one key and the new owner of a key whose
// stale lock is in the same batch), ErrInvalidTTL for a TTL Refresh refuses —
// and only the held ones are extended.
func TestRefreshBatchMixed(t *testing.T) {
	s1, s2 := twoServers(t)
	d, _ := countedDriver(t, s1.Addr(), s2.Addr())
	ctx := ctxT(t, time.Minute)
	acq := func(key, owner string, ttl time.Duration) *lock {
		t.Helper()
		l, err := d.TryAcquire(ctx, req(key, owner, ttl))
		require.NoError(t, err, "acquire %s as %s", key, owner)
		return l.(*lock)
	}
	// Short locks first, to expire them.
	expired := acq("mixed/expired", "E", 2*time.Second)
	stale := acq("mixed/taken", "A", 2*time.Second)
	admin1, admin2 := adminClient(t, s1.Addr()), adminClient(t, s2.Addr())
	gone := func(key string) bool {
		_, e1 := admin1.Get(key)
		_, e2 := admin2.Get(key)
		return errors.Is(e1, memcache.ErrCacheMiss) && errors.Is(e2, memcache.ErrCacheMiss)
	}
	if !waitFor(6*time.Second, func() bool { return gone(expired.key) && gone(stale.key) }) {
		t.Fatal("2s locks did not expire within 6s")
	}
	taker := acq("mixed/taken", "B", 30*time.Second)
	released := acq("mixed/released", "R", 30*time.Second)
	require.NoError(t, released.Release(ctx))
	nest1 := acq("mixed/nested", "N", 30*time.Second)
	nest2 := acq("mixed/nested", "N", 30*time.Second)
	half1 := acq("mixed/half", "H", 30*time.Second)
	half2 := acq("mixed/half", "H", 30*time.Second)
	require.NoError(t, half1.Release(ctx))
	held := acquireN(t, d, "mixed/held", "G", 20, 30*time.Second)

	type want int
	const (
		ok want = iota
		notHeld
		badTTL
	)
	var items []backend.RefreshItem
	var wants []want
	add := func(l *lock, ttl time.Duration, w want) {
		items = append(items, backend.RefreshItem{Lock: l, TTL: ttl})
		wants = append(wants, w)
	}
	add(held[0], time.Minute, ok)
	add(expired, time.Minute, notHeld)
	add(stale, time.Minute, notHeld)
	add(nest1, time.Minute, ok)
	add(released, time.Minute, notHeld)
	add(taker, time.Minute, ok)
	add(half1, time.Minute, notHeld)
	add(nest2, 2*time.Minute, ok)
	add(half2, time.Minute, ok)
	add(held[1], 1500*time.Millisecond, badTTL)
	for _, l := range held[2:] {
		add(l, time.Minute, ok)
	}
	admin := func(key string) *memcache.Client {
		if a, _ := d.sel.PickServer(key); a.String() == s2.Addr() {
			return admin2
		}
		return admin1
	}
	_, takerBefore := readRecord(t, admin(taker.key), taker.key)
	errs := d.RefreshBatch(ctx, items)
	if len(errs) != len(items) {
		t.Fatalf("%d results for %d items", len(errs), len(items))
	}
	now := time.Now().UnixMilli()
	for i, err := range errs {
		l := items[i].Lock.(*lock)
		switch wants[i] {
		case ok:
			if err != nil {
				t.Errorf("item %d (%s): %v, want nil", i, l.key, err)
				continue
			}
			rec, _ := readRecord(t, admin(l.key), l.key)
			if rec.expMs < now+items[i].TTL.Milliseconds()-5000 || !rec.has(l.hold) {
				t.Errorf("item %d (%s): record %+v not extended to %v", i, l.key, rec, items[i].TTL)
			}
		case notHeld:
			if !errors.Is(err, backend.ErrNotHeld) {
				t.Errorf("item %d (%s): %v, want ErrNotHeld", i, l.key, err)
			}
		case badTTL:
			if !errors.Is(err, backend.ErrInvalidTTL) {
				t.Errorf("item %d (%s): %v, want ErrInvalidTTL", i, l.key, err)
			}
		}
	}
	// The nested holds are both still there, at the longer of their TTLs.
	rec, _ := readRecord(t, admin(nest1.key), nest1.key)
	if len(rec.holds) != 2 || rec.expMs < now+115_000 {
		t.Errorf("nested record %+v: want both holds, expiring in about 2m", rec)
	}
	if a, _ := d.sel.PickServer(nest1.key); a != nil {
		if secs, ok := remainingTTL(t, a.String(), nest1.key); !ok || secs < 115 {
			t.Errorf("nested item's server TTL %ds, want about 121", secs)
		}
	}
	rec, after := readRecord(t, admin(taker.key), taker.key)
	if rec.owner != "B" || rec.tenure != taker.tenure || len(rec.holds) != 1 || after.CasID == takerBefore.CasID {
		t.Errorf("taken-over record %+v (cas %d, was %d): want B's, refreshed once", rec, after.CasID, takerBefore.CasID)
	}
	for _, k := range []string{expired.key, released.key} {
		assert.True(t, gone(k), "%s recreated by the batch", k)
	}
	// The same answers as Refresh, item by item.
	for i, it := range items {
		if wants[i] == badTTL {
			continue
		}
		err := it.Lock.Refresh(ctx, it.TTL)
		if (err == nil) != (errs[i] == nil) || errors.Is(err, backend.ErrNotHeld) != errors.Is(errs[i], backend.ErrNotHeld) {
			t.Errorf("item %d: batch %v, Refresh %v", i, errs[i], err)
		}
	}
}

// A change between the gets and the cas (here a nested acquire of the same
// owner, and a takeover) makes that cas fail with EXISTS: the item is
// settled by Refresh's own read-modify-write, the others are not disturbed.
func TestRefreshBatchConflict(t *testing.T) {
	s1, s2 := twoServers(t)
	for _, tc := range []struct {
		name string
		want error // nil or ErrNotHeld
	}{{"nested acquire", nil}, {"takeover", backend.ErrNotHeld}} {
		t.Run(tc.name, func(t *testing.T) {
			d, _ := countedDriver(t, s1.Addr(), s2.Addr())
			ctx := ctxT(t, time.Minute)
			prefix := "conflict/" + strings.ReplaceAll(tc.name, " ", "-")
			locks := acquireN(t, d, prefix, "C", 40, 30*time.Second)
			victim := locks[7]
			addr, _ := d.sel.PickServer(victim.key)
			admin := adminClient(t, addr.String())
			var nested *lock
			var fired atomic.Int32
			d.batchHook = func(a net.Addr) {
				if a.String() != addr.String() || fired.Add(1) != 1 {
					return
				}
				if tc.want == nil {
					l, err := d.TryAcquire(ctx, req(prefix+"/7", "C", 30*time.Second))
					if err != nil {
						t.Errorf("nested acquire in the hook: %v", err)
						return
					}
					nested = l.(*lock)
					return
				}
				rec := record{expMs: time.Now().Add(time.Minute).UnixMilli(), tenure: randomID(tenureBytes), holds: []string{randomID(holdBytes)}, owner: "other"}
				assert.NoError(t, admin.Set(&memcache.Item{Key: victim.key, Value: rec.encode(), Expiration: 61}), "set in the hook")
			}
			fb := statBatchFallbacks.Load()
			errs := d.RefreshBatch(ctx, itemsOf(locks, time.Minute))
			if fired.Load() == 0 {
				t.Fatal("hook never ran")
			}
			if got := statBatchFallbacks.Load() - fb; got != 1 {
				t.Errorf("%d items fell back to Refresh, want 1 (the conflicted one)", got)
			}
			now := time.Now().UnixMilli()
			for i, err := range errs {
				l := locks[i]
				if i == 7 {
					if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
						t.Errorf("conflicted item: %v, want %v", err, tc.want)
					}
					continue
				}
				assert.NoError(t, err, "item %d", i)
				a, _ := d.sel.PickServer(l.key)
				rec, _ := readRecord(t, adminClient(t, a.String()), l.key)
				if rec.expMs < now+55_000 {
					t.Errorf("item %d not extended: %+v", i, rec)
				}
			}
			rec, _ := readRecord(t, admin, victim.key)
			if tc.want == nil {
				if nested == nil || len(rec.holds) != 2 || !rec.has(victim.hold) || !rec.has(nested.hold) || rec.expMs < now+55_000 {
					t.Errorf("conflicted record %+v: want both holds, extended to a minute", rec)
				}
			} else if rec.owner != "other" {
				t.Errorf("the other owner's record was overwritten: %+v", rec)
			}
		})
	}
}

// A context that has ended, or ends while a server does not answer, gives
// every item an error at once, without a panic or a goroutine left behind;
// a closed driver answers ErrClosed.
func TestRefreshBatchContext(t *testing.T) {
	s1, s2 := twoServers(t)
	runtime.GC()
	before := runtime.NumGoroutine()
	d, _ := countedDriver(t, s1.Addr(), s2.Addr())
	locks := acquireN(t, d, "ctx", "X", 50, time.Minute)
	items := itemsOf(locks, time.Minute)

	cctx, cancel := context.WithCancel(t.Context())
	cancel()
	for i, err := range d.RefreshBatch(cctx, items) {
		assert.ErrorIs(t, err, context.Canceled, "cancelled: item %d", i)
	}

	t.Run("ends while a server is stopped", func(t *testing.T) {
		pause(t, s1)
		short, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		errs := d.RefreshBatch(short, items)
		took := time.Since(start)
		if took > 2*time.Second {
			t.Errorf("RefreshBatch took %v with a 300ms context", took)
		}
		// The stopped server's items end with the context. The other
		// server's may have been refreshed before it ended: nil is right
		// for them too (which one they get depends on timing).
		stopped := 0
		for i, err := range errs {
			a, _ := d.sel.PickServer(locks[i].key)
			onStopped := a.String() == s1.Addr()
			if onStopped {
				stopped++
			}
			if !errors.Is(err, context.DeadlineExceeded) && (onStopped || err != nil) {
				t.Errorf("item %d (stopped server: %v): %v, want context.DeadlineExceeded", i, onStopped, err)
			}
		}
		if stopped == 0 || stopped == len(errs) {
			t.Fatalf("%d of %d items on the stopped server %s: the keys should spread over both", stopped, len(errs), s1.Addr())
		}
		require.NoError(t, s1.Resume())
		// Still usable afterwards.
		for i, err := range d.RefreshBatch(ctxT(t, 30*time.Second), items) {
			assert.NoError(t, err, "after resume: item %d", i)
		}
	})

	require.NoError(t, d.Close())
	for i, err := range d.RefreshBatch(ctxT(t, 10*time.Second), items) {
		assert.ErrorIs(t, err, backend.ErrClosed, "closed: item %d", i)
	}
	if !waitFor(5*time.Second, func() bool { return runtime.NumGoroutine() <= before }) {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines after Close, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
	}
}

// After a server restart every pooled connection to it is dead: the batch
// drops them and tries that server's items once more on a fresh connection
// (as Refresh retries once), which finds them gone; the other server's
// items are refreshed.
func TestRefreshBatchRestart(t *testing.T) {
	s1, s2 := twoServers(t)
	if !s1.Controllable() {
		t.Skip("external memcached: cannot restart it")
	}
	d, w := countedDriver(t, s1.Addr(), s2.Addr())
	locks := acquireN(t, d, "restart", "X", 60, time.Minute)
	// Leave a pooled batch connection to each server.
	for i, err := range d.RefreshBatch(ctxT(t, 30*time.Second), itemsOf(locks, time.Minute)) {
		require.NoError(t, err, "item %d", i)
	}
	require.NoError(t, s1.Restart(ctxT(t, 30*time.Second)))
	fb := statBatchFallbacks.Load()
	w0 := w.snapshot()
	errs := d.RefreshBatch(ctxT(t, 30*time.Second), itemsOf(locks, time.Minute))
	w1 := w.snapshot()
	for i, err := range errs {
		a, _ := d.sel.PickServer(locks[i].key)
		if a.String() == s1.Addr() {
			assert.ErrorIs(t, err, backend.ErrNotHeld, "item %d on the restarted server", i)
		} else if err != nil {
			t.Errorf("item %d on the other server: %v", i, err)
		}
	}
	if got := statBatchFallbacks.Load() - fb; got != 0 {
		t.Errorf("%d items fell back to Refresh, want the retried batch to settle them", got)
	}
	t.Logf("requests to the restarted server: %d", w1[s1.Addr()]-w0[s1.Addr()])
	if got := w1[s1.Addr()] - w0[s1.Addr()]; got > 3 {
		t.Errorf("%d requests to the restarted server, want at most 3 (gets on the dead connection, then gets again)", got)
	}
}

// Without WithSelector the Locker does not know which server holds a key:
// the batch reads with GetMulti and writes a cas per key, with the same
// outcomes.
func TestRefreshBatchNoSelector(t *testing.T) {
	srv := testserver.Memcached(t, testserver.MemcachedConfig{})
	c := memcache.New(srv.Addr())
	c.Timeout = 2 * time.Second
	l, err := New(c, WithCloseClient())
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	d := driverOf(l)
	if d.raw != nil {
		t.Fatal("a raw pool without a selector")
	}
	ctx := ctxT(t, time.Minute)
	locks := acquireN(t, d, "nosel", "A", 30, 30*time.Second)
	extra, err := d.TryAcquire(ctx, req("nosel/0", "A", 30*time.Second))
	require.NoError(t, err)
	require.NoError(t, locks[1].Release(ctx))
	items := append(itemsOf(locks, time.Minute), backend.RefreshItem{Lock: extra, TTL: time.Minute})
	var fired atomic.Bool
	d.batchHook = func(net.Addr) { // a conflict on lock 2
		if fired.Swap(true) {
			return
		}
		if _, err := d.TryAcquire(ctx, req("nosel/2", "A", 30*time.Second)); err != nil {
			t.Errorf("nested acquire in the hook: %v", err)
		}
	}
	admin := adminClient(t, srv.Addr())
	fb := statBatchFallbacks.Load()
	errs := d.RefreshBatch(ctx, items)
	now := time.Now().UnixMilli()
	if got := statBatchFallbacks.Load() - fb; got != 1 {
		t.Errorf("%d items fell back to Refresh, want 1 (the conflicted one)", got)
	}
	for i, err := range errs {
		if i == 1 {
			assert.ErrorIs(t, err, backend.ErrNotHeld, "released item")
			continue
		}
		if err != nil {
			t.Errorf("item %d: %v", i, err)
			continue
		}
		lk := items[i].Lock.(*lock)
		if rec, _ := readRecord(t, admin, lk.key); rec.expMs < now+55_000 {
			t.Errorf("item %d not extended: %+v", i, rec)
		}
	}
}

// Through the public API: a Locker with auto-refresh holds 1,000 leases of
// TTL 6s over two servers for more than two refresh periods; none is lost,
// and the servers see a few requests per batch, not two per lease. The
// refreshes due (n per ttl/3: 500/s) stay well below what a loaded 2-core
// machine under -race was seen to manage (about 800/s), so a lost lease
// means a refresh that failed, not one that did not get the CPU in time
// (2,000 leases of TTL 3s, 2,000 refreshes/s, lost most of them so).
func TestRefreshBatchLocker(t *testing.T) {
	s1, s2 := twoServers(t)
	c, ss, w := countedClient(t, s1.Addr(), s2.Addr())
	const ttl = 6 * time.Second // validity 5s, refreshed every 2s
	lk, err := New(c, WithSelector(ss), WithCloseClient(), WithDefaults(distlock.WithTTL(ttl)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = lk.Close() })
	const n = 1000
	ctx := ctxT(t, 2*time.Minute)
	leases := make([]*distlock.Lease, n)
	var wg sync.WaitGroup
	var failed atomic.Int32
	for g := range 8 {
		wg.Go(func() {
			for i := g; i < n; i += 8 {
				lease, err := lk.TryAcquire(ctx, fmt.Sprintf("locker/%d", i))
				if err != nil {
					if failed.Add(1) == 1 {
						t.Errorf("acquire %d: %v", i, err)
					}
					return
				}
				leases[i] = lease
			}
		})
	}
	wg.Wait()
	if failed.Load() > 0 {
		t.FailNow()
	}
	acquired := time.Now()
	st1, st2 := serverStats(t, s1.Addr()), serverStats(t, s2.Addr())
	w0 := w.snapshot()
	casHits := func() int64 {
		return statDelta(st1, serverStats(t, s1.Addr()), "cas_hits") + statDelta(st2, serverStats(t, s2.Addr()), "cas_hits")
	}
	// Two full refresh periods (2s each) and then some: a lease whose
	// refresh failed would have ended at its 5s validity.
	if !waitFor(slack.D(30*time.Second), func() bool { return casHits() >= 2*n && time.Since(acquired) >= ttl }) {
		t.Fatalf("only %d refreshes of %d leases in %v", casHits(), n, time.Since(acquired))
	}
	w1 := w.snapshot()
	refreshes := casHits()
	lost := 0
	for i, lease := range leases {
		if err := lease.Err(); err != nil {
			if lost++; lost <= 5 {
				t.Errorf("lease %d lost: %v", i, err)
			}
		}
	}
	if lost > 0 {
		t.Errorf("%d of %d leases lost", lost, n)
	}
	writes := 0
	for _, a := range []string{s1.Addr(), s2.Addr()} {
		writes += w1[a] - w0[a]
	}
	t.Logf("%d refreshes in %v: %d requests to the servers (%.3f per refresh; one-by-one refresh makes 2)",
		refreshes, time.Since(acquired).Round(time.Millisecond), writes, float64(writes)/float64(refreshes))
	if int64(writes)*4 > refreshes {
		t.Errorf("%d requests for %d refreshes: not batched", writes, refreshes)
	}
}

// With -M and a full slab class every cas answers "SERVER_ERROR out of
// memory": each item gets ErrUnavailable carrying the reply, as Refresh
// does, the locks stay in place, and the pipeline stays in step (memcached
// swallows the data of a refused cas), so nothing falls back.
func TestRefreshBatchNoEvict(t *testing.T) {
	srv := testserver.Memcached(t, testserver.MemcachedConfig{MemoryMB: 2, NoEvict: true})
	d, _ := countedDriver(t, srv.Addr())
	admin := adminClient(t, srv.Addr())
	locks := acquireN(t, d, "oom", "A", 5, time.Minute)
	_, it := readRecord(t, admin, locks[0].key)
	refused := 0
	for i := 0; i < 10 && refused == 0; i++ {
		refused = fillSlab(t, srv.Addr(), len(locks[0].key), len(it.Value), i*10000, 10000)
	}
	if refused == 0 {
		t.Fatalf("memcached -M never refused a store")
	}
	fb := statBatchFallbacks.Load()
	ctx := ctxT(t, 30*time.Second)
	for round := range 2 {
		for i, err := range d.RefreshBatch(ctx, itemsOf(locks, time.Minute)) {
			err = classified(d, err) // as distlock returns it
			if !errors.Is(err, backend.ErrUnavailable) || !errors.Is(err, errOutOfMemory) || errors.Is(err, backend.ErrNotHeld) {
				t.Errorf("round %d item %d: %v, want ErrUnavailable (out of memory)", round, i, err)
			}
		}
	}
	if got := statBatchFallbacks.Load() - fb; got != 0 {
		t.Errorf("%d items fell back to Refresh: the pipeline lost step after SERVER_ERROR", got)
	}
	if err := locks[0].Refresh(ctx, time.Minute); !errors.Is(err, errOutOfMemory) {
		t.Errorf("Refresh with memory full = %v, want out of memory as the batch", err)
	}
	for _, l := range locks {
		if _, err := admin.Get(l.key); err != nil {
			t.Errorf("lock item %s gone after the failed refreshes: %v", l.key, err)
		}
		assert.NoError(t, l.Release(ctx), "release with memory full")
	}
}
