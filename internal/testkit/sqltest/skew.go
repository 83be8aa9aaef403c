package sqltest

import (
	"context"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/testkit/slack"
)

// ClockSkew is the scenario of two row-mode clients whose clocks disagree
// with the server's: ahead and behind are Lockers on one table whose
// clocks are shifted in opposite directions (the client's clock, or the
// session's time zone). Each in
// turn holds a key for a short TTL while the other tries it: the other
// sees it busy for the TTL's remainder (by the server's clock), takes it
// over after the TTL — neither early nor late — with a larger token, and
// the expired holder's Refresh fails. A driver that computed an expiry or
// a takeover from its client's clock would let the lock be stolen at once
// or hold it for the skew.
func ClockSkew(t *testing.T, ahead, behind *distlock.Locker) {
	t.Helper()
	ctx := Ctx(t, slack.D(time.Minute))
	const ttl = 2 * time.Second
	for _, pair := range []struct {
		name          string
		holder, thief *distlock.Locker
	}{{"ahead holds", ahead, behind}, {"behind holds", behind, ahead}} {
		key := "skew/" + pair.name
		start := time.Now()
		lease, err := pair.holder.TryAcquire(ctx, key, distlock.WithTTL(ttl), distlock.WithAutoRefresh(false))
		if err != nil {
			t.Fatal(err)
		}
		_, err = pair.thief.TryAcquire(ctx, key)
		var busy *backend.BusyError
		if !errors.As(err, &busy) {
			t.Fatalf("%s: the skewed client took a held lock: %v", pair.name, err)
		}
		// The server granted the lease after start, so at least the TTL
		// less the time since start is left (what a loaded machine takes
		// between the two calls is not a fixed fraction of the TTL).
		if left := ttl - time.Since(start) - 50*time.Millisecond; busy.RetryAfter < left || busy.RetryAfter > ttl {
			t.Errorf("%s: the other client sees %v left of a %v lease, want within [%v, %v]", pair.name, busy.RetryAfter, ttl, left, ttl)
		}
		info, err := pair.thief.Inspect(ctx, key)
		if err != nil || !info.Held || info.TTL <= 0 || info.TTL > ttl {
			t.Errorf("%s: Inspect = %+v, %v", pair.name, info, err)
		}
		actx, cancel := context.WithTimeout(ctx, ttl+slack.D(5*time.Second))
		got, err := pair.thief.Acquire(actx, key)
		cancel()
		if err != nil {
			t.Fatalf("%s: no takeover within the TTL %v and slack: %v", pair.name, ttl, err)
		}
		if took := time.Since(start); took < ttl-ttl/10 {
			t.Errorf("%s: taken over after %v, before the TTL %v", pair.name, took, ttl)
		}
		if err := lease.Refresh(ctx, time.Minute); !errors.Is(err, distlock.ErrNotHeld) {
			t.Errorf("%s: the expired holder's Refresh = %v, want ErrNotHeld", pair.name, err)
		}
		if got.Token() <= lease.Token() {
			t.Errorf("%s: takeover token %d not above %d", pair.name, got.Token(), lease.Token())
		}
		_ = got.Release(ctx)
	}
}

// ClockOnlyThroughHook fails the test if a non-test Go file in dir calls
// time.Now (or time.Since, time.Until) directly: the driver reads the
// client's clock only through sqllock.Base.Now, which ClockSkew shifts,
// so no statement can take a time from the client unnoticed.
func ClockOnlyThroughHook(t *testing.T, dir string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no Go files in %s: %v", dir, err)
	}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == "time" {
				switch sel.Sel.Name {
				case "Now", "Since", "Until":
					t.Errorf("%s: time.%s: read the client's clock through sqllock.Base.Now", fset.Position(sel.Pos()), sel.Sel.Name)
				}
			}
			return true
		})
	}
}
