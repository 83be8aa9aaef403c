package etcd

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"

	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/holdtab"
)

// keyState is the local state of one key (holdtab.Key): the hold this
// driver has on it, if any, and a channel closed whenever a hold appears
// (waiters of the same owner watch it to nest instead of queueing behind
// themselves).
type keyState = holdtab.Key[*hold]

// hold is one waiter key that holds the lock: one tenure, shared by the
// nested acquisitions of its owner (holdtab.Hold: key, owner, metadata,
// count, handles).
type hold struct {
	holdtab.Hold
	etcdKey string
	token   int64 // the key's create revision
	sess    *session
	unwatch context.CancelFunc // ends watchHold
}

// detachLocked removes h from its session and stops its watch: the
// table's detach hook, run when h ends or its last hold is released.
func (d *driver) detachLocked(h *hold) {
	if h.unwatch != nil {
		h.unwatch()
	}
	if h.sess.holds != nil {
		delete(h.sess.holds, h)
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
