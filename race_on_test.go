//go:build race

package distlock

// raceEnabled: the race detector is on (its instrumentation changes what
// escapes to the heap, so allocation counts are checked without it).
const raceEnabled = true
