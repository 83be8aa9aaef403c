package memcached

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/distlock/distlock/internal/testkit/testserver"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseMDReply(t *testing.T) {
	for _, c := range []struct {
		line string
		want mdResult
		err  bool
	}{
		{"HD", mdDeleted, false},
		{"OK", mdDeleted, false},
		{"EX", mdExists, false},
		{"NF", mdNotFound, false},
		{"ERROR", mdUnsupported, false},
		{"CLIENT_ERROR bad command line format", mdUnsupported, false},
		{"SERVER_ERROR out of memory", 0, true},
		{"", 0, true},
		{"HD extra", 0, true},
	} {
		got, err := parseMDReply([]byte(c.line))
		if (err != nil) != c.err || (!c.err && got != c.want) {
			t.Errorf("parseMDReply(%q) = %v, %v; want %v (error %v)", c.line, got, err, c.want, c.err)
		}
	}
}

// The meta compare-and-delete against the real server: HD when the CAS
// value matches, EX when it does not (the item stays), NF when there is no
// item; and it honours its context.
func TestMetaDelete(t *testing.T) {
	srv := testserver.Memcached(t, testserver.MemcachedConfig{})
	admin := adminClient(t, srv.Addr())
	addr, err := net.ResolveTCPAddr("tcp", srv.Addr())
	require.NoError(t, err)
	p := newRawPool(nil, 2*time.Second, 2)
	defer p.close()
	ctx := ctxT(t, 30*time.Second)
	const key = "md-test"
	require.NoError(t, admin.Set(&memcache.Item{Key: key, Value: []byte("v"), Expiration: 60}))
	it, err := admin.Get(key)
	require.NoError(t, err)
	if res, err := p.metaDelete(ctx, addr, key, it.CasID+1); err != nil || res != mdExists {
		t.Errorf("md with a wrong CAS = %v, %v; want EX", res, err)
	}
	if _, err := admin.Get(key); err != nil {
		t.Errorf("item gone after an EX: %v", err)
	}
	if res, err := p.metaDelete(ctx, addr, key, it.CasID); err != nil || res != mdDeleted {
		t.Errorf("md with the CAS = %v, %v; want HD", res, err)
	}
	if _, err := admin.Get(key); !errors.Is(err, memcache.ErrCacheMiss) {
		t.Errorf("item after HD: %v, want a miss", err)
	}
	if res, err := p.metaDelete(ctx, addr, key, it.CasID); err != nil || res != mdNotFound {
		t.Errorf("md of a missing item = %v, %v; want NF", res, err)
	}
	// The idle connection was reused throughout.
	p.mu.Lock()
	idle := len(p.idle[addr.String()])
	p.mu.Unlock()
	assert.Equal(t, 1, idle, "%d idle connections, want 1 reused", idle)

	// A paused server: md returns when its context ends.
	pause(t, srv)
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = p.metaDelete(short, addr, key, 1)
	assert.ErrorIs(t, err, context.DeadlineExceeded, "md against a paused server")
	if took := time.Since(start); took > time.Second {
		t.Errorf("md returned %v after a 200ms deadline", took)
	}
	cancelled, cancel2 := context.WithCancel(ctx)
	time.AfterFunc(100*time.Millisecond, cancel2)
	if _, err = p.metaDelete(cancelled, addr, key, 1); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled md = %v, want Canceled", err)
	}
}

// chunks is a reader that returns one chunk per Read, as packets arrive.
type chunks []string

func (c *chunks) Read(p []byte) (int, error) {
	if len(*c) == 0 {
		return 0, io.EOF
	}
	n := copy(p, (*c)[0])
	if (*c)[0] = (*c)[0][n:]; (*c)[0] == "" {
		*c = (*c)[1:]
	}
	return n, nil
}

// readValues parses get and gets replies. Read as the network delivers it
// (a VALUE line, then its data in the next packet), a value's read refills
// the buffer that holds its VALUE line, so the key must be copied first
// (the batch fell back to one-by-one refreshes when it was not:
// TestRefreshBatchLocker). Needs no server.
func TestReadValues(t *testing.T) {
	big := strings.Repeat("v", 10)
	reply := chunks{"VALUE key-one 3 10 7\r\n", big + "\r\n", "VALUE k2 0 1\r\n", "x\r\nEND\r\n"}
	var got []value
	err := readValues(bufio.NewReader(&reply), func(v value) error {
		got = append(got, v)
		return nil
	})
	if err != nil || len(got) != 2 {
		t.Fatalf("readValues = %v, %d values", err, len(got))
	}
	if v := got[0]; v.key != "key-one" || v.flags != 3 || v.cas != 7 || string(v.data) != big {
		t.Errorf("first value %q flags %d cas %d (%d bytes)", v.key, v.flags, v.cas, len(v.data))
	}
	if v := got[1]; v.key != "k2" || v.cas != 0 || string(v.data) != "x" {
		t.Errorf("second value %+v", v)
	}
	for _, bad := range []string{
		"VALUE k 0\r\nEND\r\n", "VALUE k 0 1 2 3\r\nx\r\nEND\r\n", "VALUE k x 1\r\nx\r\nEND\r\n",
		"VALUE k 0 -1\r\nEND\r\n", "VALUE k 0 2000000\r\nEND\r\n", "VALUE k 0 1 c\r\nx\r\nEND\r\n",
		"VALUE k 0 1\r\nxy\r\nEND\r\n", "SERVER_ERROR out of memory\r\n",
	} {
		var desync *desyncError
		err := readValues(bufio.NewReader(strings.NewReader(bad)), func(value) error { return nil })
		if !errors.As(err, &desync) {
			t.Errorf("readValues(%q) = %v, want a desyncError", bad, err)
		}
	}
}

func TestItemKey(t *testing.T) {
	base := strings.Repeat("k", 250)
	keys := []string{
		"a", "A", "a ", " a", "a\x00b", "a\nb", "a b", "a\tb", "🔒", "ключ", "\x7f",
		base + "x", base + "y", strings.Repeat("z", 1024), strings.Repeat("z", 1023),
	}
	seen := map[string]string{}
	for _, k := range keys {
		for _, prefix := range []string{DefaultPrefix, "", strings.Repeat("p", maxPrefixLen)} {
			ik := ItemKey(prefix, k)
			if len(ik) > 250 || len(ik) != len(prefix)+hashLen {
				t.Errorf("ItemKey(%q, %q) is %d bytes", prefix, k, len(ik))
			}
			for i := 0; i < len(ik); i++ {
				if ik[i] <= ' ' || ik[i] == 0x7f {
					t.Errorf("ItemKey(%q) has byte 0x%02x", k, ik[i])
				}
			}
			if prefix != DefaultPrefix {
				continue
			}
			if prev, dup := seen[ik]; dup {
				t.Errorf("keys %q and %q map to the same item %s", prev, k, ik)
			}
			seen[ik] = k
		}
	}
	assert.Equal(t, ItemKey(DefaultPrefix, "x"), ItemKey(DefaultPrefix, "x"), "ItemKey is not deterministic")
	for _, bad := range []string{"a b", "a\tb", "a\x7f", "a\x00", strings.Repeat("p", maxPrefixLen+1)} {
		assert.Error(t, checkPrefix(bad), "prefix %q accepted", bad)
	}
	if pinKey(DefaultPrefix) == ItemKey(DefaultPrefix, "servers") || len(pinKey(DefaultPrefix)) == len(DefaultPrefix)+hashLen {
		t.Errorf("pin key can collide with a lock item")
	}
}
