package file

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/conformance"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) {
	conformance.ServeWorker()
	serveHelper()
	os.Exit(m.Run())
}

// newT returns a Locker on dir, closed at the end of the test.
func newT(t testing.TB, dir string, opts ...Option) *distlock.Locker {
	t.Helper()
	l, err := New(dir, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}
