package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/distlock/distlock"
)

// forwarded are the signals run passes on to the command's process group.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

var runAbout = `
Takes the lock KEY on the backend, runs CMD while holding it (refreshing the
lease about every ttl/3), and releases it when CMD exits. The backend must
be shared by every process the lock coordinates: run refuses an in-process
backend (mem://) and requires --backend or $DISTLOCK_BACKEND.

CMD runs in a process group of its own. Signals distlock gets are passed on
to the whole group. If the lock is lost while CMD runs, the group gets
SIGTERM, then SIGKILL once CMD has exited or --grace has passed, whichever
comes first; distlock then exits 76. ` + parentDeathSignal + `
Processes CMD leaves behind when it exits normally are not signalled.

With --wait (or without --no-wait) distlock also waits out brief backend
outages (connection refused, timeouts, failover) until the wait ends;
a bad URL or password fails at once.

--min-hold D keeps the lock taken until at least D after it was acquired,
even when CMD ends sooner: a host whose cron fires a little later then finds
it taken and skips the job (use it with --no-wait). On backends whose locks
expire, distlock leaves the lock to expire on the server and exits at once;
on session-bound ones (zookeeper, mysql forupdate, postgres advisory)
distlock stays up until the minimum hold ends, since the lock ends with its
session.

Backends whose locks do not expire (zookeeper) ignore --ttl: a holder's lock
lasts as long as its session (session_timeout URL parameter).

--permits N takes one of N permits of the semaphore KEY instead of the lock:
at most N commands run at once across every distlock using that KEY and N
(each with its own token in DISTLOCK_TOKEN). A permit is a lease like the
lock: refreshed while CMD runs, and lost the same way. Every run of one KEY
must give the same N (another N is refused while permits are held).
` + wrapText(semaphoreSentence(), 76)

