package memcached

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/async"
)

// servers is what a Locker knows about the server of each key: nothing
// without WithSelector; with it, the client's selector, its own
// connections to each server (for the meta delete and the pin record), and
// the server-list guard.
type servers struct {
	sel memcache.ServerSelector // nil: unknown
	raw *rawPool                // nil without sel
	// pipes batch the lock paths' requests (items.go); nil without sel,
	// or when tests turn batching off.
	pipes *pipes
	list  string // the server list, as the pin records it
	pin   PinMode

	pinMu  sync.RWMutex
	pinned map[string]bool // server address → its record checked
	noMeta sync.Map        // server address → true when it lacks the meta protocol
}

// knowServers sets up the Locker's own connections to the servers of sel,
// dialled as the client dials, with its timeout and idle limit.
func (s *servers) knowServers(c *memcache.Client, sel memcache.ServerSelector, timeout time.Duration, g *async.Group) {
	s.pinned = map[string]bool{}
	if sel == nil {
		return
	}
	idle := c.MaxIdleConns
	if idle <= 0 {
		idle = memcache.DefaultMaxIdleConns
	}
	s.sel = sel
	s.raw = newRawPool(c.DialContext, timeout, idle)
	s.pipes = &pipes{pool: s.raw, g: g}
	var addrs []string
	_ = sel.Each(func(a net.Addr) error {
		addrs = append(addrs, a.String())
		return nil
	})
	s.list = strings.Join(addrs, ",")
}

// metaServer returns the server of key if the final release should use the
// meta protocol there.
func (d *driver) metaServer(key string) (net.Addr, bool) {
	if d.release == ReleaseCAS {
		return nil, false
	}
	return d.metaReadable(key)
}

// ensurePinned runs the server-list guard for the server of key, once per
// server and Locker.
func (d *driver) ensurePinned(ctx context.Context, key string) error {
	if d.pin == PinOff || d.raw == nil {
		return nil
	}
	addr, err := d.sel.PickServer(key)
	if err != nil {
		return err
	}
	s := addr.String()
	d.pinMu.RLock()
	ok := d.pinned[s]
	d.pinMu.RUnlock()
	if ok {
		return nil
	}
	if err := d.pinServer(ctx, addr); err != nil {
		return err
	}
	d.pinMu.Lock()
	d.pinned[s] = true
	d.pinMu.Unlock()
	return nil
}

const pinMagic = "distlock-servers "

// pinServer records the Locker's server list on addr (add, no expiry), or
// checks that the list recorded there is the same.
func (d *driver) pinServer(ctx context.Context, addr net.Addr) error {
	mk := pinKey(d.prefix)
	want := []byte(pinMagic + d.list)
	if d.pin == PinReset {
		_, err := d.raw.store(ctx, addr, "set", mk, 0, want)
		return err
	}
	for range 3 {
		res, err := d.raw.store(ctx, addr, "add", mk, 0, want)
		if err != nil || res == stored {
			return err
		}
		got, ok, err := d.raw.fetch(ctx, addr, mk)
		if err != nil {
			return err
		}
		if !ok {
			continue // evicted or flushed in between: record ours
		}
		if bytes.Equal(got, want) {
			return nil
		}
		return fmt.Errorf("%w: memcached server %s serves locks for the server list %q, this Locker uses %q: "+
			"a key may map to another server under a different list, so two owners could hold one lock; "+
			"use the same servers in the same order everywhere, or pin=reset once every holder under the old list is gone",
			backend.ErrInvalidOption, addr, strings.TrimPrefix(string(got), pinMagic), d.list)
	}
	return fmt.Errorf("%w: the server-list record on %s keeps disappearing", backend.ErrUnavailable, addr)
}
