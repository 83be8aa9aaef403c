package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/conformance"
)

func cmdConformance(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("conformance", "conformance [--backend URL] [--run REGEXP] [--destructive] [--ttl D] [--json]", "Checks the backend against the distlock contract. It first checks that the backend answers (exit 69 if not); a check that the backend's unavailability cut short is reported as \"unavailable\", not as a contract violation.", stdout)
	backendFlagValue := backendFlag(fs, "mem://")
	run := fs.String("run", "", "run only the checks whose name matches this regular expression")
	destructive := fs.Bool("destructive", false, "also run checks that disturb other users of the backend (restarts)")
	ttl := fs.Duration("ttl", 0, "short TTL for the expiry checks (default 300ms for mem://, else 2s)")
	sessionTimeout := fs.Duration("session-timeout", 30*time.Second, "longest time a session-bound backend may take to free a dead client's lock")
	timeout := fs.Duration("timeout", 20*time.Minute, "give up on the whole run after this long")
	asJSON := fs.Bool("json", false, "print the results as JSON instead of a table")
	fencedRedis := fs.String("fenced-redis", "", "a Redis the pause check may use as a fenced resource: host:port, or a URL as for --backend (redis://:PASSWORD@host:port/0); checked before the first check")
	fencedPostgres := fs.String("fenced-postgres", "", "URL of a PostgreSQL database the pause-holder check may also write to through fence.SQL (creates two small tables); checked before the first check")
	if st := parseFlags(fs, args, stderr); st >= 0 {
		return st
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "distlock conformance: unexpected argument %q\n", fs.Arg(0))
		return ExitUsage
	}
	url := backendURL(*backendFlagValue, "mem://")
	match, err := matchChecks(*run)
	if err != nil {
		fmt.Fprintf(stderr, "distlock conformance: --run: %s\n", errLine(err))
		return ExitUsage
	}
	interrupted, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(interrupted, *timeout)
	defer cancel()

	h, err := cliHarness(ctx, url, *ttl, *sessionTimeout)
	if err != nil {
		fmt.Fprintf(stderr, "distlock conformance: %s\n", errLine(err))
		return exitFor(err)
	}
	fctx, fcancel := context.WithTimeout(ctx, 30*time.Second)
	err = conformance.CheckFenced(fctx, *fencedRedis, *fencedPostgres)
	fcancel()
	if err != nil {
		fmt.Fprintf(stderr, "distlock conformance: %s\n", errLine(err))
		return exitFor(err)
	}
	h.FencedRedis = *fencedRedis
	h.FencedPostgres = *fencedPostgres
	progress := func(r conformance.Result) {
		if *asJSON {
			return
		}
		if r.Status == "" {
			fmt.Fprintf(stdout, "=== %s\n", r.Name)
			return
		}
		fmt.Fprintf(stdout, "--- %s %s (%v)\n", strings.ToUpper(string(r.Status)), r.Name, r.Duration.Round(time.Millisecond))
	}
	results := conformance.RunChecks(ctx, h, conformance.Options{Match: match, Destructive: *destructive, Progress: progress})
	if *asJSON {
		writeJSON(stdout, jsonReport(redactURL(url), results))
	} else {
		fmt.Fprintf(stdout, "\nconformance of %s\n", redactURL(url))
		printResults(stdout, results)
		printRunSummary(interrupted, stdout, url, results)
	}
	if interrupted.Err() != nil {
		fmt.Fprintf(stderr, "distlock conformance: interrupted: %s\n", runSummary(results))
		return ExitInterrupted
	}
	if ctx.Err() != nil {
		fmt.Fprintf(stderr, "distlock conformance: stopped after --timeout %v: %s\n", *timeout, runSummary(results))
		return ExitUnavailable
	}
	return statusOf(results)
}

// ConformanceReport is conformance --json's output: snake_case names,
// durations as Go duration strings.
type ConformanceReport struct {
	Backend string              `json:"backend"`
	Results []ConformanceResult `json:"results"`
}

// ConformanceResult is one check's outcome in ConformanceReport. Status is
// pass, FAIL (a contract violation), unavailable (the backend could not
// be reached or decide during the check) or skip.
type ConformanceResult struct {
	Name     string `json:"name"`
	Contract string `json:"contract"`
	Status   string `json:"status"`
	Duration string `json:"duration"`
	Message  string `json:"message,omitempty"`
}

