package memcached

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// DefaultPrefix is the prefix of every memcached key a Locker uses unless
// WithPrefix or the URL's prefix= says otherwise.
const DefaultPrefix = "distlock:"

// maxPrefixLen keeps prefix + digest within memcached's 250-byte key limit
// with room to spare.
const maxPrefixLen = 200

// hashLen is the length of the base64url SHA-256 digest in an item key.
const hashLen = 43

// ItemKey returns the memcached key that holds the lock named key under
// prefix: prefix followed by the unpadded base64url SHA-256 of key (43
// bytes). Every valid lock name maps to a legal memcached key (at most 250
// bytes, no whitespace or control bytes) whatever its content or length,
// and distinct names map to distinct keys (a collision would need a SHA-256
// collision).
func ItemKey(prefix, key string) string {
	sum := sha256.Sum256([]byte(key))
	b := make([]byte, len(prefix)+hashLen)
	copy(b, prefix)
	base64.RawURLEncoding.Encode(b[len(prefix):], sum[:])
	return string(b)
}

// pinKey is the item that records the server list on each server (see
// WithPin). It cannot collide with a lock item: those end in a 43-byte
// digest, this one in "servers".
func pinKey(prefix string) string { return prefix + "servers" }

// checkPrefix reports whether prefix can start a memcached key.
func checkPrefix(prefix string) error {
	if len(prefix) > maxPrefixLen {
		return fmt.Errorf("%d bytes, at most %d", len(prefix), maxPrefixLen)
	}
	for i := 0; i < len(prefix); i++ {
		if c := prefix[i]; c <= ' ' || c == 0x7f {
			return fmt.Errorf("contains whitespace or a control byte (0x%02x), which memcached keys cannot", c)
		}
	}
	return nil
}

// record is the value of a lock item:
//
//	DL1 <expiry> <tenure> <hold>[,<hold>...] <owner>
//	DL2 <expiry> <tenure> <hold>[,<hold>...] <n> <metadata><owner>
//
// expiry is the server-side expiry the last writer asked for, in Unix
// milliseconds by the writer's clock (a hint for waiters and for the
// never-shorten rule, not used for safety); tenure is a random nonce made by
// the acquisition that created the item and shared by the owner's nested
// holds; each hold is the random id of one acquisition that has not been
// released; owner is the rest of the value, any bytes. A lock taken with
// metadata (WithMetadata) is written in the DL2 form, where n is the
// metadata's length in bytes; one without is written in the DL1 form, which
// Lockers of earlier versions read too.
type record struct {
	expMs    int64
	tenure   string
	holds    []string
	metadata string
	owner    string
}

const (
	recordMagic   = "DL1 "
	recordMagicMD = "DL2 "
)

func (r *record) encode() []byte {
	n := len(recordMagic) + 21 + len(r.tenure) + 1 + len(r.holds)*(holdIDLen+1) + 1 + 6 + len(r.metadata) + len(r.owner)
	b := make([]byte, 0, n)
	if r.metadata == "" {
		b = append(b, recordMagic...)
	} else {
		b = append(b, recordMagicMD...)
	}
	b = strconv.AppendInt(b, r.expMs, 10)
	b = append(b, ' ')
	b = append(b, r.tenure...)
	b = append(b, ' ')
	for i, h := range r.holds {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, h...)
	}
	b = append(b, ' ')
	if r.metadata != "" {
		b = strconv.AppendInt(b, int64(len(r.metadata)), 10)
		b = append(b, ' ')
		b = append(b, r.metadata...)
	}
	b = append(b, r.owner...)
	return b
}

// decodeRecord parses a lock item's value. It reports false for anything
// that is not a distlock record (a foreign value under our key, or a
// tombstone).
func decodeRecord(v []byte) (record, bool) {
	var r record
	s := string(v)
	rest, ok := strings.CutPrefix(s, recordMagic)
	withMD := false
	if !ok {
		if rest, ok = strings.CutPrefix(s, recordMagicMD); !ok {
			return r, false
		}
		withMD = true
	}
	exp, rest, ok := strings.Cut(rest, " ")
	if !ok {
		return r, false
	}
	tenure, rest, ok := strings.Cut(rest, " ")
	if !ok || tenure == "" {
		return r, false
	}
	holds, owner, ok := strings.Cut(rest, " ")
	if !ok || holds == "" {
		return r, false
	}
	if withMD {
		size, after, ok := strings.Cut(owner, " ")
		n, err := strconv.Atoi(size)
		if !ok || err != nil || n < 1 || n > len(after) || size != strconv.Itoa(n) {
			return r, false
		}
		r.metadata, owner = after[:n], after[n:]
	}
	if owner == "" {
		return r, false
	}
	expMs, err := strconv.ParseInt(exp, 10, 64)
	if err != nil {
		return r, false
	}
	r.expMs, r.tenure, r.owner = expMs, tenure, owner
	r.holds = strings.Split(holds, ",")
	for _, h := range r.holds {
		if h == "" {
			return r, false
		}
	}
	return r, true
}

// has reports whether hold is one of the record's live holds.
func (r *record) has(hold string) bool { return slices.Contains(r.holds, hold) }

// records reports whether the record still holds h: the same owner and
// tenure, and h's hold among the live ones.
func (r *record) records(h holdRef) bool {
	return r.owner == h.owner && r.tenure == h.tenure && r.has(h.hold)
}

// without returns the holds less hold.
func (r *record) without(hold string) []string {
	out := make([]string, 0, len(r.holds))
	for _, h := range r.holds {
		if h != hold {
			out = append(out, h)
		}
	}
	return out
}

const (
	tenureBytes = 16 // 128 random bits per tenure
	holdBytes   = 8  // 64 random bits per hold, unique within a tenure
	holdIDLen   = 11 // base64url of holdBytes
)

func randomID(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return base64.RawURLEncoding.EncodeToString(b)
}
