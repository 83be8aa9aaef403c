package memcached

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
)

// The text and meta protocol commands the package sends on its own
// connections (rawPool.do), and the parsing of their replies.

// maxValue bounds a value read from a get or gets reply: a lock record is a
// few kilobytes at most (maxHolds holds), a pin record a server list. A
// larger value is not ours: the reply is treated as out of step.
const maxValue = 1 << 20

// errReply marks a well-formed but unexpected reply: the connection is still
// in sync.
type errReply struct{ line string }

func (e *errReply) Error() string { return fmt.Sprintf("unexpected memcached reply %q", e.line) }

// desyncError is a reply that cannot be placed: the connection is out of
// step, so do closes it (it is not an *errReply).
type desyncError struct{ reply string }

func (e *desyncError) Error() string {
	return fmt.Sprintf("unexpected memcached reply %q, out of step with the requests", e.reply)
}

// send writes p in one write (bufio writes a large p straight through):
// one request, or a pipeline of them.
func send(rw *bufio.ReadWriter, p []byte) error {
	if _, err := rw.Write(p); err != nil {
		return err
	}
	return rw.Flush()
}

// reply flushes the request written to rw (a write error stays in rw until
// then) and reads the one-line reply.
func reply(rw *bufio.ReadWriter) ([]byte, error) {
	if err := rw.Flush(); err != nil {
		return nil, err
	}
	return readLine(rw.Reader)
}

func readLine(r *bufio.Reader) ([]byte, error) {
	line, err := r.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return nil, fmt.Errorf("memcached reply line too long")
		}
		return nil, err
	}
	return bytes.TrimSuffix(line, []byte("\r\n")), nil
}

// value is one item of a get or gets reply.
type value struct {
	key   string
	flags uint32
	cas   uint64 // 0 in a get reply
	data  []byte
}

// readValues reads a get or gets reply up to END, handing each item to got.
// A line it cannot parse, or a value over maxValue, is a *desyncError.
func readValues(r *bufio.Reader, got func(value) error) error {
	for {
		line, err := readLine(r)
		if err != nil {
			return err
		}
		if string(line) == "END" {
			return nil
		}
		// VALUE <key> <flags> <bytes> [<cas unique>]
		f := bytes.Fields(line)
		if len(f) < 4 || len(f) > 5 || string(f[0]) != "VALUE" {
			return &desyncError{reply: string(line)}
		}
		flags, err1 := strconv.ParseUint(string(f[2]), 10, 32)
		size, err2 := strconv.Atoi(string(f[3]))
		var cas uint64
		var err3 error
		if len(f) == 5 {
			cas, err3 = strconv.ParseUint(string(f[4]), 10, 64)
		}
		if err1 != nil || err2 != nil || err3 != nil || size < 0 || size > maxValue {
			return &desyncError{reply: string(line)}
		}
		key := string(f[1]) // line is r's buffer, which the next read reuses
		data := make([]byte, size+2)
		if _, err := io.ReadFull(r, data); err != nil {
			return err
		}
		if !bytes.HasSuffix(data, []byte("\r\n")) {
			return &desyncError{reply: "a value without its CRLF"}
		}
		if err := got(value{key: key, flags: uint32(flags), cas: cas, data: data[:size]}); err != nil {
			return err
		}
	}
}

// mdResult is the answer to a meta compare-and-delete.
type mdResult int

const (
	mdDeleted     mdResult = iota // HD: deleted
	mdExists                      // EX: the CAS value did not match
	mdNotFound                    // NF: no such item
	mdUnsupported                 // the server does not speak the meta protocol
)

func (r mdResult) String() string {
	switch r {
	case mdDeleted:
		return "HD"
	case mdExists:
		return "EX"
	case mdNotFound:
		return "NF"
	}
	return "unsupported"
}

// parseMDReply interprets the reply line of "md <key> C<cas>". memcached
// 1.6 answers HD, EX or NF (early 1.6 meta versions said OK for HD); a server
// without the meta protocol answers ERROR, and one with a meta protocol that
// lacks the C flag CLIENT_ERROR. Anything else (SERVER_ERROR ...) is an
// error.
func parseMDReply(line []byte) (mdResult, error) {
	switch {
	case bytes.Equal(line, []byte("HD")), bytes.Equal(line, []byte("OK")):
		return mdDeleted, nil
	case bytes.Equal(line, []byte("EX")):
		return mdExists, nil
	case bytes.Equal(line, []byte("NF")):
		return mdNotFound, nil
	case bytes.Equal(line, []byte("ERROR")), bytes.HasPrefix(line, []byte("CLIENT_ERROR")):
		return mdUnsupported, nil
	}
	return 0, &errReply{line: string(line)}
}

