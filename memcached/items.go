package memcached

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/bradfitz/gomemcache/memcache"
)

// The item commands of acquire, release and refresh (add, gets, cas and
// the meta delete): through the pipe of the item's server where the Locker
// knows it (natural batching, pipe.go), else through gomemcache. Either
// way they answer as gomemcache does: memcache.ErrNotStored,
// ErrCASConflict and ErrCacheMiss for the refusals, the network's error
// for I/O, and an unexpected reply's text (SERVER_ERROR …).

// pipeOf returns the pipe of key's server, or ok false when requests for
// key go through gomemcache: no selector, batching off, or a selector that
// cannot pick (gomemcache then meets the same error).
func (d *driver) pipeOf(key string) (p *pipe, ok bool) {
	if d.pipes == nil {
		return nil, false
	}
	addr, err := d.sel.PickServer(key)
	if err != nil {
		return nil, false
	}
	return d.pipes.to(addr), true
}

// add stores it only if its key is free.
func (d *driver) add(ctx context.Context, it *memcache.Item) error {
	p, ok := d.pipeOf(it.Key)
	if !ok {
		return d.c.Add(it)
	}
	return p.do(ctx, storeCmd("add", it), readStore)
}

// cas stores it only if its item still has CAS value it.CasID.
func (d *driver) cas(ctx context.Context, it *memcache.Item) error {
	p, ok := d.pipeOf(it.Key)
	if !ok {
		return d.c.CompareAndSwap(it)
	}
	return p.do(ctx, storeCmd("cas", it), readStore)
}

// get reads the item key with its CAS value (gets).
func (d *driver) get(ctx context.Context, key string) (*memcache.Item, error) {
	p, ok := d.pipeOf(key)
	if !ok {
		return d.c.Get(key)
	}
	var it *memcache.Item
	err := p.do(ctx, []byte("gets "+key+"\r\n"), func(r *bufio.Reader) error {
		return readValues(r, func(v value) error {
			if v.key != key || it != nil {
				return &desyncError{reply: "VALUE " + v.key}
			}
			it = &memcache.Item{Key: v.key, Flags: v.flags, CasID: v.cas, Value: v.data}
			return nil
		})
	})
	if err == nil && it == nil {
		err = memcache.ErrCacheMiss
	}
	return it, err
}

// metaDelete is the meta compare-and-delete of key on addr (md <key>
// C<cas>).
func (d *driver) metaDelete(ctx context.Context, addr net.Addr, key string, cas uint64) (mdResult, error) {
	if d.pipes == nil {
		return d.raw.metaDelete(ctx, addr, key, cas)
	}
	var res mdResult
	err := d.pipes.to(addr).do(ctx, fmt.Appendf(nil, "md %s C%d\r\n", key, cas), func(r *bufio.Reader) error {
		var err error
		res, err = readMD(r)
		return err
	})
	return res, err
}

// storeCmd is the storage command verb (add, or cas with it.CasID) for it.
func storeCmd(verb string, it *memcache.Item) []byte {
	b := make([]byte, 0, len(verb)+len(it.Key)+len(it.Value)+48)
	b = fmt.Appendf(b, "%s %s %d %d %d", verb, it.Key, it.Flags, it.Expiration, len(it.Value))
	if verb == "cas" {
		b = fmt.Appendf(b, " %d", it.CasID)
	}
	b = append(b, "\r\n"...)
	b = append(b, it.Value...)
	return append(b, "\r\n"...)
}

// readStore reads the reply of a storage command as gomemcache reports it.
// memcached swallows the data after a SERVER_ERROR (out of memory with
// -M), so that reply leaves the connection in step (*errReply).
func readStore(r *bufio.Reader) error {
	line, err := readLine(r)
	if err != nil {
		return err
	}
	switch string(line) {
	case "STORED":
		return nil
	case "NOT_STORED":
		return memcache.ErrNotStored
	case "EXISTS":
		return memcache.ErrCASConflict
	case "NOT_FOUND":
		return memcache.ErrCacheMiss
	}
	if bytes.HasPrefix(line, []byte("SERVER_ERROR")) || bytes.HasPrefix(line, []byte("CLIENT_ERROR")) {
		return &errReply{line: string(line)}
	}
	return &desyncError{reply: string(line)}
}

// inStep reports whether err, from a reply reader, leaves the connection in
// step with the requests: a well-formed refusal or unexpected reply.
func inStep(err error) bool {
	var reply *errReply
	return err == nil || errors.As(err, &reply) ||
		errors.Is(err, memcache.ErrNotStored) || errors.Is(err, memcache.ErrCASConflict) ||
		errors.Is(err, memcache.ErrCacheMiss)
}
