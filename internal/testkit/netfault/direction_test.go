package netfault

import (
	"bufio"
	"net"
	"testing"
	"time"
)

func dialEcho(t *testing.T, p *Proxy) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	r := bufio.NewReader(c)
	if _, err := roundTrip(c, r, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	return c, r
}

func TestDelayRequestsKeepsScheduleThroughHeal(t *testing.T) {
	p, err := Listen(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c1, r1 := dialEcho(t, p)
	p.DelayRequests(400 * time.Millisecond)
	start := time.Now()
	if _, err := c1.Write([]byte("late\n")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	p.Heal()
	// A new connection after Heal passes at once, while the delayed
	// request is still held.
	c2, r2 := dialEcho(t, p)
	if _, err := roundTrip(c2, r2, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d >= 400*time.Millisecond {
		t.Skipf("machine too slow to order the two connections (%v)", d)
	}
	_ = c1.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := r1.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 400*time.Millisecond {
		t.Errorf("delayed request answered after %v, want its 400ms delay kept through Heal", d)
	}
}

func TestSilenceOneConnectionOneWay(t *testing.T) {
	p, err := Listen(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c1, r1 := dialEcho(t, p)
	c2, r2 := dialEcho(t, p)
	if n := p.Conns(); n != 2 {
		t.Fatalf("Conns = %d, want 2", n)
	}
	for _, silence := range []func(int) bool{p.SilenceRequests, p.SilenceReplies} {
		if !silence(0) {
			t.Fatal("no connection 0")
		}
		if _, err := roundTrip(c1, r1, 300*time.Millisecond); err == nil {
			t.Errorf("silenced connection answered")
		}
		if _, err := roundTrip(c2, r2, 5*time.Second); err != nil {
			t.Errorf("the other connection: %v", err)
		}
		p.Heal()
		// The held line arrives after Heal, then the connection works.
		_ = c1.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := r1.ReadString('\n'); err != nil {
			t.Fatalf("after Heal: %v", err)
		}
	}
	if p.SilenceRequests(2) {
		t.Errorf("SilenceRequests(2) with 2 connections reported true")
	}
}
