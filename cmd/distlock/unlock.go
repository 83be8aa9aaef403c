package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/distlock/distlock"
)

const unlockAbout = `
Frees the lock KEY whatever its owner, for a holder that is stuck or gone.
It shows the holder and asks for confirmation on the terminal (y to go on);
--yes skips the question. The lock is freed only if the holder is still the
one shown (owner and token, compared by the backend as it frees the lock).
Then it prints the evicted owner, metadata and token.

The next acquisition of KEY gets a higher fencing token than the evicted
holder's, so a resource that checks tokens refuses the old holder's writes;
the old holder's lease ends at its next refresh (distlock run then stops its
command). Work the old holder does without checking tokens is not stopped:
prefer waiting out its TTL when it may still be running.

Without a terminal on stdin (a script, cron, CI) pass --yes: unlock refuses
to ask (exit 64).

Exit status 0 when the lock was freed or was not held, 1 when not confirmed
or the lock changed hands before it was freed, 69 backend unavailable, 77
credentials refused, 78 bad URL or key, 64 usage.`

// confirmIn is where unlock reads the operator's answer (tests replace it).
var confirmIn io.Reader = os.Stdin

func cmdUnlock(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("unlock", "unlock --force [--yes] [--backend URL] KEY", unlockAbout, stdout)
	backendFlagValue := backendFlag(fs, "")
	force := fs.Bool("force", false, "required: free the lock whatever its owner")
	yes := fs.Bool("yes", false, "do not ask for confirmation")
	timeout := fs.Duration("timeout", 10*time.Second, "give up on the backend after this long (the question's wait is not counted)")
	keys, st := parseInterleaved(fs, args, stderr)
	if st >= 0 {
		return st
	}
	switch {
	case !*force:
		fmt.Fprintln(stderr, "distlock unlock: frees a lock whatever its owner: pass --force to do that (a run's own lock is released when its command exits)")
		return ExitUsage
	case len(keys) != 1:
		fmt.Fprintf(stderr, "distlock unlock: want exactly one KEY, got %d (distlock unlock --force --backend URL KEY)\n", len(keys))
		return ExitUsage
	}
	key := keys[0]
	url := backendURL(*backendFlagValue, "")
	if st := checkSharedBackend("unlock", url, stderr); st >= 0 {
		return st
	}
	if !*yes && confirmIn == os.Stdin && !stdinIsTerminal() {
		fmt.Fprintln(stderr, "distlock unlock: stdin is not a terminal: pass --yes to free the lock without the question")
		return ExitUsage
	}
	openCtx, cancel := context.WithTimeout(context.Background(), *timeout)
	locker, err := distlock.Open(openCtx, url)
	err = noAnswer(openCtx, err, *timeout)
	cancel()
	if err != nil {
		fmt.Fprintf(stderr, "distlock unlock: %s\n", errLine(err))
		return exitFor(err)
	}
	defer locker.Close()
	u := unlocker{locker: locker, key: key, timeout: *timeout, stdout: stdout, stderr: stderr}
	return u.run(*yes)
}

// unlocker is one unlock --force.
type unlocker struct {
	locker         admin
	key            string
	timeout        time.Duration
	stdout, stderr io.Writer
}

// admin is what unlock needs of a Locker.
type admin interface {
	Inspect(ctx context.Context, key string) (distlock.LockInfo, error)
	ForceRelease(ctx context.Context, key string, opts ...distlock.ForceOption) (distlock.LockInfo, error)
}

func (u *unlocker) run(yes bool) int {
	shown, err := u.inspect()
	if err != nil {
		return u.fail(err)
	}
	if !shown.Held {
		fmt.Fprintf(u.stdout, "%s is not held: nothing to release\n", cell(u.key))
		return ExitOK
	}
	fmt.Fprintf(u.stdout, "%s is held by %s\n", cell(u.key), describe(shown))
	if !yes {
		if !u.confirm() {
			fmt.Fprintln(u.stderr, "distlock unlock: not confirmed: nothing released")
			return ExitFailed
		}
		now, err := u.inspect()
		if err != nil {
			return u.fail(err)
		}
		if !sameHolder(now, shown) {
			fmt.Fprintf(u.stderr, "distlock unlock: the lock changed hands while you answered (now: %s): nothing released; run again\n", describeOrFree(now))
			return ExitFailed
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), u.timeout)
	defer cancel()
	// Only the holder shown: compared with the eviction, in the backend.
	evicted, err := u.locker.ForceRelease(ctx, u.key, distlock.IfHeldBy(shown.Owner, shown.Token))
	err = noAnswer(ctx, err, u.timeout)
	if errors.Is(err, distlock.ErrNotHeld) {
		now, ierr := u.inspect()
		state := "unknown"
		if ierr == nil {
			state = describeOrFree(now)
		}
		fmt.Fprintf(u.stderr, "distlock unlock: the lock changed hands before it was freed (now: %s): nothing released; run again\n", state)
		return ExitFailed
	}
	if err != nil {
		return u.fail(err)
	}
	fmt.Fprintf(u.stdout, "released %s by force: evicted %s\n", cell(u.key), describe(evicted))
	return ExitOK
}

func (u *unlocker) inspect() (distlock.LockInfo, error) {
	ctx, cancel := context.WithTimeout(context.Background(), u.timeout)
	defer cancel()
	info, err := u.locker.Inspect(ctx, u.key)
	return info, noAnswer(ctx, err, u.timeout)
}

func (u *unlocker) fail(err error) int {
	fmt.Fprintf(u.stderr, "distlock unlock: %s\n", errLine(err))
	return exitFor(err)
}

// confirm asks on stderr and reads one answer line; only y or yes agrees.
func (u *unlocker) confirm() bool {
	fmt.Fprintf(u.stderr, "Free %s by force? Its holder's lease ends at its next refresh. [y/N] ", cell(u.key))
	line, err := bufio.NewReader(confirmIn).ReadString('\n')
	if err != nil && line == "" {
		fmt.Fprintln(u.stderr)
		return false
	}
	a := strings.ToLower(strings.TrimSpace(line))
	return a == "y" || a == "yes"
}

// sameHolder reports whether a and b show the same hold: owner and token.
func sameHolder(a, b distlock.LockInfo) bool {
	return a.Held == b.Held && a.Owner == b.Owner && a.Token == b.Token
}

func describeOrFree(info distlock.LockInfo) string {
	if !info.Held {
		return "free"
	}
	return describe(info)
}

// describe says who holds a lock, on one line.
func describe(info distlock.LockInfo) string {
	var b strings.Builder
	fmt.Fprintf(&b, "owner %s", cell(info.Owner))
	if info.Metadata != "" {
		fmt.Fprintf(&b, " (%s)", cell(info.Metadata))
	}
	if info.Token != 0 {
		fmt.Fprintf(&b, ", token %d", info.Token)
	}
	if info.Holds > 1 {
		fmt.Fprintf(&b, ", %d holds", info.Holds)
	}
	switch {
	case info.SessionBound:
		b.WriteString(", for as long as its session lives")
	case info.TTL > 0:
		fmt.Fprintf(&b, ", %v left", info.TTL.Round(time.Millisecond))
	}
	return b.String()
}
