// Package astargets checks that every backend's Locker answers As with the
// targets its package doc lists, and refuses the others without panicking.
// None of the constructors here contacts a server.
package astargets

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/etcd"
	"github.com/distlock/distlock/file"
	"github.com/distlock/distlock/memcached"
	"github.com/distlock/distlock/memory"
	"github.com/distlock/distlock/mysql"
	"github.com/distlock/distlock/postgres"
	"github.com/distlock/distlock/redis"
	"github.com/distlock/distlock/redlock"
	"github.com/distlock/distlock/zookeeper"
)

func TestAsTargets(t *testing.T) {
	ctx := context.Background()
	rc := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"})
	defer rc.Close()
	mc := memcache.New("127.0.0.1:1")
	db, err := sql.Open("mysql", "u:p@tcp(127.0.0.1:1)/db")
	require.NoError(t, err)
	defer db.Close()
	pool, err := pgxpool.New(ctx, "postgres://u:p@127.0.0.1:1/db")
	require.NoError(t, err)
	defer pool.Close()
	ec, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:1"}, DialTimeout: time.Second})
	require.NoError(t, err)
	defer ec.Close()
	ns := memory.NewNamespace()

	open := func(l *distlock.Locker, err error) *distlock.Locker {
		t.Helper()
		require.NoError(t, err)
		t.Cleanup(func() { _ = l.Close() })
		return l
	}
	cases := map[string]struct {
		l    *distlock.Locker
		want func(t *testing.T, l *distlock.Locker)
	}{
		"redis": {open(redis.New(rc)), func(t *testing.T, l *distlock.Locker) {
			var c goredis.UniversalClient
			require.True(t, l.As(&c))
			assert.Same(t, rc, c)
		}},
		"redlock": {open(redlock.New([]goredis.UniversalClient{rc})), func(t *testing.T, l *distlock.Locker) {
			var cs []goredis.UniversalClient
			require.True(t, l.As(&cs))
			require.Len(t, cs, 1)
			assert.Same(t, rc, cs[0])
		}},
		"memcached": {open(memcached.New(mc)), func(t *testing.T, l *distlock.Locker) {
			var c *memcache.Client
			require.True(t, l.As(&c))
			assert.Same(t, mc, c)
			var it memcached.Items
			require.True(t, l.As(&it))
			assert.Equal(t, memcached.ItemKey(memcached.DefaultPrefix, "k"), it.Key("k"))
		}},
		"mysql": {open(mysql.New(db, mysql.WithMode(mysql.ModeForUpdate))), func(t *testing.T, l *distlock.Locker) {
			var m mysql.Mode
			require.True(t, l.As(&m))
			assert.Equal(t, mysql.ModeForUpdate, m)
			var got *sql.DB
			require.True(t, l.As(&got))
			assert.Same(t, db, got)
		}},
		"postgres": {open(postgres.New(pool, postgres.WithMode(postgres.ModeAdvisory))), func(t *testing.T, l *distlock.Locker) {
			var m postgres.Mode
			require.True(t, l.As(&m))
			assert.Equal(t, postgres.ModeAdvisory, m)
			var got *pgxpool.Pool
			require.True(t, l.As(&got))
			assert.Same(t, pool, got)
		}},
		"etcd": {open(etcd.New(ec)), func(t *testing.T, l *distlock.Locker) {
			var s etcd.Session
			require.True(t, l.As(&s))
			assert.Zero(t, s.LeaseID(), "no session before the first acquisition")
			var c *clientv3.Client
			require.True(t, l.As(&c))
			assert.Same(t, ec, c)
		}},
		"zookeeper": {open(zookeeper.Dial([]string{"127.0.0.1:1"})), func(t *testing.T, l *distlock.Locker) {
			var s zookeeper.Session
			require.True(t, l.As(&s))
			assert.Zero(t, s.ID(), "no session before the first acquisition")
		}},
		"memory": {open(memory.New(ns)), func(t *testing.T, l *distlock.Locker) {
			var got *memory.Namespace
			require.True(t, l.As(&got))
			assert.Same(t, ns, got)
			var s memory.Session
			require.True(t, l.As(&s))
		}},
		"file": {open(file.New(t.TempDir())), func(t *testing.T, l *distlock.Locker) {
			var d file.Dir
			require.True(t, l.As(&d))
			assert.NotEmpty(t, d.Path())
		}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			c.want(t, c.l)
			var unrelated *time.Location
			assert.False(t, c.l.As(&unrelated), "an unrelated target")
			assert.Nil(t, unrelated, "a refused target is left alone")
			assert.False(t, c.l.As(nil), "a nil target")
			assert.False(t, c.l.As(42), "a non-pointer target")
		})
	}
}
