package netfault

import "time"

// directions is a proxy's per-direction delays and per-connection silences,
// on top of its faults. Guarded by Proxy.mu.
type directions struct {
	delay [2]time.Duration // extra delay of chunks arriving from now on, by Request-1 and Reply-1
	open  []*proxied       // open connections, in accept order
}

// proxied is one client connection through the proxy.
type proxied struct {
	n        uint64  // the connection's number (see SetScope)
	silenced [2]bool // by Request-1 and Reply-1
}

// DelayRequests holds every chunk the client sends from now on for d (on
// top of SetLatency) before forwarding it; replies pass as before. A chunk
// keeps the delay it got when it arrived, through Heal and later calls, as
// bytes already in the network would: so a request sent just before Heal
// can land after requests sent on other connections just after it.
func (p *Proxy) DelayRequests(d time.Duration) { p.setDelay(Request, d) }

// DelayReplies is DelayRequests for the server's replies.
func (p *Proxy) DelayReplies(d time.Duration) { p.setDelay(Reply, d) }

// Conns reports how many client connections are open through the proxy.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.extra.open)
}

// SilenceRequests holds, until Heal, everything the client sends on its
// i-th open connection (in the order they were accepted, from 0), leaving
// its replies and every other connection alone: that one connection goes
// silent one way. It reports false if there is no such connection.
func (p *Proxy) SilenceRequests(i int) bool { return p.silence(i, Request) }

// SilenceReplies is SilenceRequests for what the server sends on the i-th
// connection.
func (p *Proxy) SilenceReplies(i int) bool { return p.silence(i, Reply) }

func (p *Proxy) setDelay(dir Direction, d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.extra.delay[dir-1] = d
}

func (p *Proxy) silence(i int, dir Direction) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if i < 0 || i >= len(p.extra.open) {
		return false
	}
	p.extra.open[i].silenced[dir-1] = true
	p.notifyLocked()
	return true
}

// clearDirectionsLocked drops every delay and silence; the caller then
// signals the change. Callers hold p.mu.
func (p *Proxy) clearDirectionsLocked() {
	p.extra.delay = [2]time.Duration{}
	for _, c := range p.extra.open {
		c.silenced = [2]bool{}
	}
}

// register adds client connection number n to the open list.
func (p *Proxy) register(n uint64) *proxied {
	c := &proxied{n: n}
	p.mu.Lock()
	p.extra.open = append(p.extra.open, c)
	p.mu.Unlock()
	return c
}

// unregister removes a connection that ended.
func (p *Proxy) unregister(c *proxied) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, x := range p.extra.open {
		if x == c {
			p.extra.open = append(p.extra.open[:i], p.extra.open[i+1:]...)
			return
		}
	}
}

// arrival returns the extra delay of a chunk arriving now in dir.
func (p *Proxy) arrival(dir Direction) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.extra.delay[dir-1]
}

// silenced reports whether c is silenced in dir.
func (p *Proxy) silenced(c *proxied, dir Direction) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return c.silenced[dir-1]
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
func (g *Group) SilenceRequests(i int) bool { return g.silence(i, Request) }

// SilenceReplies silences the replies of the i-th connection of the group.
func (g *Group) SilenceReplies(i int) bool { return g.silence(i, Reply) }

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
