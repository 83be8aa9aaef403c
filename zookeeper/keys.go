package zookeeper

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/distlock/distlock/backend"
)

// keyState is the local state of one key: the hold this driver has on it,
// if any, and a channel closed whenever a hold appears (reentrant waiters
// of the same owner watch it).
type keyState struct {
	refs    int
	hold    *hold
	changed chan struct{}
}

// hold is one lock node held by this driver: one tenure, shared by the
// nested acquisitions of its owner.
type hold struct {
	key, owner string
	metadata   string // the first acquisition's, kept by nested ones
	path       string
	token      uint64
	sess       *session
	count      int
	handles    map[*lock]func(error) // live handles and their Lost callbacks
	lost       bool
	pub        chan struct{} // one publishHolds at a time
}

// refKey returns the state of key, kept while an acquisition of it runs
// (until unrefKey) or a hold on it lives.
func (d *driver) refKey(key string) *keyState {
	d.mu.Lock()
	defer d.mu.Unlock()
	ks := d.keys[key]
	if ks == nil {
		ks = &keyState{changed: make(chan struct{})}
		d.keys[key] = ks
	}
	ks.refs++
	return ks
}

func (d *driver) unrefKey(key string, ks *keyState) {
	d.mu.Lock()
	defer d.mu.Unlock()
	ks.refs--
	if ks.refs == 0 && ks.hold == nil && d.keys[key] == ks {
		delete(d.keys, key)
	}
}

// detachLocked removes h from its key's local state and its session.
func (d *driver) detachLocked(h *hold) {
	if ks := d.keys[h.key]; ks != nil && ks.hold == h {
		ks.hold = nil
		if ks.refs == 0 {
			delete(d.keys, h.key)
		}
	}
	if h.sess.holds != nil {
		delete(h.sess.holds, h)
	}
}

// holdGone ends a hold whose node was found missing (deleted by another
// client, or the session ended): its other handles are told they were lost.
func (d *driver) holdGone(h *hold, cause string, except *lock) {
	d.mu.Lock()
	if h.lost {
		d.mu.Unlock()
		return
	}
	h.lost = true
	d.detachLocked(h)
	var lost []func(error)
	for l, f := range h.handles {
		if l != except && f != nil {
			lost = append(lost, f)
		}
	}
	d.mu.Unlock()
	err := fmt.Errorf("%w: %s", backend.ErrLockLost, cause)
	for _, f := range lost {
		f(err)
	}
}

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
