// Package netfault puts a fault-injecting TCP proxy between a client and a
// server on loopback: added latency, a silent blackhole (connections stay
// open, nothing passes, like a partition), and a cut (connections reset,
// new ones refused). A backend under test is pointed at the proxy's address
// instead of the server's, so the fault hits exactly one client's links.
//
// Latency and blackholes can hit one direction only (SetLatencyDir,
// BlackholeDir: a request stuck on its way while replies flow, or the
// reverse), and SetScope narrows every fault to the connections open at
// that moment or to those opened after it (for example a client's pub/sub
// connection, dialled after its command connections).
package netfault
