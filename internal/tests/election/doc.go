// Package election holds fault and race tests of leader election
// (distlock.Election) across backends with real servers; they live outside
// the root package so that its tests see no backend but mem:// registered.
package election
