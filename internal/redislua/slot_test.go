package redislua

import (
	"fmt"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/internal/testkit/testserver"
	"github.com/stretchr/testify/require"
)

// TestSlot (no server): Redis's reference values and hash-tag rules
// (cluster spec: CRC16("123456789") = 0x31C3).
func TestSlot(t *testing.T) {
	if c := crc16("123456789"); c != 0x31C3 {
		t.Fatalf("crc16 = %#x, want 0x31c3", c)
	}
	for _, c := range []struct {
		key  string
		same string
	}{
		{"{user1000}.following", "user1000"},
		{"foo{}{bar}", "foo{}{bar}"}, // empty first tag: the whole key
		{"foo{{bar}}zap", "{bar"},
		{"foo{bar}{zap}", "bar"},
		{"a{b", "a{b"}, // no closing brace: the whole key
		{"}{x}", "x"},
	} {
		if Slot(c.key) != Slot(c.same) || Slot(c.key) != int(crc16(c.same))%SlotCount {
			t.Errorf("Slot(%q) = %d, want the slot of %q (%d)", c.key, Slot(c.key), c.same, int(crc16(c.same))%SlotCount)
		}
	}
}

// TestSlotTags (no server): every slot has a tag, and the tag places a key
// in that slot.
func TestSlotTags(t *testing.T) {
	for slot := range SlotCount {
		tag := SlotTag(slot)
		if len(tag) != slotTagLen || strings.ContainsAny(tag, "{}") || Slot("x{"+tag+"}y") != slot {
			t.Fatalf("SlotTag(%d) = %q, slot %d", slot, tag, Slot("x{"+tag+"}y"))
		}
	}
}

// TestSlotTagsStable (no server): the counter names are part of the data
// layout: a change would restart every lock's tokens from another counter.
// These values must never change.
func TestSlotTagsStable(t *testing.T) {
	for slot, want := range map[int]string{0: "ACFZ", 1: "AAsy", 8000: "ABbI", 16383: "AEnK"} {
		if got := SlotTag(slot); got != want {
			t.Errorf("SlotTag(%d) = %q, want %q (the layout changed: tokens would repeat)", slot, got, want)
		}
	}
	if got, want := FenceKey("distlock:", 0), "distlock:fence{"+SlotTag(0)+"}"; got != want {
		t.Errorf("FenceKey = %q, want %q", got, want)
	}
}

// TestSlotMatchesCluster: Slot agrees with a real Redis Cluster's CLUSTER
// KEYSLOT, hash tags included, for lock names, counter names and odd keys.
func TestSlotMatchesCluster(t *testing.T) {
	testserver.SkipShort(t, "cluster")
	cl := testserver.RedisCluster(t, 3)
	c := goredis.NewClient(&goredis.Options{Addr: cl.Addrs()[0]})
	t.Cleanup(func() { _ = c.Close() })
	keys := []string{"", "a", "{", "}", "{}", "{}x", "a{b}c", "a{{b}}", "x{}{y}", "🔒{é}", "\x00{\xff}"}
	for i := range 200 {
		k := KeysFor(fmt.Sprintf("p%d{", i%3), fmt.Sprint(i))
		keys = append(keys, k.Lock, k.Fence, k.Legacy, fmt.Sprintf("key-%d", i*7919))
	}
	for _, k := range keys {
		want, err := c.ClusterKeySlot(t.Context(), k).Result()
		require.NoError(t, err)
		if got := Slot(k); int64(got) != want {
			t.Errorf("Slot(%q) = %d, CLUSTER KEYSLOT says %d", k, got, want)
		}
	}
}
