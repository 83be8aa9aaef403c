package netfault

import (
	"bufio"
	"net"
	"runtime"
	"testing"
	"time"
)

// echo starts a line echo server.
func echo(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func roundTrip(c net.Conn, r *bufio.Reader, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	_ = c.SetDeadline(start.Add(timeout))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return 0, err
	}
	_, err := r.ReadString('\n')
	return time.Since(start), err
}

func TestProxyModes(t *testing.T) {
	before := runtime.NumGoroutine()
	p, err := Listen(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	if _, err := roundTrip(c, r, 5*time.Second); err != nil {
		t.Fatalf("pass: %v", err)
	}
	p.SetLatency(100 * time.Millisecond)
	if d, err := roundTrip(c, r, 5*time.Second); err != nil || d < 200*time.Millisecond {
		t.Fatalf("latency 100ms each way: round trip %v, %v; want >= 200ms", d, err)
	}
	p.Blackhole()
	if _, err := roundTrip(c, r, 300*time.Millisecond); err == nil {
		t.Fatal("blackhole: a round trip went through")
	}
	// The held request is delivered after Heal (a partition that ends).
	p.Heal()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.ReadString('\n'); err != nil {
		t.Fatalf("after heal: %v", err)
	}
	p.Cut()
	if _, err := roundTrip(c, r, 2*time.Second); err == nil {
		t.Fatal("cut: connection still works")
	}
	if c2, err := net.Dial("tcp", p.Addr()); err == nil {
		_ = c2.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := roundTrip(c2, bufio.NewReader(c2), 2*time.Second); err == nil {
			t.Fatal("cut: a new connection works")
		}
		c2.Close()
	}
	p.Heal()
	c3, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := roundTrip(c3, bufio.NewReader(c3), 5*time.Second); err != nil {
		t.Fatalf("after heal: %v", err)
	}
	c.Close()
	c3.Close()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before+1 && time.Now().Before(deadline) { // +1: the echo listener
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before+1 {
		t.Errorf("%d goroutines after Close, want <= %d", n, before+1)
	}
}

// TestDirectionAndScope: a fault on one direction leaves the other alone,
// and a scope limits faults to the connections open at the time or to
// later ones.
func TestDirectionAndScope(t *testing.T) {
	p, err := Listen(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, bufio.NewReader(c)
	}
	c, r := dial()
	// Request delayed, replies not: one round trip costs the delay once.
	p.SetLatencyDir(Request, 150*time.Millisecond)
	if d, err := roundTrip(c, r, 5*time.Second); err != nil || d < 150*time.Millisecond {
		t.Fatalf("request delayed 150ms: round trip %v, %v", d, err)
	}
	// Replies held, requests pass: the echo server sees the line (its
	// reply is held), and nothing comes back until Heal.
	p.SetLatencyDir(Request, 0)
	p.BlackholeDir(Reply)
	if _, err := roundTrip(c, r, 200*time.Millisecond); err == nil {
		t.Fatal("reply blackholed: a round trip went through")
	}
	p.Heal()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.ReadString('\n'); err != nil {
		t.Fatalf("held reply after heal: %v", err)
	}

	// Scope: faults on the connections open now only.
	p.SetScope(OpenConns)
	p.Blackhole()
	fresh, fr := dial()
	if _, err := roundTrip(fresh, fr, 5*time.Second); err != nil {
		t.Fatalf("a connection opened after SetScope(OpenConns): %v", err)
	}
	if _, err := roundTrip(c, r, 200*time.Millisecond); err == nil {
		t.Fatal("an open connection in scope: a round trip went through")
	}
	p.Heal()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.ReadString('\n'); err != nil {
		t.Fatalf("after heal: %v", err)
	}
	// Scope: faults on later connections only.
	p.SetScope(NewConns)
	p.BlackholeDir(Request)
	if _, err := roundTrip(c, r, 5*time.Second); err != nil {
		t.Fatalf("a connection open before SetScope(NewConns): %v", err)
	}
	late, lr := dial()
	if _, err := roundTrip(late, lr, 200*time.Millisecond); err == nil {
		t.Fatal("a connection opened after SetScope(NewConns): a round trip went through")
	}
}
