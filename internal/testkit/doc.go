// Package testkit is the root of distlock's test kit: packages used only by
// tests, benchmarks and the conformance harness, never by a backend at run
// time — testserver (throwaway real servers), netfault (a fault-injecting
// TCP proxy), history (cross-process acquisition histories and their
// checker), fenced (a resource that refuses stale tokens), benchkit (shared
// benchmark bodies), sqltest (the SQL backends' shared test support),
// slack (the suite's one timing knob, DISTLOCK_TEST_SLACK) and soak (the
// load and scale tests `make soak` adds, DISTLOCK_SOAK=1).
// Runtime helpers of the backends live directly under internal/.
package testkit
