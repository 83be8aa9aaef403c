package jobs_test

import (
	"testing"

	"github.com/distlock/distlock"
	"github.com/stretchr/testify/require"
)

// openTwo opens two Lockers (two clients) on url, closed when the test ends.
func openTwo(t *testing.T, url string) (a, b *distlock.Locker) {
	t.Helper()
	var ls [2]*distlock.Locker
	for i := range ls {
		l, err := distlock.Open(t.Context(), url)
		require.NoError(t, err)
		t.Cleanup(func() { _ = l.Close() })
		ls[i] = l
	}
	return ls[0], ls[1]
}
