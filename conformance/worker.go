package conformance

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/fence"
	"github.com/distlock/distlock/internal/testkit/history"
)

// workerEnv carries a worker's configuration (JSON) to the re-executed
// binary.
const workerEnv = "DISTLOCK_CONFORMANCE_WORKER"

// ServeWorker turns this process into a conformance worker process if it was
// started as one, and returns at once otherwise. The checks that need lock
// clients in other processes (to pause them with SIGSTOP or kill them with
// SIGKILL) start the running binary again as a worker, so a test binary
// that runs the suite must call ServeWorker first in its TestMain:
//
//	func TestMain(m *testing.M) {
//		conformance.ServeWorker()
//		os.Exit(m.Run())
//	}
//
// Without it those checks are skipped with the reason. A worker opens the
// backend by Harness.URL, so the backend's package must be linked in.
func ServeWorker() {
	raw := os.Getenv(workerEnv)
	if raw == "" {
		return
	}
	var cfg workerConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		fmt.Fprintf(os.Stderr, "conformance worker: bad config: %v\n", err)
		os.Exit(2)
	}
	os.Exit(runWorker(cfg))
}

type workerConfig struct {
	ID       string        `json:"id"`
	URL      string        `json:"url"`
	Key      string        `json:"key"`
	Mode     string        `json:"mode"` // "loop", "hold" or "elect"
	TTL      time.Duration `json:"ttl"`
	Count    int           `json:"count"`     // loop: critical sections
	Duration time.Duration `json:"duration"`  // loop, elect: at most this long
	History  string        `json:"history"`   // loop, elect: JSON-lines history file
	Fenced   string        `json:"fenced"`    // hold: Redis address of a fenced resource
	FencedPG string        `json:"fenced_pg"` // hold: PostgreSQL URL of a fenced resource
	Permits  int           `json:"permits"`   // a permit of a semaphore of Key, not the lock
	Keys     []string      `json:"keys"`      // loop: AcquireAll of 3 of these, not the lock of Key
	WaitGo   bool          `json:"wait_go"`   // loop: start on a "go" line on stdin, so that workers contend
	HoldFor  time.Duration `json:"hold_for"`  // loop: sleep this long in each critical section
	// Progress (loop): print a "cs" line after each critical section, and
	// end the loop, as at Duration, on a "stop" line on stdin (or its end).
	Progress bool `json:"progress"`
}

// workerMsg is one line a worker prints on stdout.
type workerMsg struct {
	Ev       string `json:"ev"`
	Token    uint64 `json:"token,omitempty"`
	Deadline int64  `json:"deadline,omitempty"` // CLOCK_MONOTONIC
	At       int64  `json:"at,omitempty"`       // CLOCK_MONOTONIC
	Lost     bool   `json:"lost,omitempty"`
	OK       bool   `json:"ok,omitempty"`
	Stale    bool   `json:"stale,omitempty"`
	Done     int    `json:"done,omitempty"`
	Err      string `json:"err,omitempty"`
}

func runWorker(cfg workerConfig) int {
	out := json.NewEncoder(os.Stdout)
	say := func(m workerMsg) {
		m.At = history.Now()
		_ = out.Encode(m)
	}
	ctx := context.Background()
	l, err := distlock.Open(ctx, cfg.URL)
	if err != nil {
		say(workerMsg{Ev: "error", Err: err.Error()})
		return 1
	}
	defer l.Close()
	say(workerMsg{Ev: "ready"})
	switch cfg.Mode {
	case "loop":
		return workerLoop(ctx, l, cfg, say)
	case "hold":
		return workerHold(ctx, l, cfg, say)
	case "elect":
		return workerElect(ctx, l, cfg, say)
	}
	say(workerMsg{Ev: "error", Err: "unknown mode " + cfg.Mode})
	return 2
}

