package testserver

import (
	"bytes"
	"context"
	"crypto/sha1"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
)

// A minimal MySQL client protocol implementation (handshake v10,
// mysql_native_password, COM_QUERY with text result sets), enough to check
// that a MariaDB server accepts the test user over TCP and to run a few
// statements in this package's tests. It is not a general client.

const (
	clientLongPassword     = 0x00000001
	clientConnectWithDB    = 0x00000008
	clientProtocol41       = 0x00000200
	clientTransactions     = 0x00002000
	clientSecureConnection = 0x00008000
	clientMultiResults     = 0x00020000
	clientPluginAuth       = 0x00080000
)

// mysqlError is an ERR packet.
type mysqlError struct {
	Code    uint16
	Message string
}

func (e *mysqlError) Error() string { return fmt.Sprintf("mysql error %d: %s", e.Code, e.Message) }

type mysqlConn struct {
	c   net.Conn
	seq byte
}

func (m *mysqlConn) readPacket() ([]byte, error) {
	var h [4]byte
	if _, err := io.ReadFull(m.c, h[:]); err != nil {
		return nil, err
	}
	n := int(h[0]) | int(h[1])<<8 | int(h[2])<<16
	m.seq = h[3] + 1
	p := make([]byte, n)
	if _, err := io.ReadFull(m.c, p); err != nil {
		return nil, err
	}
	if n == 0xffffff {
		return nil, errors.New("mysql: multi-packet payloads not supported")
	}
	return p, nil
}

func (m *mysqlConn) writePacket(p []byte) error {
	h := []byte{byte(len(p)), byte(len(p) >> 8), byte(len(p) >> 16), m.seq}
	m.seq++
	_, err := m.c.Write(append(h, p...))
	return err
}

func parseErrPacket(p []byte) error {
	e := &mysqlError{}
	if len(p) >= 3 {
		e.Code = binary.LittleEndian.Uint16(p[1:3])
	}
	msg := p[min(3, len(p)):]
	if len(msg) > 0 && msg[0] == '#' && len(msg) >= 6 {
		msg = msg[6:]
	}
	e.Message = string(msg)
	return e
}

// nativePassword computes the mysql_native_password scramble.
func nativePassword(seed []byte, password string) []byte {
	if password == "" {
		return nil
	}
	h1 := sha1.Sum([]byte(password))
	h2 := sha1.Sum(h1[:])
	h := sha1.New()
	h.Write(seed)
	h.Write(h2[:])
	h3 := h.Sum(nil)
	for i := range h3 {
		h3[i] ^= h1[i]
	}
	return h3
}

// mysqlGreeting reads the server's initial handshake packet from a fresh
// connection: the server version and the auth seed.
func (m *mysqlConn) greeting() (version string, seed []byte, plugin string, err error) {
	p, err := m.readPacket()
	if err != nil {
		return "", nil, "", err
	}
	if len(p) > 0 && p[0] == 0xff {
		return "", nil, "", parseErrPacket(p)
	}
	if len(p) < 1 || p[0] != 10 {
		return "", nil, "", fmt.Errorf("mysql: unexpected handshake protocol %v", p[:min(1, len(p))])
	}
	rest := p[1:]
	i := bytes.IndexByte(rest, 0)
	if i < 0 {
		return "", nil, "", errors.New("mysql: bad handshake")
	}
	version = string(rest[:i])
	rest = rest[i+1:]
	// connection id(4) auth1(8) filler(1) caps lo(2) charset(1) status(2)
	// caps hi(2) auth len(1) reserved(10) auth2 plugin
	if len(rest) < 4+8+1+2+1+2+2+1+10 {
		return "", nil, "", errors.New("mysql: short handshake")
	}
	seed = append(seed, rest[4:12]...)
	authLen := int(rest[4+8+1+2+1+2+2])
	rest = rest[4+8+1+2+1+2+2+1+10:]
	n2 := max(13, authLen-8)
	if len(rest) < n2 {
		return "", nil, "", errors.New("mysql: short handshake auth data")
	}
	seed = append(seed, bytes.TrimRight(rest[:n2], "\x00")...)
	rest = rest[n2:]
	if j := bytes.IndexByte(rest, 0); j >= 0 {
		plugin = string(rest[:j])
	} else {
		plugin = string(rest)
	}
	return version, seed, plugin, nil
}

// mysqlGreets checks that a MySQL-protocol server sends its handshake (this
// works whatever the auth plugin, e.g. MySQL 8's caching_sha2_password).
func mysqlGreets(ctx context.Context, addr string) error {
	c, err := dial(ctx, addr)
	if err != nil {
		return err
	}
	defer c.Close()
	_, _, _, err = (&mysqlConn{c: c}).greeting()
	return err
}

