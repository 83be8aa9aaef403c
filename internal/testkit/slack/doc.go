// Package slack is the test suite's one timing knob. A test that needs
// wall-clock slack — a margin a loaded machine may eat, a wait for
// something to happen that has no event to wait on — takes it from D, so a
// slow machine is handled by setting DISTLOCK_TEST_SLACK once instead of
// by a bigger sleep in one test.
//
// DISTLOCK_TEST_SLACK is a factor (default 1, at most 20): D(d) is d times
// it. Durations that are part of what a test proves (a TTL, the margin a
// loss signal must keep) are never scaled; only the tolerances around them.
package slack
