package testserver

import (
	"context"
	"testing"
	"time"
)

// TestEtcdCluster starts a 3-member cluster, kills and restarts the leader
// (a new one is elected and the old one rejoins), pauses a follower, and
// restarts the whole cluster with its data.
func TestEtcdCluster(t *testing.T) {
	c := EtcdCluster(t, 3, EtcdConfig{})
	if !c.Controllable() {
		t.Skip("external etcd cluster: nothing to fault")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	leader, err := EtcdLeader(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if err := leader.Kill(); err != nil {
		t.Fatal(err)
	}
	waitLeader(t, ctx, c, leader)
	if err := leader.Restart(ctx); err != nil {
		t.Fatalf("restart of the old leader: %v", err)
	}
	f, err := EtcdFollower(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Pause(); err != nil {
		t.Fatal(err)
	}
	if _, err := EtcdLeader(ctx, c); err != nil {
		t.Errorf("two of three members up: %v", err)
	}
	if err := f.Resume(); err != nil {
		t.Fatal(err)
	}
	for _, s := range c.Servers {
		if err := s.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range c.Servers {
		if err := s.RestartNoWait(); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.WaitReady(ctx); err != nil {
		t.Fatalf("whole-cluster restart: %v", err)
	}
}

func TestEtcdSingle(t *testing.T) {
	s := Etcd(t, EtcdConfig{})
	st, err := EtcdMemberStatus(t.Context(), s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if !st.IsLeader() {
		t.Errorf("single member %+v is not its own leader", st)
	}
}

// waitLeader waits until a member other than old leads.
func waitLeader(t *testing.T, ctx context.Context, c *Cluster, old *Server) {
	t.Helper()
	for ctx.Err() == nil {
		if l, err := EtcdLeader(ctx, c); err == nil && l != old {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("no new leader after the old one was killed")
}
