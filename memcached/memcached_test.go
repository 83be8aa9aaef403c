package memcached

import (
	"context"
	"errors"
	"math"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/internal/testserver"
)

// The seeds' scenario (003, and 000's single-instance discussion) with
// direct inspection: A's lock expires, B acquires, and A's Release and
// Refresh must leave B's item exactly as it was. The driver is called
// directly, below distlock's lease state (which would answer ErrNotHeld
// without asking the server once A's validity has passed), so the calls do
// reach memcached and it is the server-side owner check that is tested.
func TestSeedsScenario(t *testing.T) {
	srv := testserver.Memcached(t, testserver.MemcachedConfig{NoEvict: true})
	admin := adminClient(t, srv.Addr())
	for _, release := range []string{"auto", "cas"} {
		t.Run(release, func(t *testing.T) {
			a := openDriver(t, mcURL(srv, "release="+release))
			b := openDriver(t, mcURL(srv, "release="+release))
			key := "seeds/" + release
			ik := ItemKey(DefaultPrefix, key)
			ctx := ctxT(t, 30*time.Second)
			la, err := a.TryAcquire(ctx, req(key, "A", 2*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			if !waitFor(5*time.Second, func() bool { _, err := admin.Get(ik); return errors.Is(err, memcache.ErrCacheMiss) }) {
				t.Fatalf("A's item did not expire within 5s of its 2s TTL")
			}
			lb, err := b.TryAcquire(ctx, req(key, "B", time.Minute))
			if err != nil {
				t.Fatalf("B after A's expiry: %v", err)
			}
			recB, itB := readRecord(t, admin, ik)
			if recB.owner != "B" {
				t.Fatalf("item owner %q, want B", recB.owner)
			}
			if err := la.Release(ctx); !errors.Is(err, backend.ErrNotHeld) {
				t.Errorf("A's Release after expiry = %v, want ErrNotHeld", err)
			}
			if err := la.Refresh(ctx, time.Hour); !errors.Is(err, backend.ErrNotHeld) {
				t.Errorf("A's Refresh after expiry = %v, want ErrNotHeld", err)
			}
			_, after := readRecord(t, admin, ik)
			if after.CasID != itB.CasID || string(after.Value) != string(itB.Value) {
				t.Errorf("B's item changed by A's stale calls: %q (cas %d) -> %q (cas %d)", itB.Value, itB.CasID, after.Value, after.CasID)
			}
			if secs, _ := remainingTTL(t, srv.Addr(), ik); secs > 61 {
				t.Errorf("B's expiry extended to %ds by A's stale Refresh", secs)
			}
			if err := lb.Release(ctx); err != nil {
				t.Fatalf("B's Release: %v", err)
			}
			if _, err := admin.Get(ik); !errors.Is(err, memcache.ErrCacheMiss) {
				t.Errorf("item after B's Release: %v, want a miss", err)
			}
		})
	}
}

// The same seeds scenario through the public API: A's lease ends on its own
// no later than B can acquire, and A's stale calls get ErrNotHeld.
func TestSeedsScenarioLeases(t *testing.T) {
	srv := testserver.Memcached(t, testserver.MemcachedConfig{NoEvict: true})
	admin := adminClient(t, srv.Addr())
	a, b := openURL(t, mcURL(srv, "")), openURL(t, mcURL(srv, ""))
	key := "seeds/leases"
	la, err := a.TryAcquire(ctxT(t, 10*time.Second), key, distlock.WithTTL(2*time.Second), distlock.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	lb, err := b.Acquire(ctxT(t, 10*time.Second), key)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-la.Done():
	default:
		t.Fatalf("B acquired while A's lease was still open")
	}
	if err := la.Err(); !errors.Is(err, distlock.ErrLockLost) {
		t.Errorf("A ended with %v, want ErrLockLost", err)
	}
	_, itB := readRecord(t, admin, ItemKey(DefaultPrefix, key))
	if err := la.Release(ctxT(t, 5*time.Second)); !errors.Is(err, distlock.ErrNotHeld) {
		t.Errorf("A's Release = %v, want ErrNotHeld", err)
	}
	if err := la.Refresh(ctxT(t, 5*time.Second), time.Minute); !errors.Is(err, distlock.ErrNotHeld) {
		t.Errorf("A's Refresh = %v, want ErrNotHeld", err)
	}
	_, after := readRecord(t, admin, ItemKey(DefaultPrefix, key))
	if after.CasID != itB.CasID {
		t.Errorf("B's item rewritten by A's stale calls")
	}
	if err := lb.Release(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
}

// A later tenure of the same WithOwner id is a different acquisition: a
// stale handle from the earlier tenure can neither release nor refresh it,
// because the per-tenure nonce differs. Nested holds of one tenure share its
// nonce, each with its own hold id.
func TestTenureNonce(t *testing.T) {
	srv := testserver.Memcached(t, testserver.MemcachedConfig{NoEvict: true})
	admin := adminClient(t, srv.Addr())
	d := openDriver(t, mcURL(srv, ""))
	ctx := ctxT(t, 30*time.Second)
	key := "tenure"
	ik := ItemKey(DefaultPrefix, key)

	first, err := d.TryAcquire(ctx, req(key, "worker-1", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	nested, err := d.TryAcquire(ctx, req(key, "worker-1", time.Minute))
	if err != nil {
		t.Fatalf("nested acquire: %v", err)
	}
	rec, _ := readRecord(t, admin, ik)
	f, n := first.(*lock), nested.(*lock)
	if f.tenure != n.tenure || rec.tenure != f.tenure {
		t.Errorf("nested holds do not share the tenure nonce: %q %q (item %q)", f.tenure, n.tenure, rec.tenure)
	}
	if f.hold == n.hold || len(rec.holds) != 2 || !rec.has(f.hold) || !rec.has(n.hold) {
		t.Errorf("holds %v, want the two distinct holds %q and %q", rec.holds, f.hold, n.hold)
	}
	if err := n.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if rec, _ = readRecord(t, admin, ik); len(rec.holds) != 1 || rec.holds[0] != f.hold {
		t.Errorf("after the nested release: holds %v, want [%s]", rec.holds, f.hold)
	}
	if err := n.Release(ctx); !errors.Is(err, backend.ErrNotHeld) {
		t.Errorf("second release of the nested hold = %v, want ErrNotHeld", err)
	}

	// The lock is lost (deleted behind the holder's back) and the same
	// owner id acquires again: a new tenure.
	if err := admin.Delete(ik); err != nil {
		t.Fatal(err)
	}
	second, err := d.TryAcquire(ctx, req(key, "worker-1", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	_, before := readRecord(t, admin, ik)
	if err := first.Refresh(ctx, time.Hour); !errors.Is(err, backend.ErrNotHeld) {
		t.Errorf("stale tenure's Refresh = %v, want ErrNotHeld", err)
	}
	if err := first.Release(ctx); !errors.Is(err, backend.ErrNotHeld) {
		t.Errorf("stale tenure's Release = %v, want ErrNotHeld", err)
	}
	if _, after := readRecord(t, admin, ik); after.CasID != before.CasID {
		t.Errorf("the new tenure's item was rewritten by the stale handle")
	}
	if err := second.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// Nested holds of one owner, taken and released concurrently from two
// Lockers: compare-and-swap keeps every hold, another owner never gets in
// while one is held, and the lock is free when all are released.
func TestReentrantConcurrent(t *testing.T) {
	srv := testserver.Memcached(t, testserver.MemcachedConfig{NoEvict: true})
	admin := adminClient(t, srv.Addr())
	ls := []distlock.Locker{openURL(t, mcURL(srv, "")), openURL(t, mcURL(srv, ""))}
	other := openURL(t, mcURL(srv, ""))
	const key, owner = "reentrant/concurrent", "shared-owner"
	ctx := ctxT(t, time.Minute)
	anchor, err := ls[0].TryAcquire(ctx, key, distlock.WithOwner(owner))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for g := range 8 {
		l := ls[g%2]
		wg.Go(func() {
			for range 20 {
				lease, err := l.TryAcquire(ctx, key, distlock.WithOwner(owner))
				if err != nil {
					errs <- err
					return
				}
				if err := lease.Release(ctx); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Go(func() {
		for range 20 {
			if lease, err := other.TryAcquire(ctx, key); !errors.Is(err, distlock.ErrNotAcquired) {
				if lease != nil {
					_ = lease.Release(ctx)
				}
				errs <- errors.New("another owner acquired while the owner held the lock")
				return
			}
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	rec, _ := readRecord(t, admin, ItemKey(DefaultPrefix, key))
	if len(rec.holds) != 1 {
		t.Errorf("%d holds left, want the anchor's only: %v", len(rec.holds), rec.holds)
	}
	if err := anchor.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lease, err := other.TryAcquire(ctx, key)
	if err != nil {
		t.Fatalf("lock not free after every hold was released: %v", err)
	}
	_ = lease.Release(ctx)
}

// fillSlab stores items shaped like the lock item (same key and value
// length, so the same slab class) through one pipelined connection, n at a
// time, and returns how many the server refused with SERVER_ERROR.
func fillSlab(t *testing.T, addr string, keyLen, valueLen, from, n int) (refused int) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(60 * time.Second))
	value := strings.Repeat("f", valueLen)
	w := make([]byte, 0, 1<<20)
	r := make([]byte, 64<<10)
	for i := from; i < from+n; i++ {
		k := "fill" + strings.Repeat("0", 20) + strconv.Itoa(i)
		k = k + strings.Repeat("x", max(keyLen-len(k), 0))
		w = append(w, "set "+k+" 0 0 "+strconv.Itoa(valueLen)+"\r\n"+value+"\r\n"...)
	}
	if _, err := c.Write(w); err != nil {
		t.Fatal(err)
	}
	var buf []byte
	lines := 0
	for lines < n {
		m, err := c.Read(r)
		if err != nil {
			t.Fatalf("fill: %v after %d replies", err, lines)
		}
		buf = append(buf, r[:m]...)
		for {
			i := strings.Index(string(buf), "\r\n")
			if i < 0 {
				break
			}
			if strings.HasPrefix(string(buf[:i]), "SERVER_ERROR") {
				refused++
			}
			buf = buf[i+2:]
			lines++
		}
	}
	return refused
}

// Eviction: memcached's LRU drops a live lock silently when its slab class
// fills. The holder's lease ends at its next refresh — and, as documented,
// another owner can acquire the lock before that refresh runs.
func TestEviction(t *testing.T) {
	srv := testserver.Memcached(t, testserver.MemcachedConfig{MemoryMB: 2})
	admin := adminClient(t, srv.Addr())
	a, b := openURL(t, mcURL(srv, "")), openURL(t, mcURL(srv, ""))
	key := "evicted"
	ik := ItemKey(DefaultPrefix, key)
	// TTL 30s: the first automatic refresh runs about 10s after the grant.
	lease, err := a.TryAcquire(ctxT(t, 10*time.Second), key, distlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	granted := time.Now()
	_, it := readRecord(t, admin, ik)
	evicted := false
	for i := 0; i < 10 && !evicted; i++ {
		fillSlab(t, srv.Addr(), len(ik), len(it.Value), i*10000, 10000)
		_, err := admin.Get(ik)
		evicted = errors.Is(err, memcache.ErrCacheMiss)
	}
	if !evicted {
		t.Fatalf("lock item not evicted after filling its slab class")
	}
	if time.Since(granted) > 9*time.Second {
		t.Skipf("filling took %v, past the first refresh: the window is not observable", time.Since(granted))
	}
	// Documented unsafe window: the item is gone, the holder does not know.
	if err := lease.Err(); err != nil {
		t.Fatalf("lease already ended before its refresh: %v", err)
	}
	other, err := b.TryAcquire(ctxT(t, 10*time.Second), key, distlock.WithTTL(time.Minute), distlock.WithAutoRefresh(false))
	if err != nil {
		t.Fatalf("second owner after the eviction: %v", err)
	}
	t.Logf("documented: after the eviction a second owner acquired while the first lease still looked valid (Err=%v)", lease.Err())
	select {
	case <-lease.Done():
		t.Logf("first lease ended %v after the grant: %v", time.Since(granted).Round(time.Millisecond), lease.Err())
	case <-time.After(25 * time.Second):
		t.Fatalf("first lease still open 25s after the grant: its refresh must find the lock gone")
	}
	if err := lease.Err(); !errors.Is(err, distlock.ErrLockLost) {
		t.Errorf("first lease ended with %v, want ErrLockLost", err)
	}
	if err := other.Release(ctxT(t, 5*time.Second)); err != nil {
		t.Errorf("second owner's Release: %v", err)
	}
}

// With -M memcached refuses to store instead of evicting: the lock item
// survives a full slab class, and the refusals — SERVER_ERROR out of memory
// — are ErrUnavailable, never "busy". The held lock cannot be refreshed
// either (cas needs a free chunk), but the meta release needs no memory.
func TestNoEvict(t *testing.T) {
	srv := testserver.Memcached(t, testserver.MemcachedConfig{MemoryMB: 2, NoEvict: true})
	admin := adminClient(t, srv.Addr())
	a, b := openURL(t, mcURL(srv, "")), openURL(t, mcURL(srv, ""))
	ctx := ctxT(t, time.Minute)
	// Pin the server for b before memory runs out (the pin record is an
	// item too).
	warm, err := b.TryAcquire(ctx, "warm-up")
	if err != nil {
		t.Fatal(err)
	}
	_ = warm.Release(ctx)
	key := "kept"
	ik := ItemKey(DefaultPrefix, key)
	lease, err := a.TryAcquire(ctx, key, distlock.WithTTL(time.Minute), distlock.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	_, it := readRecord(t, admin, ik)
	refused := 0
	for i := 0; i < 10 && refused == 0; i++ {
		refused = fillSlab(t, srv.Addr(), len(ik), len(it.Value), i*10000, 10000)
	}
	if refused == 0 {
		t.Fatalf("memcached -M never refused a store")
	}
	if _, err := admin.Get(ik); err != nil {
		t.Fatalf("lock item gone under -M: %v", err)
	}
	_, err = b.TryAcquire(ctx, "new-lock")
	if !errors.Is(err, distlock.ErrUnavailable) || errors.Is(err, distlock.ErrNotAcquired) {
		t.Errorf("acquire with memory full = %v, want ErrUnavailable (not ErrNotAcquired)", err)
	}
	if !strings.Contains(err.Error(), "SERVER_ERROR out of memory") {
		t.Errorf("error %q does not carry memcached's reply", err)
	}
	if err := lease.Refresh(ctx, time.Minute); !errors.Is(err, distlock.ErrUnavailable) {
		t.Errorf("refresh with memory full = %v, want ErrUnavailable", err)
	} else {
		t.Logf("documented: with -M and a full slab class the refresh fails: %v", err)
	}
	if err := lease.Err(); err != nil {
		t.Errorf("lease ended after a transient refresh failure: %v", err)
	}
	if _, err := admin.Get(ik); err != nil {
		t.Fatalf("lock item gone after the failed refresh: %v", err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Errorf("meta release with memory full: %v", err)
	}
	if _, err := admin.Get(ik); !errors.Is(err, memcache.ErrCacheMiss) {
		t.Errorf("lock item after release: %v, want a miss", err)
	}
}

// A restart empties memcached: the holder's Done closes at its next
// refresh, nothing panics, and the Locker works once the server is back.
// In between, another owner can acquire (documented).
func TestRestartWhileHeld(t *testing.T) {
	srv := testserver.Memcached(t, testserver.MemcachedConfig{NoEvict: true})
	a, b := openURL(t, mcURL(srv, "")), openURL(t, mcURL(srv, ""))
	admin := adminClient(t, srv.Addr())
	key := "restart"
	lease, err := a.TryAcquire(ctxT(t, 10*time.Second), key, distlock.WithTTL(9*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 { // move the CAS counter along
		_ = admin.Set(&memcache.Item{Key: "counter/" + strconv.Itoa(i), Value: []byte("x"), Expiration: 60})
	}
	_, it := readRecord(t, admin, ItemKey(DefaultPrefix, key))
	if err := admin.Set(&memcache.Item{Key: "cas-probe", Value: []byte("x"), Expiration: 60}); err != nil {
		t.Fatal(err)
	}
	probe, err := admin.Get("cas-probe")
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Restart(ctxT(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
	// CAS values start again after a restart: they cannot be fencing
	// tokens.
	_ = admin.Close() // its pooled connections died with the server
	if err := admin.Set(&memcache.Item{Key: "cas-probe", Value: []byte("x"), Expiration: 60}); err != nil {
		t.Fatal(err)
	}
	if again, err := admin.Get("cas-probe"); err != nil || again.CasID >= probe.CasID {
		t.Errorf("CAS after the restart %v (%v), before %d: want it to start again", again, err, probe.CasID)
	} else {
		t.Logf("CAS values: lock item %d, probe %d before the restart; probe %d after", it.CasID, probe.CasID, again.CasID)
	}
	restarted := time.Now()
	other, err := b.TryAcquire(ctxT(t, 10*time.Second), key, distlock.WithAutoRefresh(false))
	if err != nil {
		t.Fatalf("second owner after the restart: %v", err)
	}
	t.Logf("documented: after the restart a second owner acquired while the first lease's Err was %v", lease.Err())
	if err := other.Release(ctxT(t, 5*time.Second)); err != nil {
		t.Errorf("second owner's Release: %v", err)
	}
	select {
	case <-lease.Done():
		t.Logf("first lease ended %v after the restart: %v", time.Since(restarted).Round(time.Millisecond), lease.Err())
	case <-time.After(15 * time.Second):
		t.Fatalf("first lease still open 15s after the restart (TTL 9s, refresh every 3s)")
	}
	if err := lease.Err(); !errors.Is(err, distlock.ErrLockLost) {
		t.Errorf("first lease ended with %v, want ErrLockLost", err)
	}
	// The Locker keeps working: its dead pooled connections are replaced.
	for i := range 3 {
		l2, err := a.TryAcquire(ctxT(t, 10*time.Second), key+"/after")
		if err != nil {
			t.Fatalf("TryAcquire %d after the restart: %v", i, err)
		}
		if err := l2.Release(ctxT(t, 5*time.Second)); err != nil {
			t.Fatalf("Release %d after the restart: %v", i, err)
		}
	}
}

// flush_all drops every lock like a restart: the holder learns it at its
// next refresh.
func TestFlushAll(t *testing.T) {
	srv := testserver.Memcached(t, testserver.MemcachedConfig{NoEvict: true})
	admin := adminClient(t, srv.Addr())
	a := openURL(t, mcURL(srv, ""))
	if caps := a.Capabilities(); caps.Fencing || caps.Durable || caps.Notify || caps.Fair || caps.SessionBound || !caps.Expiring || !caps.Reentrant {
		t.Errorf("capabilities %+v, want Expiring and Reentrant only", caps)
	}
	lease, err := a.TryAcquire(ctxT(t, 10*time.Second), "flushed", distlock.WithTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if lease.Token() != 0 {
		t.Errorf("Token() = %d without fencing, want 0", lease.Token())
	}
	if err := admin.FlushAll(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lease.Done():
	case <-time.After(5 * time.Second):
		t.Fatalf("lease still open 5s after flush_all (refresh every 1s)")
	}
	if err := lease.Err(); !errors.Is(err, distlock.ErrLockLost) {
		t.Errorf("lease ended with %v, want ErrLockLost", err)
	}
}

// A server that is down while a lease is held: refreshes fail with
// ErrUnavailable and the lease ends at its validity deadline (ttl − 1s),
// before any other owner could acquire; the Locker recovers afterwards.
func TestDownWhileHeld(t *testing.T) {
	srv := testserver.Memcached(t, testserver.MemcachedConfig{NoEvict: true})
	a := openURL(t, mcURL(srv, ""))
	lease, err := a.TryAcquire(ctxT(t, 10*time.Second), "down", distlock.WithTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	deadline := lease.Deadline()
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lease.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("lease still open 10s after the server died")
	}
	if late := time.Since(deadline); late > time.Second {
		t.Errorf("lease ended %v after its validity deadline", late)
	}
	if err := lease.Err(); !errors.Is(err, distlock.ErrLockLost) {
		t.Errorf("lease ended with %v, want ErrLockLost", err)
	}
	if _, err := a.TryAcquire(ctxT(t, 2*time.Second), "down/2"); !errors.Is(err, distlock.ErrUnavailable) {
		t.Errorf("TryAcquire with the server down = %v, want ErrUnavailable", err)
	}
	if err := srv.Restart(ctxT(t, time.Minute)); err != nil {
		t.Fatal(err)
	}
	l2, err := a.TryAcquire(ctxT(t, 10*time.Second), "down")
	if err != nil {
		t.Fatalf("TryAcquire after the server came back: %v", err)
	}
	_ = l2.Release(ctxT(t, 5*time.Second))
}

func TestValidity(t *testing.T) {
	d := &driver{}
	for _, c := range []struct {
		ttl  time.Duration
		want time.Duration // 0: ErrInvalidTTL
	}{
		{time.Nanosecond, 0},
		{999 * time.Millisecond, 0},
		{time.Second, 0},
		{1500 * time.Millisecond, 0},
		{2*time.Second - 1, 0},
		{2 * time.Second, time.Second},
		{2*time.Second + time.Millisecond, 0},
		{3 * time.Second, 2 * time.Second},
		{15 * time.Second, 14 * time.Second},
		{MaxTTL - time.Second, MaxTTL - 2*time.Second},
		{MaxTTL, MaxTTL - 2*time.Second}, // no room for the tick of padding
		{MaxTTL + time.Second, 0},
		{MaxTTL + time.Nanosecond, 0},
		{365 * 24 * time.Hour, 0},
		{math.MaxInt64, 0},
		{0, 0},
		{-time.Second, 0},
	} {
		got, err := d.Validity(c.ttl)
		if c.want == 0 {
			if !errors.Is(err, backend.ErrInvalidTTL) {
				t.Errorf("Validity(%v) = %v, %v; want ErrInvalidTTL", c.ttl, got, err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("Validity(%v) = %v, %v; want %v", c.ttl, got, err, c.want)
		}
	}
	if got := expSeconds(1000, 0); got != 2 {
		t.Errorf("expSeconds(1s) = %d, want 1s plus a tick", got)
	}
	if got := expSeconds(1001, 0); got != 3 {
		t.Errorf("expSeconds(1.001s) = %d, want rounded up to 2, plus a tick", got)
	}
	if got := ttlSeconds(2 * time.Second); got != 3 {
		t.Errorf("ttlSeconds(2s) = %d, want 3", got)
	}
	if got := ttlSeconds(MaxTTL); got != 2592000 {
		t.Errorf("ttlSeconds(30 days) = %d, want 2592000", got)
	}
	if got := expSeconds(0, 5000); got != 1 {
		t.Errorf("expSeconds(past) = %d, want 1", got)
	}
	if got := expSeconds(int64(MaxTTL/time.Millisecond)+1, 0); got != 2592000 {
		t.Errorf("expSeconds(30d+1ms) = %d, want clamped to 2592000 (more is an absolute time)", got)
	}
}

// TTL edge cases against the server: 1s is refused, 2s works with a
// validity of 1s, 30 days is stored as a relative expiry (a longer one would
// be an absolute time in 1970 and expire at once), 30 days + 1s and huge
// values are refused, and neither a nested acquire nor a refresh with a
// shorter TTL shortens the expiry.
func TestTTLEdges(t *testing.T) {
	srv := testserver.Memcached(t, testserver.MemcachedConfig{NoEvict: true})
	l := openURL(t, mcURL(srv, ""))
	d := openDriver(t, mcURL(srv, ""))
	ctx := ctxT(t, time.Minute)
	for _, ttl := range []time.Duration{time.Second, 1500 * time.Millisecond, MaxTTL + time.Second, 100 * 365 * 24 * time.Hour, math.MaxInt64} {
		if lease, err := l.TryAcquire(ctx, "ttl/bad", distlock.WithTTL(ttl)); !errors.Is(err, distlock.ErrInvalidTTL) {
			if lease != nil {
				_ = lease.Release(ctx)
			}
			t.Errorf("TTL %v: %v, want ErrInvalidTTL", ttl, err)
		}
		// The driver refuses them too when called directly.
		if _, err := d.TryAcquire(ctx, req("ttl/bad", "x", ttl)); !errors.Is(err, backend.ErrInvalidTTL) {
			t.Errorf("driver TTL %v: %v, want ErrInvalidTTL", ttl, err)
		}
	}

	start := time.Now()
	lease, err := l.TryAcquire(ctx, "ttl/2s", distlock.WithTTL(2*time.Second), distlock.WithAutoRefresh(false))
	if err != nil {
		t.Fatalf("TTL 2s: %v", err)
	}
	if v := lease.Deadline().Sub(start); v > 1100*time.Millisecond || v < time.Second {
		t.Errorf("TTL 2s: validity %v, want 1s", v)
	}
	if secs, ok := remainingTTL(t, srv.Addr(), ItemKey(DefaultPrefix, "ttl/2s")); !ok || secs > 3 {
		t.Errorf("TTL 2s: server TTL %d (present %v)", secs, ok)
	}
	_ = lease.Release(ctx)

	// 30 days less a second: the tick of padding just fits.
	edge, err := l.TryAcquire(ctx, "ttl/30d-1s", distlock.WithTTL(MaxTTL-time.Second))
	if err != nil {
		t.Fatalf("TTL 30 days - 1s: %v", err)
	}
	if secs, ok := remainingTTL(t, srv.Addr(), ItemKey(DefaultPrefix, "ttl/30d-1s")); !ok || secs < 2592000-5 || secs > 2592000 {
		t.Errorf("TTL 30 days - 1s: server TTL %d (present %v), want about 2592000", secs, ok)
	}
	_ = edge.Release(ctx)

	ik := ItemKey(DefaultPrefix, "ttl/30d")
	lease, err = l.TryAcquire(ctx, "ttl/30d", distlock.WithTTL(MaxTTL), distlock.WithOwner("long"))
	if err != nil {
		t.Fatalf("TTL 30 days: %v", err)
	}
	secs, ok := remainingTTL(t, srv.Addr(), ik)
	if !ok || secs < 2592000-5 || secs > 2592000 {
		t.Errorf("TTL 30 days: server TTL %d (present %v), want about 2592000", secs, ok)
	}
	// Refresh at the limit: expiry stays relative (2592000), not 2592001.
	time.Sleep(1100 * time.Millisecond)
	if err := lease.Refresh(ctx, MaxTTL); err != nil {
		t.Fatalf("Refresh(30 days): %v", err)
	}
	if secs, ok := remainingTTL(t, srv.Addr(), ik); !ok || secs < 2592000-5 {
		t.Errorf("after Refresh(30 days): server TTL %d (present %v)", secs, ok)
	}
	if err := lease.Refresh(ctx, MaxTTL+time.Second); !errors.Is(err, distlock.ErrInvalidTTL) {
		t.Errorf("Refresh(30 days + 1s) = %v, want ErrInvalidTTL", err)
	}
	// A nested acquire and a refresh with a short TTL never shorten it.
	nested, err := l.TryAcquire(ctx, "ttl/30d", distlock.WithTTL(2*time.Second), distlock.WithOwner("long"))
	if err != nil {
		t.Fatalf("nested acquire: %v", err)
	}
	if err := nested.Refresh(ctx, 2*time.Second); err != nil {
		t.Fatalf("nested refresh: %v", err)
	}
	if secs, ok := remainingTTL(t, srv.Addr(), ik); !ok || secs < 2592000-10 {
		t.Errorf("after a nested 2s acquire and refresh: server TTL %d (present %v), want still about 30 days", secs, ok)
	}
	_ = nested.Release(ctx)
	if secs, ok := remainingTTL(t, srv.Addr(), ik); !ok || secs < 2592000-10 {
		t.Errorf("after the nested release: server TTL %d (present %v), want still about 30 days", secs, ok)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestParseMDReply(t *testing.T) {
	for _, c := range []struct {
		line string
		want mdResult
		err  bool
	}{
		{"HD", mdDeleted, false},
		{"OK", mdDeleted, false},
		{"EX", mdExists, false},
		{"NF", mdNotFound, false},
		{"ERROR", mdUnsupported, false},
		{"CLIENT_ERROR bad command line format", mdUnsupported, false},
		{"SERVER_ERROR out of memory", 0, true},
		{"", 0, true},
		{"HD extra", 0, true},
	} {
		got, err := parseMDReply([]byte(c.line))
		if (err != nil) != c.err || (!c.err && got != c.want) {
			t.Errorf("parseMDReply(%q) = %v, %v; want %v (error %v)", c.line, got, err, c.want, c.err)
		}
	}
}

// The meta compare-and-delete against the real server: HD when the CAS
// value matches, EX when it does not (the item stays), NF when there is no
// item; and it honours its context.
func TestMetaDelete(t *testing.T) {
	srv := testserver.Memcached(t, testserver.MemcachedConfig{})
	admin := adminClient(t, srv.Addr())
	addr, err := net.ResolveTCPAddr("tcp", srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	p := newRawPool(nil, 2*time.Second, 2)
	defer p.close()
	ctx := ctxT(t, 30*time.Second)
	const key = "md-test"
	if err := admin.Set(&memcache.Item{Key: key, Value: []byte("v"), Expiration: 60}); err != nil {
		t.Fatal(err)
	}
	it, err := admin.Get(key)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := p.metaDelete(ctx, addr, key, it.CasID+1); err != nil || res != mdExists {
		t.Errorf("md with a wrong CAS = %v, %v; want EX", res, err)
	}
	if _, err := admin.Get(key); err != nil {
		t.Errorf("item gone after an EX: %v", err)
	}
	if res, err := p.metaDelete(ctx, addr, key, it.CasID); err != nil || res != mdDeleted {
		t.Errorf("md with the CAS = %v, %v; want HD", res, err)
	}
	if _, err := admin.Get(key); !errors.Is(err, memcache.ErrCacheMiss) {
		t.Errorf("item after HD: %v, want a miss", err)
	}
	if res, err := p.metaDelete(ctx, addr, key, it.CasID); err != nil || res != mdNotFound {
		t.Errorf("md of a missing item = %v, %v; want NF", res, err)
	}
	// The idle connection was reused throughout.
	p.mu.Lock()
	idle := len(p.idle[addr.String()])
	p.mu.Unlock()
	if idle != 1 {
		t.Errorf("%d idle connections, want 1 reused", idle)
	}

	// A paused server: md returns when its context ends.
	pause(t, srv)
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = p.metaDelete(short, addr, key, 1)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("md against a paused server = %v, want DeadlineExceeded", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("md returned %v after a 200ms deadline", took)
	}
	cancelled, cancel2 := context.WithCancel(ctx)
	time.AfterFunc(100*time.Millisecond, cancel2)
	if _, err = p.metaDelete(cancelled, addr, key, 1); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled md = %v, want Canceled", err)
	}
}

func TestItemKey(t *testing.T) {
	base := strings.Repeat("k", 250)
	keys := []string{
		"a", "A", "a ", " a", "a\x00b", "a\nb", "a b", "a\tb", "🔒", "ключ", "\x7f",
		base + "x", base + "y", strings.Repeat("z", 1024), strings.Repeat("z", 1023),
	}
	seen := map[string]string{}
	for _, k := range keys {
		for _, prefix := range []string{DefaultPrefix, "", strings.Repeat("p", maxPrefixLen)} {
			ik := ItemKey(prefix, k)
			if len(ik) > 250 || len(ik) != len(prefix)+hashLen {
				t.Errorf("ItemKey(%q, %q) is %d bytes", prefix, k, len(ik))
			}
			for i := 0; i < len(ik); i++ {
				if ik[i] <= ' ' || ik[i] == 0x7f {
					t.Errorf("ItemKey(%q) has byte 0x%02x", k, ik[i])
				}
			}
			if prefix != DefaultPrefix {
				continue
			}
			if prev, dup := seen[ik]; dup {
				t.Errorf("keys %q and %q map to the same item %s", prev, k, ik)
			}
			seen[ik] = k
		}
	}
	if ItemKey(DefaultPrefix, "x") != ItemKey(DefaultPrefix, "x") {
		t.Errorf("ItemKey is not deterministic")
	}
	for _, bad := range []string{"a b", "a\tb", "a\x7f", "a\x00", strings.Repeat("p", maxPrefixLen+1)} {
		if checkPrefix(bad) == nil {
			t.Errorf("prefix %q accepted", bad)
		}
	}
	if pinKey(DefaultPrefix) == ItemKey(DefaultPrefix, "servers") || len(pinKey(DefaultPrefix)) == len(DefaultPrefix)+hashLen {
		t.Errorf("pin key can collide with a lock item")
	}
}

func TestRecord(t *testing.T) {
	for _, r := range []record{
		{expMs: 1, tenure: "t", holds: []string{"h"}, owner: "o"},
		{expMs: 1700000000000, tenure: randomID(tenureBytes), holds: []string{randomID(holdBytes), randomID(holdBytes)}, owner: "owner with spaces, commas,\nnewlines \x00 and 🔒"},
		{expMs: -5, tenure: "x", holds: []string{"a", "b", "c"}, owner: " "},
	} {
		got, ok := decodeRecord(r.encode())
		if !ok || got.expMs != r.expMs || got.tenure != r.tenure || got.owner != r.owner || strings.Join(got.holds, ",") != strings.Join(r.holds, ",") {
			t.Errorf("round trip of %+v = %+v, %v", r, got, ok)
		}
	}
	for _, v := range []string{"", "DL1", "DL1 ", "DL1 5", "DL1 5 t", "DL1 5 t h", "DL1 x t h o", "DL1 5  h o", "DL1 5 t  o", "DL1 5 t h, o", "DL2 5 t h o", "garbage"} {
		if _, ok := decodeRecord([]byte(v)); ok {
			t.Errorf("decodeRecord(%q) accepted", v)
		}
	}
	if n := len(randomID(holdBytes)); n != holdIDLen {
		t.Errorf("hold id is %d bytes, want %d", n, holdIDLen)
	}
}

func FuzzDecodeRecord(f *testing.F) {
	f.Add([]byte("DL1 5 t h o"))
	f.Add([]byte("DL1 5 t a,b owner x"))
	f.Fuzz(func(t *testing.T, v []byte) {
		r, ok := decodeRecord(v)
		if !ok {
			return
		}
		again, ok := decodeRecord(r.encode())
		if !ok || again.owner != r.owner || again.tenure != r.tenure || again.expMs != r.expMs || len(again.holds) != len(r.holds) {
			t.Errorf("re-encoding %q changed it: %+v vs %+v", v, r, again)
		}
	})
}

// Bad URLs get typed errors and no panic.
func TestOpenBadURLs(t *testing.T) {
	conformance.RefusesURLs(t, append(badURLs,
		"memcached://[::1", "memcached://127.0.0.1:99999999", "memcached:/%zz", "memcached://127.0.0.1:1/?no_such_parameter=1",
		"memcached://no-such-host.invalid:11211",
	)...)
	for _, u := range []string{
		"memcached://127.0.0.1", "memcached://127.0.0.1:11211/", "memcached://localhost:11211",
		"memcached://127.0.0.1:1,127.0.0.1:2?prefix=p:&timeout=250ms&max_idle=4&release=cas&pin=off",
		"memcached://[::1]:11211?release=auto&pin=reset",
	} {
		l, err := distlock.Open(ctxT(t, 10*time.Second), u)
		if err != nil {
			t.Errorf("Open(%q): %v", u, err)
			continue
		}
		_ = l.Close()
	}
}

// An unreachable server gives ErrUnavailable within the caller's context:
// a closed port at once, a stopped (SIGSTOP) server after the client's I/O
// timeout, and the context's own error if that comes first.
func TestUnreachable(t *testing.T) {
	l := openURL(t, closedPortURL(t))
	start := time.Now()
	_, err := l.Acquire(ctxT(t, 2*time.Second), "k")
	if !errors.Is(err, distlock.ErrUnavailable) {
		t.Errorf("closed port: %v, want ErrUnavailable", err)
	}
	var opErr *net.OpError
	if !errors.As(err, &opErr) {
		t.Errorf("closed port: the client's error is not reachable with errors.As: %v", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("closed port: answered after %v", took)
	}

	srv := testserver.Memcached(t, testserver.MemcachedConfig{})
	p := openURL(t, mcURL(srv, "timeout=300ms"))
	warm, err := p.TryAcquire(ctxT(t, 5*time.Second), "warm")
	if err != nil {
		t.Fatal(err)
	}
	_ = warm.Release(ctxT(t, 5*time.Second))
	pause(t, srv)
	start = time.Now()
	_, err = p.TryAcquire(ctxT(t, 5*time.Second), "k")
	if !errors.Is(err, distlock.ErrUnavailable) {
		t.Errorf("stopped server: %v, want ErrUnavailable", err)
	}
	var netErr net.Error
	if !errors.As(err, &netErr) || !netErr.Timeout() {
		t.Errorf("stopped server: want the client's timeout reachable with errors.As, got %v", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("stopped server: answered after %v with a 300ms I/O timeout", took)
	}
	start = time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	_, err = p.Acquire(ctx, "k2")
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, distlock.ErrNotAcquired) {
		t.Errorf("stopped server, short ctx: %v, want ErrNotAcquired and DeadlineExceeded", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("stopped server, short ctx: answered after %v", took)
	}
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	// Nothing is left behind by the attempts whose outcome was unknown.
	other := openURL(t, mcURL(srv, ""))
	for _, k := range []string{"k", "k2"} {
		if !waitFor(10*time.Second, func() bool {
			lease, err := other.TryAcquire(ctxT(t, 5*time.Second), k)
			if err != nil {
				return false
			}
			_ = lease.Release(ctxT(t, 5*time.Second))
			return true
		}) {
			t.Errorf("%s still held 10s after the server resumed", k)
		}
	}
}

// The ambiguous acquire (PITFALLS, every backend): the add reaches a server
// that answers only after the client gave up. The lock it creates must not
// block others until its TTL (here a minute): the background undo removes
// it once the server answers.
func TestAmbiguousAcquire(t *testing.T) {
	srv := testserver.Memcached(t, testserver.MemcachedConfig{})
	admin := adminClient(t, srv.Addr())
	l := openURL(t, mcURL(srv, "timeout=500ms"))
	warm, err := l.TryAcquire(ctxT(t, 5*time.Second), "warm")
	if err != nil {
		t.Fatal(err)
	}
	_ = warm.Release(ctxT(t, 5*time.Second))
	pause(t, srv)
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	_, err = l.TryAcquire(ctx, "ambiguous", distlock.WithTTL(time.Minute))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("TryAcquire against a stopped server = %v, want the ctx error", err)
	}
	// Past the client's I/O timeout: gomemcache has closed the connection,
	// but the add sits unread in the server's socket buffer.
	time.Sleep(1500 * time.Millisecond)
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	resumed := time.Now()
	seen := false
	other := openURL(t, mcURL(srv, ""))
	if !waitFor(10*time.Second, func() bool {
		if _, err := admin.Get(ItemKey(DefaultPrefix, "ambiguous")); err == nil {
			seen = true
		}
		lease, err := other.TryAcquire(ctxT(t, 5*time.Second), "ambiguous")
		if err != nil {
			return false
		}
		_ = lease.Release(ctxT(t, 5*time.Second))
		return true
	}) {
		t.Fatalf("the lock of an abandoned acquire (TTL 1m) still blocks others 10s after the server resumed")
	}
	t.Logf("free %v after the server resumed (the late add was seen: %v)", time.Since(resumed).Round(time.Millisecond), seen)
}

// Close leaves no goroutine behind — not even the background work of an
// abandoned acquisition — and releases held locks on the server.
func TestNoLeaks(t *testing.T) {
	srv := testserver.Memcached(t, testserver.MemcachedConfig{})
	admin := adminClient(t, srv.Addr())
	runtime.GC()
	before := runtime.NumGoroutine()
	l, err := distlock.Open(ctxT(t, 10*time.Second), mcURL(srv, "timeout=500ms"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, time.Minute)
	held, err := l.TryAcquire(ctx, "leak/held", distlock.WithTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		lease, err := l.Acquire(ctx, "leak/cycle")
		if err != nil {
			t.Fatal(err)
		}
		_ = lease.Release(ctx)
	}
	waiting := make(chan error, 1)
	go func() {
		_, err := l.Acquire(ctx, "leak/held")
		waiting <- err
	}()
	// An abandoned acquisition against a stopped server.
	pause(t, srv)
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, _ = l.TryAcquire(short, "leak/abandoned")
	cancel()
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	// The held lease refreshes meanwhile (every second): its record's
	// expiry moves on.
	heldKey := ItemKey(DefaultPrefix, "leak/held")
	first, _ := readRecord(t, admin, heldKey)
	if !waitFor(5*time.Second, func() bool {
		it, err := admin.Get(heldKey)
		if err != nil {
			return false
		}
		rec, ok := decodeRecord(it.Value)
		return ok && rec.expMs > first.expMs
	}) {
		t.Errorf("the held lease was not refreshed within 5s")
	}
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := <-waiting; !errors.Is(err, distlock.ErrClosed) {
		t.Errorf("waiting Acquire after Close = %v, want ErrClosed", err)
	}
	if !errors.Is(held.Err(), distlock.ErrClosed) {
		t.Errorf("held lease after Close: %v", held.Err())
	}
	if _, err := admin.Get(ItemKey(DefaultPrefix, "leak/held")); !errors.Is(err, memcache.ErrCacheMiss) {
		t.Errorf("held lock left on the server after Close: %v", err)
	}
	if !waitFor(5*time.Second, func() bool { return runtime.NumGoroutine() <= before }) {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines after Close, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
	}
}

// New over a caller's client: without a selector releases use the tombstone;
// with the client's selector, the meta protocol and the server-list guard.
func TestNew(t *testing.T) {
	srv := testserver.Memcached(t, testserver.MemcachedConfig{})
	admin := adminClient(t, srv.Addr())
	ctx := ctxT(t, 30*time.Second)

	plain := memcache.New(srv.Addr())
	defer plain.Close()
	l, err := New(plain, WithDefaults(distlock.WithTTL(3*time.Second)), WithPrefix("typed:"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	tomb := statTombstones.Load()
	start := time.Now()
	lease, err := l.TryAcquire(ctx, "typed")
	if err != nil {
		t.Fatal(err)
	}
	if v := lease.Deadline().Sub(start); v > 2100*time.Millisecond || v < 2*time.Second {
		t.Errorf("WithDefaults(WithTTL(3s)): validity %v, want 2s", v)
	}
	if l.ItemKey("typed") != ItemKey("typed:", "typed") {
		t.Errorf("ItemKey ignores the prefix")
	}
	if _, err := admin.Get(l.ItemKey("typed")); err != nil {
		t.Errorf("item under the prefix: %v", err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if statTombstones.Load() == tomb {
		t.Errorf("without a selector the release did not use the tombstone")
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := plain.Get("anything"); !errors.Is(err, memcache.ErrCacheMiss) {
		t.Errorf("caller's client unusable after Close: %v", err)
	}

	ss := new(memcache.ServerList)
	if err := ss.SetServers(srv.Addr()); err != nil {
		t.Fatal(err)
	}
	sc := memcache.NewFromSelector(ss)
	ml, err := New(sc, WithSelector(ss), WithCloseClient())
	if err != nil {
		t.Fatal(err)
	}
	defer ml.Close()
	meta := statMetaDeletes.Load()
	lease, err = ml.TryAcquire(ctx, "typed")
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if statMetaDeletes.Load() == meta {
		t.Errorf("with the selector the release did not use md")
	}
	if _, err := admin.Get(pinKey(DefaultPrefix)); err != nil {
		t.Errorf("no server-list record with the selector: %v", err)
	}

}

// New checks every option value (and the client) itself: a bad one is an
// error wrapping ErrInvalidOption, on one line, naming the option — not a
// Locker whose acquisitions fail later. Before, New returned such a Locker
// (its TryAcquire answered ErrInvalidOption) and took out-of-range modes as
// the defaults. Needs no server.
func TestNewChecksOptions(t *testing.T) {
	plain := memcache.New("127.0.0.1:1")
	for _, c := range []struct {
		name string
		c    *memcache.Client
		opts []Option
		want string // in the message
	}{
		{"nil client", nil, nil, "New(nil)"},
		{"space", plain, []Option{WithPrefix("a b")}, `WithPrefix("a b")`},
		{"long prefix", plain, []Option{WithPrefix(strings.Repeat("p", 201))}, "WithPrefix("},
		{"nil option", plain, []Option{WithPrefix("p:"), nil}, "option 1 is nil"},
		{"nil selector", plain, []Option{WithSelector(nil)}, "WithSelector(nil)"},
		{"nil server list", plain, []Option{WithSelector((*memcache.ServerList)(nil))}, "WithSelector(nil)"},
		{"release", plain, []Option{WithRelease(ReleaseMode(7))}, "WithRelease(7)"},
		{"release negative", plain, []Option{WithRelease(-1)}, "WithRelease(-1)"},
		{"pin", plain, []Option{WithPin(PinMode(3))}, "WithPin(3)"},
	} {
		l, err := New(c.c, c.opts...)
		if l != nil || !errors.Is(err, distlock.ErrInvalidOption) {
			t.Errorf("%s: New = %v, %v; want no Locker and ErrInvalidOption", c.name, l, err)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, c.want) || strings.Contains(msg, "\n") {
			t.Errorf("%s: error %q: want one line naming %s", c.name, msg, c.want)
		}
	}
	for _, m := range []ReleaseMode{ReleaseAuto, ReleaseCAS} {
		for _, p := range []PinMode{PinCheck, PinReset, PinOff} {
			l, err := New(plain, WithRelease(m), WithPin(p), WithPrefix(""))
			if err != nil {
				t.Errorf("New(%v, %v): %v", m, p, err)
				continue
			}
			_ = l.Close()
		}
	}
}
