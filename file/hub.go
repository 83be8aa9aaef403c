//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package file

import (
	"strings"
	"sync"
)

// The wake-up hub: one per process, one dirWatch per lock directory in use.
// A waiter takes the channel of its lock file's name (signal) before each
// attempt and sleeps on it after a failed one; the channel is closed when
// that name may have been released: by this process at once (wake), and
// by other processes through the kernel's directory events where the
// platform has them (inotify on Linux: a lock file closed after writing,
// renamed over, removed). Without them waiters poll on a short schedule.

var hub = struct {
	mu   sync.Mutex
	dirs map[string]*dirWatch
}{dirs: map[string]*dirWatch{}}

// dirWatch is the wake-up state of one directory.
type dirWatch struct {
	dir    string
	refs   int  // Lockers using it; guarded by hub.mu
	notify bool // kernel events arrive
	stop   func()

	mu    sync.Mutex
	names map[string]chan struct{}
	turns map[string]*turn
}

// turn lets one waiter at a time of this process wait for a lock file:
// the others queue on it (FIFO, in the runtime's channel queue), so a
// release wakes one waiter per process, not every waiter.
type turn struct {
	ch   chan struct{} // holds a value while a waiter has the turn
	refs int           // guarded by dirWatch.mu
}

// enter returns name's turn; leave must follow.
func (w *dirWatch) enter(name string) *turn {
	w.mu.Lock()
	defer w.mu.Unlock()
	t := w.turns[name]
	if t == nil {
		t = &turn{ch: make(chan struct{}, 1)}
		w.turns[name] = t
	}
	t.refs++
	return t
}

// leave ends an enter.
func (w *dirWatch) leave(name string, t *turn) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if t.refs--; t.refs == 0 {
		delete(w.turns, name)
	}
}

// attach returns dir's watch, starting the kernel watch on first use.
func attach(dir string) *dirWatch {
	hub.mu.Lock()
	defer hub.mu.Unlock()
	w := hub.dirs[dir]
	if w == nil {
		w = &dirWatch{dir: dir, names: map[string]chan struct{}{}, turns: map[string]*turn{}}
		w.stop, w.notify = startWatch(dir, w.wake, w.wakeAll)
		hub.dirs[dir] = w
	}
	w.refs++
	return w
}

// detach ends one attach; the last stops the kernel watch and waits for
// its goroutine.
func (w *dirWatch) detach() {
	hub.mu.Lock()
	w.refs--
	last := w.refs == 0
	if last {
		delete(hub.dirs, w.dir)
	}
	hub.mu.Unlock()
	if last && w.stop != nil {
		w.stop()
	}
}

// signal returns the channel that the next wake of name closes.
func (w *dirWatch) signal(name string) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	ch := w.names[name]
	if ch == nil {
		ch = make(chan struct{})
		w.names[name] = ch
	}
	return ch
}

// wake closes name's channel, and that of its group: everyone waiting on
// either tries again. The group of a lock file "<stem>.<rest>.lock" is
// "<stem>.*": a semaphore's permit waiters wait for any of its permit
// files.
func (w *dirWatch) wake(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.wakeLocked(name)
	if g := group(name); g != "" {
		w.wakeLocked(g)
	}
}

func (w *dirWatch) wakeLocked(name string) {
	if ch := w.names[name]; ch != nil {
		close(ch)
		delete(w.names, name)
	}
}

// group returns the group name of a lock file name, "" if it has none.
func group(name string) string {
	stem, _, ok := strings.Cut(name, ".")
	if !ok || !strings.HasSuffix(name, ".lock") {
		return ""
	}
	return stem + ".*"
}

// wakeAll wakes every waiter of the directory (the kernel dropped events).
func (w *dirWatch) wakeAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for name, ch := range w.names {
		close(ch)
		delete(w.names, name)
	}
}
