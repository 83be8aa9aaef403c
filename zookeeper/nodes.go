package zookeeper

import (
	"crypto/rand"
	"encoding/hex"
	"slices"
	"strconv"
	"strings"
)

// Node names: "_c_" + 32 lower-case hex digits (a random GUID per attempt)
// + "-lock-" + the sequence number the server appends (a signed 32-bit
// counter formatted %010d: "0000000007", and after 2147483647 it wraps to
// "-2147483648"). The "_c_<guid>-" prefix is Curator's and go-zookeeper's
// protected-mode convention.
const (
	protectedPrefix = "_c_"
	guidLen         = 32
	lockInfix       = "-lock-"
)

func newGUID() string {
	var b [guidLen / 2]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// member is one lock node under a key's parent.
type member struct {
	name string
	guid string
	seq  int32
}

// parseMember recognises a lock node; anything else under the parent is a
// foreign child and is ignored.
func parseMember(name string) (member, bool) {
	const seqAt = len(protectedPrefix) + guidLen + len(lockInfix)
	if len(name) <= seqAt || !strings.HasPrefix(name, protectedPrefix) || name[len(protectedPrefix)+guidLen:seqAt] != lockInfix {
		return member{}, false
	}
	guid := name[len(protectedPrefix) : len(protectedPrefix)+guidLen]
	for i := 0; i < len(guid); i++ {
		if c := guid[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return member{}, false
		}
	}
	v, err := strconv.ParseInt(name[seqAt:], 10, 32)
	if err != nil {
		return member{}, false
	}
	return member{name: name, guid: guid, seq: int32(v)}, true
}

// seqBefore orders sequence numbers as serial numbers (RFC 1982): a is
// before b if b is less than 2^31 steps after a, so the order survives the
// counter's wrap from 2147483647 to -2147483648. Sequence numbers of nodes
// alive at the same time are always far closer than 2^31: the counter
// advances by one per child created or deleted.
func seqBefore(a, b int32) bool { return int32(uint32(a)-uint32(b)) < 0 }

// order returns the lock nodes among children, first holder first.
func order(children []string) []member {
	ms := make([]member, 0, len(children))
	for _, c := range children {
		if m, ok := parseMember(c); ok {
			ms = append(ms, m)
		}
	}
	slices.SortFunc(ms, func(a, b member) int {
		switch {
		case a.seq == b.seq:
			return strings.Compare(a.name, b.name)
		case seqBefore(a.seq, b.seq):
			return -1
		default:
			return 1
		}
	})
	return ms
}
