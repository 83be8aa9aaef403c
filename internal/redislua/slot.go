package redislua

import "sync"

// Redis Cluster places a key in one of SlotCount hash slots: CRC16 (the
// XMODEM variant: polynomial 0x1021, initial value 0) of the key's hashed
// part, modulo SlotCount. The hashed part is the text between the first
// '{' and the first '}' after it when that text is not empty, else the
// whole key (see https://redis.io/docs/reference/cluster-spec/#hash-tags).
// A Lua script in a Cluster may only touch keys of one slot, so a lock's
// fencing counter must sit in the lock key's slot: FenceKey names one
// counter per slot, which bounds the counters to SlotCount, ever.

// SlotCount is the number of Redis Cluster hash slots.
const SlotCount = 16384

var crc16tab = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()

func crc16[T string | []byte](s T) uint16 {
	var c uint16
	for i := 0; i < len(s); i++ {
		c = c<<8 ^ crc16tab[byte(c>>8)^s[i]]
	}
	return c
}

// Slot returns the Redis Cluster hash slot of key, honouring hash tags
// exactly as Redis does (CLUSTER KEYSLOT).
func Slot(key string) int { return slotOf(key) }

func slotOf[T string | []byte](key T) int {
	for i := 0; i < len(key); i++ {
		if key[i] != '{' {
			continue
		}
		for j := i + 1; j < len(key); j++ {
			if key[j] == '}' {
				if j > i+1 {
					key = key[i+1 : j]
				}
				return int(crc16(key) % SlotCount)
			}
		}
		break
	}
	return int(crc16(key) % SlotCount)
}

// slotTagLen is the length of every slot tag.
const slotTagLen = 4

// slotTagAlphabet: the characters of slot tags (base64url: no braces).
const slotTagAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

// slotTags returns, per slot, the first 4-character string over
// slotTagAlphabet (in the alphabet's order, the last character varying
// fastest) whose CRC16 falls in that slot. The table is a pure function of
// the CRC, so every process computes the same one: the counter names must
// never change, since a new name would restart the
// tokens. About 170,000 CRCs, once, on first use.
var slotTags = sync.OnceValue(func() *[SlotCount][slotTagLen]byte {
	var t [SlotCount][slotTagLen]byte
	var set [SlotCount]bool
	left := SlotCount
	var s [slotTagLen]byte
	const n = len(slotTagAlphabet)
	for i := 0; left > 0 && i < n*n*n*n; i++ {
		for j, v := slotTagLen-1, i; j >= 0; j, v = j-1, v/n {
			s[j] = slotTagAlphabet[v%n]
		}
		if slot := crc16(s[:]) % SlotCount; !set[slot] {
			set[slot], t[slot] = true, s
			left--
		}
	}
	if left > 0 {
		panic("redislua: no slot tag for some slot") // impossible: every slot has a tag
	}
	return &t
})

// SlotTag returns the hash tag (without braces) that places a key in slot.
func SlotTag(slot int) string {
	t := slotTags()[uint(slot)%SlotCount]
	return string(t[:])
}
