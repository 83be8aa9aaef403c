package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/internal/testkit/slack"
	"github.com/distlock/distlock/internal/testkit/testserver"
	"github.com/stretchr/testify/require"
)

// TestDemoLocalPostgres: demo --local has both PostgreSQL modes; each entry
// starts its server, opens a Locker in its mode (advisory: session-bound;
// row: expiring) and runs conformance checks on it.
func TestDemoLocalPostgres(t *testing.T) {
	t.Parallel()
	testserver.SkipShort(t, "PostgreSQL")
	want := map[string]func(distlock.Capabilities) bool{
		"postgres (advisory)": func(c distlock.Capabilities) bool { return c.SessionBound && !c.Expiring },
		"postgres (row)":      func(c distlock.Capabilities) bool { return c.Expiring && !c.SessionBound },
	}
	for _, lb := range localBackends {
		modeOK, ok := want[lb.name]
		if !ok {
			continue
		}
		delete(want, lb.name)
		t.Run(lb.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
			defer cancel()
			url, stop, err := lb.start(ctx)
			if errors.Is(err, testserver.ErrMissingBinary) {
				t.Skip(err)
			}
			require.NoError(t, err)
			defer stop()
			if lb.scheme != "postgres" || !strings.HasPrefix(url, "postgres://") {
				t.Fatalf("scheme %q, URL %q", lb.scheme, redactURL(url))
			}
			l, err := distlock.Open(ctx, url)
			require.NoError(t, err)
			caps := l.Capabilities()
			_ = l.Close()
			if !modeOK(caps) {
				t.Errorf("%s: capabilities %+v are not this mode's", redactURL(url), caps)
			}
			h, err := cliHarness(ctx, url, 0, 0)
			require.NoError(t, err)
			results := conformance.RunChecks(ctx, h, conformance.Options{Match: regexp.MustCompile(`^(keys|mutual-exclusion)$`)})
			if len(results) == 0 {
				t.Fatal("no check ran")
			}
			for _, r := range results {
				if r.Status != conformance.Pass {
					t.Errorf("%s: %s %s: %s", redactURL(url), r.Name, r.Status, r.Message)
				}
			}
		})
	}
	for name := range want {
		t.Errorf("demo --local has no %q entry", name)
	}
}

// TestMySQLDriverLogSilenced: a server that hangs up mid-handshake makes
// go-sql-driver/mysql log "[mysql] packets.go:… unexpected EOF" on its own;
// distlock's stderr has its one error line only.
func TestMySQLDriverLogSilenced(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	r := runBin(t, time.Minute, nil, "status", "--timeout", "3s", "--backend", "mysql://u:p@"+ln.Addr().String()+"/db", "k")
	if strings.Contains(r.stderr, "[mysql]") || r.status == ExitOK {
		t.Errorf("status %d, stderr %q; want an error without the driver's log lines", r.status, r.stderr)
	}
}

// TestDemoLocalConcurrent: demo --local starts the backends' servers and
// runs their suites at the same time, not one backend after another: each
// entry's start waits until every entry has begun starting (on the old,
// one-at-a-time demo the first waited alone until its deadline).
func TestDemoLocalConcurrent(t *testing.T) {
	const n = 3
	var begun sync.WaitGroup
	begun.Add(n)
	saved := localBackends
	t.Cleanup(func() { localBackends = saved })
	localBackends = nil
	for i := range n {
		localBackends = append(localBackends, localBackend{fmt.Sprintf("mem %d", i), "mem", func(ctx context.Context) (string, func(), error) {
			begun.Done()
			all := make(chan struct{})
			go func() { begun.Wait(); close(all) }()
			select {
			case <-all:
				return fmt.Sprintf("mem://demo-concurrent-%d", i), func() {}, nil
			case <-time.After(slack.D(5 * time.Second)):
				return "", nil, errors.New("started alone: the other backends did not start meanwhile")
			}
		}})
	}
	var stdout, stderr strings.Builder
	st := demoLocal(t.Context(), "^keys$", n, &stdout, &stderr)
	if st != ExitOK || strings.Count(stdout.String(), "PASS keys") != n {
		t.Errorf("status %d; want %d and the keys check passed on each of %d backends:\n%s\n%s", st, ExitOK, n, stdout.String(), stderr.String())
	}
}
