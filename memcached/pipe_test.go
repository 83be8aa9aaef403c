package memcached

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"net"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/testkit/testserver"
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
	if err := ss.SetServers(srv.Addr()); err != nil {
		t.Fatal(err)
	}
	c := memcache.NewFromSelector(ss)
	c.Timeout = 10 * time.Second
	c.DialContext = dial
	d, err := newDriver(c, []Option{WithSelector(ss), WithCloseClient()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	l, err := d.TryAcquire(ctxT(t, 10*time.Second), req("pipe/warm", "warm", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	addr, err := ss.PickServer("any")
	if err != nil {
		t.Fatal(err)
	}
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
	if sentKey(g.written(), "pipe/queued") {
		t.Error("the cancelled queued acquisition was sent")
	}
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
	if err != nil {
		t.Fatal(err)
	}
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
	if !batched {
		t.Error("the three queued acquisitions did not go out in one write")
	}
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
	if !undone {
		t.Error("the abandoned acquisition's lock went without the undo's delete")
	}
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
