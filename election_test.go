package distlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/memory"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNewElectionChecks(t *testing.T) {
	l := memory.MustNew(memory.NewNamespace())
	defer l.Close()
	for name, tc := range map[string]struct {
		l    *distlock.Locker
		key  string
		id   string
		opts []distlock.ElectionOption
		want error
	}{
		"nil locker":      {nil, "k", "a", nil, distlock.ErrInvalidOption},
		"empty identity":  {l, "k", "", nil, distlock.ErrInvalidOption},
		"huge identity":   {l, "k", string(make([]byte, distlock.MaxMetadataLen+1)), nil, distlock.ErrInvalidOption},
		"empty key":       {l, "", "a", nil, distlock.ErrInvalidKey},
		"owner given":     {l, "k", "a", []distlock.ElectionOption{distlock.WithTermOptions(distlock.WithOwner("x"))}, distlock.ErrInvalidOption},
		"bad ttl":         {l, "k", "a", []distlock.ElectionOption{distlock.WithTermOptions(distlock.WithTTL(-1))}, distlock.ErrInvalidTTL},
		"zero interval":   {l, "k", "a", []distlock.ElectionOption{distlock.WithObserveInterval(0)}, distlock.ErrInvalidOption},
		"nil backoff":     {l, "k", "a", []distlock.ElectionOption{distlock.WithRecampaignBackoff(nil)}, distlock.ErrInvalidOption},
		"nil option":      {l, "k", "a", []distlock.ElectionOption{nil}, distlock.ErrInvalidOption},
		"nil term option": {l, "k", "a", []distlock.ElectionOption{distlock.WithTermOptions(nil)}, distlock.ErrInvalidOption},
	} {
		if _, err := distlock.NewElection(tc.l, tc.key, tc.id, tc.opts...); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
	}
}

