package netfault

import (
	"net"
	"sync"
	"time"
)

// Mode is what the proxy does to traffic.
type Mode int

// The modes of a proxy.
const (
	Pass      Mode = iota // forward, after the configured latency
	Blackhole             // accept and hold connections, forward nothing
	Cut                   // reset open connections, refuse new ones
)

// Direction is a way data flows through a proxy.
type Direction int

// The directions.
const (
	Both    Direction = iota // client to server and server to client
	Request                  // client to server only
	Reply                    // server to client only
)

// Scope is the set of connections that faults apply to.
type Scope int

// The scopes.
const (
	AllConns  Scope = iota // every connection, open or new (the default)
	OpenConns              // the connections open when SetScope was called
	NewConns               // the connections accepted after SetScope was called
)

// fault is what one direction does to traffic.
type fault struct {
	mode    Mode
	latency time.Duration
}

// Proxy forwards connections from its loopback address to a target.
type Proxy struct {
	target string
	ln     net.Listener

	mu       sync.Mutex
	dirs     [2]fault // indexed by Request-1 and Reply-1
	scope    Scope
	boundary uint64              // the first connection number after SetScope
	seq      uint64              // the next connection's number
	conns    map[net.Conn]uint64 // open connections (both ends) by number
	changed  chan struct{}       // closed and replaced when a fault changes
	closed   bool
	extra    directions // per-direction delays and per-connection silences (direction.go)
	wg       sync.WaitGroup
}

// Listen starts a proxy to target on a free loopback port.
func Listen(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: target, ln: ln, conns: map[net.Conn]uint64{}, changed: make(chan struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address clients dial instead of the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target is the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// SetLatency delays every chunk of data in both directions by d (0: none),
// for new and open connections in scope.
func (p *Proxy) SetLatency(d time.Duration) { p.SetLatencyDir(Both, d) }

// SetLatencyDir forwards the traffic of direction dir again, each chunk
// delayed by d (0: none); the other direction keeps its fault.
func (p *Proxy) SetLatencyDir(dir Direction, d time.Duration) {
	p.set(dir, func(f *fault) { f.mode, f.latency = Pass, d })
}

// Blackhole stops all traffic silently; open connections stay open.
func (p *Proxy) Blackhole() { p.BlackholeDir(Both) }

// BlackholeDir stops the traffic of direction dir silently (it is held,
// and delivered after a Heal); the other direction keeps its fault.
func (p *Proxy) BlackholeDir(dir Direction) {
	p.set(dir, func(f *fault) { f.mode = Blackhole })
}

// SetScope makes faults, from now on until Heal, apply only to the
// connections in s: those open now (OpenConns), those accepted from now on
// (NewConns), or all (AllConns). Connections out of scope pass without
// latency.
func (p *Proxy) SetScope(s Scope) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.scope, p.boundary = s, p.seq
	p.notifyLocked()
}

// Cut resets every open connection in scope and refuses new ones (if new
// connections are in scope) until Heal.
func (p *Proxy) Cut() {
	p.set(Both, func(f *fault) { f.mode = Cut })
	p.mu.Lock()
	conns := make([]net.Conn, 0, len(p.conns))
	for c, n := range p.conns {
		if p.inScopeLocked(n) {
			conns = append(conns, c)
		}
	}
	p.mu.Unlock()
	for _, c := range conns {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // RST, not FIN
		}
		_ = c.Close()
	}
}

// Heal restores normal forwarding without latency, on every connection.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dirs = [2]fault{}
	p.scope = AllConns
	p.clearDirectionsLocked()
	p.notifyLocked()
}

func (p *Proxy) set(dir Direction, change func(*fault)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range p.dirs {
		if dir == Both || int(dir) == i+1 {
			change(&p.dirs[i])
		}
	}
	p.notifyLocked()
}

func (p *Proxy) notifyLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

func (p *Proxy) inScopeLocked(conn uint64) bool {
	switch p.scope {
	case OpenConns:
		return conn < p.boundary
	case NewConns:
		return conn >= p.boundary
	}
	return true
}

// state returns the fault of direction dir (Request or Reply) for
// connection number conn, and a channel closed at the next change.
func (p *Proxy) state(dir Direction, conn uint64) (Mode, time.Duration, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.inScopeLocked(conn) {
		return Pass, 0, p.changed
	}
	f := p.dirs[dir-1]
	return f.mode, f.latency, p.changed
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	err := p.ln.Close()
	for c := range p.conns {
		_ = c.Close()
	}
	p.notifyLocked()
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

func (p *Proxy) track(c net.Conn, n uint64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = n
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		n := p.seq
		p.seq++
		p.mu.Unlock()
		if m, _, _ := p.state(Request, n); m == Cut {
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
			_ = c.Close()
			continue
		}
		p.wg.Add(1)
		go p.serve(c, n)
	}
}

