package etcd

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testkit/testserver"
)

// TestURLCredentials: etcd://user:password@host/... authenticates with
// etcd's auth (a member with auth enabled): the right password gets locks,
// a wrong one is ErrAuth (never ErrUnavailable: waiting does not cure it),
// and no error
// shows either password.
func TestURLCredentials(t *testing.T) {
	t.Parallel()
	s := ownMember(t, testserver.EtcdConfig{}, "auth is enabled on a member of our own")
	admin := adminClient(t, s.Addr())
	ctx := ctxT(t, 30*time.Second)
	const pw = "s3cret-pw"
	for _, step := range []func() error{
		func() error { _, err := admin.RoleAdd(ctx, "root"); return err },
		func() error { _, err := admin.UserAdd(ctx, "root", pw); return err },
		func() error { _, err := admin.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := admin.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatalf("enable auth: %v", err)
		}
	}
	// Without credentials the cluster refuses.
	anon, err := distlock.Open(ctx, "etcd://"+s.Addr()+"/auth?session_ttl=4s")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = anon.Close() })
	if _, err := anon.TryAcquire(ctxT(t, 10*time.Second), "k"); !errors.Is(err, distlock.ErrAuth) || errors.Is(err, distlock.ErrUnavailable) {
		t.Errorf("TryAcquire without credentials: %v, want ErrAuth", err)
	}

	l, err := distlock.Open(ctx, "etcd://root:"+pw+"@"+s.Addr()+"/auth?session_ttl=4s")
	if err != nil {
		t.Fatalf("Open with credentials: %v", err)
	}
	t.Cleanup(func() { _ = l.Close() })
	lease, err := l.Acquire(ctxT(t, 10*time.Second), "k")
	if err != nil {
		t.Fatalf("Acquire with credentials: %v", err)
	}
	info, err := l.Inspect(ctxT(t, 10*time.Second), "k")
	if err != nil || info.Token != lease.Token() {
		t.Errorf("Inspect with credentials: %+v, %v", info, err)
	}
	if err := lease.Release(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}

	const wrong = "wrong-pw-42"
	start := time.Now()
	_, err = distlock.Open(ctx, "etcd://root:"+wrong+"@"+s.Addr()+"/auth")
	switch {
	case err == nil:
		t.Fatal("Open with a wrong password: no error")
	case !errors.Is(err, distlock.ErrAuth) || errors.Is(err, distlock.ErrUnavailable):
		t.Errorf("wrong password: %v, want ErrAuth", err)
	case strings.Contains(err.Error(), wrong) || strings.Contains(err.Error(), pw):
		t.Errorf("the error shows the password: %v", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("wrong password refused after %v", took)
	}
	t.Logf("wrong password: %v", err)

	// Unreachable with credentials: at once, with the cause.
	addr := closedPort(t)
	start = time.Now()
	_, err = distlock.Open(context.Background(), "etcd://root:"+pw+"@"+addr+"/auth")
	if !errors.Is(err, distlock.ErrUnavailable) || !strings.Contains(err.Error(), "connection refused") || strings.Contains(err.Error(), pw) {
		t.Errorf("Open with credentials of an unreachable endpoint: %v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("took %v", took)
	}
}
