package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/distlock/distlock"
)

// forwarded are the signals run passes on to the command. SIGINT and SIGQUIT
// typed at a terminal reach the command directly too (same process group);
// the command then sees them twice, as under most supervisors.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

func cmdRun(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("run", "run [--backend URL] --key KEY [--ttl D] [--wait D | --no-wait] [--owner ID] [--grace D] -- CMD [ARGS...]", stderr)
	backendURL := fs.String("backend", defaultBackend(), "lock backend URL (default $DISTLOCK_BACKEND, then mem://)")
	key := fs.String("key", "", "name of the lock (required)")
	ttl := fs.Duration("ttl", distlock.DefaultTTL, "lease TTL; the lease is refreshed about every ttl/3 while the command runs")
	wait := fs.Duration("wait", 0, "give up with status 75 after waiting this long for the lock (0: wait as long as it takes)")
	noWait := fs.Bool("no-wait", false, "give up with status 75 at once if the lock is held")
	owner := fs.String("owner", "", "owner id: runs with the same owner id nest instead of excluding each other (default: a random id)")
	grace := fs.Duration("grace", 10*time.Second, "after the lock is lost: time between SIGTERM and SIGKILL to the command")
	verbose := fs.Bool("v", false, "report acquisition and release on stderr")
	if st := parseFlags(fs, args, stderr); st >= 0 {
		return st
	}
	argv := fs.Args()
	switch {
	case *key == "":
		fmt.Fprintln(stderr, "distlock run: --key is required (see distlock run --help)")
		return ExitUsage
	case len(argv) == 0:
		fmt.Fprintln(stderr, "distlock run: no command given (distlock run --key KEY -- CMD [ARGS...])")
		return ExitUsage
	case *noWait && *wait != 0:
		fmt.Fprintln(stderr, "distlock run: --wait and --no-wait exclude each other")
		return ExitUsage
	case *wait < 0 || *grace < 0:
		fmt.Fprintln(stderr, "distlock run: --wait and --grace must not be negative")
		return ExitUsage
	}

	// Signals that arrive while we wait for the lock end the wait.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	locker, err := distlock.Open(ctx, *backendURL)
	if err != nil {
		fmt.Fprintf(stderr, "distlock run: %v\n", err)
		return exitFor(err)
	}
	defer locker.Close()

	opts := []distlock.Option{distlock.WithTTL(*ttl)}
	if *owner != "" {
		opts = append(opts, distlock.WithOwner(*owner))
	}
	lease, status := acquireForRun(ctx, locker, *key, *wait, *noWait, opts, sigs, stderr)
	if lease == nil {
		return status
	}
	if *verbose {
		fmt.Fprintf(stderr, "distlock run: acquired %q token=%d owner=%s\n", *key, lease.Token(), lease.Owner())
	}

	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	cmd.Env = append(os.Environ(),
		"DISTLOCK_KEY="+*key,
		"DISTLOCK_TOKEN="+strconv.FormatUint(lease.Token(), 10),
		"DISTLOCK_OWNER="+lease.Owner(),
	)
	if err := cmd.Start(); err != nil {
		release(lease, stderr, *verbose)
		fmt.Fprintf(stderr, "distlock run: %v\n", err)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			return 127
		}
		return 126
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	status = -1
	var killTimer <-chan time.Time
	lost := lease.Done()
	for status < 0 {
		select {
		case err := <-exited:
			if killTimer != nil {
				status = ExitLost
			} else {
				status = exitStatus(err)
			}
		case sig := <-sigs:
			_ = cmd.Process.Signal(sig)
		case <-lost:
			lost = nil
			fmt.Fprintf(stderr, "distlock run: lock %q lost while the command ran: %v; sending SIGTERM\n", *key, lease.Err())
			_ = cmd.Process.Signal(syscall.SIGTERM)
			killTimer = time.After(*grace)
		case <-killTimer:
			killTimer = make(chan time.Time) // keep "lost" state, never fires
			fmt.Fprintf(stderr, "distlock run: command still running %v after SIGTERM; sending SIGKILL\n", *grace)
			_ = cmd.Process.Kill()
		}
	}
	if status != ExitLost {
		release(lease, stderr, *verbose)
	}
	return status
}

// acquireForRun takes the lock as run's flags say. On failure it reports
// and returns the exit status.
func acquireForRun(ctx context.Context, l distlock.Locker, key string, wait time.Duration, noWait bool, opts []distlock.Option, sigs <-chan os.Signal, stderr io.Writer) (*distlock.Lease, int) {
	if wait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, wait)
		defer cancel()
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop, watched := make(chan struct{}), make(chan struct{})
	var interrupted os.Signal
	go func() {
		defer close(watched)
		select {
		case sig := <-sigs:
			interrupted = sig
			cancel(fmt.Errorf("interrupted by %v", sig))
		case <-stop:
		}
	}()
	var (
		lease *distlock.Lease
		err   error
	)
	if noWait {
		lease, err = l.TryAcquire(ctx, key, opts...)
	} else {
		lease, err = l.Acquire(ctx, key, opts...)
	}
	close(stop)
	<-watched
	if err == nil && interrupted != nil {
		release(lease, stderr, false) // the signal came with the grant: honour it
	}
	if err == nil && interrupted == nil {
		return lease, ExitOK
	}
	if sig, ok := interrupted.(syscall.Signal); ok {
		fmt.Fprintf(stderr, "distlock run: interrupted by %v while waiting for %q\n", sig, key)
		return nil, 128 + int(sig)
	}
	switch {
	case errors.Is(err, distlock.ErrUnavailable):
		fmt.Fprintf(stderr, "distlock run: backend unavailable: %v\n", err)
	case errors.Is(err, distlock.ErrNotAcquired) && noWait:
		fmt.Fprintf(stderr, "distlock run: %q is held by another owner\n", key)
	case errors.Is(err, distlock.ErrNotAcquired) && errors.Is(err, context.DeadlineExceeded):
		fmt.Fprintf(stderr, "distlock run: %q still held after waiting %v\n", key, wait)
	default:
		fmt.Fprintf(stderr, "distlock run: %v\n", err)
	}
	return nil, exitFor(err)
}

func release(lease *distlock.Lease, stderr io.Writer, verbose bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := lease.Release(ctx); err != nil {
		fmt.Fprintf(stderr, "distlock run: release: %v\n", err)
	} else if verbose {
		fmt.Fprintf(stderr, "distlock run: released %q\n", lease.Key())
	}
}

// exitStatus is the shell's view of how the command ended: its exit code,
// or 128 + the signal that killed it.
func exitStatus(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	return ExitInternal
}
