package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/mysql"
)

// stmtGate records the COM_QUERY statements a pool sends and, while
// armed, holds the reply of every statement sent until it is opened: a
// statement is then in flight, executed or not, for as long as a test
// needs. Handshake reads are never held.
type stmtGate struct {
	mu      sync.Mutex
	queries []string
	hold    chan struct{}
	waiting chan struct{} // a held read announces itself
}

func (g *stmtGate) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &gatedStmtConn{Conn: c, g: g}, nil
}

// arm holds the replies of statements sent from now on (and of those
// whose reply is not read yet); open lets them through.
func (g *stmtGate) arm() (open func()) {
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

func (g *stmtGate) held(t *testing.T) {
	t.Helper()
	select {
	case <-g.waiting:
	case <-time.After(10 * time.Second):
		t.Fatal("no statement went out")
	}
}

// sent reports whether a statement sent so far contains s.
func (g *stmtGate) sent(s string) (n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, q := range g.queries {
		if strings.Contains(q, s) {
			n++
		}
	}
	return n
}

type gatedStmtConn struct {
	net.Conn
	g       *stmtGate
	command bool // a command was written, its reply is not read yet
}

func (c *gatedStmtConn) Write(b []byte) (int, error) {
	// One packet per Write: 3-byte length, sequence id, payload;
	// sequence 0 starts a command.
	if len(b) >= 5 && b[3] == 0 && b[4] == comQuery {
		c.g.mu.Lock()
		c.g.queries = append(c.g.queries, string(b[5:]))
		c.g.mu.Unlock()
		c.command = true
	}
	return c.Conn.Write(b)
}

func (c *gatedStmtConn) Read(b []byte) (int, error) {
	c.g.mu.Lock()
	h := c.g.hold
	c.g.mu.Unlock()
	if h != nil && c.command {
		c.command = false
		select {
		case c.g.waiting <- struct{}{}:
		default:
		}
		<-h
	}
	return c.Conn.Read(b)
}

// batchedPair is a row-mode Locker with natural batching on a pool whose
// statements go through a gate, and another Locker on the same table for
// inspection.
func batchedPair(t *testing.T, name string) (l, other *mysql.Locker, g *stmtGate) {
	t.Helper()
	l, other, g, _ = batchedPairOn(t, uniqueTable(name), nil)
	return l, other, g
}

// batchedPairOn is batchedPair on table, with params added to the batched
// Locker's DSN; it returns an admin pool too.
func batchedPairOn(t *testing.T, table string, params map[string]string) (l, other *mysql.Locker, g *stmtGate, admin *sql.DB) {
	t.Helper()
	srv := server(t)
	g = &stmtGate{waiting: make(chan struct{}, 1)}
	cfg := config(t, srv)
	cfg.MultiStatements = true
	cfg.DialFunc = g.dial
	cfg.Params = params
	l, err := mysql.NewBatching(openDB(t, cfg), 1, mysql.WithTable(table))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	admin = adminDB(t, srv)
	other = mustNew(t, admin, mysql.WithTable(table))
	t.Cleanup(func() { other.Close() })
	warm, err := l.TryAcquire(ctxT(t, 10*time.Second), "warm")
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Release(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	return l, other, g, admin
}

type rowAcquired struct {
	lease *distlock.Lease
	err   error
}

func tryAcquireRow(ctx context.Context, l *mysql.Locker, key string) <-chan rowAcquired {
	ch := make(chan rowAcquired, 1)
	go func() {
		lease, err := l.TryAcquire(ctx, key, distlock.WithTTL(10*time.Minute))
		ch <- rowAcquired{lease, err}
	}()
	return ch
}

// rowQueueBehind puts an acquisition on l in flight, its reply held by g,
// calls start (which starts statements that queue behind it) and waits
// until n are queued. release lets the first reply through and waits for
// the acquisition.
func rowQueueBehind(t *testing.T, l *mysql.Locker, g *stmtGate, n int, start func()) (release func()) {
	t.Helper()
	open := g.arm()
	t.Cleanup(open)
	first := tryAcquireRow(ctxT(t, time.Minute), l, "batch-first")
	g.held(t)
	start()
	deadline := time.Now().Add(10 * time.Second)
	for mysql.BatchPending(l) != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d statements queued behind the one in flight, want %d", mysql.BatchPending(l), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return func() {
		open()
		if r := <-first; r.err != nil {
			t.Fatalf("the acquisition in flight: %v", r.err)
		}
	}
}

// An acquisition whose ctx ends while it waits in the queue is never
// sent: its caller gets ctx's error and no statement names its key.
func TestRowBatchCancelledQueuedAcquireNeverSent(t *testing.T) {
	l, other, g := batchedPair(t, "nbqueued")
	ctx, cancel := context.WithCancel(t.Context())
	var queued <-chan rowAcquired
	release := rowQueueBehind(t, l, g, 1, func() { queued = tryAcquireRow(ctx, l, "batch-queued") })
	cancel()
	if r := <-queued; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("cancelled queued TryAcquire = %v, %v; want context.Canceled", r.lease, r.err)
	}
	release()
	l.Close() // waits for the flusher and any give-back
	if n := g.sent("batch-queued"); n != 0 {
		t.Errorf("%d statements named the cancelled queued acquisition's key", n)
	}
	if info, err := distlock.Inspect(ctxT(t, 10*time.Second), other, "batch-queued"); err != nil || info.Held {
		t.Errorf("the cancelled acquisition's lock: %+v, %v; want free", info, err)
	}
}

