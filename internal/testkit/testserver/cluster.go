package testserver

import (
	"context"
	"errors"
	"sync"
)

// Cluster is a group of servers forming one Redis Cluster or ZooKeeper
// ensemble.
type Cluster struct {
	// Servers are the members, in node order.
	Servers []*Server

	cleanup     func() // removes the directory the cluster created, if any
	cleanupOnce sync.Once
}

// Addrs returns the client addresses of all members.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Servers))
	for i, s := range c.Servers {
		out[i] = s.Addr()
	}
	return out
}

// Stop stops all members in parallel and returns their errors joined.
func (c *Cluster) Stop() error {
	errs := make([]error, len(c.Servers))
	var wg sync.WaitGroup
	for i, s := range c.Servers {
		wg.Go(func() { errs[i] = s.Stop() })
	}
	wg.Wait()
	if c.cleanup != nil {
		c.cleanupOnce.Do(c.cleanup)
	}
	return errors.Join(errs...)
}

// WaitReady waits until every member is ready (see Server.WaitReady).
func (c *Cluster) WaitReady(ctx context.Context) error {
	errs := make([]error, len(c.Servers))
	var wg sync.WaitGroup
	for i, s := range c.Servers {
		wg.Go(func() { errs[i] = s.WaitReady(ctx) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Controllable reports whether all members are local processes.
func (c *Cluster) Controllable() bool {
	for _, s := range c.Servers {
		if !s.Controllable() {
			return false
		}
	}
	return len(c.Servers) > 0
}
