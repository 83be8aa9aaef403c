package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"

	gomysql "github.com/go-sql-driver/mysql"
	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/conformance"
)

func main() {
	if os.Getenv("DISTLOCK_DEBUG") == "" {
		// go-redis and go-sql-driver/mysql log failed dials and broken
		// connections on their own ("[mysql] packets.go:58 unexpected
		// EOF"); distlock reports errors itself, in one line.
		goredis.SetLogger(discardLogger{})
		_ = gomysql.SetLogger(discardLogger{})
	}
	conformance.ServeWorker() // the conformance checks' worker processes re-execute this binary
	os.Exit(Main(os.Args[1:], os.Stdout, os.Stderr))
}

type discardLogger struct{}

func (discardLogger) Printf(context.Context, string, ...any) {}

// Print discards go-sql-driver/mysql's log lines.
func (discardLogger) Print(...any) {}

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
	case "status":
		return cmdStatus(rest, stdout, stderr)
	case "unlock":
		return cmdUnlock(rest, stdout, stderr)
	case "conformance":
		return cmdConformance(rest, stdout, stderr)
	case "bench":
		return cmdBench(rest, stdout, stderr)
	case "demo":
		return cmdDemo(rest, stdout, stderr)
	case "help", "-h", "-help", "--help":
		if len(rest) > 0 && rest[0] != "help" && !strings.HasPrefix(rest[0], "-") {
			return Main([]string{rest[0], "--help"}, stdout, stderr)
		}
		usage(stdout)
		return ExitOK
	case "version", "-version", "--version":
		fmt.Fprintln(stdout, "distlock", version())
		return ExitOK
	default:
		fmt.Fprintf(stderr, "distlock: unknown command %q (want run, status, unlock, conformance, bench or demo; see distlock help)\n", cmd)
		return ExitUsage
	}
}

// buildVersion may be set at link time (-ldflags "-X main.buildVersion=v1.2.3").
var buildVersion string

// version is buildVersion, else the module version and VCS revision Go
// recorded in the binary.
func version() string {
	if buildVersion != "" {
		return buildVersion
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(unknown)"
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			v += " " + s.Value[:12]
		}
	}
	return v + " " + bi.GoVersion
}

func usage(w io.Writer) {
	fmt.Fprint(w, `distlock — distributed locks for shells, cron and CI, and a contract check for lock backends

Usage:
  distlock run --backend URL --key KEY [--ttl D] [--wait D | --no-wait] [--owner ID] [--metadata S] [--grace D] -- CMD [ARGS...]
  distlock status [--backend URL] [--json] KEY...
  distlock unlock --force [--yes] [--backend URL] KEY
  distlock conformance [--backend URL] [--run REGEXP] [--destructive] [--ttl D] [--json]
  distlock bench [--backend URL] [--clients N] [--keys K] [--duration D] [--json]
  distlock demo [--local]
  distlock help [COMMAND]
  distlock --version

--backend defaults to $DISTLOCK_BACKEND. run, status and unlock need a backend
shared by the processes it coordinates; conformance and bench fall back to
mem:// (in-process).
Backends: `+strings.Join(schemes(), ", ")+`
Run "distlock help COMMAND" for a command's flags.

Exit statuses of run: the command's own status; 75 not acquired in time;
76 lock lost while the command ran (it was terminated); 64 usage error;
69 backend unavailable; 77 the backend refused the credentials or a
permission; 78 bad backend URL or option, an operation the backend cannot
do, or a backend not set up for distlock (missing database or lock table);
70 internal error.
`)
}

// newFlags returns a FlagSet whose --help goes to stdout; about, if not
// empty, is printed between the synopsis and the flags.
func newFlags(name, synopsis, about string, stdout io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stdout)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: distlock %s\n\n", synopsis)
		if about != "" {
			fmt.Fprintf(fs.Output(), "%s\n\n", strings.TrimSpace(about))
		}
		fmt.Fprintln(fs.Output(), "Flags:")
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args and returns the exit status to use if parsing
// ended the command (help or a bad flag), or -1 to go on. Help goes to
// the FlagSet's output (stdout), an error to stderr in one line.
func parseFlags(fs *flag.FlagSet, args []string, stderr io.Writer) int {
	out := fs.Output()
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.SetOutput(out)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.Usage()
		return ExitOK
	case err != nil:
		fmt.Fprintf(stderr, "distlock %s: %v (see distlock help %s)\n", fs.Name(), err, fs.Name())
		return ExitUsage
	}
	return -1
}

// backendFlag declares --backend with an empty default: the default,
// $DISTLOCK_BACKEND, is read after parsing and never printed (it may hold
// a password). fallback is used when the variable is unset too ("" for
// none).
func backendFlag(fs *flag.FlagSet, fallback string) *string {
	help := "lock backend URL (default $DISTLOCK_BACKEND"
	if fallback != "" {
		help += ", then " + fallback
	}
	return fs.String("backend", "", help+")")
}

// backendURL is the --backend value, else $DISTLOCK_BACKEND, else fallback.
func backendURL(flagValue, fallback string) string {
	if flagValue != "" {
		return flagValue
	}
	if b := os.Getenv("DISTLOCK_BACKEND"); b != "" {
		return b
	}
	return fallback
}

// exitFor maps a library error to an exit status.
func exitFor(err error) int {
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, distlock.ErrAuth):
		// Before ErrUnavailable: a Redlock quorum lost to nodes that
		// refuse the password and to nodes that are down is both, and
		// waiting cures only the latter.
		return ExitAuth
	case errors.Is(err, distlock.ErrMisconfigured):
		return ExitConfig
	case errors.Is(err, distlock.ErrUnavailable):
		// Before ErrNotAcquired: a wait that ran out because the backend
		// never answered is an outage, not a busy lock.
		return ExitUnavailable
	case errors.Is(err, distlock.ErrNotAcquired):
		return ExitNotAcquired
	case errors.Is(err, distlock.ErrInvalidOption), errors.Is(err, distlock.ErrInvalidKey), errors.Is(err, distlock.ErrInvalidTTL),
		errors.Is(err, errors.ErrUnsupported): // the backend chosen cannot do it
		return ExitConfig
	default:
		return ExitInternal
	}
}

// errLine is err's message on one line: errors that join several (a
// Redlock error lists every node's) are separated by " | ".
func errLine(err error) string {
	if err == nil {
		return "<nil>"
	}
	return oneLine(err.Error())
}
