package zookeeper

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/holdtab"
)

// keyState is the local state of one key (holdtab.Key): the hold this
// driver has on it, if any, and a channel closed whenever a hold appears
// (reentrant waiters of the same owner watch it).
type keyState = holdtab.Key[*hold]

// hold is one lock node held by this driver: one tenure, shared by the
// nested acquisitions of its owner (holdtab.Hold: key, owner, metadata,
// count, handles).
type hold struct {
	holdtab.Hold
	path  string
	token uint64
	sess  *session
}

// detachLocked removes h from its session: the table's detach hook, run
// when h ends or its last hold is released.
func (d *driver) detachLocked(h *hold) {
	if h.sess.holds != nil {
		delete(h.sess.holds, h)
	}
}

// errNodeDeleted: the hold's node was deleted by another client.
var errNodeDeleted = fmt.Errorf("%w: lock node deleted by another client", backend.ErrLockLost)

const keyPrefix = "k-"

// encodeKey maps a key to one path component that the server accepts, with
// no collisions: "k-" followed by the key's bytes, where every byte other
// than A–Z a–z 0–9 - . _ ~ is written %XX. The prefix keeps "." and ".."
// from being components; the result is printable ASCII (at most 3074
// bytes for a 1024-byte key), so ZooKeeper's character restrictions
// (control characters, emoji, private-use code points) never apply.
func encodeKey(key string) string {
	const hexdig = "0123456789ABCDEF"
	b := make([]byte, 0, len(keyPrefix)+len(key)+len(key)/2)
	b = append(b, keyPrefix...)
	for i := 0; i < len(key); i++ {
		c := key[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '.', c == '_', c == '~':
			b = append(b, c)
		default:
			b = append(b, '%', hexdig[c>>4], hexdig[c&15])
		}
	}
	return string(b)
}

// decodeKey inverts encodeKey.
func decodeKey(name string) (string, bool) {
	rest, ok := strings.CutPrefix(name, keyPrefix)
	if !ok {
		return "", false
	}
	b := make([]byte, 0, len(rest))
	for i := 0; i < len(rest); i++ {
		if rest[i] != '%' {
			b = append(b, rest[i])
			continue
		}
		if i+2 >= len(rest) {
			return "", false
		}
		v, err := strconv.ParseUint(rest[i+1:i+3], 16, 8)
		if err != nil {
			return "", false
		}
		b = append(b, byte(v))
		i += 2
	}
	return string(b), true
}

// parentPath is the container node of key's lock nodes.
func (d *driver) parentPath(key string) string { return d.cfg.basePath + "/" + encodeKey(key) }
