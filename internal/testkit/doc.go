// Package testkit is the root of distlock's test kit: packages used only by
// tests, benchmarks and the conformance harness, never by a backend at run
// time — testserver (throwaway real servers), netfault (a fault-injecting
// TCP proxy), history (cross-process acquisition histories and their
// checker), fenced (a resource that refuses stale tokens), benchkit (shared
// benchmark bodies) and sqltest (the SQL backends' shared test support).
// Runtime helpers of the backends live directly under internal/.
package testkit