func cmdRun(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("run", "run --backend URL --key KEY [--ttl D] [--wait D | --no-wait] [--min-hold D] [--permits N | --owner ID] [--metadata S] [--grace D] -- CMD [ARGS...]", runAbout, stdout)
	backendFlagValue := backendFlag(fs, "")
	key := fs.String("key", "", "name of the lock (required)")
	ttl := fs.Duration("ttl", distlock.DefaultTTL, "lease TTL; the lease is refreshed about every ttl/3 while the command runs")
	wait := fs.Duration("wait", 0, "give up with status 75 after waiting this long for the lock or for the backend to come back (0: as long as it takes)")
	noWait := fs.Bool("no-wait", false, "give up with status 75 at once if the lock is held")
	owner := fs.String("owner", "", "owner id: runs with the same owner id nest instead of excluding each other (default: a random id)")
	minHold := fs.Duration("min-hold", 0, "keep the lock taken until at least this long after it was acquired, even if CMD ends sooner, so that a host whose timer fires a little later skips the job (cron)")
	metadata := fs.String("metadata", "", "description stored with the lock for distlock status (default: host=HOST pid=PID cmd=NAME; the command's arguments are left out: they may hold passwords)")
	permits := fs.Int("permits", 0, "take one of N permits of the semaphore KEY instead of the lock: at most N commands run at once")
	grace := fs.Duration("grace", 10*time.Second, "after the lock is lost: time between SIGTERM and SIGKILL to the command's process group")
	verbose := fs.Bool("v", false, "report acquisition and release on stderr, and as they happen: a backend outage being waited out, failing refreshes, a lost lease")
	if st := parseFlags(fs, args, stderr); st >= 0 {
		return st
	}
	argv := fs.Args()
	url := backendURL(*backendFlagValue, "")
	if st := checkRunArgs(*key, argv, *noWait, *wait, *grace, url, stderr); st >= 0 {
		return st
	}
	if st := checkPermitArgs(*permits, *owner, stderr); st >= 0 {
		return st
	}
	ttlSet := false
	fs.Visit(func(f *flag.Flag) { ttlSet = ttlSet || f.Name == "ttl" })

	// Signals that arrive while we wait for the lock end the wait.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	locker, err := distlock.Open(ctx, url)
	if err != nil {
		fmt.Fprintf(stderr, "distlock run: %s\n", errLine(err))
		return exitFor(err)
	}
	defer locker.Close()
	if ttlSet && !locker.Capabilities().Expiring {
		fmt.Fprintf(stderr, "distlock run: note: %s locks do not expire, --ttl is ignored: the lock lasts as long as distlock's session\n", schemeOf(url))
	}

	md := *metadata
	if md == "" {
		md = defaultMetadata(argv)
	}
	opts := []distlock.Option{distlock.WithTTL(*ttl), distlock.WithMetadata(md), distlock.WithMinHold(*minHold)}
	if !*noWait {
		opts = append(opts, distlock.WithRetryUnavailable(true))
	}
	if *verbose {
		opts = append(opts, distlock.WithLogger(verboseLogger(stderr, "run")))
	}
	if *owner != "" {
		opts = append(opts, distlock.WithOwner(*owner))
	}
	take, err := runTaker(locker, *key, *permits, opts)
	if err != nil {
		fmt.Fprintf(stderr, "distlock run: %s\n", errLine(err))
		return exitFor(err)
	}
	lease, status := acquireForRun(ctx, take, *key, *wait, *noWait, sigs, stderr)
	if lease == nil {
		return status
	}
	// The minimum hold counts from now (the library's, from the grant's
	// arrival before Acquire returned, ends no later).
	holdUntil := time.Now().Add(*minHold)
	if *verbose {
		fmt.Fprintf(stderr, "distlock run: acquired %q token=%d owner=%s\n", *key, lease.Token(), lease.Owner())
	}

	cmd, status := startCommand(argv, *key, lease, stdout, stderr)
	if cmd == nil {
		giveBack(lease, stderr, *verbose) // the command never ran: no minimum hold
		return status
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	status = superviseCommand(cmd, exited, lease, sigs, *grace, stderr)
	restoreForeground(cmd)
	if status != ExitLost {
		release(lease, stderr, *verbose)
		if !locker.Capabilities().Expiring {
			waitMinHold(holdUntil, sigs, stderr, *verbose)
		}
	}
	return status
}

// waitMinHold keeps distlock, and with it the session that holds a lock
// that does not expire, alive until the minimum hold ends; the Locker
// releases the lock then. A signal ends the wait early (the session, and
// the lock, end with distlock).
func waitMinHold(until time.Time, sigs <-chan os.Signal, stderr io.Writer, verbose bool) {
	left := time.Until(until)
	if left <= 0 {
		return
	}
	if verbose {
		fmt.Fprintf(stderr, "distlock run: holding the lock %v more (--min-hold)\n", left.Round(time.Millisecond))
	}
	t := time.NewTimer(left + 100*time.Millisecond) // and let the Locker's release go out
	defer t.Stop()
	select {
	case <-t.C:
	case sig := <-sigs:
		fmt.Fprintf(stderr, "distlock run: %v during --min-hold: the lock is freed now, %v early\n", sig, time.Until(until).Round(time.Millisecond))
	}
}

// defaultMetadata describes this run for distlock status: host, pid of
// distlock (the process to signal) and the command's name, within
// MaxMetadataLen. The arguments are left out: they may hold secrets.
func defaultMetadata(argv []string) string {
	host, err := os.Hostname()
	if err != nil {
		host = "?"
	}
	md := fmt.Sprintf("host=%s pid=%d cmd=%s", host, os.Getpid(), filepath.Base(argv[0]))
	return truncateUTF8(md, distlock.MaxMetadataLen)
}

// truncateUTF8 cuts s to at most n bytes at a rune boundary, and replaces
// invalid UTF-8 (a file name may hold any bytes).
func truncateUTF8(s string, n int) string {
	s = strings.ToValidUTF8(s, "?")
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// checkRunArgs returns the exit status of run's unusable arguments, or -1.
func checkRunArgs(key string, argv []string, noWait bool, wait, grace time.Duration, url string, stderr io.Writer) int {
	switch {
	case key == "":
		fmt.Fprintln(stderr, "distlock run: --key is required (see distlock help run)")
		return ExitUsage
	case len(argv) == 0:
		fmt.Fprintln(stderr, "distlock run: no command given (distlock run --backend URL --key KEY -- CMD [ARGS...])")
		return ExitUsage
	case noWait && wait != 0:
		fmt.Fprintln(stderr, "distlock run: --wait and --no-wait exclude each other")
		return ExitUsage
	case wait < 0 || grace < 0:
		fmt.Fprintln(stderr, "distlock run: --wait and --grace must not be negative")
		return ExitUsage
	}
	return checkSharedBackend("run", url, stderr)
}

// startCommand starts the command under the lease, in its own process
// group, with the lease in its environment. It returns the exit status of
// a command that could not start (127: not found, 126: not executable).
func startCommand(argv []string, key string, lease *distlock.Lease, stdout, stderr io.Writer) (*exec.Cmd, int) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	cmd.Env = append(os.Environ(),
		"DISTLOCK_KEY="+key,
		"DISTLOCK_TOKEN="+strconv.FormatUint(lease.Token(), 10),
		"DISTLOCK_OWNER="+lease.Owner(),
	)
	setProcAttr(cmd)
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "distlock run: %s\n", errLine(err))
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			return nil, 127
		}
		return nil, 126
	}
	return cmd, 0
}