// workerLoop runs critical sections and records them.
func workerLoop(ctx context.Context, l *distlock.Locker, cfg workerConfig, say func(workerMsg)) int {
	f, err := os.OpenFile(cfg.History, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		say(workerMsg{Ev: "error", Err: err.Error()})
		return 1
	}
	defer f.Close()
	w := bufio.NewWriter(f)
	rec := history.NewRecorder(w)
	stop := time.Now().Add(cfg.Duration)
	// run ends at stop, or on "stop" (Progress).
	run, endRun := context.WithDeadline(ctx, stop)
	defer endRun()
	done := 0
	take, err := taker(l, cfg)
	if err != nil {
		say(workerMsg{Ev: "error", Err: err.Error()})
		return 1
	}
	in := bufio.NewScanner(os.Stdin)
	if cfg.WaitGo {
		in.Scan()
	}
	if cfg.Progress {
		go func() {
			defer endRun()
			for in.Scan() && in.Text() != "stop" {
			}
		}()
	}
	for seq := 0; done < cfg.Count && run.Err() == nil; seq++ {
		keys := take.keys(seq)
		for i, key := range keys {
			rec.Add(history.Event{Process: cfg.ID, Seq: memberSeq(seq, i, len(keys)), Op: history.AcquireCall, Key: key})
		}
		leases, release, err := take.acquire(run, keys)
		if err != nil {
			for i, key := range keys {
				rec.Add(history.Event{Process: cfg.ID, Seq: memberSeq(seq, i, len(keys)), Op: history.AcquireFail, Key: key, Err: err.Error()})
			}
			if errors.Is(err, distlock.ErrUnavailable) {
				time.Sleep(50 * time.Millisecond)
			}
			continue
		}
		for i, lease := range leases {
			rec.Add(history.Event{Process: cfg.ID, Seq: memberSeq(seq, i, len(keys)), Op: history.AcquireOK, Key: lease.Key(), Owner: lease.Owner(),
				Token: lease.Token(), Deadline: history.Mono(lease.Deadline())})
		}
		time.Sleep(cfg.HoldFor)
		for i, lease := range leases {
			if err := lease.Err(); err != nil {
				rec.Add(history.Event{Process: cfg.ID, Seq: memberSeq(seq, i, len(keys)), Op: history.Lost, Key: lease.Key()})
			}
		}
		for i, lease := range leases {
			rec.Add(history.Event{Process: cfg.ID, Seq: memberSeq(seq, i, len(keys)), Op: history.ReleaseCall, Key: lease.Key(), Deadline: history.Mono(lease.Deadline())})
		}
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err = release(rctx)
		cancel()
		op := history.ReleaseOK
		if err != nil {
			op = history.ReleaseFail
		}
		for i, lease := range leases {
			rec.Add(history.Event{Process: cfg.ID, Seq: memberSeq(seq, i, len(keys)), Op: op, Key: lease.Key()})
		}
		done++
		if cfg.Progress {
			say(workerMsg{Ev: "cs"})
		}
	}
	if err := w.Flush(); err != nil {
		say(workerMsg{Ev: "error", Err: err.Error()})
		return 1
	}
	say(workerMsg{Ev: "finished", Done: done})
	return 0
}

// workerHold takes the lock once and then obeys commands on stdin: "write"
// (to the fenced resource with its token), "status", "release".
func workerHold(ctx context.Context, l *distlock.Locker, cfg workerConfig, say func(workerMsg)) int {
	take, err := taker(l, cfg)
	if err != nil {
		say(workerMsg{Ev: "error", Err: err.Error()})
		return 1
	}
	// The holder's acquisition sets the check up: one that the backend
	// could not complete within the short TTL (a new process's first
	// round trips on a loaded machine: ErrUnavailable, nothing held) is
	// tried again, a few times.
	var leases []*distlock.Lease
	for try := 1; ; try++ {
		leases, _, err = take.acquire(ctx, take.keys(0))
		if err == nil || !errors.Is(err, distlock.ErrUnavailable) || try == 5 || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		say(workerMsg{Ev: "error", Err: err.Error()})
		return 1
	}
	lease := leases[0]
	say(workerMsg{Ev: "acquired", Token: lease.Token(), Deadline: history.Mono(lease.Deadline())})
	stores, err := openFencedStores(ctx, cfg.Fenced, cfg.FencedPG, cfg.Key)
	if err != nil {
		say(workerMsg{Ev: "error", Err: err.Error()})
		return 1
	}
	defer closeStores(stores)
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		switch in.Text() {
		case "write":
			// Kleppmann's holder: it does not look at the lease first
			// (as if paused between the check and the write).
			m := workerMsg{Ev: "write"}
			if len(stores) == 0 {
				m.Err = "no fenced resource configured"
			} else {
				// OK: every store took the write; Stale: every one refused
				// it as stale.
				m.OK, m.Stale = true, true
				var errs []error
				for _, s := range stores {
					werr := s.write(ctx, lease.Token(), cfg.ID)
					m.OK = m.OK && werr == nil
					m.Stale = m.Stale && errors.Is(werr, fence.ErrStale)
					if werr != nil {
						errs = append(errs, fmt.Errorf("%s: %w", s.name(), werr))
					}
				}
				if err := errors.Join(errs...); err != nil {
					m.Err = oneLineErr(err)
				}
			}
			m.Lost = lease.Err() != nil
			say(m)
		case "status":
			m := workerMsg{Ev: "status", Lost: lease.Err() != nil, Deadline: history.Mono(lease.Deadline())}
			if err := lease.Err(); err != nil {
				m.Err = err.Error()
			}
			say(m)
		case "release":
			m := workerMsg{Ev: "released"}
			if err := lease.Release(ctx); err != nil {
				m.Err = err.Error()
			}
			say(m)
			return 0
		}
	}
	return 0
}

