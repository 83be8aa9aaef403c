package memcached

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/testkit/soak"
	"github.com/distlock/distlock/internal/testkit/testserver"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// gate records every write on the connections of a client (and of the
// driver's own pool, which dials through the client's dialer) and, while
// armed, holds every read until it is opened: a request is then in flight,
// written and unanswered, for as long as a test needs.
type gate struct {
	mu      sync.Mutex
	writes  [][]byte
	writers []int64                // the goroutine of each write
	hold    chan struct{}          // not nil: reads wait until it is closed
	fail    map[chan struct{}]bool // reads held by this hold then fail
	waiting chan chan<- int        // a held read announces itself
}

func (g *gate) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &gatedConn{Conn: nc, g: g}, nil
}

// arm makes the next reads wait; it returns the function that lets them
// (and every later one, until the next arm) go on.
func (g *gate) arm() (open func()) {
	h := make(chan struct{})
	g.mu.Lock()
	g.hold = h
	g.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			if g.hold == h {
				g.hold = nil
			}
			g.mu.Unlock()
			close(h)
		})
	}
}

// armFailing is arm, but the reads it held fail when they are let go: the
// connection breaks after its requests were sent.
func (g *gate) armFailing() (open func()) {
	open = g.arm()
	g.mu.Lock()
	if g.fail == nil {
		g.fail = map[chan struct{}]bool{}
	}
	g.fail[g.hold] = true
	g.mu.Unlock()
	return open
}

// held waits until a read is held (a request was written and its reply
// is waited for).
func (g *gate) held(t *testing.T) {
	t.Helper()
	select {
	case <-g.waiting:
	case <-time.After(10 * time.Second):
		t.Fatal("no request went out")
	}
}

// written returns the writes so far.
func (g *gate) written() [][]byte {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([][]byte(nil), g.writes...)
}

type gatedConn struct {
	net.Conn
	g *gate
}

func (c *gatedConn) Write(p []byte) (int, error) {
	c.g.mu.Lock()
	c.g.writes = append(c.g.writes, bytes.Clone(p))
	c.g.writers = append(c.g.writers, goid())
	c.g.mu.Unlock()
	return c.Conn.Write(p)
}

func (c *gatedConn) Read(p []byte) (int, error) {
	c.g.mu.Lock()
	h := c.g.hold
	c.g.mu.Unlock()
	if h != nil {
		select {
		case c.g.waiting <- nil:
		default:
		}
		<-h
		c.g.mu.Lock()
		fail := c.g.fail[h]
		c.g.mu.Unlock()
		if fail {
			_ = c.Conn.Close()
			return 0, net.ErrClosed
		}
	}
	return c.Conn.Read(p)
}

// goid is the id of the calling goroutine.
func goid() int64 {
	var buf [64]byte
	s := bytes.TrimPrefix(buf[:runtime.Stack(buf[:], false)], []byte("goroutine "))
	id, _ := strconv.ParseInt(string(s[:bytes.IndexByte(s, ' ')]), 10, 64)
	return id
}

// gatedDriver is a driver on srv that knows its selector (as the URL
// opener makes it), whose connections go through a gate; it has taken and
// released one lock, so the pin is checked and a connection is idle.
func gatedDriver(t *testing.T, srv *testserver.Server) (*driver, *gate, *pipe) {
	t.Helper()
	g := &gate{waiting: make(chan chan<- int, 1)}
	d, p := dialledDriver(t, srv, g.dial)
	return d, g, p
}

// dialledDriver is gatedDriver's driver with its connections dialled by
// dial, and the pipe to srv.
func dialledDriver(t *testing.T, srv *testserver.Server, dial func(ctx context.Context, network, addr string) (net.Conn, error)) (*driver, *pipe) {
	t.Helper()
	ss := new(memcache.ServerList)
	require.NoError(t, ss.SetServers(srv.Addr()))
	c := memcache.NewFromSelector(ss)
	c.Timeout = 10 * time.Second
	c.DialContext = dial
	d, err := newDriver(c, []Option{WithSelector(ss), WithCloseClient()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Close() })
	l, err := d.TryAcquire(ctxT(t, 10*time.Second), req("pipe/warm", "warm", time.Minute))
	require.NoError(t, err)
	require.NoError(t, l.Release(ctxT(t, 10*time.Second)))
	addr, err := ss.PickServer("any")
	require.NoError(t, err)
	return d, d.pipes.to(addr)
}

