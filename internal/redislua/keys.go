package redislua

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/distlock/distlock/backend"
)

// DefaultPrefix is the key prefix used when none is configured.
const DefaultPrefix = "distlock:"

// Keys names the server-side objects of one lock. All of them sit in one
// Redis Cluster slot.
type Keys struct {
	// Name is the lock's name as the caller gave it; the acquire scripts
	// store it in the lock hash (field "name"), so that an operator who
	// finds the hashed key can read what it locks.
	Name string
	// Lock is the hash holding owner ("o"), token ("t"), name ("name"),
	// metadata ("meta", only when not empty) and one field per hold. It
	// carries the lock's expiry.
	Lock string
	// Fence is the fencing counter of the lock key's Cluster slot (see
	// FenceKey), incremented for every new acquisition of any lock in
	// that slot. It has no expiry. Empty: no fencing counter (tokens are
	// 0).
	Fence string
	// Legacy is the lock's own fencing counter of the layout before
	// per-slot counters (Lock + ":fence"): where it still exists, the next
	// token is raised above it and it is deleted, so tokens keep
	// increasing across the upgrade. Empty with Fence.
	Legacy string
	// Channel is the pub/sub channel on which a release that frees the lock
	// publishes. Empty: no publication.
	Channel string
	// Queue and Waiters are the fair queue's sorted set and entries (see
	// Keys.Fair). Empty: the lock is not fair, and Release ignores them.
	Queue, Waiters string
}

// TagLen is the length of the hash-tag content that KeysFor derives from a key.
const TagLen = 43

// KeysFor returns the names of the lock key under prefix. The lock's own
// names are prefix + "{" + tag + "}" (+ ":wake", and ":fence" for the
// legacy counter) with tag the unpadded base64url SHA-256 of key; the
// fencing counter is the lock key's slot's (FenceKey). Any prefix works:
// every name lands in the lock key's Cluster slot.
func KeysFor(prefix, key string) Keys {
	sum := sha256.Sum256([]byte(key))
	var tag [TagLen]byte
	base64.RawURLEncoding.Encode(tag[:], sum[:])
	// One allocation: "<base>:fence<base>:wake<fence>", sliced.
	n := len(prefix) + 2 + TagLen
	buf := make([]byte, 0, 2*n+len(":fence")+len(":wake")+fenceKeyLen(prefix))
	buf = append(buf, prefix...)
	buf = append(buf, '{')
	buf = append(buf, tag[:]...)
	buf = append(buf, '}')
	buf = append(buf, ":fence"...)
	buf = append(buf, buf[:n]...)
	buf = append(buf, ":wake"...)
	m := len(buf)
	buf = appendFenceKey(buf, prefix, slotOf(buf[:n]))
	s := unsafe.String(unsafe.SliceData(buf), len(buf)) // buf is never written again: one allocation, not two
	return Keys{
		Name: key, Lock: s[:n], Legacy: s[:n+len(":fence")],
		Channel: s[n+len(":fence") : m], Fence: s[m:],
	}
}

// FenceKey returns the name of the fencing counter of Cluster slot slot
// under prefix: prefix + "fence{" + SlotTag(slot) + "}", which Redis hashes
// to slot; for a prefix whose own braces would change how the name hashes,
// "{" + SlotTag(slot) + "}" + prefix + "fence" instead. At most SlotCount
// counters exist per prefix, however many lock names are used.
func FenceKey(prefix string, slot int) string {
	return string(appendFenceKey(make([]byte, 0, fenceKeyLen(prefix)), prefix, slot))
}

func fenceKeyLen(prefix string) int { return len(prefix) + len("fence{}") + slotTagLen }

func appendFenceKey(buf []byte, prefix string, slot int) []byte {
	tag := &slotTags()[uint(slot)%SlotCount]
	start := len(buf)
	buf = append(buf, prefix...)
	buf = append(buf, "fence{"...)
	buf = append(buf, tag[:]...)
	buf = append(buf, '}')
	if slotOf(buf[start:]) == slot {
		return buf
	}
	buf = append(buf[:start], '{')
	buf = append(buf, tag[:]...)
	buf = append(buf, '}')
	buf = append(buf, prefix...)
	return append(buf, "fence"...)
}

// PX returns ttl in whole milliseconds, the unit of Redis expiries. A TTL
// below 1ms or with a sub-millisecond part gets an error wrapping
// backend.ErrInvalidTTL: go-redis would round it silently, so it is refused
// instead.
func PX(ttl time.Duration) (int64, error) {
	if ttl < time.Millisecond {
		return 0, fmt.Errorf("%w: %v is below Redis's 1ms expiry resolution", backend.ErrInvalidTTL, ttl)
	}
	if ttl%time.Millisecond != 0 {
		return 0, fmt.Errorf("%w: %v is not a whole number of milliseconds (Redis expiries are in ms; no rounding)", backend.ErrInvalidTTL, ttl)
	}
	return int64(ttl / time.Millisecond), nil
}

// HoldSource makes hold ids: unique per acquisition across processes (a
// random 64-bit base per source plus a counter). Safe for concurrent use.
type HoldSource struct {
	base string
	n    atomic.Uint64
}

// NewHoldSource returns a HoldSource with a fresh random base.
func NewHoldSource() *HoldSource {
	var b [9]byte
	_, _ = rand.Read(b[:]) // crypto/rand never fails
	return &HoldSource{base: "h" + base64.RawURLEncoding.EncodeToString(b[:])}
}

// Next returns a new hold id. Hold ids begin with 'h', so they never clash
// with the hash's "o" and "t" fields.
func (h *HoldSource) Next() string {
	b := make([]byte, 0, len(h.base)+13) // 13: the base-36 digits of the largest uint64
	b = append(b, h.base...)
	b = strconv.AppendUint(b, h.n.Add(1), 36)
	return unsafe.String(unsafe.SliceData(b), len(b)) // b is never written again: one allocation, not two
}

func checkHold(hold string) error {
	if hold == "" || hold[0] != 'h' {
		return fmt.Errorf("redislua: hold id %q does not come from a HoldSource", hold)
	}
	return nil
}

// Fair returns k with the fair queue's names set (Queue, Waiters): Acquire
// and Release then keep the queue (see FairAcquire).
func (k Keys) Fair() Keys {
	s := k.Lock + ":q" + k.Lock + ":w" // one allocation, sliced
	n := len(k.Lock) + 2
	k.Queue, k.Waiters = s[:n], s[n:]
	return k
}

func (k Keys) fairKeys() []string { return []string{k.Lock, k.Fence, k.Queue, k.Waiters, k.Legacy} }
