package etcd

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"

	"github.com/distlock/distlock/backend"
)

// keyState is the local state of one key: the hold this driver has on it,
// if any, and a channel closed whenever a hold appears (waiters of the same
// owner watch it to nest instead of queueing behind themselves).
type keyState struct {
	refs    int
	hold    *hold
	changed chan struct{}
}

// hold is one waiter key that holds the lock: one tenure, shared by the
// nested acquisitions of its owner.
type hold struct {
	key, owner string
	metadata   string // the first acquisition's, kept by nested ones
	etcdKey    string
	token      int64 // the key's create revision
	sess       *session
	count      int
	handles    map[*lock]func(error) // live handles and their Lost callbacks
	lost       bool
	pub        chan struct{}      // one publishHolds at a time
	unwatch    context.CancelFunc // ends watchHold
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

// detachLocked removes h from its key's local state and its session, and
// stops its watch.
func (d *driver) detachLocked(h *hold) {
	if h.unwatch != nil {
		h.unwatch()
	}
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

// holdGone ends a hold whose key was found missing (deleted by another
// client): its handles other than except are told they were lost.
func (d *driver) holdGone(h *hold, except *lock) {
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
	for _, f := range lost {
		f(errKeyGone)
	}
}

// errKeyGone: the hold's key was deleted by another client.
var errKeyGone = fmt.Errorf("%w: lock key deleted by another client", backend.ErrLockLost)

// lockPrefix is the prefix of key's waiter keys: the Locker's prefix, the
// key path-escaped (url.PathEscape: "/" and "%" among others become %XX,
// so no key's prefix is another's), and "/".
func (d *driver) lockPrefix(key string) string {
	return d.cfg.prefix + "/" + escapeKey(key) + "/"
}

// escapeKey is key as one path component: url.PathEscape, which writes
// "/", "%", controls and non-ASCII bytes as %XX and is inverted by
// url.PathUnescape.
func escapeKey(key string) string { return url.PathEscape(key) }

// waiterKey is the key of one attempt: the lease in hex and the
// attempt's random id, unique across attempts.
func waiterKey(prefix string, lease int64, id string) string {
	return fmt.Sprintf("%s%016x-%s", prefix, lease, id)
}

// value is a waiter key's value: the holder's description for Inspect and
// ForceRelease on any client. The holding driver rewrites holds whenever
// its nested hold count changes.
type value struct {
	Owner    string `json:"owner"`
	Metadata string `json:"metadata,omitempty"`
	Holds    int    `json:"holds"`
}

func encodeValue(owner, metadata string, holds int) string {
	b, _ := json.Marshal(value{Owner: owner, Metadata: metadata, Holds: holds})
	return string(b)
}

func decodeValue(b []byte) value {
	var v value
	if err := json.Unmarshal(b, &v); err != nil || v.Holds < 1 {
		return value{Owner: string(b), Holds: 1}
	}
	return v
}