// sentKey reports whether any write named the item of key.
func sentKey(writes [][]byte, key string) bool {
	for _, w := range writes {
		if bytes.Contains(w, []byte(" "+ItemKey(DefaultPrefix, key)+" ")) {
			return true
		}
	}
	return false
}

type acquired struct {
	l   backend.Lock
	err error
}

func tryAcquireAsync(ctx context.Context, d *driver, key, owner string) <-chan acquired {
	ch := make(chan acquired, 1)
	go func() {
		l, err := d.TryAcquire(ctx, req(key, owner, time.Minute))
		ch <- acquired{l, err}
	}()
	return ch
}

// queueBehind puts an acquisition on d in flight, its reply held by g,
// calls start (which starts requests that queue behind it) and waits until
// n requests are queued. release lets the first reply through and waits
// for the acquisition.
func queueBehind(t *testing.T, d *driver, g *gate, p *pipe, n int, start func()) (release func()) {
	t.Helper()
	open := g.arm()
	t.Cleanup(open)
	first := tryAcquireAsync(ctxT(t, time.Minute), d, "pipe/first", "a")
	g.held(t)
	start()
	if !waitFor(10*time.Second, func() bool { return p.pending() == n }) {
		t.Fatalf("%d requests queued behind the one in flight, want %d", p.pending(), n)
	}
	return func() {
		open()
		if r := <-first; r.err != nil {
			t.Fatalf("the acquisition in flight: %v", r.err)
		}
	}
}

// An acquisition whose ctx ends while it waits in the queue behind a
// request in flight is never sent: its caller gets ctx's error and the
// server never sees the key.
func TestPipeCancelledQueuedAcquireNeverSent(t *testing.T) {
	srv := testserver.Memcached(t, testserver.MemcachedConfig{NoEvict: true})
	d, g, p := gatedDriver(t, srv)
	ctx, cancel := context.WithCancel(t.Context())
	var queued <-chan acquired
	release := queueBehind(t, d, g, p, 1, func() { queued = tryAcquireAsync(ctx, d, "pipe/queued", "b") })
	cancel()
	if r := <-queued; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("cancelled queued TryAcquire = %v, %v; want context.Canceled", r.l, r.err)
	}
	release()
	_ = d.Close() // waits for the flusher and any undo
	assert.False(t, sentKey(g.written(), "pipe/queued"), "the cancelled queued acquisition was sent")
	if _, err := adminClient(t, srv.Addr()).Get(ItemKey(DefaultPrefix, "pipe/queued")); !errors.Is(err, memcache.ErrCacheMiss) {
		t.Errorf("the item of the cancelled acquisition: %v, want a miss", err)
	}
}

// Requests that queue behind one in flight go out in one write and each
// gets its own outcome; an acquisition of that batch whose caller gave up
// after it was sent is undone (no lock left behind), and its neighbours
// keep theirs.
func TestPipeBatchedAcquireAbandonedUndone(t *testing.T) {
	srv := testserver.Memcached(t, testserver.MemcachedConfig{NoEvict: true})
	d, g, p := gatedDriver(t, srv)
	admin := adminClient(t, srv.Addr())
	taken, err := d.TryAcquire(ctxT(t, 10*time.Second), req("pipe/taken", "other", time.Minute))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	var abandoned, kept, busy <-chan acquired
	release := queueBehind(t, d, g, p, 3, func() {
		abandoned = tryAcquireAsync(ctx, d, "pipe/abandoned", "a")
		kept = tryAcquireAsync(ctxT(t, time.Minute), d, "pipe/kept", "a")
		busy = tryAcquireAsync(ctxT(t, time.Minute), d, "pipe/taken", "a")
	})
	trips0, reqs0 := p.q.Stats()
	openBatch := g.arm() // the batch's replies are held in their turn
	defer openBatch()
	release()
	g.held(t) // the batch is written, its replies held
	cancel()
	if r := <-abandoned; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("TryAcquire abandoned after it was sent = %v, %v; want context.Canceled", r.l, r.err)
	}
	openBatch()
	if r := <-kept; r.err != nil {
		t.Errorf("a neighbour in the batch: %v", r.err)
	}
	if r := <-busy; !errors.Is(r.err, backend.ErrNotAcquired) {
		t.Errorf("a neighbour in the batch on a held key: %v, %v; want ErrNotAcquired", r.l, r.err)
	}
	trips1, reqs1 := p.q.Stats()
	if got, n := trips1-trips0, reqs1-reqs0; got < 1 || n < 3 {
		t.Errorf("after the first: %d round trips carrying %d requests", got, n)
	}
	batched := false
	for _, w := range g.written() {
		if sentKey([][]byte{w}, "pipe/abandoned") && sentKey([][]byte{w}, "pipe/kept") && sentKey([][]byte{w}, "pipe/taken") {
			batched = true
		}
	}
	assert.True(t, batched, "the three queued acquisitions did not go out in one write")
	if !waitFor(10*time.Second, func() bool {
		_, err := admin.Get(ItemKey(DefaultPrefix, "pipe/abandoned"))
		return errors.Is(err, memcache.ErrCacheMiss)
	}) {
		t.Error("the lock of the abandoned acquisition (TTL 1m) is still there 10s later")
	}
	undone := false
	for _, w := range g.written() {
		undone = undone || bytes.Contains(w, []byte("md "+ItemKey(DefaultPrefix, "pipe/abandoned")+" "))
	}
	assert.True(t, undone, "the abandoned acquisition's lock went without the undo's delete")
	if _, err := admin.Get(ItemKey(DefaultPrefix, "pipe/kept")); err != nil {
		t.Errorf("the neighbour's lock: %v", err)
	}
	_ = taken.Release(ctxT(t, 10*time.Second))
}

