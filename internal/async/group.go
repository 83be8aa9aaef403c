package async

import (
	"slices"
	"sync"
	"time"
)

// Group runs work that outlives its caller. Close stops new work, closes
// Quit and waits until every started function has returned and every pooled
// goroutine has exited. The zero Group is not usable: call NewGroup. Safe
// for concurrent use.
type Group struct {
	quit    chan struct{} // closed when Close begins
	workers sync.WaitGroup

	mu       sync.Mutex
	draining bool
	active   int
	idle     sync.Cond
	// ready is the stack of idle pooled goroutines, the most recently idle
	// on top: work goes to the top, so under a steady load the same few
	// stay busy and the rest of a burst's goroutines time out at the
	// bottom (a FIFO hand-off would keep every one of them alive).
	ready []*worker
}

// worker is a pooled goroutine's inbox.
type worker struct{ task chan func() }

// WorkerIdle is how long a pooled goroutine waits for more work before it
// exits. A variable only so that tests can shorten it.
var WorkerIdle = time.Second

// NewGroup returns an open Group.
func NewGroup() *Group {
	g := &Group{quit: make(chan struct{})}
	g.idle.L = &g.mu
	return g
}

// Go runs fn on a goroutine that Close waits for, and reports true. Once
// Close has begun it reports false and does not run fn.
func (g *Group) Go(fn func()) bool { return g.start(fn, false) }

// GoChild is Go for work started by work of this group (a late callback
// that schedules an undo): that work holds Close back itself, so GoChild
// still runs fn while Close is waiting, and reports false only after Close
// has returned.
func (g *Group) GoChild(fn func()) bool { return g.start(fn, true) }

func (g *Group) start(fn func(), child bool) bool {
	g.mu.Lock()
	if g.draining && (!child || g.active == 0) {
		g.mu.Unlock()
		return false
	}
	g.active++
	task := func() {
		defer g.done()
		fn()
	}
	if n := len(g.ready); n > 0 {
		w := g.ready[n-1]
		g.ready[n-1] = nil
		g.ready = g.ready[:n-1]
		g.mu.Unlock()
		w.task <- task // buffered: never blocks
		return true
	}
	g.workers.Add(1)
	g.mu.Unlock()
	go g.work(task)
	return true
}

func (g *Group) work(task func()) {
	defer g.workers.Done()
	w := &worker{task: make(chan func(), 1)}
	idle := time.NewTimer(WorkerIdle)
	defer idle.Stop()
	for {
		task()
		g.mu.Lock()
		g.ready = append(g.ready, w)
		g.mu.Unlock()
		idle.Reset(WorkerIdle)
		select {
		case task = <-w.task:
			continue
		case <-idle.C:
		case <-g.quit:
		}
		if !g.retire(w) {
			task = <-w.task // start took w off the stack: its task is on the way
			continue
		}
		return
	}
}

// retire takes w off the idle stack; false if start already took it.
func (g *Group) retire(w *worker) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, r := range g.ready {
		if r == w {
			g.ready = slices.Delete(g.ready, i, i+1) // clears the vacated slot
			return true
		}
	}
	return false
}

func (g *Group) done() {
	g.mu.Lock()
	g.active--
	if g.active == 0 {
		g.idle.Broadcast()
	}
	g.mu.Unlock()
}

// Quit is closed when Close begins: work waiting between retries should
// stop waiting then.
func (g *Group) Quit() <-chan struct{} { return g.quit }

// Closing reports whether Close has begun.
func (g *Group) Closing() bool {
	select {
	case <-g.quit:
		return true
	default:
		return false
	}
}

// Close stops new work (Go reports false), closes Quit and waits until
// every function started by Go or GoChild has returned and every pooled
// goroutine has exited. Work must therefore be bounded in time on its own;
// Close adds no bound. Calling Close again waits again.
func (g *Group) Close() {
	g.mu.Lock()
	if !g.draining {
		close(g.quit)
	}
	g.draining = true
	for g.active > 0 {
		g.idle.Wait()
	}
	g.mu.Unlock()
	g.workers.Wait()
}
