// Package fenced is a resource protected by fencing tokens: a store in Redis
// that accepts a write only with a token larger than every token it has
// accepted before, in one atomic script. It is what the fault tests write to,
// so they can show what fencing buys: a holder paused past its lease that
// wakes up and writes with its old token is refused, whatever the lock
// service believes.
package fenced

import (
	"context"
	"errors"
	"fmt"

	goredis "github.com/redis/go-redis/v9"
)

// ErrStale is returned for a write whose token is not larger than the
// largest accepted so far.
var ErrStale = errors.New("fenced: stale token")

// write: KEYS[1] the resource hash; ARGV token, value, writer.
// Returns {accepted (0/1), highest token before this write}.
var write = goredis.NewScript(`
local seen = tonumber(redis.call('HGET', KEYS[1], 'token') or '0')
local tok = tonumber(ARGV[1])
if tok <= seen then
  redis.call('HINCRBY', KEYS[1], 'rejected', 1)
  return {0, seen}
end
redis.call('HSET', KEYS[1], 'token', ARGV[1], 'value', ARGV[2], 'writer', ARGV[3])
redis.call('HINCRBY', KEYS[1], 'accepted', 1)
return {1, seen}
`)

// Store is one fenced resource.
type Store struct {
	c   goredis.UniversalClient
	key string
}

// New returns the resource named name on c.
func New(c goredis.UniversalClient, name string) *Store {
	return &Store{c: c, key: "distlock:fenced:{" + name + "}"}
}

// Write stores value on behalf of writer if token is larger than every token
// accepted before; otherwise it returns an error wrapping ErrStale.
func (s *Store) Write(ctx context.Context, token uint64, writer, value string) error {
	res, err := write.Run(ctx, s.c, []string{s.key}, token, value, writer).Int64Slice()
	if err != nil {
		return fmt.Errorf("fenced: write: %w", err)
	}
	if res[0] == 0 {
		return fmt.Errorf("%w: token %d, already accepted %d", ErrStale, token, res[1])
	}
	return nil
}

// State is the resource's content.
type State struct {
	Token              uint64
	Value, Writer      string
	Accepted, Rejected int64
}

// Read returns the resource's content.
func (s *Store) Read(ctx context.Context) (State, error) {
	var st State
	m, err := s.c.HGetAll(ctx, s.key).Result()
	if err != nil {
		return st, fmt.Errorf("fenced: read: %w", err)
	}
	_, _ = fmt.Sscan(m["token"]+" 0", &st.Token)
	_, _ = fmt.Sscan(m["accepted"]+" 0", &st.Accepted)
	_, _ = fmt.Sscan(m["rejected"]+" 0", &st.Rejected)
	st.Value, st.Writer = m["value"], m["writer"]
	return st, nil
}