// A lone request is sent at once, on its caller's goroutine, as an
// exchange of its own.
func TestPipeLoneRequestGoesAtOnce(t *testing.T) {
	srv := testserver.Memcached(t, testserver.MemcachedConfig{NoEvict: true})
	_, g, p := gatedDriver(t, srv)
	trips0, reqs0 := p.q.Stats()
	n0 := len(g.written())
	var line string
	err := p.do(ctxT(t, 10*time.Second), []byte("version\r\n"), func(r *bufio.Reader) error {
		l, err := readLine(r)
		line = string(l)
		return err
	})
	if err != nil || len(line) < len("VERSION ") {
		t.Fatalf("version = %q, %v", line, err)
	}
	trips1, reqs1 := p.q.Stats()
	if trips, reqs := trips1-trips0, reqs1-reqs0; trips != 1 || reqs != 1 {
		t.Errorf("%d round trips carrying %d requests, want 1 and 1", trips, reqs)
	}
	g.mu.Lock()
	writers := g.writers[n0:]
	g.mu.Unlock()
	if me := goid(); len(writers) != 1 || writers[0] != me {
		t.Errorf("written by goroutines %v, want one write by the caller (%d)", writers, me)
	}
}

// When the connection breaks after a batch was sent, every request of the
// batch has an unknown outcome, as a lone request's would: each
// acquisition undoes its first hold in the background and tries once more
// on a fresh connection, so each caller gets its lock and no hold is left
// behind.
func TestPipeBatchBrokenConnection(t *testing.T) {
	srv := testserver.Memcached(t, testserver.MemcachedConfig{NoEvict: true})
	d, g, p := gatedDriver(t, srv)
	admin := adminClient(t, srv.Addr())
	var queued []<-chan acquired
	release := queueBehind(t, d, g, p, 3, func() {
		for i := range 3 {
			queued = append(queued, tryAcquireAsync(ctxT(t, time.Minute), d, "pipe/io/"+strconv.Itoa(i), "a"))
		}
	})
	openBatch := g.armFailing()
	defer openBatch()
	release()
	g.held(t) // the batch is written
	openBatch()
	for i, ch := range queued {
		r := <-ch
		if r.err != nil {
			t.Errorf("acquisition %d after a broken connection: %v", i, r.err)
			continue
		}
		l := r.l.(*lock)
		if !recordsJustHold(admin, l) {
			it, err := admin.Get(l.key)
			t.Errorf("acquisition %d: the item does not come to record just its hold %s: %v %v", i, l.hold, it, err)
		}
		// The add was sent again on a fresh connection. Whether the first
		// one landed is unknown, as it is to the driver: the server may
		// have read it before the cut, or lost it with the reset (closing
		// a socket with unread replies resets it, which drops what the
		// server had not read yet). If it landed, its hold was taken off
		// (by cas when the retry had nested in it, by md when the undo
		// came first); either way the item records just the retry's hold.
		adds, undone := 0, false
		for _, w := range g.written() {
			w = append([]byte("\n"), w...)
			adds += bytes.Count(w, []byte("\nadd "+l.key+" "))
			for _, verb := range []string{"cas ", "md "} {
				undone = undone || bytes.Contains(w, []byte("\n"+verb+l.key+" "))
			}
		}
		if adds < 2 {
			t.Errorf("acquisition %d: %d add written: the broken batch was not retried", i, adds)
		}
		t.Logf("acquisition %d: %d adds written, first hold undone: %v", i, adds, undone)
	}
}

