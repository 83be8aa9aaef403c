// Package history records what lock clients did — in one process or in
// many — and checks the record against the lock contract:
//
//   - mutual exclusion: no two owners hold a key at the same time, where a
//     hold lasts from the return of its acquisition until the earliest of
//     the start of its release, the moment its loss was noticed, and its
//     validity deadline (a lease backend promises nothing past it);
//   - fencing: an acquisition that began after another one of the same key
//     had returned gets a larger token (real-time order);
//   - reentrancy: a nested acquisition by the holder keeps its token.
//
// Times are CLOCK_MONOTONIC readings in nanoseconds, which all processes on
// one machine share (Go's own monotonic readings are per process), so
// histories of worker processes can be merged.
package history