// metaDelete sends "md <key> C<cas>" to addr: memcached deletes the item only
// if its CAS value is still cas.
func (p *rawPool) metaDelete(ctx context.Context, addr net.Addr, key string, cas uint64) (mdResult, error) {
	var res mdResult
	err := p.do(ctx, addr, func(rw *bufio.ReadWriter) error {
		_, _ = fmt.Fprintf(rw, "md %s C%d\r\n", key, cas)
		if err := rw.Flush(); err != nil {
			return err
		}
		var err error
		res, err = readMD(rw.Reader)
		return err
	})
	return res, err
}

// readMD reads the reply of a meta compare-and-delete (parseMDReply).
func readMD(r *bufio.Reader) (mdResult, error) {
	line, err := readLine(r)
	if err != nil {
		return 0, err
	}
	return parseMDReply(line)
}

// storeResult is the answer to a text-protocol storage command.
type storeResult int

const (
	stored storeResult = iota
	notStored
)

// store sends "<verb> <key> 0 <exptime> <len>" with data to addr.
func (p *rawPool) store(ctx context.Context, addr net.Addr, verb, key string, exptime int32, data []byte) (storeResult, error) {
	var res storeResult
	err := p.do(ctx, addr, func(rw *bufio.ReadWriter) error {
		_, _ = fmt.Fprintf(rw, "%s %s 0 %d %d\r\n", verb, key, exptime, len(data))
		_, _ = rw.Write(data)
		_, _ = rw.WriteString("\r\n")
		line, err := reply(rw)
		if err != nil {
			return err
		}
		switch string(line) {
		case "STORED":
			res = stored
		case "NOT_STORED", "EXISTS", "NOT_FOUND":
			res = notStored
		default:
			return &errReply{line: string(line)}
		}
		return nil
	})
	return res, err
}

// fetch sends "get <key>" to addr and returns the value, or ok false on a
// miss.
func (p *rawPool) fetch(ctx context.Context, addr net.Addr, key string) (data []byte, ok bool, err error) {
	err = p.do(ctx, addr, func(rw *bufio.ReadWriter) error {
		_, _ = fmt.Fprintf(rw, "get %s\r\n", key)
		if err := rw.Flush(); err != nil {
			return err
		}
		return readValues(rw.Reader, func(v value) error {
			data, ok = v.data, true
			return nil
		})
	})
	return data, ok, err
}

// metaItem is the answer to a meta get of an item's value, CAS value and
// remaining TTL.
type metaItem struct {
	found bool
	data  []byte
	cas   uint64
	ttl   int64 // seconds left by the server's clock; -1: no expiry
}

// metaGet sends "mg <key> t v c" to addr: the value, CAS value and
// remaining TTL of one item, read together (memcached 1.6 answers
// "VA <size> t<ttl> c<cas>" and the value, or EN on a miss). unsupported:
// the server answered ERROR or CLIENT_ERROR, it lacks the meta protocol.
func (p *rawPool) metaGet(ctx context.Context, addr net.Addr, key string) (mi metaItem, unsupported bool, err error) {
	err = p.do(ctx, addr, func(rw *bufio.ReadWriter) error {
		_, _ = fmt.Fprintf(rw, "mg %s t v c\r\n", key)
		line, err := reply(rw)
		if err != nil {
			return err
		}
		switch {
		case bytes.Equal(line, []byte("EN")):
			return nil
		case bytes.Equal(line, []byte("ERROR")), bytes.HasPrefix(line, []byte("CLIENT_ERROR")):
			unsupported = true
			return nil
		case !bytes.HasPrefix(line, []byte("VA ")):
			return &desyncError{reply: string(line)}
		}
		mi, err = parseMGHeader(line)
		if err != nil {
			return err
		}
		data := make([]byte, len(mi.data)+2)
		if _, err := io.ReadFull(rw.Reader, data); err != nil {
			return err
		}
		if !bytes.HasSuffix(data, []byte("\r\n")) {
			return &desyncError{reply: "a value without its CRLF"}
		}
		mi.data = data[:len(mi.data)]
		return nil
	})
	return mi, unsupported, err
}

// parseMGHeader reads "VA <size> t<ttl> c<cas>" (flags in any order); data
// is allocated with the value's size, to be filled by the caller. A header
// without both flags, or with a size over maxValue, is a *desyncError.
func parseMGHeader(line []byte) (metaItem, error) {
	f := bytes.Fields(line)
	bad := &desyncError{reply: string(line)}
	if len(f) < 2 {
		return metaItem{}, bad
	}
	size, err := strconv.Atoi(string(f[1]))
	if err != nil || size < 0 || size > maxValue {
		return metaItem{}, bad
	}
	mi := metaItem{found: true, data: make([]byte, size)}
	var sawT, sawC bool
	for _, tok := range f[2:] {
		if len(tok) < 2 {
			return metaItem{}, bad
		}
		switch tok[0] {
		case 't':
			mi.ttl, err = strconv.ParseInt(string(tok[1:]), 10, 64)
			sawT = err == nil
		case 'c':
			mi.cas, err = strconv.ParseUint(string(tok[1:]), 10, 64)
			sawC = err == nil
		}
	}
	if !sawT || !sawC {
		return metaItem{}, bad
	}
	return mi, nil
}
