package fence

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

var (
	//go:embed lua/check.lua
	luaCheck string
	//go:embed lua/record.lua
	luaRecord string
	//go:embed lua/set.lua
	luaSet string
	//go:embed lua/hset.lua
	luaHSet string
	//go:embed lua/user.lua
	luaUser string
)

// guarded wraps a write in the fence check and the token record.
func guarded(write string) string { return luaCheck + write + "\n" + luaRecord }

var (
	setScript  = goredis.NewScript(guarded(luaSet))
	hsetScript = goredis.NewScript(guarded(luaHSet))
)

// DefaultRedisPrefix starts the key of every Redis token record.
const DefaultRedisPrefix = "distlock:fence:"

// Redis is a fencing guard for Redis: each write runs in one Lua script that
// first compares the write's token with the highest recorded for the
// resource, refuses it if lower, else applies the write and records the
// token. Redis runs a script without interleaving other commands, so the
// check, the write and the record are atomic.
//
// The Redis may be a different one from the lock's (the token comes from
// the lease, not from this server). Each resource costs one small string key
// without expiry, TokenKey(resource); with Redis Cluster every key a write
// touches must hash to the token record's slot: give the resource a hash tag
// and the data keys the same one (resource "{acct:7}", key "{acct:7}:balance").
//
// Guarantees: once a write with token T has been applied, no write with a
// lower token is applied to that resource (refused with a *StaleError,
// errors.Is ErrStale, and nothing changed). An equal token is allowed: the
// same lease writing again, or retrying a write whose reply was lost; the
// record does not change, so the retry is idempotent when the write is (SET
// and HSET are).
//
// Not guaranteed: reads; writes that bypass the guard; effects outside this
// Redis. The record survives a Redis restart only as far as the Redis
// persists it (AOF with appendfsync always, or accept that a restart that
// loses the record lets a stale write through once). A user script that
// raises an error stops where it failed: Redis keeps the writes it made
// before the error (Redis has no rollback), and the token is not recorded;
// the same goes for a script that returns redis.error_reply.
type Redis struct {
	c      RedisClient
	prefix string
}

// RedisClient is what the guard needs of a go-redis client: every
// *redis.Client, *redis.ClusterClient, *redis.Ring and UniversalClient has it.
type RedisClient interface {
	goredis.Scripter
	Get(ctx context.Context, key string) *goredis.StringCmd
}

// RedisOption configures NewRedis.
type RedisOption func(*Redis)

// WithPrefix replaces DefaultRedisPrefix as the start of token record keys.
func WithPrefix(p string) RedisOption { return func(g *Redis) { g.prefix = p } }

// NewRedis returns a guard whose writes and token records live on c (a
// *redis.Client, *redis.ClusterClient or any UniversalClient).
func NewRedis(c RedisClient, opts ...RedisOption) *Redis {
	g := &Redis{c: c, prefix: DefaultRedisPrefix}
	for _, o := range opts {
		o(g)
	}
	return g
}

// TokenKey is the key of resource's token record.
func (g *Redis) TokenKey(resource string) string { return g.prefix + resource }

// Set does SET key value (with PX ttl when ttl > 0) if token is not below
// resource's highest recorded token, and records token; see Redis for the
// guarantee. A refused write returns a *StaleError and changes nothing; token
// 0 returns ErrZeroToken.
func (g *Redis) Set(ctx context.Context, resource string, token uint64, key string, value any, ttl time.Duration) error {
	if ttl < 0 {
		return fmt.Errorf("%w: negative ttl %v", ErrInvalidArgument, ttl)
	}
	ms := ttl.Milliseconds()
	if ttl > 0 && ms == 0 {
		ms = 1
	}
	_, err := g.run(ctx, setScript, resource, token, []string{key}, value, ms)
	return err
}

// HSet does HSET key field value [field value …] if token is not below
// resource's highest recorded token, and records token; it returns HSET's
// count of new fields. See Set.
func (g *Redis) HSet(ctx context.Context, resource string, token uint64, key string, fieldValues ...any) (int64, error) {
	if len(fieldValues) == 0 || len(fieldValues)%2 != 0 {
		return 0, fmt.Errorf("%w: HSet needs field, value pairs, got %d values", ErrInvalidArgument, len(fieldValues))
	}
	res, err := g.run(ctx, hsetScript, resource, token, []string{key}, fieldValues...)
	if err != nil {
		return 0, err
	}
	n, _ := res.(int64)
	return n, nil
}

// Script is a user-supplied Lua write that Eval runs behind the fence.
type Script struct{ s *goredis.Script }

// NewScript wraps body, the source of an ordinary EVAL script (it sees its
// own KEYS and ARGV and returns a result), so that Eval runs it only after
// the fence check, in the same script. body must not start with a #! flags
// line.
func NewScript(body string) *Script {
	return &Script{s: goredis.NewScript(guarded(strings.Replace(luaUser, "--[[BODY]]", body, 1)))}
}

// Eval runs s with keys and args if token is not below resource's highest
// recorded token, then records token, in one atomic script; it returns what
// s returned (as go-redis decodes it; nil for a Lua nil). A refused write
// returns a *StaleError and s does not run. If s raises an error or returns
// an error reply (redis.error_reply), Redis keeps the writes s made before,
// the token is not recorded, and the error is returned.
func (g *Redis) Eval(ctx context.Context, resource string, token uint64, s *Script, keys []string, args ...any) (any, error) {
	if s == nil || s.s == nil {
		return nil, fmt.Errorf("%w: Eval needs a Script from NewScript", ErrInvalidArgument)
	}
	return g.run(ctx, s.s, resource, token, keys, args...)
}

// Highest returns resource's highest recorded token (0 when none).
func (g *Redis) Highest(ctx context.Context, resource string) (uint64, error) {
	v, err := g.c.Get(ctx, g.TokenKey(resource)).Result()
	if errors.Is(err, goredis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("fence: redis: %w", err)
	}
	return strconv.ParseUint(v, 10, 64)
}

// run is the one path every guarded Redis write takes.
func (g *Redis) run(ctx context.Context, s *goredis.Script, resource string, token uint64, keys []string, args ...any) (any, error) {
	if err := checkWrite(resource, token); err != nil {
		return nil, err
	}
	ks := append([]string{g.TokenKey(resource)}, keys...)
	as := append([]any{strconv.FormatUint(token, 10)}, args...)
	reply, err := s.Run(ctx, g.c, ks, as...).Slice()
	if err != nil {
		return nil, fmt.Errorf("fence: redis: %w", err)
	}
	if len(reply) < 2 {
		return nil, fmt.Errorf("fence: redis: unexpected reply %v", reply)
	}
	seen, _ := reply[1].(string)
	if ok, _ := reply[0].(int64); ok == 0 {
		h, _ := strconv.ParseUint(seen, 10, 64)
		return nil, &StaleError{Resource: resource, Token: token, Highest: h}
	}
	if len(reply) > 2 {
		return reply[2], nil
	}
	return nil, nil
}
