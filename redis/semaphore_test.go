package redis

import (
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redislua"
	"github.com/distlock/distlock/internal/testkit/testserver"
	"github.com/stretchr/testify/require"
)

// semKeysLeft returns the semaphore keys (":sem…") in the database.
func semKeysLeft(t *testing.T, admin *goredis.Client) []string {
	var out []string
	for _, k := range scanKeys(t, admin) {
		if strings.Contains(k, ":sem") {
			out = append(out, k)
		}
	}
	return out
}

// TestSemaphoreKeysGoWithLastHolder: a released semaphore leaves no key
// behind, and one whose holders died (no release) disappears when the last
// of them expires; an expired holder is dropped by the next acquisition,
// with its token, in the same script.
func TestSemaphoreKeysGoWithLastHolder(t *testing.T) {
	srv := testserver.Redis(t, testserver.RedisConfig{})
	admin := adminClient(t, srv.Addr())
	l := newTestLocker(t, &goredis.Options{Addr: srv.Addr()})
	ctx := tctx(t, 30*time.Second)
	s, err := l.Semaphore("sem/keys", 2)
	require.NoError(t, err)
	p, err := s.TryAcquire(ctx)
	require.NoError(t, err)
	require.NoError(t, p.Release(ctx))
	if left := semKeysLeft(t, admin); len(left) != 0 {
		t.Fatalf("keys left after the last release: %v", left)
	}
	short := []distlock.Option{distlock.WithTTL(200 * time.Millisecond), distlock.WithAutoRefresh(false)}
	a, err := s.TryAcquire(ctx, short...)
	require.NoError(t, err)
	b, err := s.TryAcquire(ctx, distlock.WithTTL(time.Minute))
	require.NoError(t, err)
	<-a.Done()
	k := redislua.SemKeysFor("distlock:", "sem/keys")
	eventually(t, 10*time.Second, "the expired holder is past its score", func() bool {
		c, err := s.TryAcquire(ctx, short...) // drops the expired holder, takes its place
		if err != nil {
			return false
		}
		_ = c.Release(ctx)
		return true
	})
	if n, err := admin.HLen(ctx, k.Tokens).Result(); err != nil || n != 1 {
		t.Fatalf("tokens hash has %d entries (%v), want only the live holder's", n, err)
	}
	require.NoError(t, b.Release(ctx))
	if _, err := s.TryAcquire(ctx, short...); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the keys of a semaphore whose holders all expired are gone", func() bool {
		return len(semKeysLeft(t, admin)) == 0
	})
	require.ErrorIs(t, a.Release(ctx), distlock.ErrNotHeld, "Release of an expired permit")
}
