package openfuzz

import (
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/memcached"
	"github.com/distlock/distlock/memory"
	"github.com/distlock/distlock/mysql"
	"github.com/distlock/distlock/postgres"
	"github.com/distlock/distlock/redis"
	"github.com/distlock/distlock/redlock"
	"github.com/stretchr/testify/require"
)

// TestNewChecksDefaults: every backend's New refuses unusable default
// acquisition options (WithDefaults) at construction, with the error an
// acquisition would have returned; before, each acquisition failed later.
// The clients are built without a server: New must not need one to check.
func TestNewChecksDefaults(t *testing.T) {
	rc := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"})
	defer rc.Close()
	db, err := sql.Open("mysql", "u:p@tcp(127.0.0.1:1)/db")
	require.NoError(t, err)
	defer db.Close()
	cfg, err := pgxpool.ParseConfig("postgres://u:p@127.0.0.1:1/db")
	require.NoError(t, err)
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	defer pool.Close()
	for _, tc := range []struct {
		bad  distlock.Option
		want error
	}{
		{distlock.WithTTL(-time.Second), distlock.ErrInvalidTTL},
		{distlock.WithOwner(""), distlock.ErrInvalidOption},
		{distlock.WithRetry(nil), distlock.ErrInvalidOption},
	} {
		news := map[string]func() (*distlock.Locker, error){
			"redis": func() (*distlock.Locker, error) { return redis.New(rc, redis.WithDefaults(tc.bad)) },
			"redlock": func() (*distlock.Locker, error) {
				return redlock.New([]goredis.UniversalClient{rc}, redlock.WithDefaults(tc.bad))
			},
			"memcached": func() (*distlock.Locker, error) {
				return memcached.New(memcache.New("127.0.0.1:1"), memcached.WithDefaults(tc.bad))
			},
			"memory": func() (*distlock.Locker, error) {
				return memory.New(memory.NewNamespace(), memory.WithDefaults(tc.bad))
			},
			"mysql":    func() (*distlock.Locker, error) { return mysql.New(db, mysql.WithDefaults(tc.bad)) },
			"postgres": func() (*distlock.Locker, error) { return postgres.New(pool, postgres.WithDefaults(tc.bad)) },
		}
		for name, newLocker := range news {
			l, err := newLocker()
			if !errors.Is(err, tc.want) {
				t.Errorf("%s.New with a bad default: %v, want %v", name, err, tc.want)
			}
			if err == nil && l != nil {
				_ = l.Close()
			}
		}
	}
}
