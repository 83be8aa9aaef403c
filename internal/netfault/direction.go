package netfault

import "time"

// Direction is one way of the traffic through a proxy.
type Direction int

// The directions of a proxied connection.
const (
	Requests Direction = iota // client to server
	Replies                   // server to client
)

// directions is a proxy's per-direction and per-connection faults, on top
// of its mode and latency. Guarded by Proxy.mu.
type directions struct {
	delay [2]time.Duration // extra delay of chunks arriving from now on
	open  []*proxied       // open connections, in accept order
}

// proxied is one client connection through the proxy.
type proxied struct {
	silenced [2]bool
}

// DelayRequests holds every chunk the client sends from now on for d (on
// top of SetLatency) before forwarding it; replies pass as before. A chunk
// keeps the delay it got when it arrived, through Heal and later calls, as
// bytes already in the network would: so a request sent just before Heal
// can land after requests sent on other connections just after it.
func (p *Proxy) DelayRequests(d time.Duration) { p.setDelay(Requests, d) }

// DelayReplies is DelayRequests for the server's replies.
func (p *Proxy) DelayReplies(d time.Duration) { p.setDelay(Replies, d) }

// Conns reports how many client connections are open through the proxy.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.dirs.open)
}

// SilenceRequests holds, until Heal, everything the client sends on its
// i-th open connection (in the order they were accepted, from 0), leaving
// its replies and every other connection alone: that one connection goes
// silent one way. It reports false if there is no such connection.
func (p *Proxy) SilenceRequests(i int) bool { return p.silence(i, Requests) }

// SilenceReplies is SilenceRequests for what the server sends on the i-th
// connection.
func (p *Proxy) SilenceReplies(i int) bool { return p.silence(i, Replies) }

func (p *Proxy) setDelay(dir Direction, d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dirs.delay[dir] = d
}

func (p *Proxy) silence(i int, dir Direction) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if i < 0 || i >= len(p.dirs.open) {
		return false
	}
	p.dirs.open[i].silenced[dir] = true
	return true
}

// clearDirections drops every delay and silence; the caller then signals
// the change. Callers hold p.mu.
func (p *Proxy) clearDirections() {
	p.dirs.delay = [2]time.Duration{}
	for _, c := range p.dirs.open {
		c.silenced = [2]bool{}
	}
}

// register adds a client connection to the open list.
func (p *Proxy) register() *proxied {
	c := &proxied{}
	p.mu.Lock()
	p.dirs.open = append(p.dirs.open, c)
	p.mu.Unlock()
	return c
}

// unregister removes a connection that ended.
func (p *Proxy) unregister(c *proxied) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, x := range p.dirs.open {
		if x == c {
			p.dirs.open = append(p.dirs.open[:i], p.dirs.open[i+1:]...)
			return
		}
	}
}

// arrival returns the extra delay of a chunk arriving now in dir.
func (p *Proxy) arrival(dir Direction) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dirs.delay[dir]
}

// held reports whether c is silenced in dir, and whether the proxy closed.
func (p *Proxy) held(c *proxied, dir Direction) (silenced, closed bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return c.silenced[dir], p.closed
}

// DelayRequests delays the requests on every link.
func (g *Group) DelayRequests(d time.Duration) { g.each(func(p *Proxy) { p.DelayRequests(d) }) }

// DelayReplies delays the replies on every link.
func (g *Group) DelayReplies(d time.Duration) { g.each(func(p *Proxy) { p.DelayReplies(d) }) }

// Conns reports the open connections of every link together; they are
// numbered link by link, in the order of the targets.
func (g *Group) Conns() int {
	n := 0
	g.each(func(p *Proxy) { n += p.Conns() })
	return n
}

// SilenceRequests silences the requests of the i-th connection of the
// group (numbered as by Conns).
func (g *Group) SilenceRequests(i int) bool { return g.silence(i, Requests) }

// SilenceReplies silences the replies of the i-th connection of the group.
func (g *Group) SilenceReplies(i int) bool { return g.silence(i, Replies) }

func (g *Group) silence(i int, dir Direction) bool {
	for _, p := range g.Proxies {
		n := p.Conns()
		if i < n {
			return p.silence(i, dir)
		}
		i -= n
	}
	return false
}
