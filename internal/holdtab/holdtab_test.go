package holdtab

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

type testHold struct {
	Hold
	detached int
}

func newTable() (*Table[*testHold], *sync.Mutex) {
	mu := new(sync.Mutex)
	return New(mu, func(h *testHold) { h.detached++ }), mu
}

func grant(t *Table[*testHold], mu *sync.Mutex, k *Key[*testHold], owner string, lost func(error)) (*testHold, *Handle, *testHold) {
	h := &testHold{Hold: NewHold("k", owner, "")}
	hd := new(Handle)
	mu.Lock()
	stale := t.GrantLocked(k, h, hd, lost)
	mu.Unlock()
	return h, hd, stale
}

func release(t *Table[*testHold], mu *sync.Mutex, h *testHold, hd *Handle) Releasing {
	mu.Lock()
	defer mu.Unlock()
	return t.ReleaseLocked(h, hd)
}

// newKey is a table with key "k" referenced until the test ends.
func newKey(t *testing.T) (*Table[*testHold], *sync.Mutex, *Key[*testHold]) {
	tab, mu := newTable()
	k := tab.Ref("k")
	t.Cleanup(func() { tab.Unref("k", k) })
	return tab, mu, k
}

func TestKeyStateLivesWhileRefOrHold(t *testing.T) {
	tab, mu := newTable()
	k := tab.Ref("k")
	changed := tab.Changed(k)
	h, hd, stale := grant(tab, mu, k, "a", nil)
	if stale != nil {
		t.Fatal("stale hold on a new key")
	}
	select {
	case <-changed:
	default:
		t.Fatal("GrantLocked did not close Changed")
	}
	tab.Unref("k", k)
	require.Len(t, tab.keys, 1, "key state dropped while a hold lives")
	if r := release(tab, mu, h, hd); r != Last || len(tab.keys) != 0 || h.detached != 1 {
		t.Fatalf("last release: %v, %d keys, detached %d", r, len(tab.keys), h.detached)
	}
	require.Equal(t, Again, release(tab, mu, h, hd), "second release")
}

func TestNestAndLossFanOut(t *testing.T) {
	tab, mu, k := newKey(t)
	var mu2 sync.Mutex
	var got []string
	lost := func(name string) func(error) {
		return func(error) { mu2.Lock(); got = append(got, name); mu2.Unlock() }
	}
	h, _, _ := grant(tab, mu, k, "a", lost("first"))
	publish := func(context.Context, *testHold) (bool, error) { return true, nil }
	if _, ok, err := tab.Nest(context.Background(), k, "b", new(Handle), lost("other"), publish, nil); ok || err != nil {
		t.Fatal("nested into another owner's hold")
	}
	hd2 := new(Handle)
	if h2, ok, err := tab.Nest(context.Background(), k, "a", hd2, lost("second"), publish, nil); !ok || err != nil || h2 != h || h.Count != 2 {
		t.Fatalf("Nest: ok %v err %v count %d", ok, err, h.Count)
	}
	gone := errors.New("gone")
	tab.Gone(h, gone, hd2)
	tab.Gone(h, gone, nil) // ends once
	if len(got) != 1 || got[0] != "first" || !h.Lost || h.detached != 1 {
		t.Fatalf("lost callbacks %v, lost %v, detached %d", got, h.Lost, h.detached)
	}
	if _, ok := tab.Joinable(k, "a"); ok {
		t.Fatal("a lost hold is joinable")
	}
	require.Equal(t, WasLost, release(tab, mu, h, hd2), "release after loss")
}

func TestNestOnGoneTenureEndsHold(t *testing.T) {
	tab, mu, k := newKey(t)
	var calls int
	h, _, _ := grant(tab, mu, k, "a", func(error) { calls++ })
	hd := new(Handle)
	_, ok, err := tab.Nest(context.Background(), k, "a", hd, func(error) { t.Error("dropped handle told of loss") },
		func(context.Context, *testHold) (bool, error) { return false, nil }, errors.New("gone"))
	if ok || err != nil || !h.Lost || calls != 1 || !hd.released {
		t.Fatalf("ok %v err %v lost %v calls %d released %v", ok, err, h.Lost, calls, hd.released)
	}
}

