package main

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/distlock/distlock/internal/testkit/testserver"
)

// asMain makes the test binary act as fenced-sql (see fencedSQLWrapper).
const asMain = "FENCED_SQL_AS_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(asMain) != "" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// binDir holds distlock (built from cmd/distlock) and fenced-sql (a wrapper
// that runs this test binary as the command).
func binDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(dir, "distlock"), "github.com/distlock/distlock/cmd/distlock")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build distlock: %v\n%s", err, out)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	wrapper := "#!/bin/sh\n" + asMain + "=1 exec " + strconv.Quote(self) + ` "$@"` + "\n"
	if err := os.WriteFile(filepath.Join(dir, "fenced-sql"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

type runResult struct {
	code   int
	output string
}

func sh(t *testing.T, env []string, args ...string) runResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return runResult{0, string(out)}
	case errors.As(err, &ee):
		return runResult{ee.ExitCode(), string(out)}
	}
	t.Fatalf("%v: %v\n%s", args, err, out)
	return runResult{}
}

// TestDistlockRunFencedWrite runs the example scripts for real: distlock
// run on a Redis lock exports DISTLOCK_TOKEN to job.sh, whose fenced-sql
// write commits; a write with an older token (what a holder paused past its
// lease would carry) is refused with status 3 and changes nothing; the psql
// variant behaves the same; token 0 is refused as bad usage.
func TestDistlockRunFencedWrite(t *testing.T) {
	pg := testserver.PostgresServer(t)
	rd := testserver.Redis(t, testserver.RedisConfig{})
	bin := binDir(t)
	db, err := sql.Open("pgx", pg.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := t.Context()
	for _, q := range []string{
		"DROP TABLE IF EXISTS report", "DROP TABLE IF EXISTS distlock_fence",
		"CREATE TABLE report (id INT PRIMARY KEY, body TEXT)", "INSERT INTO report VALUES (1, '')",
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(q, err)
		}
	}
	body := func() string {
		var b string
		if err := db.QueryRowContext(ctx, "SELECT body FROM report WHERE id = 1").Scan(&b); err != nil {
			t.Fatal(err)
		}
		return b
	}
	recorded := func() uint64 {
		var tok uint64
		if err := db.QueryRowContext(ctx, "SELECT token FROM distlock_fence WHERE resource = 'report/daily'").Scan(&tok); err != nil {
			t.Fatal(err)
		}
		return tok
	}
	env := []string{
		"PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH"),
		"DISTLOCK_BACKEND=redis://" + rd.Addr(),
		"DATABASE_URL=" + pg.DSN(),
	}

	for _, b := range []string{"first", "second"} {
		if r := sh(t, env, "./run.sh", b); r.code != 0 || body() != b {
			t.Fatalf("run.sh %s: status %d, body %q\n%s", b, r.code, body(), r.output)
		}
	}
	tok := recorded()
	if tok < 2 {
		t.Fatalf("recorded token %d after two runs", tok)
	}
	stale := append(env, "DISTLOCK_KEY=report/daily", "DISTLOCK_TOKEN="+strconv.FormatUint(tok-1, 10))
	if r := sh(t, stale, "./job.sh", "stale"); r.code != exitStale || body() != "second" {
		t.Fatalf("job.sh with token %d after %d: status %d, body %q\n%s", tok-1, tok, r.code, body(), r.output)
	}
	same := append(env, "DISTLOCK_KEY=report/daily", "DISTLOCK_TOKEN="+strconv.FormatUint(tok, 10))
	if r := sh(t, same, "./job.sh", "second"); r.code != 0 || body() != "second" || recorded() != tok {
		t.Fatalf("retry with the same token: status %d, body %q\n%s", r.code, body(), r.output)
	}
	zero := append(env, "DISTLOCK_KEY=report/daily", "DISTLOCK_TOKEN=0")
	if r := sh(t, zero, "./job.sh", "zero"); r.code != exitUsage || !strings.Contains(r.output, "token 0") {
		t.Fatalf("token 0: status %d\n%s", r.code, r.output)
	}

	if _, err := exec.LookPath("psql"); err != nil {
		t.Log("no psql: psql-job.sh not tried")
		return
	}
	if r := sh(t, env, filepath.Join(bin, "distlock"), "run", "--key", "report/daily", "--", "./psql-job.sh", "third"); r.code != 0 || body() != "third" {
		t.Fatalf("psql-job.sh under distlock run: status %d, body %q\n%s", r.code, body(), r.output)
	}
	tok = recorded()
	stale = append(env, "DISTLOCK_KEY=report/daily", "DISTLOCK_TOKEN="+strconv.FormatUint(tok-1, 10))
	if r := sh(t, stale, "./psql-job.sh", "stale"); r.code != exitStale || body() != "third" || recorded() != tok {
		t.Fatalf("psql-job.sh with token %d after %d: status %d, body %q\n%s", tok-1, tok, r.code, body(), r.output)
	}
}

// TestFencedSQLMySQL: the same command against MariaDB (a go-sql-driver
// DSN, ? placeholders).
func TestFencedSQLMySQL(t *testing.T) {
	my := testserver.MariaDBServer(t)
	dsn := my.DSN()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range []string{"DROP TABLE IF EXISTS report", "CREATE TABLE report (id INT PRIMARY KEY, body TEXT)", "INSERT INTO report VALUES (1, '')"} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(q, err)
		}
	}
	var out, errOut strings.Builder
	w := func(tok, b string) int {
		return run([]string{"--dsn", dsn, "--resource", "report", "--token", tok, "--", "UPDATE report SET body = ? WHERE id = 1", b}, &out, &errOut)
	}
	if c := w("5", "five"); c != exitOK {
		t.Fatalf("token 5: %d %s", c, errOut.String())
	}
	if c := w("4", "four"); c != exitStale {
		t.Fatalf("token 4 after 5: %d %s", c, errOut.String())
	}
	var b string
	if err := db.QueryRow("SELECT body FROM report WHERE id = 1").Scan(&b); err != nil || b != "five" {
		t.Fatalf("body %q, %v", b, err)
	}
}
