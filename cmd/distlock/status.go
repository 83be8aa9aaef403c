package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend"
)

const statusAbout = `
Shows each lock KEY as the backend sees it: whether it is held, by which
owner, with which metadata (distlock run stores host, pid and command name)
and fencing token, how many nested holds, how long the server keeps it
unless refreshed (or "session" for locks bound to the holder's session),
and how many acquisitions wait, where the backend can tell ("-" where it
cannot). It takes no lock and changes nothing. Exit status 0 when every key
was read, else the status of the first error (69 backend unavailable, 78 bad
URL or key).`

// StatusEntry is one lock in status --json's output. Held is left out
// when the lock could not be read (Error says why): it is then unknown,
// not false. TTLMillis is the server-side time left, 0 when not held or
// session-bound; Waiters is null where the backend cannot count them.
type StatusEntry struct {
	Key          string `json:"key"`
	Held         *bool  `json:"held,omitempty"`
	Owner        string `json:"owner,omitempty"`
	Metadata     string `json:"metadata,omitempty"`
	Token        uint64 `json:"token,omitempty"`
	Holds        int    `json:"holds,omitempty"`
	TTLMillis    int64  `json:"ttl_ms,omitempty"`
	SessionBound bool   `json:"session_bound,omitempty"`
	Waiters      *int   `json:"waiters"`
	Error        string `json:"error,omitempty"`
}

func statusEntry(info distlock.LockInfo) StatusEntry {
	held := info.Held
	e := StatusEntry{Key: info.Key, Held: &held, Owner: info.Owner, Metadata: info.Metadata, Token: info.Token,
		Holds: info.Holds, TTLMillis: info.TTL.Milliseconds(), SessionBound: info.SessionBound}
	if info.Waiters >= 0 {
		w := info.Waiters
		e.Waiters = &w
	}
	return e
}

func cmdStatus(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("status", "status [--backend URL] [--json] KEY...", statusAbout, stdout)
	backendFlagValue := backendFlag(fs, "")
	asJSON := fs.Bool("json", false, "print a JSON array instead of a table")
	timeout := fs.Duration("timeout", 10*time.Second, "give up on the backend after this long")
	keys, st := parseInterleaved(fs, args, stderr)
	if st >= 0 {
		return st
	}
	if len(keys) == 0 {
		fmt.Fprintln(stderr, "distlock status: no KEY given (distlock status --backend URL KEY...)")
		return ExitUsage
	}
	url := backendURL(*backendFlagValue, "")
	if st := checkSharedBackend("status", url, stderr); st >= 0 {
		return st
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	locker, err := distlock.Open(ctx, url)
	if err != nil {
		err = noAnswer(ctx, err, *timeout)
		fmt.Fprintf(stderr, "distlock status: %s\n", errLine(err))
		return exitFor(err)
	}
	defer locker.Close()
	status := ExitOK
	entries := make([]StatusEntry, 0, len(keys))
	for _, key := range keys {
		info, err := locker.Inspect(ctx, key)
		if err != nil {
			err = noAnswer(ctx, err, *timeout)
			fmt.Fprintf(stderr, "distlock status: %s\n", errLine(err))
			if status == ExitOK {
				status = exitFor(err)
			}
			entries = append(entries, StatusEntry{Key: key, Error: errLine(err)})
			continue
		}
		entries = append(entries, statusEntry(info))
	}
	if *asJSON {
		writeJSON(stdout, entries)
	} else {
		printStatus(stdout, entries)
	}
	return status
}

// printStatus writes entries as a table, one lock a line.
func printStatus(w io.Writer, entries []StatusEntry) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tHELD\tOWNER\tTOKEN\tHOLDS\tTTL\tWAITERS\tMETADATA")
	for _, e := range entries {
		if e.Error != "" {
			fmt.Fprintf(tw, "%s\terror\t\t\t\t\t\t%s\n", cell(e.Key), cell(e.Error))
			continue
		}
		if !*e.Held {
			fmt.Fprintf(tw, "%s\tno\t-\t-\t-\t-\t%s\t-\n", cell(e.Key), waiters(e.Waiters))
			continue
		}
		ttl := (time.Duration(e.TTLMillis) * time.Millisecond).String()
		if e.SessionBound {
			ttl = "session"
		}
		token := "-"
		if e.Token != 0 {
			token = strconv.FormatUint(e.Token, 10)
		}
		fmt.Fprintf(tw, "%s\tyes\t%s\t%s\t%d\t%s\t%s\t%s\n", cell(e.Key), cell(e.Owner), token, e.Holds, ttl, waiters(e.Waiters), cell(e.Metadata))
	}
	_ = tw.Flush()
}

func waiters(n *int) string {
	if n == nil {
		return "-"
	}
	return strconv.Itoa(*n)
}

// cell keeps a table cell on one line and one column, and the terminal
// safe from what a holder wrote into its metadata: a value with anything
// but printable characters (controls, tabs, newlines, C1 controls, bidi
// overrides, invalid UTF-8) is shown quoted, and an empty value as "-".
func cell(s string) string {
	if s == "" {
		return "-"
	}
	if !utf8.ValidString(s) || strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) {
		return strconv.Quote(s)
	}
	return s
}

// parseInterleaved parses flags that may come before, between or after the
// positional arguments (status --backend U k1 k2 --json), and returns the
// positional ones; "--" ends the flags. The status is as parseFlags's.
func parseInterleaved(fs *flag.FlagSet, args []string, stderr io.Writer) ([]string, int) {
	var pos []string
	for {
		if st := parseFlags(fs, args, stderr); st >= 0 {
			return nil, st
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, -1
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(pos, rest...), -1
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// checkSharedBackend returns the exit status when url names no backend or
// an in-process one (which another process's locks are never in), or -1.
func checkSharedBackend(cmd, url string, stderr io.Writer) int {
	switch {
	case url == "":
		fmt.Fprintf(stderr, "distlock %s: no lock backend: pass --backend URL or set $DISTLOCK_BACKEND to a backend every process can reach (such as redis://host:6379/0)\n", cmd)
		return ExitUsage
	case backend.InProcess(schemeOf(url)):
		fmt.Fprintf(stderr, "distlock %s: backend %s:// locks only within one process, not across processes: pass --backend URL or set $DISTLOCK_BACKEND to a shared backend\n", cmd, schemeOf(url))
		return ExitConfig
	}
	return -1
}

// noAnswer is err, from a call that ctx (bounded by --timeout) cut off, as
// the backend's failure to answer in time (ErrUnavailable) rather than a
// bare "context deadline exceeded" (an internal error, exit 70): the client
// may report the end of ctx itself while it is still dialling.
func noAnswer(ctx context.Context, err error, timeout time.Duration) error {
	if err == nil || ctx.Err() == nil || !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, distlock.ErrUnavailable) {
		return err
	}
	return fmt.Errorf("%w: no answer within --timeout %v: %w", distlock.ErrUnavailable, timeout, err)
}
