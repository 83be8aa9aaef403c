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

// stopMembers stops every member created so far (a failed start).
func (c *Cluster) stopMembers() {
	for _, s := range c.Servers {
		if s != nil {
			_ = s.Stop()
		}
	}
}

// startMembers starts every member's process, then waits until all answer
// (they form a quorum only together); on failure it stops them all.
func (c *Cluster) startMembers(ctx context.Context) error {
	procs := make([]*proc, len(c.Servers))
	for i, s := range c.Servers {
		var err error
		s.mu.Lock()
		procs[i], err = s.startLocked()
		s.mu.Unlock()
		if err != nil {
			c.stopMembers()
			return err
		}
	}
	errs := make([]error, len(c.Servers))
	var wg sync.WaitGroup
	for i, s := range c.Servers {
		wg.Go(func() { errs[i] = s.waitReady(ctx, procs[i]) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		c.stopMembers()
		return err
	}
	return nil
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
