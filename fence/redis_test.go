package fence_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/distlock/distlock/fence"
	"github.com/stretchr/testify/require"
)

// TestRedisTokensAbove2To53: tokens compare exactly over the whole uint64
// range. Lua numbers are doubles: tonumber makes 2^53 and 2^53+1 equal, and
// would let the older write through.
func TestRedisTokensAbove2To53(t *testing.T) {
	ctx := ctxT(t)
	g := fence.NewRedis(redisClient(t))
	const big = 1 << 53
	must(t, g.Set(ctx, "r", big+1, "k", "newer", 0))
	require.ErrorIs(t, g.Set(ctx, "r", big, "k", "older", 0), fence.ErrStale, "token 2^53 after 2^53+1")
	must(t, g.Set(ctx, "r", 1<<64-1, "k", "max", 0))
	require.ErrorIs(t, g.Set(ctx, "r", 1<<64-2, "k", "older", 0), fence.ErrStale, "token 2^64-2 after 2^64-1")
	if h, err := g.Highest(ctx, "r"); err != nil || h != 1<<64-1 {
		t.Fatalf("Highest %d, %v", h, err)
	}
}

// TestRedisHSetAndScript: HSET and a user script behind the fence; the
// script sees its own KEYS and ARGV and its result comes back; a script
// that raises an error does not record its token.
func TestRedisHSetAndScript(t *testing.T) {
	ctx := ctxT(t)
	c := redisClient(t)
	g := fence.NewRedis(c, fence.WithPrefix("f:"))
	if n, err := g.HSet(ctx, "r", 5, "h", "a", "1", "b", "2"); err != nil || n != 2 {
		t.Fatalf("HSet: %d, %v", n, err)
	}
	if _, err := g.HSet(ctx, "r", 4, "h", "a", "stale"); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("HSet with an older token: %v", err)
	}
	if _, err := g.HSet(ctx, "r", 5, "h", "a"); !errors.Is(err, fence.ErrInvalidArgument) {
		t.Fatal("HSet with an odd number of values: nil error")
	}
	require.Equal(t, "1", c.HGet(ctx, "h", "a").Val(), "h.a")
	echo := fence.NewScript(`return KEYS[1] .. '=' .. ARGV[1] .. ',' .. #KEYS .. ',' .. #ARGV`)
	res, err := g.Eval(ctx, "r", 5, echo, []string{"k"}, "v")
	if err != nil || res != "k=v,1,1" {
		t.Fatalf("Eval: %v, %v", res, err)
	}
	nothing := fence.NewScript(`redis.call('SET', KEYS[1], 'x')`)
	if res, err := g.Eval(ctx, "r", 5, nothing, []string{"k"}); err != nil || res != nil {
		t.Fatalf("script returning nothing: %v, %v", res, err)
	}
	failing := fence.NewScript(`return redis.error_reply('nope')`)
	if _, err := g.Eval(ctx, "r", 9, failing, nil); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("script answering error_reply: %v", err)
	}
	if h, _ := g.Highest(ctx, "r"); h != 5 {
		t.Fatalf("a script that answered an error recorded its token: highest %d", h)
	}
	raising := fence.NewScript(`redis.call('SET', KEYS[1], 'half'); error('raised')`)
	if _, err := g.Eval(ctx, "r", 20, raising, []string{"k2"}); err == nil || !strings.Contains(err.Error(), "raised") {
		t.Fatalf("raising script: %v", err)
	}
	if h, _ := g.Highest(ctx, "r"); h == 20 {
		t.Fatal("a script that raised recorded its token")
	}
	require.Equal(t, int64(1), c.Exists(ctx, "f:r").Val(), "WithPrefix: no token record at f:r")
	require.ErrorIs(t, g.Set(ctx, "r", 5, "k", "v", -1), fence.ErrInvalidArgument, "negative ttl")
	if _, err := g.Eval(ctx, "r", 5, nil, nil); !errors.Is(err, fence.ErrInvalidArgument) {
		t.Fatal("Eval(nil script): nil error")
	}
	require.ErrorIs(t, g.Set(ctx, "", 5, "k", "v", 0), fence.ErrInvalidResource, "empty resource")
}
