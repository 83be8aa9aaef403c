package etcd

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"

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
//
// Its waiter key is not stored: keyOf makes it from the lock's name, the
// session's lease and the attempt's id (a held lock costs the 16 bytes of
// the id, not the 100-odd of the key).
type hold struct {
	holdtab.Hold
	id    waiterID
	token int64 // the key's create revision
	sess  *session
}

// keyOf is h's waiter key.
func (d *driver) keyOf(h *hold) string {
	return waiterKey(d.lockPrefix(h.Key), int64(h.sess.id), h.id)
}

// detachLocked removes h from the live holds (and so from the hold
// watch): the table's detach hook, run when h ends or its last hold is
// released.
func (d *driver) detachLocked(h *hold) { d.unwatchLocked(h) }

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

// waiterID is the random part of a waiter key: 128 bits, unique across
// attempts.
type waiterID [16]byte

// newID is a random attempt id.
func newID() waiterID {
	var id waiterID
	randRead(id[:])
	return id
}

// waiterIDLen is the length of a waiter key's last part: the lease in 16
// hex digits, "-", the id in 32 hex digits.
const waiterIDLen = 16 + 1 + 32

// waiterKey is the key of one attempt: the lock's prefix, the lease in hex
// and the attempt's id in hex.
func waiterKey(prefix string, lease int64, id waiterID) string {
	var b strings.Builder
	b.Grow(len(prefix) + waiterIDLen)
	b.WriteString(prefix)
	var l [8]byte
	binary.BigEndian.PutUint64(l[:], uint64(lease))
	var x [waiterIDLen]byte
	hex.Encode(x[:16], l[:])
	x[16] = '-'
	hex.Encode(x[17:], id[:])
	b.Write(x[:])
	return b.String()
}

// parseWaiterID returns the id of waiter key key; false if key does not
// end like one.
func parseWaiterID(key []byte) (waiterID, bool) {
	var id waiterID
	if len(key) < waiterIDLen || key[len(key)-33] != '-' {
		return id, false
	}
	if _, err := hex.Decode(id[:], key[len(key)-32:]); err != nil {
		return id, false
	}
	return id, true
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
