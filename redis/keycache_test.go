package redis

import (
	"hash/maphash"
	"strconv"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/distlock/distlock/internal/redislua"
	"github.com/distlock/distlock/internal/testkit/slack"
	"github.com/distlock/distlock/internal/testkit/testserver"
)

// TestKeyCache: a name's remembered keys come back for that name only; a
// newer name of the same slot replaces it.
func TestKeyCache(t *testing.T) {
	c := &keyCache{seed: maphash.MakeSeed()}
	a := redislua.KeysFor("p:", "a")
	_, ok := c.get("a")
	require.False(t, ok)
	c.put(&a)
	got, ok := c.get("a")
	require.True(t, ok)
	require.Equal(t, a, got)
	// A name of the same slot.
	var other string
	for i := 0; other == ""; i++ {
		if n := "b" + strconv.Itoa(i); c.slot(n) == c.slot("a") {
			other = n
		}
	}
	_, ok = c.get(other)
	require.False(t, ok, "another name of the slot is not a's")
	b := redislua.KeysFor("p:", other)
	c.put(&b)
	_, ok = c.get("a")
	require.False(t, ok, "replaced")
	got, ok = c.get(other)
	require.True(t, ok)
	require.Equal(t, b, got)
}

// TestKnownKeys: a name the driver acquired has its keys remembered, the
// same keys KeysFor derives (with the fair queue's for a fair driver), and
// finding them again allocates nothing; acquiring and releasing through
// them works as through derived ones.
func TestKnownKeys(t *testing.T) {
	srv := testserver.Redis(t, testserver.RedisConfig{})
	for _, fair := range []bool{false, true} {
		var opts []Option
		want := redislua.KeysFor("known:", "k")
		if fair {
			opts = append(opts, WithFair())
			want = want.Fair()
		}
		l := newTestLocker(t, &goredis.Options{Addr: srv.Addr()}, append(opts, WithPrefix("known:"))...)
		ctx := tctx(t, slack.D(10*time.Second))
		for range 3 {
			lease, err := l.TryAcquire(ctx, "k")
			require.NoError(t, err)
			require.NoError(t, lease.Release(ctx))
			got, ok := l.d.knownKeys("k")
			require.True(t, ok, "fair %v", fair)
			require.Equal(t, want, got)
		}
		if n := testing.AllocsPerRun(100, func() { l.d.keys("k") }); n != 0 {
			t.Errorf("keys of a known name: %.0f allocations, want 0", n)
		}
		_, ok := l.d.knownKeys("never acquired")
		require.False(t, ok)
	}
}
