package backend

import "context"

// MultiAcquirer is implemented by drivers that can take several locks in
// one atomic request (one Redis script over keys of one node or Cluster
// slot). TryAcquireAll makes one attempt to take every lock of reqs, all or
// nothing: if any is held (by anyone, the same owner included: a nested
// hold is left to the one-by-one path) it returns ErrNotAcquired (Busy) and
// takes nothing. It returns one Lock per request, in order. When it cannot
// take these keys in one request (keys of several Cluster slots, a mode
// that queues per key) it returns an error wrapping errors.ErrUnsupported
// and sends nothing. An attempt whose outcome is unknown is undone by the
// driver, as Driver.TryAcquire's is. ctx: as TryAcquire.
//
// Without it: Locker.AcquireAll takes the keys one by one in sorted
// order, one round trip each. With it, AcquireAll first makes one atomic
// attempt and falls back to that path when the attempt fails for any
// reason (a key held, the backend busy or unreachable, unsupported).
type MultiAcquirer interface {
	TryAcquireAll(ctx context.Context, reqs []Request) ([]Lock, error)
}