// superviseCommand waits for the command to exit, passing signals on to
// its process group. If the lease is lost first, the group gets SIGTERM,
// and SIGKILL when the command has exited or grace has passed; the status
// is then ExitLost.
func superviseCommand(cmd *exec.Cmd, exited <-chan error, lease *distlock.Lease, sigs <-chan os.Signal, grace time.Duration, stderr io.Writer) int {
	lost := lease.Done()
	var killTimer <-chan time.Time
	for {
		select {
		case err := <-exited:
			if lost != nil {
				return exitStatus(err)
			}
			if groupAlive(cmd) {
				fmt.Fprintln(stderr, "distlock run: command exited after the lock was lost; sending SIGKILL to what is left of its process group")
				signalGroup(cmd, syscall.SIGKILL)
			}
			return ExitLost
		case sig := <-sigs:
			signalGroup(cmd, sig)
		case <-lost:
			lost = nil
			fmt.Fprintf(stderr, "distlock run: lock %q lost while the command ran (%s); sending SIGTERM to the command's process group\n", lease.Key(), errLine(lease.Err()))
			signalGroup(cmd, syscall.SIGTERM)
			killTimer = time.After(grace)
		case <-killTimer:
			killTimer = nil
			fmt.Fprintf(stderr, "distlock run: command still running %v after SIGTERM; sending SIGKILL to its process group\n", grace)
			signalGroup(cmd, syscall.SIGKILL)
		}
	}
}

// schemeOf is the scheme of a backend URL, lower case, "" if none.
func schemeOf(url string) string {
	i := strings.Index(url, ":")
	if i <= 0 {
		return ""
	}
	return strings.ToLower(url[:i])
}

// acquireForRun takes the lock as run's flags say. On failure it reports
// and returns the exit status.
func acquireForRun(ctx context.Context, take taker, key string, wait time.Duration, noWait bool, sigs <-chan os.Signal, stderr io.Writer) (*distlock.Lease, int) {
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
	lease, err := take(ctx, noWait)
	close(stop)
	<-watched
	if err == nil && interrupted != nil {
		giveBack(lease, stderr, false) // the signal came with the grant: the command never ran
	}
	if err == nil && interrupted == nil {
		return lease, ExitOK
	}
	if sig, ok := interrupted.(syscall.Signal); ok {
		fmt.Fprintf(stderr, "distlock run: interrupted by %v while waiting for %q\n", sig, key)
		return nil, 128 + int(sig)
	}
	switch {
	case errors.Is(err, distlock.ErrUnavailable) && wait > 0:
		fmt.Fprintf(stderr, "distlock run: gave up after waiting %v: %s\n", wait, errLine(err))
	case errors.Is(err, distlock.ErrNotAcquired) && noWait:
		fmt.Fprintf(stderr, "distlock run: %q is held by another owner\n", key)
	case errors.Is(err, distlock.ErrNotAcquired) && errors.Is(err, context.DeadlineExceeded):
		fmt.Fprintf(stderr, "distlock run: %q still held after waiting %v\n", key, wait)
	default:
		fmt.Fprintf(stderr, "distlock run: %s\n", errLine(err))
	}
	return nil, exitFor(err)
}

func release(lease *distlock.Lease, stderr io.Writer, verbose bool) {
	end(lease, lease.Release, stderr, verbose)
}

// giveBack ends a lease whose command never ran: the lock is freed at once,
// whatever --min-hold says (a minimum hold is kept only by work that ran).
func giveBack(lease *distlock.Lease, stderr io.Writer, verbose bool) {
	end(lease, lease.Abandon, stderr, verbose)
}

func end(lease *distlock.Lease, how func(context.Context) error, stderr io.Writer, verbose bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := how(ctx); err != nil {
		fmt.Fprintf(stderr, "distlock run: release: %s\n", errLine(err))
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