// Statements that queue behind one in flight go out as one transaction,
// each with its own outcome; an acquisition of that batch whose caller
// gave up after it was sent is given back (no lock left behind), and its
// neighbours keep theirs.
func TestRowBatchAbandonedAcquireGivenBack(t *testing.T) {
	l, other, g := batchedPair(t, "nbabandon")
	taken, err := other.TryAcquire(ctxT(t, 10*time.Second), "batch-taken")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Release(ctxT(t, 10*time.Second))
	ctx, cancel := context.WithCancel(t.Context())
	var abandoned, kept, busy <-chan rowAcquired
	release := rowQueueBehind(t, l, g, 3, func() {
		abandoned = tryAcquireRow(ctx, l, "batch-abandoned")
		kept = tryAcquireRow(ctxT(t, time.Minute), l, "batch-kept")
		busy = tryAcquireRow(ctxT(t, time.Minute), l, "batch-taken")
	})
	trips0, stmts0 := mysql.BatchStats(l)
	openBatch := g.arm() // the batch's reply is held in its turn
	defer openBatch()
	release()
	g.held(t) // the batch is sent
	cancel()
	if r := <-abandoned; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("TryAcquire abandoned after it was sent = %v, %v; want context.Canceled", r.lease, r.err)
	}
	openBatch()
	r := <-kept
	if r.err != nil {
		t.Fatalf("a neighbour in the batch: %v", r.err)
	}
	defer r.lease.Release(ctxT(t, 10*time.Second))
	if r := <-busy; !errors.Is(r.err, distlock.ErrNotAcquired) {
		t.Errorf("a neighbour in the batch on a held key: %v, %v; want ErrNotAcquired", r.lease, r.err)
	}
	if trips, stmts := mysql.BatchStats(l); trips-trips0 != 1 || stmts-stmts0 != 3 {
		t.Errorf("the queued acquisitions took %d round trips carrying %d statements, want 1 and 3", trips-trips0, stmts-stmts0)
	}
	if n := g.sent("START TRANSACTION"); n != 1 {
		t.Errorf("%d batched transactions sent, want 1", n)
	}
	waitInfo(t, other, "batch-abandoned", 10*time.Second, "the abandoned acquisition's hold given back", func(i distlock.LockInfo) bool { return !i.Held })
	if info, err := distlock.Inspect(ctxT(t, 10*time.Second), other, "batch-kept"); err != nil || !info.Held {
		t.Errorf("the neighbour's lock: %+v, %v; want held", info, err)
	}
}

// A lone statement goes out at once, alone, as an autocommit statement:
// no transaction around it.
func TestRowBatchLoneStatementAlone(t *testing.T) {
	l, _, g := batchedPair(t, "nblone")
	trips0, stmts0 := mysql.BatchStats(l)
	lease, err := l.TryAcquire(ctxT(t, 10*time.Second), "batch-lone")
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Release(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if trips, stmts := mysql.BatchStats(l); trips-trips0 != 2 || stmts-stmts0 != 2 {
		t.Errorf("acquire+release took %d round trips carrying %d statements, want 2 and 2", trips-trips0, stmts-stmts0)
	}
	if n := g.sent("START TRANSACTION"); n != 0 {
		t.Errorf("%d transactions sent for lone statements", n)
	}
}

// When the server refuses a statement of a batch (here a lock-wait
// timeout on a row another session has locked), the transaction is rolled
// back and each statement runs again alone: its neighbour gets its lock
// with exactly one hold (the rolled-back run left none), and the refused
// one gets the server's error, not an unknown outcome.
func TestRowBatchRefusedStatementRunsAlone(t *testing.T) {
	table := uniqueTable("nbrefused")
	l, other, g, admin := batchedPairOn(t, table, map[string]string{"innodb_lock_wait_timeout": "1"})
	ctx := ctxT(t, time.Minute)
	for _, key := range []string{"batch-locked", "batch-free"} { // the rows exist
		lease, err := other.TryAcquire(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	tx, err := admin.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	h := mysqlKeyHash("batch-locked")
	if _, err := tx.ExecContext(ctx, "SELECT fence FROM `"+table+"` WHERE key_hash = ? FOR UPDATE", h[:]); err != nil {
		t.Fatal(err)
	}
	var locked, free <-chan rowAcquired
	release := rowQueueBehind(t, l, g, 2, func() {
		locked = tryAcquireRow(ctx, l, "batch-locked")
		free = tryAcquireRow(ctx, l, "batch-free")
	})
	release()
	r := <-free
	if r.err != nil {
		t.Fatalf("the neighbour of a refused statement: %v", r.err)
	}
	defer r.lease.Release(ctx)
	if r := <-locked; r.err == nil || errors.Is(r.err, context.DeadlineExceeded) {
		t.Errorf("acquisition of a row locked by another session = %v, %v; want the server's lock-wait timeout", r.lease, r.err)
	}
	if n := g.sent("START TRANSACTION"); n != 1 {
		t.Errorf("%d batched transactions, want 1", n)
	}
	if n := g.sent("ROLLBACK"); n != 1 {
		t.Errorf("%d rollbacks, want 1", n)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if info, err := distlock.Inspect(ctx, other, "batch-free"); err != nil || !info.Held || info.Holds != 1 {
		t.Errorf("the neighbour's lock: %+v, %v; want held once", info, err)
	}
	if info, err := distlock.Inspect(ctx, other, "batch-locked"); err != nil || info.Held {
		t.Errorf("the refused acquisition's lock: %+v, %v; want free", info, err)
	}
}
