// Package async holds the bookkeeping every driver needs for work that
// outlives the call that started it, written once:
//
//   - Group: goroutines that Close waits for (pooled, so a fan-out per
//     operation does not pay for a new goroutine each time), with a Quit
//     channel that tells waiting work the driver is closing.
//   - Call: run an operation so that its caller returns as soon as its ctx
//     ends, and hand the late result to a callback that can undo it (an
//     acquire that lands after its caller left must be given back).
//   - Retry: repeat a try (an owner-checked undo, a cleanup) on a schedule,
//     bounded in time, until it reports done, its ctx ends or the group
//     closes.
//   - Slots: a bound on how many optional jobs (undos that a TTL would cover
//     anyway) run at once.
//   - CtxError: the one shape of an error caused by the end of a ctx.
package async