func jsonReport(backendName string, results []conformance.Result) ConformanceReport {
	rep := ConformanceReport{Backend: backendName, Results: []ConformanceResult{}}
	for _, r := range results {
		rep.Results = append(rep.Results, ConformanceResult{
			Name: r.Name, Contract: r.Contract, Status: string(r.Status),
			Duration: r.Duration.Round(time.Millisecond).String(), Message: r.Message,
		})
	}
	return rep
}

// matchChecks compiles --run and checks that it selects at least one check.
func matchChecks(expr string) (*regexp.Regexp, error) {
	if expr == "" {
		return nil, nil
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, c := range conformance.Checks() {
		if re.MatchString(c.Name) {
			return re, nil
		}
		names = append(names, c.Name)
	}
	return nil, fmt.Errorf("%q matches no check (checks: %s)", expr, strings.Join(names, ", "))
}

// cliHarness checks that url opens and that the backend answers (a lock
// taken and released), and returns a harness whose keys live under a
// prefix unique to this run.
func cliHarness(ctx context.Context, url string, ttl, sessionTimeout time.Duration) (conformance.Harness, error) {
	if err := probe(ctx, url); err != nil {
		return conformance.Harness{}, err
	}
	if ttl == 0 {
		ttl = 2 * time.Second
		if strings.HasPrefix(url, "mem:") {
			ttl = 300 * time.Millisecond
		}
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	return conformance.Harness{
		Name:           redactURL(url),
		NewLocker:      func(ctx context.Context) (*distlock.Locker, error) { return distlock.Open(ctx, url) },
		KeyPrefix:      "distlock-conformance/" + hex.EncodeToString(b[:]) + "/",
		URL:            workerURL(url),
		TTL:            ttl,
		SessionTimeout: sessionTimeout,
	}, nil
}

// probe opens url and takes and releases a lock within 30s, so that an
// unreachable server or a refused password is one clear error before any
// check runs.
func probe(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	l, err := distlock.Open(ctx, url)
	if err != nil {
		return err
	}
	defer l.Close()
	var b [6]byte
	_, _ = rand.Read(b[:])
	lease, err := l.TryAcquire(ctx, "distlock-conformance/probe/"+hex.EncodeToString(b[:]))
	if err != nil {
		return fmt.Errorf("the backend does not answer: %w", err)
	}
	if err := lease.Release(ctx); err != nil {
		return fmt.Errorf("the backend does not answer: %w", err)
	}
	return nil
}

func printResults(w io.Writer, results []conformance.Result) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CHECK\tRESULT\tDURATION\tDETAIL")
	for _, r := range results {
		detail := oneLine(r.Message)
		if r.Status == conformance.Skip {
			detail = userReason(r.Message)
		}
		if len(detail) > 160 {
			detail = detail[:157] + "..."
		}
		fmt.Fprintf(tw, "%s\t%s\t%v\t%s\n", r.Name, r.Status, r.Duration.Round(time.Millisecond), detail)
	}
	_ = tw.Flush()
	fmt.Fprintln(w, runSummary(results))
	printFailures(w, results)
}

// runSummary counts results by status: "N passed, N failed, N unavailable,
// N skipped", then the interrupted and not-run counts where there are any.
func runSummary(results []conformance.Result) string {
	n := map[conformance.Status]int{}
	for _, r := range results {
		n[r.Status]++
	}
	s := fmt.Sprintf("%d passed, %d failed, %d unavailable, %d skipped", n[conformance.Pass], n[conformance.Fail], n[conformance.Unavailable], n[conformance.Skip])
	if n[conformance.Interrupted]+n[conformance.NotRun] > 0 {
		s += fmt.Sprintf(", %d interrupted, %d not run", n[conformance.Interrupted], n[conformance.NotRun])
	}
	return s
}

// printFailures prints, for every check that failed or was cut short by
// the backend's unavailability, its whole message on one line: the table
// truncates it.
func printFailures(w io.Writer, results []conformance.Result) {
	for _, r := range results {
		if r.Status == conformance.Fail || r.Status == conformance.Unavailable {
			fmt.Fprintf(w, "%s %s: %s\n", strings.ToUpper(string(r.Status)), r.Name, oneLine(r.Message))
		}
	}
}

// oneLine joins the lines of s with " | ".
func oneLine(s string) string {
	return strings.ReplaceAll(strings.TrimSpace(s), "\n", " | ")
}

func writeJSON(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// redactURL hides a password in a backend URL, whether or not it parses.
func redactURL(raw string) string { return backend.RedactURL(raw) }

// workerURL is the URL worker processes open: none for the in-process
// backend, whose lock table a separate process cannot share.
func workerURL(url string) string {
	if strings.HasPrefix(url, "mem:") {
		return ""
	}
	return url
}