func TestPublishWritesLatestCount(t *testing.T) {
	tab, mu, k := newKey(t)
	h, _, _ := grant(tab, mu, k, "a", nil)
	var wrote []int
	held, err := tab.Publish(context.Background(), h, func() error { return nil }, func(_ context.Context, n int) (bool, error) {
		wrote = append(wrote, n)
		if n == 1 {
			mu.Lock()
			h.Count = 3 // changed while the write was under way
			mu.Unlock()
		}
		return true, nil
	})
	if !held || err != nil || len(wrote) != 2 || wrote[1] != 3 {
		t.Fatalf("held %v err %v wrote %v", held, err, wrote)
	}
}

// TestGoneTellsEveryHandleButTheFinder: the first handle and the nested
// ones are kept apart (the first needs no map); a loss reaches all of them
// but the one that found it, once each, and a released handle never.
func TestGoneTellsEveryHandleButTheFinder(t *testing.T) {
	tab, mu, k := newKey(t)
	told := map[int]int{}
	tell := func(i int) func(error) { return func(error) { told[i]++ } }
	h, first, _ := grant(tab, mu, k, "a", tell(0))
	hds := []*Handle{first}
	for i := 1; i < 4; i++ {
		hd := new(Handle)
		if _, ok := tab.join(k, "a", hd, tell(i)); !ok {
			t.Fatalf("join %d refused", i)
		}
		hds = append(hds, hd)
	}
	require.Equal(t, Kept, release(tab, mu, h, hds[3]), "release of a nested handle")
	tab.Gone(h, errors.New("gone"), hds[2])
	tab.Gone(h, errors.New("again"), nil)
	if want := map[int]int{0: 1, 1: 1}; len(told) != len(want) || told[0] != 1 || told[1] != 1 {
		t.Fatalf("Lost callbacks called %v, want %v", told, want)
	}
	require.Equal(t, WasLost, release(tab, mu, h, first), "release after the loss")
}

// TestReleaseKept: a release that kept a nested hold is lost only when the
// tenure is gone while holds remain, not when the owner's last release,
// racing it, removed the tenure before its count write landed.
func TestReleaseKept(t *testing.T) {
	errGone, errWrite := errors.New("gone"), errors.New("write failed")
	for _, tc := range []struct {
		name     string
		lastWins bool // the other hold is released before the write lands
		held     bool
		err      error
		lost     bool
	}{
		{name: "written", held: true},
		{name: "write error", err: errWrite},
		{name: "tenure gone, hold left", lost: true},
		{name: "tenure removed by the last release", lastWins: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tab, mu, k := newKey(t)
			var told []error
			h, hd1, _ := grant(tab, mu, k, "a", func(err error) { told = append(told, err) })
			hd2 := new(Handle)
			_, ok, err := tab.Nest(t.Context(), k, "a", hd2, nil, func(context.Context, *testHold) (bool, error) { return true, nil }, errGone)
			require.NoError(t, err)
			require.True(t, ok)
			require.Equal(t, Kept, release(tab, mu, h, hd2))
			lost, err := tab.ReleaseKept(t.Context(), h, func(context.Context, *testHold) (bool, error) {
				if tc.lastWins {
					require.Equal(t, Last, release(tab, mu, h, hd1))
				}
				return tc.held, tc.err
			}, errGone)
			require.ErrorIs(t, err, tc.err)
			require.Equal(t, tc.lost, lost)
			mu.Lock()
			ended := h.Lost
			mu.Unlock()
			require.Equal(t, tc.lost, ended, "h ended")
			if tc.lost {
				require.Equal(t, []error{errGone}, told, "the remaining hold told of the loss")
			} else {
				require.Empty(t, told)
			}
		})
	}
}