func (p *Proxy) serve(client net.Conn, n uint64) {
	defer p.wg.Done()
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		_ = client.Close()
		return
	}
	if !p.track(client, n) || !p.track(server, n) {
		_ = client.Close()
		_ = server.Close()
		return
	}
	pc := p.register(n)
	defer p.unregister(pc)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(server, client, Request, pc) }()
	go func() { defer wg.Done(); p.pipe(client, server, Reply, pc) }()
	wg.Wait()
	p.untrack(client)
	p.untrack(server)
}

// pipe copies src to dst chunk by chunk, applying the fault of direction
// dir for connection pc to each chunk; it closes both ends when either
// fails.
func (p *Proxy) pipe(dst, src net.Conn, dir Direction, pc *proxied) {
	defer func() { _ = dst.Close(); _ = src.Close() }()
	buf := make([]byte, 32<<10)
	for {
		k, err := src.Read(buf)
		if k > 0 {
			if !p.deliver(dst, buf[:k], dir, pc) {
				return
			}
		}
		if err != nil {
			return // EOF or error: close both ends
		}
	}
}

// deliver writes chunk to dst once the fault allows: after the latency (and
// the direction's delay at the chunk's arrival) in Pass mode, never in Cut
// mode, and only after a change in Blackhole mode or while pc is silenced
// in dir.
func (p *Proxy) deliver(dst net.Conn, chunk []byte, dir Direction, pc *proxied) bool {
	arrived := time.Now()
	extra := p.arrival(dir)
	for {
		mode, latency, changed := p.state(dir, pc.n)
		latency += extra
		if mode == Pass && p.silenced(pc, dir) {
			mode = Blackhole
		}
		switch mode {
		case Cut:
			return false
		case Blackhole:
			<-changed
			p.mu.Lock()
			closed := p.closed
			p.mu.Unlock()
			if closed {
				return false
			}
			continue
		}
		if wait := time.Until(arrived.Add(latency)); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-changed:
				t.Stop()
				continue
			}
		}
		_, err := dst.Write(chunk)
		return err == nil
	}
}

// Group is one proxy per server of a backend, faulted together: the links
// of one client to every node. It satisfies conformance.Link.
type Group struct{ Proxies []*Proxy }

// ListenGroup starts a proxy for each target.
func ListenGroup(targets ...string) (*Group, error) {
	g := &Group{}
	for _, t := range targets {
		p, err := Listen(t)
		if err != nil {
			_ = g.Close()
			return nil, err
		}
		g.Proxies = append(g.Proxies, p)
	}
	return g, nil
}

// Addrs returns the proxies' addresses, in the order of the targets.
func (g *Group) Addrs() []string {
	out := make([]string, len(g.Proxies))
	for i, p := range g.Proxies {
		out[i] = p.Addr()
	}
	return out
}

// SetLatency delays traffic on every link.
func (g *Group) SetLatency(d time.Duration) { g.each(func(p *Proxy) { p.SetLatency(d) }) }

// SetLatencyDir delays one direction's traffic on every link.
func (g *Group) SetLatencyDir(dir Direction, d time.Duration) {
	g.each(func(p *Proxy) { p.SetLatencyDir(dir, d) })
}

// Blackhole silences every link.
func (g *Group) Blackhole() { g.each((*Proxy).Blackhole) }

// BlackholeDir silences one direction on every link.
func (g *Group) BlackholeDir(dir Direction) { g.each(func(p *Proxy) { p.BlackholeDir(dir) }) }

// SetScope narrows the faults of every link (see Proxy.SetScope).
func (g *Group) SetScope(s Scope) { g.each(func(p *Proxy) { p.SetScope(s) }) }

// Cut resets every link.
func (g *Group) Cut() { g.each((*Proxy).Cut) }

// Heal restores every link.
func (g *Group) Heal() { g.each((*Proxy).Heal) }

// Close stops every proxy.
func (g *Group) Close() error {
	var first error
	for _, p := range g.Proxies {
		if err := p.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (g *Group) each(f func(*Proxy)) {
	for _, p := range g.Proxies {
		f(p)
	}
}
