// Package jobs holds tests of the job helpers (Do, TryDo, WithMinHold)
// across backends with real servers; they live outside the root package so
// that its tests see no backend but mem:// registered.
package jobs
