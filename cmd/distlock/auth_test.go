package main

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/internal/testkit/testserver"
	"github.com/stretchr/testify/require"
)

// authRedis is a redis-server that wants the password "right-password".
func authRedis(t *testing.T) *testserver.Server {
	srv := testserver.Redis(t, testserver.RedisConfig{})
	admin := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer admin.Close()
	require.NoError(t, admin.ConfigSet(context.Background(), "requirepass", "right-password").Err())
	return srv
}

// TestRunRefusedCredentials: a wrong or missing Redis password is the
// credentials class (exit 77) at once, not "backend unavailable" after the
// whole --wait (it used to print "gave up after waiting 5s: … backend
// unavailable: WRONGPASS" and exit 69), and run and status name the same
// cause without a password (run used to say "ERR Protocol error:
// unauthenticated multibulk length", status "NOAUTH").
func TestRunRefusedCredentials(t *testing.T) {
	t.Parallel()
	srv := authRedis(t)
	for _, tc := range []struct{ name, url, want string }{
		{"wrong password", "redis://:wrong-password@" + srv.Addr() + "/0", "WRONGPASS"},
		{"no password", "redis://" + srv.Addr() + "/0", ""},
	} {
		start := time.Now()
		r := runBin(t, time.Minute, nil, "run", "--backend", tc.url, "--key", "k", "--wait", "5s", "--", "echo", "ran")
		took := time.Since(start)
		s := runBin(t, time.Minute, nil, "status", "--backend", tc.url, "k")
		for cmd, r := range map[string]result{"run": r, "status": s} {
			if r.status != ExitAuth || !strings.Contains(r.stderr, "refused the credentials") || strings.Contains(r.stderr, "unavailable") ||
				!strings.Contains(r.stderr, tc.want) || strings.Contains(r.stderr, "wrong-password") {
				t.Errorf("%s, %s: status %d, stderr %q; want %d, the credentials named", tc.name, cmd, r.status, r.stderr, ExitAuth)
			}
		}
		if strings.Contains(r.stdout, "ran") || took >= 5*time.Second {
			t.Errorf("%s: the command ran, or run waited out --wait 5s: %v", tc.name, took)
		}
		if tc.want == "" && (strings.Contains(r.stderr, "Protocol error") || !strings.Contains(r.stderr, "NOAUTH") || !strings.Contains(s.stderr, "NOAUTH")) {
			t.Errorf("no password: run says %q, status %q; want both to say NOAUTH", r.stderr, s.stderr)
		}
	}
}

// TestSQLRefusedCredentialsAndSetup: a wrong PostgreSQL or MariaDB password
// is exit 77, a missing database or lock table exit 78, each saying what to
// fix (they were all "backend unavailable", 69, or an internal error, 70).
func TestSQLRefusedCredentialsAndSetup(t *testing.T) {
	t.Parallel()
	testserver.SkipShort(t, "PostgreSQL and MariaDB")
	pg := testserver.PostgresServer(t)
	my := testserver.MariaDBServer(t)
	pgURL := func(pass, db, query string) string {
		u := url.URL{Scheme: "postgres", User: url.UserPassword(pg.User, pass), Host: pg.Addr(), Path: "/" + db, RawQuery: query}
		return u.String()
	}
	myURL := func(pass, db, query string) string {
		u := url.URL{Scheme: "mysql", User: url.UserPassword(my.User, pass), Host: my.Addr(), Path: "/" + db, RawQuery: query}
		return u.String()
	}
	for _, tc := range []struct {
		name, url string
		status    int
		want      string
	}{
		{"postgres wrong password", pgURL("wrong-password", pg.DB, "mode=row"), ExitAuth, "refused the credentials"},
		{"postgres missing database", pgURL(pg.Password, "no_such_db", "mode=row"), ExitConfig, "check the database named in the URL"},
		{"postgres missing table", pgURL(pg.Password, pg.DB, "mode=row&table=no_such_table"), ExitConfig, "lock table"},
		{"mysql wrong password", myURL("wrong-password", my.DB, "mode=row"), ExitAuth, "refused the credentials"},
		{"mysql missing database", myURL(my.Password, "no_such_db", "mode=row"), ExitConfig, "check the database named in the URL"},
		{"mysql missing table", myURL(my.Password, my.DB, "mode=row&table=no_such_table&create_table=false"), ExitConfig, "lock table"},
	} {
		r := runBin(t, time.Minute, nil, "run", "--backend", tc.url, "--key", "k", "--wait", "5s", "--", "echo", "ran")
		if r.status != tc.status || !strings.Contains(r.stderr, tc.want) || strings.Contains(r.stderr, "unavailable") ||
			strings.Contains(r.stderr, "wrong-password") || strings.Contains(r.stdout, "ran") {
			t.Errorf("%s: status %d, stderr %q; want %d and %q", tc.name, r.status, r.stderr, tc.status, tc.want)
		}
	}
}
