package redlock

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
)

// TestErrorListsEveryNode: a failed attempt's error says what each node
// answered, in the order of the nodes and on one line — the ones that
// granted as well as the ones that failed (an error that listed only the
// failures read "0 of 5 nodes succeeded" while naming 3 nodes).
func TestErrorListsEveryNode(t *testing.T) {
	c := startCluster(t, 2)
	addrs := append(c.addrs(), closedPorts(t, 3)...)
	l := newTestLocker(t, addrs, WithNodeTimeout(time.Second))
	_, err := l.TryAcquire(tctx(t, 10*time.Second), "every-node")
	if !errors.Is(err, distlock.ErrUnavailable) {
		t.Fatalf("TryAcquire with 3 of 5 nodes down: %v, want ErrUnavailable", err)
	}
	msg := err.Error()
	if strings.ContainsAny(msg, "\n\r") {
		t.Errorf("error on several lines: %q", msg)
	}
	last := -1
	for _, a := range addrs {
		i := strings.Index(msg, "node "+a+": ")
		if i < 0 {
			t.Errorf("error does not name node %s: %q", a, msg)
			continue
		}
		if i < last {
			t.Errorf("node %s out of order in %q", a, msg)
		}
		last = i
	}
	var ne *NodeError
	if !errors.As(err, &ne) {
		t.Errorf("no *NodeError reachable in %v", err)
	}
}
