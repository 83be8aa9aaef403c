package main

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	dlredis "github.com/distlock/distlock/redis"
)

// The cost of redis.WithWaitReplicas (wait_replicas=1): distlock on a
// master with one replica, without and with the WAIT confirmation of every
// acquisition, in the uncontended section.

// benchWaitTimeout is the rows' wait_timeout (the URL's default).
const benchWaitTimeout = 500 * time.Millisecond

var (
	distlockReplicated = lib{name: "distlock redis (master with 1 replica)", make: func(a []string) inst { return newDistlock(a) }}
	distlockWait1      = lib{name: "distlock redis wait_replicas=1 (master with 1 replica)", make: func(a []string) inst {
		return newDistlock(a, dlredis.WithWaitReplicas(1, benchWaitTimeout))
	}}
)

// startReplicated starts a master and one replica of it, and returns when
// the replica is online (its initial sync done).
func startReplicated(bin string) (master, replica *server, err error) {
	master, err = startRedis(bin)
	if err != nil {
		return nil, nil, err
	}
	host, port, _ := net.SplitHostPort(master.addr)
	replica, err = startRedis(bin, "--replicaof", host, port)
	if err != nil {
		master.stop()
		return nil, nil, err
	}
	c := newClient(master.addr)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		info, err := c.Info(ctx, "replication").Result()
		if err == nil && strings.Contains(info, "connected_slaves:1") && strings.Contains(info, "state=online") {
			return master, replica, nil
		}
		select {
		case <-ctx.Done():
			master.stop()
			replica.stop()
			return nil, nil, fmt.Errorf("the replica of %s did not come online: %v (last INFO error: %v)", master.addr, ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
