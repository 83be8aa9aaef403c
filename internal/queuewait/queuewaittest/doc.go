// Package queuewaittest holds the tests that every backend waiting with
// queuewait runs against its real server.
package queuewaittest
