package memcached

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"time"
)

// The pipelined part of RefreshBatch, on the Locker's own connection to
// each server: one gets for all of a server's keys, then every cas in one
// write.

// server refreshes the keys that live on addr: one exchange, repeated once
// on fresh connections after an I/O error, then Refresh for whatever it
// could not settle.
func (b *refreshBatch) server(ctx context.Context, addr net.Addr, keys []*batchKey) {
	err := b.exchange(ctx, addr, keys)
	var desync *desyncError
	if err != nil && !errors.As(err, &desync) && b.d.freshRetry(ctx, err) {
		err = b.exchange(ctx, addr, openKeys(keys))
	}
	if err != nil {
		desynced := errors.As(err, &desync) && ctx.Err() == nil
		err = shape(err)
		for _, k := range openKeys(keys) {
			if desynced {
				k.state = keyFallback
				continue
			}
			for _, e := range k.entries {
				b.errs[e] = err
			}
			k.state = keyDone
		}
	}
	b.fallback(ctx, keys)
}

// exchange is one attempt on one connection to addr: a gets naming every
// key, then every cas in one write, then their replies in order. It
// settles the keys it can; on an error the keys still open are those whose
// outcome it does not know.
func (b *refreshBatch) exchange(ctx context.Context, addr net.Addr, keys []*batchKey) error {
	if len(keys) == 0 {
		return nil
	}
	return b.d.raw.do(ctx, addr, func(rw *bufio.ReadWriter) error {
		if err := b.gets(rw, keys); err != nil {
			return err
		}
		if b.d.batchHook != nil {
			b.d.batchHook(addr)
		}
		buf, sent := b.casPipeline(keys, time.Now().UnixMilli())
		if len(sent) == 0 {
			return nil
		}
		if err := send(rw, buf); err != nil {
			return err
		}
		return b.casReplies(rw.Reader, sent)
	})
}

// gets sends one "gets" naming keys and reads the items into them.
func (b *refreshBatch) gets(rw *bufio.ReadWriter, keys []*batchKey) error {
	byKey := make(map[string]*batchKey, len(keys))
	n := len("gets\r\n")
	for _, k := range keys {
		byKey[k.key] = k
		k.found, k.value = false, nil
		n += 1 + len(k.key)
	}
	buf := make([]byte, 0, n)
	buf = append(buf, "gets"...)
	for _, k := range keys {
		buf = append(buf, ' ')
		buf = append(buf, k.key...)
	}
	buf = append(buf, "\r\n"...)
	if err := send(rw, buf); err != nil {
		return err
	}
	return readValues(rw.Reader, func(v value) error {
		k := byKey[v.key]
		if k == nil {
			return &desyncError{reply: "VALUE " + v.key}
		}
		k.found, k.flags, k.cas, k.value = true, v.flags, v.cas, v.data
		return nil
	})
}

// casPipeline prepares the keys at nowMs and returns the cas commands of
// those still held, in one buffer, and those keys in order.
func (b *refreshBatch) casPipeline(keys []*batchKey, nowMs int64) (buf []byte, sent []*batchKey) {
	for _, k := range keys {
		value, exp, ok := b.prepare(k, nowMs)
		if !ok {
			continue
		}
		buf = fmt.Appendf(buf, "cas %s %d %d %d %d\r\n", k.key, k.flags, exp, len(value), k.cas)
		buf = append(buf, value...)
		buf = append(buf, "\r\n"...)
		sent = append(sent, k)
	}
	return buf, sent
}

// casReplies reads the reply of each cas of sent, in order, and settles
// its key.
func (b *refreshBatch) casReplies(r *bufio.Reader, sent []*batchKey) error {
	for _, k := range sent {
		line, err := readLine(r)
		if err != nil {
			return err
		}
		switch string(line) {
		case "STORED":
			b.settle(k, nil)
		case "EXISTS": // changed since the gets: Refresh reads it again
			k.state = keyFallback
		case "NOT_FOUND", "NOT_STORED": // as extendHold
			b.settle(k, errGone)
		default:
			if !bytes.HasPrefix(line, []byte("SERVER_ERROR")) {
				return &desyncError{reply: string(line)}
			}
			// memcached swallows the data after a SERVER_ERROR (out
			// of memory with -M): the pipeline is still in sync.
			b.settle(k, shape(&errReply{line: string(line)}))
		}
	}
	return nil
}