// TestElectionOneLeaderAtATime: candidates on separate sessions lead in
// turns; no two terms overlap and every term's token is higher than the
// one before.
func TestElectionOneLeaderAtATime(t *testing.T) {
	ns := memory.NewNamespace()
	var (
		mu      sync.Mutex
		leader  string
		last    uint64
		terms   int
		overlap []string
	)
	const candidates, rounds = 4, 25
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for c := range candidates {
		l := memory.MustNew(ns)
		defer l.Close()
		id := fmt.Sprintf("candidate-%d", c)
		e, err := distlock.NewElection(l, "leader", id, distlock.WithRecampaignBackoff(distlock.Backoff{Min: time.Millisecond, Max: 2 * time.Millisecond}))
		require.NoError(t, err)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				err := e.Lead(ctx, func(ctx context.Context, term *distlock.Term) error {
					mu.Lock()
					if leader != "" {
						overlap = append(overlap, leader+" and "+id)
					}
					if term.Token() <= last {
						overlap = append(overlap, fmt.Sprintf("token %d after %d", term.Token(), last))
					}
					leader, last = id, term.Token()
					terms++
					mu.Unlock()
					time.Sleep(time.Duration(rand.N(2000)) * time.Microsecond)
					mu.Lock()
					leader = ""
					mu.Unlock()
					return nil
				})
				if err != nil {
					t.Errorf("%s: Lead: %v", id, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if len(overlap) > 0 || terms != candidates*rounds {
		t.Errorf("%d terms (want %d); violations: %q", terms, candidates*rounds, overlap)
	}
}

// TestElectionRecampaignsAfterLoss: a term lost to a forced release ends
// fn's context; Lead campaigns again and the next term has a higher token.
func TestElectionRecampaignsAfterLoss(t *testing.T) {
	ns := memory.NewNamespace()
	l := memory.MustNew(ns)
	defer l.Close()
	operator := memory.MustNew(ns)
	defer operator.Close()
	e, err := distlock.NewElection(l, "leader", "me", distlock.WithRecampaignBackoff(distlock.Backoff{Min: time.Millisecond, Max: time.Millisecond}))
	require.NoError(t, err)
	var tokens []uint64
	err = e.Lead(t.Context(), func(ctx context.Context, term *distlock.Term) error {
		tokens = append(tokens, term.Token())
		if len(tokens) == 1 {
			if _, err := operator.ForceRelease(ctx, "leader"); err != nil {
				return err
			}
			<-ctx.Done()
			if term.Err() == nil || !errors.Is(term.Err(), distlock.ErrLockLost) {
				return fmt.Errorf("term ended with %v, want ErrLockLost", term.Err())
			}
			return errors.New("dropped: the term was lost")
		}
		return nil
	})
	if err != nil || len(tokens) != 2 || tokens[1] <= tokens[0] {
		t.Errorf("Lead = %v after terms with tokens %v; want nil after two terms, increasing", err, tokens)
	}
}

func TestElectionLeadEnds(t *testing.T) {
	ns := memory.NewNamespace()
	holder := memory.MustNew(ns)
	defer holder.Close()
	l := memory.MustNew(ns)
	e, err := distlock.NewElection(l, "leader", "me")
	require.NoError(t, err)
	lease, err := holder.TryAcquire(t.Context(), "leader")
	require.NoError(t, err)
	defer lease.Release(context.Background())
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	assert.ErrorIs(t, e.Lead(ctx, func(context.Context, *distlock.Term) error { return nil }), context.DeadlineExceeded, "Lead while another candidate leads, ctx ends")
	boom := errors.New("boom")
	lease.Release(t.Context())
	if err := e.Lead(t.Context(), func(context.Context, *distlock.Term) error { return boom }); !errors.Is(err, boom) {
		t.Errorf("Lead whose fn fails while leading: %v, want fn's error", err)
	}
	if info, err := e.Leader(t.Context()); err != nil || info.Held {
		t.Errorf("after Lead returned, Leader = %+v, %v; want nobody (Lead resigns)", info, err)
	}
	l.Close()
	if err := e.Lead(t.Context(), func(context.Context, *distlock.Term) error { return nil }); !errors.Is(err, distlock.ErrClosed) {
		t.Errorf("Lead on a closed Locker: %v, want ErrClosed at once", err)
	}
}

func TestElectionObserve(t *testing.T) {
	ns := memory.NewNamespace()
	a, b := memory.MustNew(ns), memory.MustNew(ns)
	defer a.Close()
	defer b.Close()
	ea, _ := distlock.NewElection(a, "leader", "host-a pid=1")
	eb, err := distlock.NewElection(b, "leader", "host-b pid=2", distlock.WithObserveInterval(5*time.Millisecond))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	seen := eb.Observe(ctx)
	if first := <-seen; first.Held {
		t.Errorf("first observation %+v, want nobody leading", first)
	}
	term, err := ea.Campaign(t.Context())
	require.NoError(t, err)
	if got := <-seen; !got.Held || got.Metadata != "host-a pid=1" || got.Token != term.Token() {
		t.Errorf("observed %+v, want host-a with token %d", got, term.Token())
	}
	require.NoError(t, term.Resign(t.Context()))
	assert.ErrorIs(t, term.Resign(t.Context()), distlock.ErrNotHeld, "second Resign")
	if got := <-seen; got.Held {
		t.Errorf("observed %+v after Resign, want nobody", got)
	}
	cancel()
	for range seen { // closed when ctx ends
	}
}

// TestElectionLockerDefaultOwner: NewElection refuses WithOwner among the
// term options ("Each term gets an owner id of its own, so two candidates
// of one identity still exclude each other"), but a Locker whose defaults
// carry WithOwner (memory.WithDefaults, or any backend's defaults, such as
// one owner id per service) gives every term that owner: two candidates
// on two such Lockers both win, reentrantly, and both see Term.Err() ==
// nil at the same instant: two leaders.
func TestElectionLockerDefaultOwner(t *testing.T) {
	ns := memory.NewNamespace()
	defaults := memory.WithDefaults(distlock.WithOwner("billing-service"))
	a, b := memory.MustNew(ns, defaults), memory.MustNew(ns, defaults)
	defer a.Close()
	defer b.Close()
	ea, err := distlock.NewElection(a, "leader", "host-a")
	require.NoError(t, err)
	eb, err := distlock.NewElection(b, "leader", "host-b")
	require.NoError(t, err)
	ctx := t.Context()
	ta, err := ea.Campaign(ctx)
	require.NoError(t, err)
	defer ta.Resign(ctx)
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	tb, err := eb.Campaign(cctx)
	if err != nil {
		return // b waits while a leads: one leader
	}
	defer tb.Resign(ctx)
	if ta.Err() == nil && tb.Err() == nil {
		t.Errorf("two leaders at once: host-a (token %d) and host-b (token %d), both Term.Err() == nil", ta.Token(), tb.Token())
	}
}
