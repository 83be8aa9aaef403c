package redissub

import (
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/internal/redissub/redialgate"
	"github.com/distlock/distlock/internal/testkit/netfault"
	"github.com/distlock/distlock/internal/testkit/testserver"
	"github.com/stretchr/testify/require"
)

// TestWakeAfterResubscription: the pub/sub connection breaks — killed
// (CLIENT KILL TYPE pubsub), or silent (half-open: replaced after the
// health checks) — its first redial fails and the second is held, and a
// release is published meanwhile, reaching no live subscriber. The waiter
// must be woken once its channel's resubscription is confirmed: a wake-up
// at the break only (before the channel exists again) leaves it asleep
// past that release.
func TestWakeAfterResubscription(t *testing.T) {
	t.Run("killed", func(t *testing.T) { testWakeAfterResubscription(t, false) })
	t.Run("silent", func(t *testing.T) { testWakeAfterResubscription(t, true) })
}

func testWakeAfterResubscription(t *testing.T, silent bool) {
	addr := testserver.Redis(t, testserver.RedisConfig{}).Addr()
	proxy, err := netfault.Listen(addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = proxy.Close() })
	gate := redialgate.New()
	t.Cleanup(gate.Open)
	c := goredis.NewClient(&goredis.Options{Addr: proxy.Addr(), Dialer: gate.Dial})
	t.Cleanup(func() { _ = c.Close() })
	admin := goredis.NewClient(&goredis.Options{Addr: addr})
	t.Cleanup(func() { _ = admin.Close() })
	ctx := t.Context()
	sub := NewSubscriber(c, SubscriberOptions{HealthInterval: 100 * time.Millisecond})
	t.Cleanup(func() { _ = sub.Close() })
	const channel = "resub"
	ch, cancel := sub.Watch(ctx, channel)
	defer cancel()
	if ch == never {
		t.Fatal("not subscribed")
	}

	gate.Arm()
	if silent {
		proxy.SetScope(netfault.OpenConns) // the subscription's connection only
		proxy.Blackhole()
	} else if n := admin.ClientKillByFilter(ctx, "TYPE", "pubsub").Val(); n != 1 {
		t.Fatalf("killed %d pub/sub clients, want 1", n)
	}
	select {
	case <-gate.Held(): // the first redial failed, the second waits
	case <-time.After(10 * time.Second):
		t.Fatal("no second redial")
	}
	fired(ch, 0) // the break's wake-up: its attempt found the lock still held
	if n := admin.Publish(ctx, channel, "0").Val(); n > 1 {
		t.Fatalf("the release reached %d subscribers", n)
	}
	gate.Open()
	if !fired(ch, 10*time.Second) {
		t.Fatal("waiter not woken after its channel's resubscription was confirmed: the release published while it was down is lost to it")
	}
}
