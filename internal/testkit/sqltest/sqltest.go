package sqltest

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock/conformance"
)

// Shared is the server most tests of a package use; tests that kill or
// restart a server start their own. The zero value is not usable: set
// Start and PerTest.
type Shared[S any] struct {
	// External reports whether an external server is configured (an
	// environment variable): then PerTest returns it for every test.
	External func() bool
	// Start starts a server in a temporary directory.
	Start func(ctx context.Context) (S, error)
	// Stop stops a server Start started.
	Stop func(S) error
	// PerTest returns a server for one test (testserver.MariaDBServer).
	PerTest func(t testing.TB) S
	// Parallel is how many parallel tests Main lets run at once (see
	// conformance.ParallelSuites); 0 leaves the default.
	Parallel int

	mu      sync.Mutex
	srv     S
	started bool
	err     error
}

// Get returns the shared server, starting it on first use. Under -short it
// skips the test: -short runs only tests that need no server.
func (s *Shared[S]) Get(t testing.TB) S {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a database server (skipped under -short)")
	}
	if s.External() {
		return s.PerTest(t)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.started && s.err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		s.srv, s.err = s.Start(ctx)
		cancel()
		s.started = s.err == nil
	}
	if s.err != nil {
		t.Fatalf("start the shared server: %v", s.err)
	}
	return s.srv
}

// Main is a package's TestMain: it serves conformance workers, runs the
// tests and stops the shared server if one was started.
func (s *Shared[S]) Main(m *testing.M) {
	conformance.ServeWorker()
	conformance.ParallelSuites(s.Parallel)
	code := m.Run()
	s.mu.Lock()
	if s.started {
		if err := s.Stop(s.srv); err != nil {
			fmt.Fprintln(os.Stderr, "stop the shared server:", err)
		}
	}
	s.mu.Unlock()
	os.Exit(code)
}

// Controllable is a server a test can kill and restart.
type Controllable interface {
	Controllable() bool
}

// Own returns a server started for the test by start (or skips the test
// under -short, or when the server cannot be killed or restarted: an
// external one).
func Own[S Controllable](t testing.TB, start func(testing.TB) S) S {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a database server of its own (skipped under -short)")
	}
	srv := start(t)
	if !srv.Controllable() {
		t.Skip("the database server is external: cannot kill or restart it")
	}
	return srv
}

var tableSeq atomic.Int64

// UniqueTable names a fresh table so tests on a shared server do not see
// each other's rows.
func UniqueTable(prefix string) string {
	return fmt.Sprintf("%s_%d_%d", prefix, time.Now().UnixNano()%1e9, tableSeq.Add(1))
}

// Ctx returns a context that ends after d or with the test.
func Ctx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// ClosedPort returns a loopback address nobody listens on.
func ClosedPort(t testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// Until polls cond every 10ms until it holds or d has passed; it reports
// whether it held.
func Until(d time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(d); ; {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}
