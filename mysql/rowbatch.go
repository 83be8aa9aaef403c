package mysql

import (
	"bytes"
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/distlock/distlock/internal/async"
)

// stmtBatchMax bounds the statements of one batched transaction.
const stmtBatchMax = 64

// stmtLanes is how many statements or batches a Locker has in flight at
// once: more than one, so that the server's cores execute statements side
// by side, while the others queue.
const stmtLanes = 2

// stmtBatch is natural batching of row mode's single-row statements
// (acquire, release, refresh) of one Locker: while a statement or batch is
// in flight, the next statements queue, and the moment it is answered they
// go out together as one multi-statement, START TRANSACTION; s1; …; sn;
// COMMIT — one round trip and one commit (one log flush) for all. Each
// statement's outcome is its own OK packet's LAST_INSERT_ID, exactly as
// when it runs alone. A lone statement is sent at once, alone, as an
// autocommit statement on the caller's goroutine: no timer, no linger. A
// statement whose ctx ends while it is queued is never sent (its error
// reports so: notSent). One already sent is abandoned by its caller, who
// returns ctx's error at once and gives back an acquisition's hold as for
// any lost reply. When the server refuses a statement of the batch (a
// deadlock, a lock-wait timeout) the transaction is rolled back — nothing
// of the batch took effect — and each statement is run again alone by its
// caller, within its own ctx; when the batch's reply is lost, every
// statement's outcome is unknown, as a lone statement's would be. The
// statements run in the order of their rows' keys, so that two Lockers'
// batches lock rows in one order.
//
// It needs a pool whose connections have multiStatements and
// interpolateParams set: the URL opener's.
type stmtBatch struct {
	d *rowDriver

	lanes int // statements or batches in flight at once, at most

	mu     sync.Mutex
	flying int // statements or batches in flight, and flushers starting
	q      []*stmtReq

	roundTrips atomic.Uint64 // single statements and batches sent
	statements atomic.Uint64 // statements they carried
}

// stmtReq is one statement of a stmtBatch.
type stmtReq struct {
	ctx   context.Context
	hash  []byte // the row's key_hash: the order within a batch
	query string
	args  []any

	id    int64 // the outcome, LAST_INSERT_ID
	err   error
	alone bool // the batch was rolled back: the caller runs it alone
	state atomic.Int32
	done  chan struct{}
}

// The states of a stmtReq.
const (
	stmtQueued int32 = iota
	stmtSent
	stmtDelivered
	stmtDropped   // its ctx ended while it was queued: never sent
	stmtAbandoned // its ctx ended after it was sent
)

// notSent is the error of a statement whose ctx ended before it was sent:
// nothing reached the server, nothing is to be undone.
type notSent struct{ err error }

func (e *notSent) Error() string { return e.err.Error() }
func (e *notSent) Unwrap() error { return e.err }

func isNotSent(err error) bool {
	var ns *notSent
	return errors.As(err, &ns)
}

// exec runs query with args, a statement on the row whose key_hash is
// hash, through b, and returns its LAST_INSERT_ID.
func (b *stmtBatch) exec(ctx context.Context, hash []byte, query string, args []any) (int64, error) {
	if ctx.Err() != nil {
		return 0, &notSent{async.CtxError(ctx)}
	}
	b.mu.Lock()
	if b.flying < b.lanes {
		b.flying++
		b.mu.Unlock()
		b.roundTrips.Add(1)
		b.statements.Add(1)
		id, err := b.d.execAlone(ctx, query, args)
		b.next()
		return id, err
	}
	r := &stmtReq{ctx: ctx, hash: hash, query: query, args: args, done: make(chan struct{})}
	b.q = append(b.q, r)
	b.mu.Unlock()
	select {
	case <-r.done:
	case <-ctx.Done():
		if r.state.CompareAndSwap(stmtQueued, stmtDropped) {
			return 0, &notSent{async.CtxError(ctx)}
		}
		if r.state.CompareAndSwap(stmtSent, stmtAbandoned) {
			return 0, async.CtxError(ctx)
		}
		<-r.done
	}
	if r.alone {
		if ctx.Err() != nil {
			return 0, &notSent{async.CtxError(ctx)}
		}
		return b.d.execAlone(ctx, query, args)
	}
	return r.id, r.err
}

// pending returns the number of statements queued (for tests).
func (b *stmtBatch) pending() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.q)
}

