package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/conformance"
)

// skipWords rewrite the skip reasons of the conformance harness (written
// for backend authors) in a user's words: what the CLI cannot do to the
// user's servers from outside, and so could not verify.
var skipWords = []struct{ jargon, words string }{
	{"Faults.NewLinkedLocker", "needs a network fault on one client's connection (only the test harness can cut or delay it)"},
	{"conformance.DirectedLink", "needs a one-way network delay on a client's connection (only the test harness can inject it)"},
	{"Faults.KillClient", "needs to kill one client's session mid-hold (only the test harness can)"},
	{"Faults.ServerFaults", "needs to inject faults into the server (only the test harness can)"},
	{"Faults.StopBackend/StartBackend", "needs to stop and start your servers (only the test harness can)"},
	{"Faults.RestartBackend", "needs to restart your servers (only the test harness can)"},
	{"Faults.Expire", "needs to expire a lock on the server (only the test harness can)"},
	{"Harness.URL", "needs worker processes that open the backend URL"},
	{"Harness.FencedRedis, FencedPostgres", "no fenced resource given: pass --fenced-redis or --fenced-postgres to verify that a resumed holder's stale write is refused"},
	{"conformance.ServeWorker", "this binary cannot start worker processes"},
}

// userReason is a skip reason in a user's words.
func userReason(msg string) string {
	for _, w := range skipWords {
		if strings.Contains(msg, w.jargon) {
			return w.words
		}
	}
	return oneLine(msg)
}

// printRunSummary ends a conformance run: what was verified, what cannot
// be verified from outside (and why), what a flag left out, and for Redis
// backends whether the servers persist what fencing tokens rest on.
func printRunSummary(ctx context.Context, w io.Writer, url string, results []conformance.Result) {
	var verified, byFlag int
	reasons := map[string][]string{}
	for _, r := range results {
		switch {
		case r.Status == conformance.Pass:
			verified++
		case r.Status == conformance.Skip && strings.HasPrefix(r.Message, "destructive:"):
			byFlag++
		case r.Status == conformance.Skip:
			why := userReason(r.Message)
			reasons[why] = append(reasons[why], r.Name)
		}
	}
	notVerifiable := 0
	for _, names := range reasons {
		notVerifiable += len(names)
	}
	fmt.Fprintf(w, "\nsummary: %d of %d checks verified; %d not verifiable from outside; %d skipped by flag (--destructive)\n", verified, len(results), notVerifiable, byFlag)
	whys := make([]string, 0, len(reasons))
	for why := range reasons {
		whys = append(whys, why)
	}
	sort.Slice(whys, func(i, j int) bool { return len(reasons[whys[i]]) > len(reasons[whys[j]]) })
	for _, why := range whys {
		fmt.Fprintf(w, "  not verified (%d): %s: %s\n", len(reasons[why]), why, strings.Join(reasons[why], ", "))
	}
	if warn := redisPersistence(ctx, url); warn != "" {
		fmt.Fprintf(w, "  warning: %s\n", warn)
	}
}

// redisPersistence reads the persistence settings of a redis or redlock
// URL's servers (CONFIG GET appendonly, save) and returns a warning when a
// restart would lose the locks and the fencing counters, "" otherwise.
func redisPersistence(ctx context.Context, url string) string {
	scheme := schemeOf(url)
	if scheme != "redis" && scheme != "rediss" && scheme != "redlock" {
		return ""
	}
	var opts []*goredis.Options
	if scheme == "redlock" {
		u, err := backend.ParseURL(url)
		if err != nil {
			return ""
		}
		hosts, err := backend.Hosts(u, "6379")
		if err != nil {
			return ""
		}
		pw, _ := u.User.Password()
		for _, h := range hosts {
			opts = append(opts, &goredis.Options{Addr: h, Username: u.User.Username(), Password: pw})
		}
	} else {
		o, err := goredis.ParseURL(url)
		if err != nil {
			return ""
		}
		opts = append(opts, o)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var none, unknown []string
	for _, o := range opts {
		o.MaxRetries = -1
		c := goredis.NewClient(o)
		aof, err1 := c.ConfigGet(ctx, "appendonly").Result()
		save, err2 := c.ConfigGet(ctx, "save").Result()
		_ = c.Close()
		switch {
		case err1 != nil || err2 != nil:
			unknown = append(unknown, o.Addr)
		case aof["appendonly"] != "yes":
			if save["save"] == "" {
				none = append(none, o.Addr+" (no persistence)")
			} else {
				none = append(none, o.Addr+" (RDB snapshots only: writes since the last snapshot are lost)")
			}
		}
	}
	var parts []string
	if len(none) > 0 {
		parts = append(parts, fmt.Sprintf("appendonly is off on %s: after a restart the locks are gone and fencing tokens restart at 1 — the checks above cannot see this; set appendonly yes (appendfsync always) for tokens to survive restarts", strings.Join(none, ", ")))
	}
	if len(unknown) > 0 {
		parts = append(parts, fmt.Sprintf("could not read the persistence settings of %s (CONFIG GET refused): check appendonly yourself — without it fencing tokens restart at 1 after a restart", strings.Join(unknown, ", ")))
	}
	return strings.Join(parts, "; ")
}
