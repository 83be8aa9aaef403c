package redialgate

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
)

// ErrRefused is the error of the refused dial.
var ErrRefused = errors.New("redialgate: dial refused")

// Gate is a dialer (Dial, for goredis.Options.Dialer) that dials normally
// until Arm.
type Gate struct {
	armed atomic.Bool
	dials atomic.Int32 // dials since Arm
	held  chan struct{}
	open  chan struct{}
	once  sync.Once
}

// New returns a disarmed Gate.
func New() *Gate {
	return &Gate{held: make(chan struct{}), open: make(chan struct{})}
}

// Arm makes the next dial fail with ErrRefused and the one after it wait
// for Open (or its ctx); later dials pass.
func (g *Gate) Arm() { g.armed.Store(true) }

// Held is closed once the second dial after Arm waits at the gate.
func (g *Gate) Held() <-chan struct{} { return g.held }

// Open lets the held dial (and every later one) through. Idempotent.
func (g *Gate) Open() { g.once.Do(func() { close(g.open) }) }

// Dial is the dialer.
func (g *Gate) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if g.armed.Load() {
		switch g.dials.Add(1) {
		case 1:
			return nil, ErrRefused
		case 2:
			close(g.held)
			select {
			case <-g.open:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
	}
	return (&net.Dialer{}).DialContext(ctx, network, addr)
}
