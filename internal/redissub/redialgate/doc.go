// Package redialgate is a test helper: a go-redis dialer that, once armed,
// refuses the next dial and holds the one after it until the test opens the
// gate. With a killed pub/sub connection (CLIENT KILL TYPE pubsub) it holds
// the client's resubscription pending for as long as the test needs: the
// first redial fails, the second waits.
package redialgate
