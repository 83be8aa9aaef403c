package fence_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/fence"
	_ "github.com/distlock/distlock/redis" // redis:// lock backend for the child
	"github.com/stretchr/testify/require"
)

// Environment of the child process of TestPausedProcessSIGSTOP.
const (
	childEnv       = "FENCE_TEST_CHILD"       // the lock backend URL
	childGuardEnv  = "FENCE_TEST_CHILD_GUARD" // "redis:<addr>" or "dir:<path>"
	childTTL       = time.Second
	childLockKey   = "job"
	childOutputKey = "job:out"
	childTable     = "sigstop_out" // PostgreSQL: the written row's table; its token table adds _fence
)

// pausedChild is the child: it acquires the lock, prints its token, waits
// for a line on stdin (the parent stops it with SIGSTOP meanwhile, past its
// lease), then writes through the guard with its old token and prints the
// outcome: "ok", "stale" or "error: …".
func pausedChild() int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := distlock.Open(ctx, os.Getenv(childEnv))
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	defer l.Close()
	lease, err := l.Acquire(ctx, childLockKey, distlock.WithTTL(childTTL))
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	fmt.Println(lease.Token())
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		fmt.Println("error:", err)
		return 1
	}
	kind, where, _ := strings.Cut(os.Getenv(childGuardEnv), ":")
	err = guardedWrite(ctx, kind, where, lease.Token(), "child")
	switch {
	case err == nil:
		fmt.Println("ok")
	case errors.Is(err, fence.ErrStale):
		fmt.Println("stale")
	default:
		fmt.Println("error:", err)
	}
	return 0
}

// guardedWrite writes v with token through the guard kind ("redis" on the
// Redis at where, "postgres" on the database whose URL is where, or "dir"
// in the directory where).
func guardedWrite(ctx context.Context, kind, where string, token uint64, v string) error {
	switch kind {
	case "redis":
		c := goredis.NewClient(&goredis.Options{Addr: where})
		defer c.Close()
		return fence.NewRedis(c).Set(ctx, childLockKey, token, childOutputKey, v, 0)
	case "postgres":
		g, err := fence.NewSQLTable(fence.Postgres, childTable+"_fence")
		if err != nil {
			return err
		}
		conn, err := pgx.Connect(ctx, where)
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		return g.TxPgx(ctx, conn, childLockKey, token, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "UPDATE "+childTable+" SET v = $1 WHERE id = 1", v)
			return err
		})
	case "dir":
		d, err := fence.OpenDir(where)
		if err != nil {
			return err
		}
		return d.WriteFile(ctx, "out", token, []byte(v), 0o644)
	}
	return fmt.Errorf("unknown guard %q", kind)
}

// TestPausedProcessSIGSTOP is the seeds' scenario with a real process and a
// real pause: a child acquires a Redis lock (TTL 1s) and is stopped with
// SIGSTOP; the lock expires, the parent acquires it and writes through the
// guard; the child is continued and writes with its old token: refused,
// the parent's data intact. The guard's Redis is a different server from
// the lock's; the same runs with the PostgreSQL guard (pgx) and the
// directory guard.
func TestPausedProcessSIGSTOP(t *testing.T) {
	lockAddr := redisClient(t).Options().Addr
	guardRedis := redisClient(t)
	dir := t.TempDir()
	pg := postgres.Get(t).DSN()
	db := pgDB(t)
	g0, _ := fence.NewSQLTable(fence.Postgres, childTable+"_fence")
	for _, q := range []string{"DROP TABLE IF EXISTS " + childTable, "DROP TABLE IF EXISTS " + childTable + "_fence",
		"CREATE TABLE " + childTable + " (id INT PRIMARY KEY, v TEXT NOT NULL)", "INSERT INTO " + childTable + " VALUES (1, '')", g0.DDL()} {
		mustExec(t, db, q)
	}
	for _, g := range []struct{ kind, where string }{{"redis", guardRedis.Options().Addr}, {"postgres", pg}, {"dir", dir}} {
		t.Run(g.kind, func(t *testing.T) {
			ctx := ctxT(t)
			lockURL := "redis://" + lockAddr
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), childEnv+"="+lockURL, childGuardEnv+"="+g.kind+":"+g.where)
			stdin, err := cmd.StdinPipe()
			require.NoError(t, err)
			stdout, err := cmd.StdoutPipe()
			require.NoError(t, err)
			cmd.Stderr = os.Stderr
			require.NoError(t, cmd.Start())
			defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
			out := bufio.NewScanner(stdout)
			require.True(t, out.Scan(), "child said nothing: %v", out.Err())
			childToken, err := strconv.ParseUint(out.Text(), 10, 64)
			require.NoError(t, err, "child: %s", out.Text())
			require.NoError(t, cmd.Process.Signal(syscall.SIGSTOP))
			stopped := true
			defer func() {
				if stopped {
					_ = cmd.Process.Signal(syscall.SIGCONT)
				}
			}()

			l, err := distlock.Open(ctx, lockURL)
			require.NoError(t, err)
			defer l.Close()
			lease, err := l.Acquire(ctx, childLockKey, distlock.WithTTL(time.Minute)) // after the stopped child's lease expired
			require.NoError(t, err)
			defer lease.Release(context.Background())
			if lease.Token() <= childToken {
				t.Fatalf("parent token %d, child %d", lease.Token(), childToken)
			}
			require.NoError(t, guardedWrite(ctx, g.kind, g.where, lease.Token(), "parent"), "parent's write")

			require.NoError(t, cmd.Process.Signal(syscall.SIGCONT))
			stopped = false
			if _, err := stdin.Write([]byte("go\n")); err != nil {
				t.Fatal(err)
			}
			require.True(t, out.Scan(), "child said nothing after SIGCONT: %v", out.Err())
			if got := out.Text(); got != "stale" {
				t.Fatalf("child's write with token %d after the parent's %d: %q, want stale", childToken, lease.Token(), got)
			}
			var v string
			switch g.kind {
			case "redis":
				v, err = guardRedis.Get(ctx, childOutputKey).Result()
			case "postgres":
				err = db.QueryRowContext(ctx, "SELECT v FROM "+childTable+" WHERE id = 1").Scan(&v)
			default:
				var b []byte
				b, err = os.ReadFile(dir + "/out")
				v = string(b)
			}
			if err != nil || v != "parent" {
				t.Fatalf("data %q, %v: want the parent's", v, err)
			}
		})
	}
}
