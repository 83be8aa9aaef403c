package zookeeper

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
)

// errUnreachable: every server address the client tries refused or did
// not answer its TCP dial.
var errUnreachable = errors.New("zookeeper: cannot connect to any server")

// dialLog is what the instrumented dialer learns from the client's dials:
// the error of each address whose latest dial failed since a dial last
// connected. go-zookeeper tries its addresses in turn and pauses 1 s after
// each full round; a dial of an address that already failed in the same
// run of failures therefore means that the client has tried every address
// and none connected.
type dialLog struct {
	mu     sync.Mutex
	failed map[string]error // address → its latest dial error, since the last connect
	round  bool             // some address failed twice in this run of failures
}

// dialFailed records a failed dial of addr; it reports whether this dial
// completed the first full round of failures.
func (dl *dialLog) dialFailed(addr string, err error) bool {
	dl.mu.Lock()
	defer dl.mu.Unlock()
	if dl.failed == nil {
		dl.failed = map[string]error{}
	}
	_, again := dl.failed[addr]
	dl.failed[addr] = err
	if again && !dl.round {
		dl.round = true
		return true
	}
	return false
}

// dialed records a dial that connected.
func (dl *dialLog) dialed() {
	dl.mu.Lock()
	defer dl.mu.Unlock()
	dl.failed, dl.round = nil, false
}

// unreachable returns nil unless the client has tried every address since
// a dial last connected and each failed: then an error wrapping
// errUnreachable that lists each address's latest dial error in one line.
func (dl *dialLog) unreachable() error {
	dl.mu.Lock()
	defer dl.mu.Unlock()
	if !dl.round {
		return nil
	}
	addrs := make([]string, 0, len(dl.failed))
	for a := range dl.failed {
		addrs = append(addrs, a)
	}
	sort.Strings(addrs)
	msgs := make([]string, len(addrs))
	for i, a := range addrs {
		msg := strings.Join(strings.Fields(dl.failed[a].Error()), " ")
		if !strings.Contains(msg, a) {
			msg = a + ": " + msg
		}
		msgs[i] = msg
	}
	return fmt.Errorf("%w: %s", errUnreachable, strings.Join(msgs, "; "))
}
