package file

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// maxEscaped bounds the escaped form of a key in a file name; longer keys
// are named by their SHA-256. File names stay under 255 bytes with every
// suffix this package appends.
const maxEscaped = 180

// baseName maps a lock key to the stem of its files: "k-" and the key with
// every byte outside [a-z0-9_-] written as %xx (lower-case hex), or "h-"
// and the key's SHA-256 in hex, as "kh-<hex>", when that is longer than
// maxEscaped. Upper
// case is escaped too, so two keys never share a file on a case-insensitive
// filesystem (macOS), and no stem contains a dot, so the suffixes
// (".lock", ".fence", ".<i>.lock") cannot make two stems collide. The
// mapping is injective: distinct keys get distinct stems. prefix
// separates namespaces ("k" for locks, "s" for semaphores).
func baseName(prefix, key string) string {
	var b strings.Builder
	b.Grow(len(key) + 2)
	b.WriteString(prefix)
	b.WriteByte('-')
	const hexdig = "0123456789abcdef"
	for i := 0; i < len(key); i++ {
		c := key[i]
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hexdig[c>>4])
		b.WriteByte(hexdig[c&15])
		if b.Len() > maxEscaped+2 {
			break
		}
	}
	if b.Len() > maxEscaped+2 {
		sum := sha256.Sum256([]byte(key))
		return prefix + "h-" + hex.EncodeToString(sum[:])
	}
	return b.String()
}