// mysqlConnect connects and logs in with mysql_native_password.
func mysqlConnect(ctx context.Context, addr, user, password, db string) (*mysqlConn, error) {
	c, err := dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	m := &mysqlConn{c: c}
	if err := m.login(user, password, db); err != nil {
		c.Close()
		return nil, err
	}
	return m, nil
}

func (m *mysqlConn) login(user, password, db string) error {
	_, seed, _, err := m.greeting()
	if err != nil {
		return err
	}
	caps := uint32(clientLongPassword | clientProtocol41 | clientTransactions |
		clientSecureConnection | clientMultiResults | clientPluginAuth)
	if db != "" {
		caps |= clientConnectWithDB
	}
	var b bytes.Buffer
	_ = binary.Write(&b, binary.LittleEndian, caps)
	_ = binary.Write(&b, binary.LittleEndian, uint32(1<<24))
	b.WriteByte(33) // utf8_general_ci
	b.Write(make([]byte, 23))
	b.WriteString(user)
	b.WriteByte(0)
	auth := nativePassword(seed, password)
	b.WriteByte(byte(len(auth)))
	b.Write(auth)
	if db != "" {
		b.WriteString(db)
		b.WriteByte(0)
	}
	b.WriteString("mysql_native_password")
	b.WriteByte(0)
	if err := m.writePacket(b.Bytes()); err != nil {
		return err
	}
	for range 3 {
		p, err := m.readPacket()
		if err != nil {
			return err
		}
		if len(p) == 0 {
			return errors.New("mysql: empty auth reply")
		}
		switch p[0] {
		case 0x00:
			return nil
		case 0xff:
			return parseErrPacket(p)
		case 0xfe: // auth switch request: plugin name, then seed
			rest := p[1:]
			i := bytes.IndexByte(rest, 0)
			if i < 0 {
				return errors.New("mysql: bad auth switch request")
			}
			plugin := string(rest[:i])
			if plugin != "mysql_native_password" {
				return fmt.Errorf("mysql: unsupported auth plugin %q", plugin)
			}
			newSeed := bytes.TrimRight(rest[i+1:], "\x00")
			if err := m.writePacket(nativePassword(newSeed, password)); err != nil {
				return err
			}
		default:
			return fmt.Errorf("mysql: unexpected auth reply 0x%02x", p[0])
		}
	}
	return errors.New("mysql: too many auth round trips")
}

func (m *mysqlConn) Close() error {
	m.seq = 0
	_ = m.writePacket([]byte{0x01}) // COM_QUIT
	return m.c.Close()
}

// query runs one statement and returns the rows of a text result set (nil
// for statements without one). NULL is returned as "".
func (m *mysqlConn) query(sql string) ([][]string, error) {
	m.seq = 0
	if err := m.writePacket(append([]byte{0x03}, sql...)); err != nil {
		return nil, err
	}
	p, err := m.readPacket()
	if err != nil {
		return nil, err
	}
	if len(p) == 0 {
		return nil, errors.New("mysql: empty reply")
	}
	switch p[0] {
	case 0x00:
		return nil, nil
	case 0xff:
		return nil, parseErrPacket(p)
	}
	ncols, _ := lenenc(p)
	for range ncols { // column definitions
		if _, err := m.readPacket(); err != nil {
			return nil, err
		}
	}
	if p, err = m.readPacket(); err != nil || !isEOF(p) {
		return nil, fmt.Errorf("mysql: expected EOF after columns: %v", err)
	}
	var rows [][]string
	for {
		p, err := m.readPacket()
		if err != nil {
			return nil, err
		}
		if isEOF(p) {
			return rows, nil
		}
		if p[0] == 0xff {
			return nil, parseErrPacket(p)
		}
		row := make([]string, 0, ncols)
		for range ncols {
			if len(p) == 0 {
				return nil, errors.New("mysql: short row")
			}
			if p[0] == 0xfb {
				row = append(row, "")
				p = p[1:]
				continue
			}
			n, w := lenenc(p)
			p = p[w:]
			if uint64(len(p)) < n {
				return nil, errors.New("mysql: short row")
			}
			row = append(row, string(p[:n]))
			p = p[n:]
		}
		rows = append(rows, row)
	}
}

func isEOF(p []byte) bool { return len(p) > 0 && len(p) < 9 && p[0] == 0xfe }

// lenenc decodes a length-encoded integer and returns it and its width.
func lenenc(p []byte) (uint64, int) {
	width := map[byte]int{0xfc: 3, 0xfd: 4, 0xfe: 9}
	if len(p) == 0 || len(p) < width[p[0]] {
		return 0, len(p)
	}
	switch p[0] {
	case 0xfc:
		return uint64(binary.LittleEndian.Uint16(p[1:3])), 3
	case 0xfd:
		return uint64(p[1]) | uint64(p[2])<<8 | uint64(p[3])<<16, 4
	case 0xfe:
		return binary.LittleEndian.Uint64(p[1:9]), 9
	}
	return uint64(p[0]), 1
}