// next hands what queued during the caller's statement to a flusher, or
// frees its lane.
func (b *stmtBatch) next() {
	b.mu.Lock()
	if len(b.q) == 0 {
		b.flying--
		b.mu.Unlock()
		return
	}
	b.mu.Unlock()
	if !b.d.Go(func(context.Context) { b.flush() }) {
		b.flush() // closing: no more background work
	}
}

// flush sends the queue, at most stmtBatchMax statements at a time, until
// it finds it empty; then its lane is free.
func (b *stmtBatch) flush() {
	var batch []*stmtReq
	for {
		b.mu.Lock()
		if len(b.q) == 0 {
			b.flying--
			b.mu.Unlock()
			return
		}
		k := min(len(b.q), stmtBatchMax)
		batch = append(batch[:0], b.q[:k]...)
		b.q = append(b.q[:0], b.q[k:]...)
		b.mu.Unlock()
		n := 0
		for _, r := range batch {
			if r.state.CompareAndSwap(stmtQueued, stmtSent) {
				batch[n] = r
				n++
			}
		}
		if n > 0 {
			b.send(batch[:n])
			for _, r := range batch[:n] {
				r.state.CompareAndSwap(stmtSent, stmtDelivered)
				close(r.done)
			}
		}
		clear(batch)
	}
}

// send runs reqs: one alone, several as one transaction.
func (b *stmtBatch) send(reqs []*stmtReq) {
	b.roundTrips.Add(1)
	b.statements.Add(uint64(len(reqs)))
	ctx, cancel := b.context(reqs)
	defer cancel()
	if len(reqs) == 1 {
		r := reqs[0]
		r.id, r.err = b.d.execAlone(ctx, r.query, r.args)
		return
	}
	slices.SortStableFunc(reqs, func(x, y *stmtReq) int { return bytes.Compare(x.hash, y.hash) })
	var q strings.Builder
	q.WriteString("START TRANSACTION")
	var args []driver.NamedValue
	for _, r := range reqs {
		q.WriteString(";\n")
		q.WriteString(r.query)
		for _, a := range r.args {
			args = append(args, driver.NamedValue{Ordinal: len(args) + 1, Value: a})
		}
	}
	q.WriteString(";\nCOMMIT")
	ids, rejected, err := b.transaction(ctx, q.String(), args)
	switch {
	case rejected:
		for _, r := range reqs {
			r.alone = true
		}
	case err == nil && len(ids) != len(reqs)+2:
		err = fmt.Errorf("the batched transaction of %d statements returned %d results", len(reqs), len(ids))
		fallthrough
	case err != nil:
		for _, r := range reqs {
			r.err = err
		}
	default:
		for i, r := range reqs {
			r.id = ids[i+1]
		}
	}
}

// transaction runs the multi-statement q on a connection of the pool and
// returns each statement's LAST_INSERT_ID. rejected reports that nothing
// of it took effect: the pool gave no connection, or the server refused a
// statement and the transaction was rolled back.
func (b *stmtBatch) transaction(ctx context.Context, q string, args []driver.NamedValue) (ids []int64, rejected bool, err error) {
	conn, err := b.d.db.Conn(ctx)
	if err != nil {
		return nil, true, err
	}
	defer conn.Close()
	err = conn.Raw(func(dc any) error {
		ex, ok := dc.(driver.ExecerContext)
		if !ok {
			rejected = true
			return fmt.Errorf("mysql: %T cannot execute statements", dc)
		}
		res, err := ex.ExecContext(ctx, q, args)
		if err != nil {
			if !serverRejected(err) {
				return err // the reply was lost: the outcome is unknown
			}
			if _, rerr := ex.ExecContext(ctx, "ROLLBACK", nil); rerr != nil {
				// Discard the connection: the server rolls back when it
				// closes.
				err = fmt.Errorf("%w (rollback: %w)", driver.ErrBadConn, rerr)
			}
			rejected = true
			return err
		}
		mr, ok := res.(gomysql.Result)
		if !ok {
			return fmt.Errorf("mysql: %T has no per-statement results", res)
		}
		ids = mr.AllLastInsertIds()
		return nil
	})
	return ids, rejected, err
}

// context is the context of a batch: not cancelled by any of its callers
// (one who gives up after it was sent abandons its statement, the others
// wait for theirs), with the latest of their deadlines when every caller
// has one, and cancelled by Close.
func (b *stmtBatch) context(reqs []*stmtReq) (context.Context, context.CancelFunc) {
	var latest time.Time
	for _, r := range reqs {
		d, ok := r.ctx.Deadline()
		if !ok {
			return context.WithCancel(b.d.Life())
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(b.d.Life(), latest)
}
