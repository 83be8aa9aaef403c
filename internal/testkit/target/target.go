package target

import (
	"fmt"

	"github.com/distlock/distlock"
)

// Of returns l's value of type T through l.As, and panics when l has none:
// a test that asks a Locker for the wrong backend's handle is wrong.
func Of[T any](l *distlock.Locker) T {
	var t T
	if !l.As(&t) {
		panic(fmt.Sprintf("target.Of: the Locker has no %T", t))
	}
	return t
}