// recordsJustHold reports whether l's item comes, within 10s, to record
// just l's hold.
func recordsJustHold(admin *memcache.Client, l *lock) bool {
	return waitFor(10*time.Second, func() bool {
		it, err := admin.Get(l.key)
		if err != nil {
			return false
		}
		rec, ok := decodeRecord(it.Value)
		return ok && len(rec.holds) == 1 && rec.holds[0] == l.hold
	})
}

// readVersion reads the reply of "version".
func readVersion(r *bufio.Reader) error {
	_, err := readLine(r)
	return err
}

// A panic in a lone request's reply reader, recovered by its caller, must
// not leave the pipe busy for ever: the next request goes out and is
// answered.
func TestPipePanicInOwnRequestFreesPipe(t *testing.T) {
	srv := testserver.Memcached(t, testserver.MemcachedConfig{NoEvict: true})
	_, _, p := gatedDriver(t, srv)
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the reader's panic did not reach the caller")
			}
		}()
		_ = p.do(ctxT(t, 10*time.Second), []byte("version\r\n"), func(*bufio.Reader) error { panic("reader panics") })
	}()
	if err := p.do(ctxT(t, 5*time.Second), []byte("version\r\n"), readVersion); err != nil {
		t.Fatalf("the request after a recovered panic: %v (busy %v)", err, p.q.Busy())
	}
}

// nestedContenders is how many holds of one owner on one key contend at
// once in the tests below. Each compare-and-swap round lets one of them
// through, so the last waits about two round trips per contender: 40 is
// well above casRetries (the fixed count that natural batching's lockstep
// exhausted) and well inside casWindow on a loaded machine under -race,
// where 100 contenders (about 10ms a round trip) made some acquisitions
// give up after casWindow with errContention.
const nestedContenders = 40

// Many nested holds of one owner on one key, released at once: with
// natural batching their gets go out in one write and their cas in the
// next, so every round only one of them wins. Each release must still
// succeed (not "compare-and-swap conflicts"), and the item must be gone.
//
// Failed before casPace (about a third of 100 releases got "16
// compare-and-swap conflicts in a row" and the item stayed): rewrite
// bounded its loop at casRetries, which natural batching's lockstep
// exhausts; it now paces its retries over casWindow, as acquireOnce does.
func TestPipeConcurrentNestedReleasesOneKey(t *testing.T) {
	srv := testserver.Memcached(t, testserver.MemcachedConfig{NoEvict: true})
	d := openDriver(t, mcURL(srv, ""))
	const n = nestedContenders
	locks := make([]backend.Lock, n)
	for i := range locks {
		l, err := d.TryAcquire(ctxT(t, 10*time.Second), req("pipe/nested", "a", time.Minute))
		require.NoError(t, err, "nested hold %d", i)
		locks[i] = l
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i, l := range locks {
		wg.Go(func() { errs[i] = l.Release(ctxT(t, 30*time.Second)) })
	}
	wg.Wait()
	logBatching(t, d)
	failed := 0
	for i, err := range errs {
		if err != nil {
			failed++
			if failed < 3 {
				t.Errorf("release %d: %v", i, err)
			}
		}
	}
	if failed > 0 {
		t.Errorf("%d of %d concurrent releases failed", failed, n)
	}
	if _, err := adminClient(t, srv.Addr()).Get(ItemKey(DefaultPrefix, "pipe/nested")); !errors.Is(err, memcache.ErrCacheMiss) {
		t.Errorf("the item after every release: %v, want a miss", err)
	}
}

// Many nested acquisitions of one owner on one key at once (their add,
// gets and cas batched together) all succeed, and so do their releases.
func TestPipeConcurrentNestedAcquiresOneKey(t *testing.T) {
	srv := testserver.Memcached(t, testserver.MemcachedConfig{NoEvict: true})
	d := openDriver(t, mcURL(srv, ""))
	const n = nestedContenders
	var wg sync.WaitGroup
	locks := make([]backend.Lock, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			locks[i], errs[i] = d.TryAcquire(ctxT(t, 30*time.Second), req("pipe/nestacq", "a", time.Minute))
		})
	}
	wg.Wait()
	logBatching(t, d)
	for i, err := range errs {
		if err != nil {
			t.Errorf("acquisition %d: %v", i, err)
			continue
		}
		assert.NoError(t, locks[i].Release(ctxT(t, 30*time.Second)), "release %d", i)
	}
	if _, err := adminClient(t, srv.Addr()).Get(ItemKey(DefaultPrefix, "pipe/nestacq")); !errors.Is(err, memcache.ErrCacheMiss) {
		t.Errorf("the item after every release: %v, want a miss", err)
	}
}

