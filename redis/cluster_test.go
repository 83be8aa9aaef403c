package redis

import (
	"strconv"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/conformance"
	"github.com/distlock/distlock/internal/redislua"
	"github.com/distlock/distlock/internal/testkit/testserver"
	"github.com/stretchr/testify/require"
)

// TestClusterFenceSlots: on a Redis Cluster of three masters, with plain
// and fair Lockers, two lock names whose keys share a slot share its
// counter (their tokens interleave, each strictly increasing), 200 names
// over many slots all work, each slot's counter lives in that slot, and a
// legacy per-key counter is honoured there too (the scripts touch only
// keys of one slot, or the cluster would refuse them with CROSSSLOT).
func TestClusterFenceSlots(t *testing.T) {
	testserver.SkipShort(t, "redis cluster")
	conformance.Parallel(t)
	cluster := sharedCluster(t)
	admin := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: cluster.Addrs()})
	t.Cleanup(func() { _ = admin.Close() })
	ctx := tctx(t, 2*time.Minute)
	for _, fair := range []bool{false, true} {
		opts := []Option{WithCloseClient(), WithPrefix("c" + strconv.FormatBool(fair) + ":")}
		if fair {
			opts = append(opts, WithFair())
		}
		l, err := New(goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: cluster.Addrs()}), opts...)
		require.NoError(t, err)
		t.Cleanup(func() { _ = l.Close() })
		prefix := driverOf(l).prefix
		cycle := func(key string) uint64 {
			t.Helper()
			lease, err := l.TryAcquire(ctx, key, distlock.WithAutoRefresh(false))
			require.NoError(t, err, "fair %v: %q", fair, key)
			require.NoError(t, lease.Release(ctx))
			return lease.Token()
		}

		// Two names in one slot.
		a := "same/a"
		ka := redislua.KeysFor(prefix, a)
		var b string
		for i := 0; b == ""; i++ {
			if k := "same/b" + strconv.Itoa(i); redislua.Slot(redislua.KeysFor(prefix, k).Lock) == redislua.Slot(ka.Lock) {
				b = k
			}
		}
		last := map[string]uint64{}
		var prev uint64
		for i := range 10 {
			key := []string{a, b}[i%2]
			tok := cycle(key)
			if tok <= last[key] || tok <= prev {
				t.Errorf("fair %v: token %d of %q after %d (its last) and %d (the slot's last)", fair, tok, key, last[key], prev)
			}
			last[key], prev = tok, tok
		}
		if n, err := admin.Get(ctx, ka.Fence).Uint64(); err != nil || n != prev {
			t.Errorf("fair %v: slot counter %q = %d, %v; want %d", fair, ka.Fence, n, err, prev)
		}

		// Many slots, each name twice: strictly increasing per name.
		for i := range 200 {
			key := "many/" + strconv.Itoa(i)
			if t1, t2 := cycle(key), cycle(key); t2 <= t1 {
				t.Errorf("fair %v: %q tokens %d then %d", fair, key, t1, t2)
			}
		}

		// A legacy per-key counter in the cluster.
		kl := redislua.KeysFor(prefix, "legacy")
		require.NoError(t, admin.Set(ctx, kl.Legacy, 1000, 0).Err())
		if tok := cycle("legacy"); tok <= 1000 {
			t.Errorf("fair %v: token %d over a legacy counter at 1000", fair, tok)
		}
	}
}
