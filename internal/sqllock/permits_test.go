package sqllock

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock/backend"
)

// A lock table whose name leaves no room for the permit table's suffix
// refuses every acquisition of a permit with ErrInvalidOption naming the
// permit table, before the lock table is set up or a statement made.
func TestPermitsTableName(t *testing.T) {
	d := Dialect{Ident: regexp.MustCompile(`^[a-z_]{1,12}$`), IdentDesc: "1-12 letters or '_'", Qualifier: "schema", Quote: `"`}
	b := NewBase(d, nil, &Config{Table: "locks_abc", Mode: "m", CreateTable: true}, nil)
	t.Cleanup(func() { _ = b.Shutdown() })
	p := NewPermits(d, b,
		func(context.Context) error { t.Error("the lock table was set up"); return nil },
		func(string) PermitSQL { t.Error("statements were made"); return nil })
	for range 2 {
		_, err := p.TryAcquire(context.Background(), backend.Request{Key: "k", Owner: "o", TTL: time.Second}, 1)
		if !errors.Is(err, backend.ErrInvalidOption) || !strings.Contains(err.Error(), `"locks_abc_permits"`) {
			t.Fatalf("want ErrInvalidOption naming locks_abc_permits, got %v", err)
		}
	}
}
