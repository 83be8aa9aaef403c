package fenced_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/internal/testkit/fenced"
	"github.com/distlock/distlock/internal/testkit/testserver"
)

func TestFencedStore(t *testing.T) {
	srv := testserver.Redis(t, testserver.RedisConfig{})
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer c.Close()
	ctx := context.Background()
	s := fenced.New(c, t.Name())
	if err := s.Write(ctx, 5, "a", "v5"); err != nil {
		t.Fatal(err)
	}
	for _, tok := range []uint64{5, 4, 0} {
		if err := s.Write(ctx, tok, "b", "stale"); !errors.Is(err, fenced.ErrStale) {
			t.Errorf("write with token %d after 5: %v, want ErrStale", tok, err)
		}
	}
	if err := s.Write(ctx, 6, "c", "v6"); err != nil {
		t.Fatal(err)
	}
	st, err := s.Read(ctx)
	if err != nil || st.Token != 6 || st.Value != "v6" || st.Writer != "c" || st.Accepted != 2 || st.Rejected != 3 {
		t.Fatalf("state %+v, %v", st, err)
	}
	// Concurrent writers with distinct tokens: the final token is the max,
	// and each accepted write was larger than all before it.
	var wg sync.WaitGroup
	for tok := uint64(100); tok < 200; tok++ {
		wg.Add(1)
		go func() { defer wg.Done(); _ = s.Write(ctx, tok, "w", "x") }()
	}
	wg.Wait()
	if st, _ := s.Read(ctx); st.Token != 199 || st.Accepted+st.Rejected != 105 {
		t.Errorf("after concurrent writes: %+v", st)
	}
}
