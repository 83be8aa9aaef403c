package queuewait

import (
	"context"

	"github.com/distlock/distlock/internal/holdtab"
)

// Member is the part of a Queue that every backend shares: joining the
// driver's hold of the entry's owner (Joinable, Nest) and recognising an
// attempt of that owner on the driver at the head of the queue (Head). A
// backend's entry embeds it, made by NewMember, records the head of the
// queue its create and reads find with SetHead, and implements the rest of
// Queue (its mechanism).
type Member[L any, H holdtab.Holder] struct {
	table    *holdtab.Table[H]
	key      *holdtab.Key[H]
	owner    string
	attempts *Attempts
	nest     func(context.Context) (L, bool, error)
	headWait func()
	head     string
}

// NewMember returns the Member of an entry of owner on key, in the
// driver's table and attempts. nest joins the driver's hold of owner on
// key (Nest); headWait, if not nil, is called each time Head finds an
// attempt of owner at the head of the queue, before Head returns.
func NewMember[L any, H holdtab.Holder](table *holdtab.Table[H], key *holdtab.Key[H], owner string, attempts *Attempts, nest func(context.Context) (L, bool, error), headWait func()) Member[L, H] {
	return Member[L, H]{table: table, key: key, owner: owner, attempts: attempts, nest: nest, headWait: headWait}
}

// SetHead records the name (as Attempts knows it) of the first entry of
// the queue, as the entry's create or its last read found it.
func (m *Member[L, H]) SetHead(name string) { m.head = name }

// Joinable tells whether the driver holds the key for the entry's owner.
func (m *Member[L, H]) Joinable() (<-chan struct{}, bool) { return m.table.Joinable(m.key, m.owner) }

// Nest joins that hold.
func (m *Member[L, H]) Nest(ctx context.Context) (L, bool, error) { return m.nest(ctx) }

// Head tells whether the first entry SetHead recorded is that of an
// attempt of the entry's owner on this driver under way.
func (m *Member[L, H]) Head() (<-chan struct{}, bool) {
	ended, ours := m.attempts.Of(m.head, m.owner)
	if ours && m.headWait != nil {
		m.headWait()
	}
	return ended, ours
}
