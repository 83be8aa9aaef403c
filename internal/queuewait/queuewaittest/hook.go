package queuewaittest

import (
	"sync"

	"github.com/distlock/distlock/internal/queuewait"
)

// HookJoinable returns q with a hook in its Joinable: the first time
// Joinable reports the owner's hold as joinable, hook runs before it
// returns, so between Await's check and its Nest.
func HookJoinable[L, E any](q queuewait.Queue[L, E], hook func()) queuewait.Queue[L, E] {
	return &joinHooked[L, E]{Queue: q, hook: hook}
}

type joinHooked[L, E any] struct {
	queuewait.Queue[L, E]
	once sync.Once
	hook func()
}

func (j *joinHooked[L, E]) Joinable() (<-chan struct{}, bool) {
	ch, same := j.Queue.Joinable()
	if same {
		j.once.Do(j.hook)
	}
	return ch, same
}