// worker is the parent's handle on a worker process.
type worker struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	msgs  chan workerMsg
	exit  chan error
}

// startWorker starts this binary as a worker and waits for it to be ready.
// It skips the check if the binary does not serve workers.
func startWorker(t T, cfg workerConfig) *worker {
	t.Helper()
	w := launchWorker(t, cfg)
	w.waitReady(t, cfg)
	return w
}

// startWorkers starts a worker for each of cfgs at once, and waits for
// every one to be ready.
func startWorkers(t T, cfgs []workerConfig) []*worker {
	t.Helper()
	ws := make([]*worker, len(cfgs))
	for i, cfg := range cfgs {
		ws[i] = launchWorker(t, cfg)
	}
	for i, cfg := range cfgs {
		ws[i].waitReady(t, cfg)
	}
	return ws
}

// launchWorker starts this binary as a worker.
func launchWorker(t T, cfg workerConfig) *worker {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Skipf("cannot find the running binary to start worker processes: %v", err)
	}
	raw, _ := json.Marshal(cfg)
	// -test.run=^$ makes a test binary that does not call ServeWorker
	// run nothing and exit, instead of running the tests again.
	cmd := exec.Command(exe, "-test.run=^$", "-test.count=1")
	cmd.Env = append(os.Environ(), workerEnv+"="+string(raw))
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = workerProcAttr()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatalf("worker stdin: %v", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatalf("worker stdout: %v", err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start worker: %v", err)
	}
	w := &worker{cmd: cmd, stdin: stdin, msgs: make(chan workerMsg, 64), exit: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var m workerMsg
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				w.msgs <- m
			}
		}
		close(w.msgs)
		w.exit <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = stdin.Close()
	})
	return w
}

// waitReady waits for the worker's "ready". It skips the check if the
// binary does not serve workers.
func (w *worker) waitReady(t T, cfg workerConfig) {
	t.Helper()
	m, ok := w.recv(60 * time.Second)
	if !ok {
		t.Skipf("the binary does not serve conformance workers: call conformance.ServeWorker() first in TestMain")
	}
	if m.Ev != "ready" {
		t.Fatalf("worker %s: %+v", cfg.ID, m)
	}
}

// recv waits for the next message; false if the worker ended or timed out.
func (w *worker) recv(d time.Duration) (workerMsg, bool) {
	select {
	case m, ok := <-w.msgs:
		return m, ok
	case <-time.After(d):
		return workerMsg{}, false
	}
}

func (w *worker) send(cmd string) error {
	_, err := io.WriteString(w.stdin, cmd+"\n")
	return err
}

func (w *worker) signal(sig syscall.Signal) error { return w.cmd.Process.Signal(sig) }

// waitExit waits for the worker process to end.
func (w *worker) waitExit(d time.Duration) error {
	select {
	case err := <-w.exit:
		return err
	case <-time.After(d):
		return fmt.Errorf("worker still running after %v", d)
	}
}

// oneLineErr is err's message with joined errors on one line.
func oneLineErr(err error) string { return strings.ReplaceAll(err.Error(), "\n", "; ") }
