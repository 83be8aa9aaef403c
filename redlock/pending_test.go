package redlock

import "testing"

// TestPendingNodes: a release waits only for the nodes still running at
// the decision, and once all of them have answered the lock keeps no
// channels.
func TestPendingNodes(t *testing.T) {
	var none *pendingNodes
	if none.wait(0) != nil {
		t.Fatal("nil pendingNodes: wait returned a channel")
	}
	none.done(0) // no panic

	p := newPendingNodes([]bool{false, true, false})
	if p.wait(1) != nil {
		t.Fatal("node 1 answered before the decision, but wait returned a channel")
	}
	c0, c2 := p.wait(0), p.wait(2)
	if c0 == nil || c2 == nil {
		t.Fatal("pending nodes: wait returned nil")
	}
	p.done(0)
	select {
	case <-c0:
	default:
		t.Fatal("done(0) did not close node 0's channel")
	}
	select {
	case <-c2:
		t.Fatal("done(0) closed node 2's channel")
	default:
	}
	if p.wait(0) != nil {
		t.Fatal("node 0 answered, but wait still returns a channel")
	}
	p.done(0) // repeated: no double close
	p.done(2)
	<-c2
	if p.st != nil || p.left != 0 {
		t.Fatalf("all answered: state %v left %d, want nil and 0", p.st, p.left)
	}
	if p.wait(2) != nil {
		t.Fatal("all answered, but wait returns a channel")
	}
}
