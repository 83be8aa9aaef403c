package queuewait

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/distlock/distlock/internal/holdtab"
)

type testHold struct{ holdtab.Hold }

// TestMember: Joinable follows the table's hold of the owner, Nest is the
// backend's, and Head finds only an attempt of the owner under way (and
// calls the hook then).
func TestMember(t *testing.T) {
	var mu sync.Mutex
	table := holdtab.New(&mu, func(*testHold) {})
	key := table.Ref("k")
	defer table.Unref("k", key)
	var attempts Attempts
	nests, hooks := 0, 0
	m := NewMember(table, key, "a", &attempts,
		func(context.Context) (string, bool, error) { nests++; return "nested", true, nil },
		func() { hooks++ })

	changed, same := m.Joinable()
	assert.False(t, same, "no hold yet")
	h := &testHold{holdtab.NewHold("k", "a", "")}
	mu.Lock()
	table.GrantLocked(key, h, &holdtab.Handle{}, nil)
	mu.Unlock()
	select {
	case <-changed:
	default:
		t.Fatal("the grant did not close the signal Joinable returned")
	}
	_, same = m.Joinable()
	assert.True(t, same, "the owner's hold")
	other := NewMember[string](table, key, "b", &attempts, nil, nil)
	_, same = other.Joinable()
	assert.False(t, same, "another owner's hold")

	l, ok, err := m.Nest(t.Context())
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, "nested", l)
	assert.Equal(t, 1, nests)

	_, ours := m.Head()
	assert.False(t, ours, "no head recorded")
	end := attempts.Start("w1", "a")
	endOther := attempts.Start("w2", "b")
	m.SetHead("w2")
	_, ours = m.Head()
	assert.False(t, ours, "the head is another owner's attempt")
	assert.Equal(t, 0, hooks)
	m.SetHead("w1")
	ended, ours := m.Head()
	require.True(t, ours, "the head is the owner's attempt")
	assert.Equal(t, 1, hooks)
	end()
	endOther()
	<-ended
	_, ours = m.Head()
	assert.False(t, ours, "the attempt ended")
	_, ours = other.Head() // no hook: nil is not called
	assert.False(t, ours)
}