// logBatching logs the round trips and requests of d's pipes.
func logBatching(t *testing.T, d *driver) {
	if d.pipes == nil {
		t.Fatal("the driver has no pipes: batching is off")
	}
	d.pipes.m.Range(func(_, v any) bool {
		rt, n := v.(*pipe).q.Stats()
		t.Logf("%d requests in %d round trips", n, rt)
		return true
	})
}

// In a batch, a reply that cannot be placed (a CLIENT_ERROR where a gets
// expects VALUE or END: memcached's answer to a key over 250 bytes) puts
// the connection out of step, and the requests after it in the batch —
// written, maybe applied — must get an error whose outcome is unknown
// (ioError: the driver undoes and retries), not one that reads as the
// server's refusal (the add it applied would be left held, unowned).
func TestPipeOutOfStepLaterRequestsUnknown(t *testing.T) {
	srv := testserver.Memcached(t, testserver.MemcachedConfig{NoEvict: true})
	d, g, p := gatedDriver(t, srv)
	long := strings.Repeat("k", 300)
	key := ItemKey(DefaultPrefix, "pipe/oos")
	getErr, addErr := make(chan error, 1), make(chan error, 1)
	release := queueBehind(t, d, g, p, 2, func() {
		go func() {
			_, err := d.get(ctxT(t, time.Minute), long)
			getErr <- err
		}()
		if !waitFor(10*time.Second, func() bool { return p.pending() == 1 }) {
			t.Fatal("the gets did not queue")
		}
		go func() {
			addErr <- d.add(ctxT(t, time.Minute), &memcache.Item{Key: key, Value: []byte("x"), Expiration: 60})
		}()
	})
	release()
	gerr, aerr := <-getErr, <-addErr
	t.Logf("gets: %v; add: %v", gerr, aerr)
	require.Error(t, gerr, "a gets of a 300-byte key succeeded")
	_, err := adminClient(t, srv.Addr()).Get(key)
	applied := err == nil
	if applied && aerr != nil && !ioError(aerr) {
		t.Errorf("the add was applied, but its error %q reads as the server's answer (ioError false): nobody undoes it", aerr)
	}
}

// Close while one acquisition is in flight on the pipe and three are
// queued behind it, their callers giving up: every caller returns, Close
// returns once the reply comes, no goroutine is left, and no lock is left
// on the server (the queued ones never sent, the one in flight undone).
func TestPipeCloseWhileQueuedAndInFlight(t *testing.T) {
	srv := testserver.Memcached(t, testserver.MemcachedConfig{NoEvict: true})
	base := runtime.NumGoroutine()
	d, g, p := gatedDriver(t, srv)
	open := g.arm()
	defer open()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	keys := []string{"pipe/close/0", "pipe/close/1", "pipe/close/2", "pipe/close/3"}
	var got []<-chan acquired
	got = append(got, tryAcquireAsync(ctx, d, keys[0], "a"))
	g.held(t)
	for _, k := range keys[1:] {
		got = append(got, tryAcquireAsync(ctx, d, k, "a"))
	}
	if !waitFor(10*time.Second, func() bool { return p.pending() == 3 }) {
		t.Fatalf("%d queued, want 3", p.pending())
	}
	closed := make(chan error, 1)
	go func() { closed <- d.Close() }()
	cancel()
	for i, ch := range got {
		select {
		case r := <-ch:
			assert.Error(t, r.err, "acquisition %d got a lock after its ctx ended", i)
		case <-time.After(10 * time.Second):
			t.Fatalf("acquisition %d did not return at its ctx's end", i)
		}
	}
	open()
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not return")
	}
	admin := adminClient(t, srv.Addr())
	for _, k := range keys {
		if it, err := admin.Get(ItemKey(DefaultPrefix, k)); !errors.Is(err, memcache.ErrCacheMiss) {
			t.Errorf("%s after Close: %v %v, want a miss", k, it, err)
		}
	}
	for i, k := range keys[1:] {
		assert.False(t, sentKey(g.written(), k), "queued acquisition %d was sent", i+1)
	}
	if !waitFor(10*time.Second, func() bool { return runtime.NumGoroutine() <= base+2 }) {
		t.Errorf("%d goroutines after Close, %d before the driver", runtime.NumGoroutine(), base)
	}
}

