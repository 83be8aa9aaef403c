// Package queuewait is the wait of a queued lock waiter, written once for
// the session-bound backends whose waiters queue by creation order
// (zookeeper's sequential nodes, etcd's waiter keys). A backend implements
// Queue for one waiter's entry with only its mechanism: reading where the
// entry stands, watching a deletion, granting, nesting, deleting the entry;
// Await runs the loop. What every backend's entry does alike (joining its
// owner's hold, recognising its owner's attempt at the head of the queue)
// is Member's, which the entry embeds.
//
// The loop, round by round: join the owner's hold if the driver has one
// (Joinable, which also gives the hold table's signal of a new hold), Look
// at the queue; if the entry is first, Grant; otherwise Watch only the
// predecessor (the entry just before ours) and wait for that watch to say
// it is gone, then Look again. A release therefore wakes the one waiter
// behind it: no herd.
//
// Guarantees of Await:
//
//   - Every round trip is the backend's: Await calls Look once per round,
//     Watch once per round that did not Grant, Event once per event
//     received, and Nest only when the owner has a hold to join; so a
//     backend's counters of server calls count the same as in a loop of
//     its own.
//   - Each watch runs under a context of its own, derived from ctx, which
//     Await cancels as soon as it stops waiting on that watch (look again,
//     grant, join or end): a backend that can cancel a watch need not track
//     it.
//   - The wait ends, with the entry deleted (Fail) and the error Ends
//     gives, when ctx ends, when the driver closes (Ends.Closed) or when the
//     entry's session is lost (Ends.Lost). Errors of Look, Watch and Event
//     have ended the attempt already and are returned as they are.
//   - When the driver has a live hold on the key for the entry's owner
//     (Joinable) at the start of a round, or gets one while the entry
//     waits (the signal closed), the waiter nests in that hold (Nest) and
//     leaves the queue (Fail(nil) deletes its entry), instead of waiting
//     behind its own owner. Nest's error is returned after the entry was
//     deleted. A hold of another owner, or one Nest finds gone, only
//     renews the signal.
//   - Refuse, the end of a try (no wait) whose entry is not first, joins
//     the owner's hold the same way before it deletes the entry and
//     returns busy: a try of an owner that holds the key succeeds. While
//     the head of the queue is an attempt of the same owner on this driver
//     that is not granted yet (Head), the try waits until that attempt is
//     granted (and joins it) or ends (and looks again), since no other
//     owner holds the key then: a try is refused only when the head of
//     the queue is not an attempt or a hold of its owner on this driver.
//   - Await holds no lock and starts no goroutine of its own: it returns
//     once Grant, Nest or an end returns, and leaves nothing running but
//     what the backend started.
package queuewait
