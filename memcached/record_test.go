package memcached

import (
	"strings"
	"testing"
)

func TestRecord(t *testing.T) {
	for _, r := range []record{
		{expMs: 1, tenure: "t", holds: []string{"h"}, owner: "o"},
		{expMs: 1700000000000, tenure: randomID(tenureBytes), holds: []string{randomID(holdBytes), randomID(holdBytes)}, owner: "owner with spaces, commas,\nnewlines \x00 and 🔒"},
		{expMs: -5, tenure: "x", holds: []string{"a", "b", "c"}, owner: " "},
		{expMs: 1, tenure: "t", holds: []string{"h"}, metadata: "m", owner: "o"},
		{expMs: 1, tenure: "t", holds: []string{"h", "i"}, metadata: "12 host=a pid 7 ✓\n", owner: "3 owner"},
	} {
		got, ok := decodeRecord(r.encode())
		if !ok || got.expMs != r.expMs || got.tenure != r.tenure || got.owner != r.owner || got.metadata != r.metadata || strings.Join(got.holds, ",") != strings.Join(r.holds, ",") {
			t.Errorf("round trip of %+v = %+v, %v", r, got, ok)
		}
	}
	for _, v := range []string{"", "DL1", "DL1 ", "DL1 5", "DL1 5 t", "DL1 5 t h", "DL1 x t h o", "DL1 5  h o", "DL1 5 t  o", "DL1 5 t h, o", "DL2 5 t h o", "DL2 5 t h 0 o", "DL2 5 t h 2 o", "DL2 5 t h 1 o", "DL2 5 t h 01 mo", "DL2 5 t h x o", "garbage"} {
		if _, ok := decodeRecord([]byte(v)); ok {
			t.Errorf("decodeRecord(%q) accepted", v)
		}
	}
	// Without metadata the record keeps the form earlier versions read.
	if v := (&record{expMs: 1, tenure: "t", holds: []string{"h"}, owner: "o"}).encode(); string(v) != "DL1 1 t h o" {
		t.Errorf("record without metadata encoded as %q", v)
	}
	if v := (&record{expMs: 1, tenure: "t", holds: []string{"h"}, metadata: "a b", owner: "o"}).encode(); string(v) != "DL2 1 t h 3 a bo" {
		t.Errorf("record with metadata encoded as %q", v)
	}
	if n := len(randomID(holdBytes)); n != holdIDLen {
		t.Errorf("hold id is %d bytes, want %d", n, holdIDLen)
	}
}

func FuzzDecodeRecord(f *testing.F) {
	f.Add([]byte("DL1 5 t h o"))
	f.Add([]byte("DL1 5 t a,b owner x"))
	f.Add([]byte("DL2 5 t a,b 3 m downer"))
	f.Fuzz(func(t *testing.T, v []byte) {
		r, ok := decodeRecord(v)
		if !ok {
			return
		}
		again, ok := decodeRecord(r.encode())
		if !ok || again.owner != r.owner || again.metadata != r.metadata || again.tenure != r.tenure || again.expMs != r.expMs || len(again.holds) != len(r.holds) {
			t.Errorf("re-encoding %q changed it: %+v vs %+v", v, r, again)
		}
	})
}