// cutter wraps the connections of a gate: while armed, a read returns at
// most the first reply line of what the server sent, and the next read
// fails (the connection breaks after some replies of a batch were read).
type cutter struct {
	g     *gate
	armed atomic.Bool
}

func (c *cutter) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	nc, err := c.g.dial(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &cutConn{Conn: nc, c: c}, nil
}

type cutConn struct {
	net.Conn
	c   *cutter
	cut bool
}

func (cc *cutConn) Read(p []byte) (int, error) {
	if cc.cut {
		_ = cc.Conn.Close()
		return 0, net.ErrClosed
	}
	n, err := cc.Conn.Read(p)
	if n > 0 && cc.c.armed.CompareAndSwap(true, false) {
		if i := bytes.IndexByte(p[:n], '\n'); i >= 0 {
			cc.cut = true
			return i + 1, nil
		}
		cc.c.armed.Store(true) // less than a line came: cut after the next
	}
	return n, err
}

// When the connection breaks after the first reply of a batch was read,
// that request keeps its exact outcome (its lock, no retry), and each later
// one, written and unread, is unknown: undone and retried, so that every
// caller gets its lock and each item records exactly its hold.
func TestPipeBatchCutAfterFirstReply(t *testing.T) {
	srv := testserver.Memcached(t, testserver.MemcachedConfig{NoEvict: true})
	g := &gate{waiting: make(chan chan<- int, 1)}
	cut := &cutter{g: g}
	d, p := dialledDriver(t, srv, cut.dial)
	var queued []<-chan acquired
	release := queueBehind(t, d, g, p, 3, func() {
		for i := range 3 {
			queued = append(queued, tryAcquireAsync(ctxT(t, time.Minute), d, "pipe/cut/"+strconv.Itoa(i), "a"))
			if !waitFor(10*time.Second, func() bool { return p.pending() == i+1 }) {
				t.Fatalf("acquisition %d did not queue", i)
			}
		}
	})
	openBatch := g.arm()
	defer openBatch()
	release()
	g.held(t) // the batch is written, its replies held
	cut.armed.Store(true)
	openBatch()
	admin := adminClient(t, srv.Addr())
	for i, ch := range queued {
		r := <-ch
		if r.err != nil {
			t.Errorf("acquisition %d: %v", i, r.err)
			continue
		}
		l := r.l.(*lock)
		if !recordsJustHold(admin, l) {
			it, err := admin.Get(l.key)
			t.Errorf("acquisition %d: the item does not come to record just its hold: %v %v", i, it, err)
		}
	}
	// touched counts the writes that add, cas or delete the item key.
	touched := func(key string) (adds, others int) {
		for _, w := range g.written() {
			w = append([]byte("\n"), w...)
			adds += bytes.Count(w, []byte("\nadd "+key+" "))
			others += bytes.Count(w, []byte("\nmd "+key+" ")) + bytes.Count(w, []byte("\ncas "+key+" "))
		}
		return adds, others
	}
	if adds, others := touched(ItemKey(DefaultPrefix, "pipe/cut/0")); adds != 1 || others != 0 {
		t.Errorf("the request whose reply was read: %d adds, %d cas or md; want 1 add, nothing undone or retried", adds, others)
	}
	for i := 1; i < 3; i++ {
		if adds, others := touched(ItemKey(DefaultPrefix, "pipe/cut/"+strconv.Itoa(i))); adds+others < 2 {
			t.Errorf("unread request %d: %d adds, %d cas or md; want it undone and retried", i, adds, others)
		}
	}
}

