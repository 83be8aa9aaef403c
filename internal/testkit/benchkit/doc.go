// Package benchkit holds the measurements every backend's benchmarks share,
// so that their figures mean the same thing.
package benchkit
