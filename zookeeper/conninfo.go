package zookeeper

import (
	"encoding/binary"
	"net"
	"runtime"
	"sync"
	"time"
	"weak"

	"github.com/go-zookeeper/zk"
)

// connInfo is what the instrumented dialer reads from the wire about the
// sessions of one *zk.Conn: the session each connect asks to resume, and
// the one granted, with its negotiated timeout (id 0: expired).
type connInfo struct {
	mu       sync.Mutex
	sessions map[int64]*sessInfo
	order    []int64      // insertion order, for pruning
	live     *trackedConn // the TCP connection whose session is established
	liveSID  int64
	changed  chan struct{} // closed and replaced on every change
	dials    dialLog
}

// sessInfo is the wire-level knowledge about one session id.
type sessInfo struct {
	timeout time.Duration // negotiated
	// contact is the send time of the latest connect request the server
	// answered for this session: the server (and, in an ensemble, the
	// leader, which creates or revalidates the session) heard from the
	// client at that moment or later.
	contact time.Time
	expired bool // the server answered a request to resume it with id 0
}

const maxSessInfo = 8

func newConnInfo() *connInfo {
	return &connInfo{sessions: map[int64]*sessInfo{}, changed: make(chan struct{})}
}

func (ci *connInfo) notifyLocked() {
	close(ci.changed)
	ci.changed = make(chan struct{})
}

// watch returns a channel closed at the next change.
func (ci *connInfo) watch() <-chan struct{} {
	ci.mu.Lock()
	defer ci.mu.Unlock()
	return ci.changed
}

func (ci *connInfo) entryLocked(sid int64) *sessInfo {
	e := ci.sessions[sid]
	if e == nil {
		e = &sessInfo{}
		ci.sessions[sid] = e
		ci.order = append(ci.order, sid)
		for len(ci.order) > maxSessInfo {
			delete(ci.sessions, ci.order[0])
			ci.order = ci.order[1:]
		}
	}
	return e
}

func (ci *connInfo) established(tc *trackedConn, requested, sid int64, timeout time.Duration, sent time.Time) {
	ci.mu.Lock()
	defer ci.mu.Unlock()
	if requested != 0 && requested != sid {
		ci.entryLocked(requested).expired = true
	}
	e := ci.entryLocked(sid)
	e.timeout = timeout
	if sent.After(e.contact) {
		e.contact = sent
	}
	ci.live, ci.liveSID = tc, sid
	ci.notifyLocked()
}

func (ci *connInfo) expire(requested int64) {
	if requested == 0 {
		return
	}
	ci.mu.Lock()
	defer ci.mu.Unlock()
	ci.entryLocked(requested).expired = true
	ci.notifyLocked()
}

func (ci *connInfo) closed(tc *trackedConn) {
	ci.mu.Lock()
	defer ci.mu.Unlock()
	if ci.live == tc {
		ci.live, ci.liveSID = nil, 0
		ci.notifyLocked()
	}
}

// session returns what is known about sid.
func (ci *connInfo) session(sid int64) (s sessInfo, ok bool) {
	ci.mu.Lock()
	defer ci.mu.Unlock()
	if e := ci.sessions[sid]; e != nil {
		return *e, true
	}
	return sessInfo{}, false
}

// liveSession is the session of the open, established TCP connection, 0 if
// there is none (disconnected or reconnecting).
func (ci *connInfo) liveSession() int64 {
	ci.mu.Lock()
	defer ci.mu.Unlock()
	return ci.liveSID
}

// dialer wraps next so that every connection it makes reports to ci.
func (ci *connInfo) dialer(next zk.Dialer) zk.Dialer {
	if next == nil {
		next = net.DialTimeout
	}
	return func(network, address string, timeout time.Duration) (net.Conn, error) {
		c, err := next(network, address, timeout)
		if err != nil {
			if ci.dials.dialFailed(address, err) {
				ci.mu.Lock()
				ci.notifyLocked()
				ci.mu.Unlock()
			}
			return nil, err
		}
		ci.dials.dialed()
		return &trackedConn{Conn: c, ci: ci}, nil
	}
}

// trackedConn reads the connect handshake of one TCP connection of a
// *zk.Conn and passes everything through unchanged.
type trackedConn struct {
	net.Conn
	ci *connInfo

	mu        sync.Mutex // write side, read by the reader
	wn        int
	wbuf      [28]byte // len + connect request up to the session id
	requested int64
	sent      time.Time

	rn   int // reader goroutine only
	rbuf [20]byte
	once sync.Once
}

// Connect request: int32 len, int32 protocolVersion, int64 lastZxidSeen,
// int32 timeOut, int64 sessionId, buffer passwd.
// Connect response: int32 len, int32 protocolVersion, int32 timeOut,
// int64 sessionId, buffer passwd.

func (t *trackedConn) Write(p []byte) (int, error) {
	t.mu.Lock()
	if t.wn < len(t.wbuf) {
		if t.wn == 0 {
			t.sent = time.Now() // before the bytes leave: the server hears later
		}
		t.wn += copy(t.wbuf[t.wn:], p)
		if t.wn == len(t.wbuf) {
			t.requested = int64(binary.BigEndian.Uint64(t.wbuf[20:28]))
		}
	}
	t.mu.Unlock()
	return t.Conn.Write(p)
}

func (t *trackedConn) Read(p []byte) (int, error) {
	n, err := t.Conn.Read(p)
	if t.rn < len(t.rbuf) && n > 0 {
		t.rn += copy(t.rbuf[t.rn:], p[:n])
		if t.rn == len(t.rbuf) {
			timeout := time.Duration(int32(binary.BigEndian.Uint32(t.rbuf[8:12]))) * time.Millisecond
			sid := int64(binary.BigEndian.Uint64(t.rbuf[12:20]))
			t.mu.Lock()
			requested, sent := t.requested, t.sent
			t.mu.Unlock()
			if sid == 0 {
				t.ci.expire(requested)
			} else {
				t.ci.established(t, requested, sid, timeout, sent)
			}
		}
	}
	if err != nil {
		t.markClosed()
	}
	return n, err
}

func (t *trackedConn) Close() error {
	t.markClosed()
	return t.Conn.Close()
}

func (t *trackedConn) markClosed() { t.once.Do(func() { t.ci.closed(t) }) }

// Conns made by Connect, so that New can find their connInfo.
var (
	instrumentedMu sync.Mutex
	instrumented   = map[weak.Pointer[zk.Conn]]*connInfo{}
)

func register(conn *zk.Conn, ci *connInfo) {
	wp := weak.Make(conn)
	instrumentedMu.Lock()
	instrumented[wp] = ci
	instrumentedMu.Unlock()
	runtime.AddCleanup(conn, func(wp weak.Pointer[zk.Conn]) {
		instrumentedMu.Lock()
		delete(instrumented, wp)
		instrumentedMu.Unlock()
	}, wp)
}

func lookupInfo(conn *zk.Conn) *connInfo {
	if conn == nil {
		return nil
	}
	instrumentedMu.Lock()
	defer instrumentedMu.Unlock()
	return instrumented[weak.Make(conn)]
}
