package openfuzz

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/etcd"
	"github.com/distlock/distlock/internal/testkit/testserver"
	"github.com/stretchr/testify/require"
)

// TestEtcdRefusedCredentialsAreErrAuth: against an etcd with authentication
// enabled, a client without credentials ("user name is empty") and one
// whose user lacks the permission ("permission denied") get ErrAuth, never
// ErrUnavailable (both were ErrUnavailable). The etcd URL carries no
// credentials: they come with the client given to etcd.New.
func TestEtcdRefusedCredentialsAreErrAuth(t *testing.T) {
	srv := testserver.Etcd(t, testserver.EtcdConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.Addr()}, DialTimeout: 10 * time.Second})
	require.NoError(t, err)
	defer admin.Close()
	for _, step := range []func() error{
		func() error { _, err := admin.UserAdd(ctx, "root", "rootpw"); return err },
		func() error { _, err := admin.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := admin.UserAdd(ctx, "nobody", "nobodypw"); return err },
		func() error { _, err := admin.AuthEnable(ctx); return err },
	} {
		require.NoError(t, step())
	}
	for name, cfg := range map[string]clientv3.Config{
		"no credentials": {Endpoints: []string{srv.Addr()}, DialTimeout: 10 * time.Second},
		"no permission":  {Endpoints: []string{srv.Addr()}, DialTimeout: 10 * time.Second, Username: "nobody", Password: "nobodypw"},
	} {
		c, err := clientv3.New(cfg)
		require.NoError(t, err, "%s", name)
		l, err := etcd.New(c)
		require.NoError(t, err)
		_, err = l.Acquire(ctx, "k", distlock.WithRetryUnavailable(true))
		if !errors.Is(err, distlock.ErrAuth) || errors.Is(err, distlock.ErrUnavailable) || ctx.Err() != nil {
			t.Errorf("%s: Acquire: %v; want ErrAuth, not ErrUnavailable, at once", name, err)
		}
		l.Close()
		c.Close()
	}
}
