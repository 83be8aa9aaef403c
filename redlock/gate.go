package redlock

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// The gate: while a driver has waiters queued on a lock (WatchHeld), its
// attempts on that lock ask one node first — the lock's gate node, the
// same for every driver — and fan out to the others only once the gate
// granted. A release wakes one waiter per driver (each driver's own queue
// head), and waiters of different drivers racing for all the nodes at once
// split the nodes among them: with three or more of them, often no one
// reaches a quorum, all give back and try again. At the gate they are
// served one at a time: the one the gate grants finds the other nodes
// free, and the others are refused at the cost of one request, which also
// marks the lock there for the next release's wake-up. The quorum decides
// as before — the gate's grant is one vote of the attempt — so mutual
// exclusion is unchanged; a gate that fails lets the attempt fan out to
// every node, as an attempt without waiters does, and a gate marked down
// hands the lock's gate over to the next node of its ranking. An attempt
// that is not a queued waiter's may be a nested acquisition, which needs
// the other nodes: refused at the gate, it asks them whether its owner
// holds the lock there (refusedAtGate).

// gateOf is the gate node of key: of the nodes not marked down, the one
// whose address, hashed with the key, ranks highest (rendezvous hashing);
// with every node marked down, the highest of all. Every driver configured
// with the same addresses — in any order, in any process — picks the same
// node while it sees the same nodes down, and the locks' gates spread over
// the nodes; the locks of a dead gate move to the next node of their
// ranking, the same for every driver that found it dead.
func (d *driver) gateOf(key string) int {
	best, bestH, bestUp := 0, uint64(0), false
	for i, n := range d.nodes {
		h := fnv1a(fnv1a(fnvOffset, key), n.addr)
		up := !n.down(d)
		if i == 0 || (up && !bestUp) || (up == bestUp && h > bestH) {
			best, bestH, bestUp = i, h, up
		}
	}
	return best
}

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// fnv1a continues the 64-bit FNV-1a hash h over s.
func fnv1a(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime
	}
	// Mixed, so that keys differing in their last bytes still rank the
	// nodes differently.
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	return h
}

// waiting counts a driver's queued waiters per lock, and per lock and
// owner.
type waiting struct {
	total  atomic.Int64 // over all locks: the uncontended path reads only this
	mu     sync.Mutex
	keys   map[string]int
	owners map[waiter]int
}

// waiter is one owner queued on one lock.
type waiter struct{ key, owner string }

func (w *waiting) add(key, owner string) {
	w.mu.Lock()
	if w.keys == nil {
		w.keys, w.owners = map[string]int{}, map[waiter]int{}
	}
	w.keys[key]++
	w.owners[waiter{key, owner}]++
	w.total.Add(1)
	w.mu.Unlock()
}

func (w *waiting) remove(key, owner string) {
	w.mu.Lock()
	if w.keys[key]--; w.keys[key] <= 0 {
		delete(w.keys, key)
	}
	o := waiter{key, owner}
	if w.owners[o]--; w.owners[o] <= 0 {
		delete(w.owners, o)
	}
	w.total.Add(-1)
	w.mu.Unlock()
}

// has reports whether waiters are queued on key.
func (w *waiting) has(key string) bool {
	if w.total.Load() == 0 {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.keys[key] > 0
}

// queued reports whether owner is among the waiters queued on key.
func (w *waiting) queued(key, owner string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.owners[waiter{key, owner}] > 0
}

// gate runs the attempt on its lock's gate node alone, unless every node
// is marked down or there are fewer than 2 nodes (ok false: fan out to
// every node). It returns the gate's answer, which the attempt's fan-out
// then takes as the gate's (attempt.gateNode), and when it sent the
// request: the attempt's validity counts from then.
func (a *attempt) gate(ctx context.Context) (r nodeResult, sent time.Time, ok bool) {
	d := a.d
	sent = time.Now()
	if len(d.nodes) < 2 {
		return r, sent, false
	}
	i := d.gateOf(a.key)
	nd := d.nodes[i]
	if nd.down(d) {
		return r, sent, false
	}
	gctx, cancel := context.WithTimeout(ctx, min(d.nodeTimeout, a.validity))
	r = a.node(gctx, i, nd)
	cancel()
	r.i = i
	a.gateNode, a.gateResult = i, &r
	return r, sent, true
}

// refusedAtGate returns whether the gate's refusal r is final for the
// attempt, and then the wait before the next attempt (0: unknown). A
// refusal by a hold younger than two per-node timeouts is final, but for
// an attempt that is not a queued waiter's (WatchHeld) and whose owner
// holds the lock on a quorum of the other nodes (heldElsewhere): a nested
// acquisition, which must succeed at once, goes on to every node. The
// young hold belongs to an attempt still under way or to
// a holder that just took the lock, and either announces its end at the
// gate — the holder's release, or the give-back of an attempt that failed
// to reach a quorum (see giveBackHold) — so the waiter waits for that,
// bounded by the hold's expiry (what announces nothing: an ambiguous
// failure, a process that died mid-attempt; its hold is old at the
// waiter's next attempt). An older hold, or one of unknown age, may be a leftover on this node alone
// while a quorum of the others is free: the attempt goes on to every node.
func (a *attempt) refusedAtGate(ctx context.Context, r nodeResult) (bool, time.Duration) {
	if r.age < 0 || r.age >= a.d.youngHold() {
		return false, 0
	}
	if !a.d.waiting.queued(a.key, a.h.owner) && a.heldElsewhere(ctx) {
		return false, 0
	}
	return true, max(r.pttl, 0)
}

// heldElsewhere reports whether the attempt's owner holds the lock on a
// quorum of the nodes other than the gate, which refused it. One read per
// node and no grant: unlike the fan-out, it takes no free node from the
// waiter that the gate served.
func (a *attempt) heldElsewhere(ctx context.Context) bool {
	d, gate := a.d, a.gateNode
	r := d.run(ctx, quorumOp{wait: d.nodeTimeout, op: nodeFunc(func(ctx context.Context, i int, nd *node) nodeResult {
		if i == gate {
			return nodeResult{out: no}
		}
		o, err := nd.client.HGet(ctx, a.h.keys.Lock, "o").Result()
		switch {
		case err == nil && o == a.h.owner:
			return nodeResult{out: yes}
		case err == nil || errors.Is(err, goredis.Nil):
			return nodeResult{out: no}
		}
		return nodeResult{out: failed, err: err}
	}), decided: settled})
	r.finish(true)
	return r.tally().yes >= d.quorum
}

// giveBackHold is the hold to give back on node i after a failed attempt:
// on the lock's gate node the give-back announces the release (the waiters
// that the gate refused wait for it), elsewhere it is silent.
func (a *attempt) giveBackHold(i int) holdRef {
	if i == a.announcedAt() {
		return a.h
	}
	return a.undoH
}

// announcedAt is the node where a failed attempt's give-back is announced:
// the gate it asked first, if that answered, else the lock's gate now.
func (a *attempt) announcedAt() int {
	if a.gateNode >= 0 && a.gateResult.out != failed {
		return a.gateNode
	}
	return a.d.gateOf(a.key)
}