// 10,000 requests (100,000 under soak) through one pipe from 64
// goroutines, a fifth of them with a ctx cancelled at once after the call:
// every request gets exactly its own reply (an add of its own key: STORED;
// nothing crosses between callers), the ones that were never sent left
// nothing, the stats count exactly the requests sent, and the pipe ends
// free.
func TestPipeHundredThousand(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 requests")
	}
	srv := testserver.Memcached(t, testserver.MemcachedConfig{NoEvict: true})
	_, _, p := gatedDriver(t, srv)
	const workers = 64
	per := 10000 / workers
	if soak.Enabled() {
		per = 100000 / workers
	}
	deadline := time.Now().Add(2 * time.Minute)
	trips0, reqs0 := p.q.Stats()
	var (
		wg                     sync.WaitGroup
		stored, notSent, wrong atomic.Int64
		storedKeys, unsentKeys = make([][]string, workers), make([][]string, workers)
	)
	for w := range workers {
		wg.Go(func() {
			for i := range per {
				if time.Now().After(deadline) {
					return
				}
				key := "hk/" + strconv.Itoa(w) + "/" + strconv.Itoa(i)
				ctx, cancel := context.WithCancel(context.Background())
				cmd := storeCmd("add", &memcache.Item{Key: key, Value: []byte(key), Expiration: 300})
				var err error
				if i%5 == 0 {
					done := make(chan struct{})
					go func() { err = p.do(ctx, cmd, readStore); close(done) }()
					cancel()
					<-done
				} else {
					err = p.do(ctx, cmd, readStore)
				}
				cancel()
				switch {
				case err == nil:
					stored.Add(1)
					storedKeys[w] = append(storedKeys[w], key)
				case errors.Is(err, context.Canceled):
					notSent.Add(1)
					unsentKeys[w] = append(unsentKeys[w], key)
				default:
					wrong.Add(1)
					t.Errorf("%s: %v", key, err)
				}
			}
		})
	}
	wg.Wait()
	trips1, reqs1 := p.q.Stats()
	t.Logf("%d stored, %d not sent, in %d round trips carrying %d requests", stored.Load(), notSent.Load(), trips1-trips0, reqs1-reqs0)
	if got := int64(reqs1 - reqs0); got != stored.Load() {
		t.Errorf("stats count %d requests sent, %d were stored", got, stored.Load())
	}
	if !waitFor(10*time.Second, func() bool { return !p.q.Busy() }) {
		t.Error("the pipe stayed busy")
	}
	admin := adminClient(t, srv.Addr())
	check := func(keys [][]string, want bool) {
		for _, ks := range keys {
			for i, k := range ks {
				if i%97 != 0 { // a sample
					continue
				}
				it, err := admin.Get(k)
				if got := err == nil; got != want || (got && string(it.Value) != k) {
					t.Errorf("%s: %v %v, stored %v", k, it, err, want)
					return
				}
			}
		}
	}
	check(storedKeys, true)
	check(unsentKeys, false)
}

// Two owners' acquisitions of one key in one write: exactly one wins, the
// other is refused; the item records just the winner's hold.
func TestPipeSameKeyOneBatch(t *testing.T) {
	srv := testserver.Memcached(t, testserver.MemcachedConfig{NoEvict: true})
	d, g, p := gatedDriver(t, srv)
	var a, b <-chan acquired
	release := queueBehind(t, d, g, p, 2, func() {
		a = tryAcquireAsync(ctxT(t, time.Minute), d, "pipe/same", "a")
		b = tryAcquireAsync(ctxT(t, time.Minute), d, "pipe/same", "b")
	})
	release()
	ra, rb := <-a, <-b
	if (ra.err == nil) == (rb.err == nil) {
		t.Fatalf("two owners in one batch: a %v, b %v; want exactly one lock", ra.err, rb.err)
	}
	win, lose := ra, rb
	if ra.err != nil {
		win, lose = rb, ra
	}
	assert.ErrorIs(t, lose.err, backend.ErrNotAcquired, "the loser")
	l := win.l.(*lock)
	it, err := adminClient(t, srv.Addr()).Get(l.key)
	require.NoError(t, err)
	if rec, ok := decodeRecord(it.Value); !ok || len(rec.holds) != 1 || rec.holds[0] != l.hold || rec.owner != l.owner {
		t.Errorf("the item records %+v, want just the winner's hold %s", rec, l.hold)
	}
}
