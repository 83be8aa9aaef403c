// Package target gives tests what a Locker answers to As, in one call.
package target
