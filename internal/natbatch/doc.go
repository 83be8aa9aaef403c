// Package natbatch is natural batching: the queue that lets the requests
// many goroutines of one process make to one server share round trips.
// While a round trip is in flight the next requests queue, and the moment
// it is answered every queued request goes out together, as one pipeline.
// A lone request is never delayed: no timer, no linger. Per-request ctx
// semantics are exact: a request whose ctx ends while it is queued is
// never sent; one already sent is either waited for or abandoned to a late
// handler, as the caller chooses.
//
// A driver keeps one Queue per server connection (redislua.Batch for
// Redis, the memcached pipe), supplies the function that sends a batch in
// one round trip, and sends a lone request itself (Own).
package natbatch
