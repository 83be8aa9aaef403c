// Package netfault puts a fault-injecting TCP proxy between a client and a
// server on loopback: added latency, a silent blackhole (connections stay
// open, nothing passes, like a partition), and a cut (connections reset,
// new ones refused). A backend under test is pointed at the proxy's address
// instead of the server's, so the fault hits exactly one client's links.
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

// Proxy forwards connections from its loopback address to a target.
type Proxy struct {
	target string
	ln     net.Listener

	mu      sync.Mutex
	mode    Mode
	latency time.Duration
	conns   map[net.Conn]struct{}
	changed chan struct{} // closed and replaced when mode or latency change
	closed  bool
	dirs    directions // per-direction faults (direction.go)
	wg      sync.WaitGroup
}

// Listen starts a proxy to target on a free loopback port.
func Listen(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: target, ln: ln, conns: map[net.Conn]struct{}{}, changed: make(chan struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address clients dial instead of the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target is the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// SetLatency delays every chunk of data in both directions by d (0: none),
// for new and open connections.
func (p *Proxy) SetLatency(d time.Duration) { p.set(Pass, d) }

// Blackhole stops all traffic silently; open connections stay open.
func (p *Proxy) Blackhole() { p.set(Blackhole, p.latencyNow()) }

// Cut resets every open connection and refuses new ones until Heal.
func (p *Proxy) Cut() {
	p.set(Cut, p.latencyNow())
	p.mu.Lock()
	conns := make([]net.Conn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	for _, c := range conns {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // RST, not FIN
		}
		_ = c.Close()
	}
}

// Heal restores normal forwarding without latency, delays or silences.
func (p *Proxy) Heal() {
	p.mu.Lock()
	p.clearDirections()
	p.mu.Unlock()
	p.set(Pass, 0)
}

func (p *Proxy) latencyNow() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.latency
}

func (p *Proxy) set(m Mode, d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode, p.latency = m, d
	close(p.changed)
	p.changed = make(chan struct{})
}

// state returns the mode, latency and a channel closed at the next change.
func (p *Proxy) state() (Mode, time.Duration, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode, p.latency, p.changed
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
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
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
		if m, _, _ := p.state(); m == Cut {
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
			_ = c.Close()
			continue
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		_ = client.Close()
		return
	}
	if !p.track(client) || !p.track(server) {
		_ = client.Close()
		_ = server.Close()
		return
	}
	pc := p.register()
	defer p.unregister(pc)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(server, client, Requests, pc) }()
	go func() { defer wg.Done(); p.pipe(client, server, Replies, pc) }()
	wg.Wait()
	p.untrack(client)
	p.untrack(server)
}

// pipe copies src to dst chunk by chunk, applying the proxy's mode to each
// chunk; it closes both ends when either fails.
func (p *Proxy) pipe(dst, src net.Conn, dir Direction, pc *proxied) {
	defer func() { _ = dst.Close(); _ = src.Close() }()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.deliver(dst, buf[:n], dir, pc) {
				return
			}
		}
		if err != nil {
			return // EOF or error: close both ends
		}
	}
}

// deliver writes chunk to dst once the mode allows: after the latency (and
// the direction's delay at the chunk's arrival) in Pass mode, never in Cut
// mode, and only after a Heal in Blackhole mode or while pc is silenced in
// dir.
func (p *Proxy) deliver(dst net.Conn, chunk []byte, dir Direction, pc *proxied) bool {
	arrived := time.Now()
	extra := p.arrival(dir)
	for {
		mode, latency, changed := p.state()
		latency += extra
		if silenced, closed := p.held(pc, dir); closed {
			return false
		} else if silenced && mode == Pass {
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

// Blackhole silences every link.
func (g *Group) Blackhole() { g.each((*Proxy).Blackhole) }

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
