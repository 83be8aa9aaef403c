package conformance

import (
	"context"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/fence"
)

// fencedResource is what the fault checks write to: a Redis hash guarded
// by fence.Redis, the guard users get, so that the published fault matrix
// shows a paused holder's write refused by the real helper.
type fencedResource struct {
	c     *goredis.Client
	guard *fence.Redis
	name  string // the lock key: the guard's resource
	data  string // the hash written
}

func newFencedResource(c *goredis.Client, name string) *fencedResource {
	return &fencedResource{c: c, guard: fence.NewRedis(c), name: name, data: "distlock:conformance:fenced:" + name}
}

// write records writer in the resource with token; an older token than
// the highest accepted gets an error wrapping fence.ErrStale.
func (r *fencedResource) write(ctx context.Context, token uint64, writer string) error {
	_, err := r.guard.HSet(ctx, r.name, token, r.data, "writer", writer)
	return err
}

// writer returns the last writer accepted.
func (r *fencedResource) writer(ctx context.Context) (string, error) {
	return r.c.HGet(ctx, r.data, "writer").Result()
}
