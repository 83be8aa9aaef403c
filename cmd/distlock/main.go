// Command distlock runs commands under a distributed lock, checks a lock
// backend against the distlock contract, and measures it.
//
//	distlock run [--backend URL] --key KEY [--ttl D] [--wait D | --no-wait] [--owner ID] [--grace D] -- CMD [ARGS…]
//	distlock conformance [--backend URL] [--run REGEXP] [--destructive] [--ttl D] [--json]
//	distlock bench [--backend URL] [--clients N] [--keys K] [--duration D] [--json]
//	distlock demo [--local]
//
// --backend defaults to $DISTLOCK_BACKEND, then to "mem://" (the embedded
// in-process backend). Exit statuses are listed in exitcodes.go and the
// README.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/conformance"
)

func main() {
	if os.Getenv("DISTLOCK_DEBUG") == "" {
		// go-redis logs every failed dial on its own; distlock reports
		// errors itself, in one line.
		goredis.SetLogger(discardLogger{})
	}
	conformance.ServeWorker() // the conformance checks' worker processes re-execute this binary
	os.Exit(Main(os.Args[1:], os.Stdout, os.Stderr))
}

type discardLogger struct{}

func (discardLogger) Printf(context.Context, string, ...any) {}

// Main runs the command line args and returns the exit status.
func Main(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return ExitUsage
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "run":
		return cmdRun(rest, stdout, stderr)
	case "conformance":
		return cmdConformance(rest, stdout, stderr)
	case "bench":
		return cmdBench(rest, stdout, stderr)
	case "demo":
		return cmdDemo(rest, stdout, stderr)
	case "help", "-h", "-help", "--help":
		usage(stdout)
		return ExitOK
	default:
		fmt.Fprintf(stderr, "distlock: unknown command %q (want run, conformance, bench or demo; see distlock help)\n", cmd)
		return ExitUsage
	}
}

func usage(w io.Writer) {
	fmt.Fprint(w, `distlock — distributed locks for shells, cron and CI, and a contract check for lock backends

Usage:
  distlock run [--backend URL] --key KEY [--ttl D] [--wait D | --no-wait] [--owner ID] [--grace D] -- CMD [ARGS...]
  distlock conformance [--backend URL] [--run REGEXP] [--destructive] [--ttl D] [--json]
  distlock bench [--backend URL] [--clients N] [--keys K] [--duration D] [--json]
  distlock demo [--local]

--backend defaults to $DISTLOCK_BACKEND, then to mem:// (in-process).
Backends: `+strings.Join(schemes(), ", ")+`
Run "distlock COMMAND --help" for a command's flags.

Exit statuses of run: the command's own status; 75 not acquired in time;
76 lock lost while the command ran (it was terminated); 64 usage error;
69 backend unavailable; 78 bad backend URL or option; 70 internal error.
`)
}

// newFlags returns a FlagSet that reports errors in one line.
func newFlags(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: distlock %s\n\nFlags:\n", synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args and returns the exit status to use if parsing
// ended the command (help or a bad flag), or -1 to go on.
func parseFlags(fs *flag.FlagSet, args []string, stderr io.Writer) int {
	// The flag package prints the usage on errors; keep errors to one line.
	out := fs.Output()
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.SetOutput(out)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.Usage()
		return ExitOK
	case err != nil:
		fmt.Fprintf(stderr, "distlock %s: %v (see distlock %s --help)\n", fs.Name(), err, fs.Name())
		return ExitUsage
	}
	return -1
}

func defaultBackend() string {
	if b := os.Getenv("DISTLOCK_BACKEND"); b != "" {
		return b
	}
	return "mem://"
}

// exitFor maps a library error to an exit status.
func exitFor(err error) int {
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, distlock.ErrUnavailable):
		// Before ErrNotAcquired: a wait that ran out because the backend
		// never answered is an outage, not a busy lock.
		return ExitUnavailable
	case errors.Is(err, distlock.ErrNotAcquired):
		return ExitNotAcquired
	case errors.Is(err, distlock.ErrInvalidOption), errors.Is(err, distlock.ErrInvalidKey), errors.Is(err, distlock.ErrInvalidTTL):
		return ExitConfig
	default:
		return ExitInternal
	}
}
