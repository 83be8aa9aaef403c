package testserver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// ---- helpers ----

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// requireRefused checks that nothing listens on addr any more.
func requireRefused(t *testing.T, addr string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err == nil {
		c.Close()
		t.Fatalf("%s still accepts connections", addr)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial %s: want connection refused, got %v", addr, err)
	}
}

// requireTimeout checks that a probe with a 300ms deadline times out.
func requireTimeout(t *testing.T, what string, probe func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := probe(ctx)
	if err == nil {
		t.Fatalf("%s answered while paused", what)
	}
	if !errors.Is(err, os.ErrDeadlineExceeded) && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%s while paused: want a timeout, got %v", what, err)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("%s: timeout took %v", what, el)
	}
}

func requireGone(t *testing.T, pid int) {
	t.Helper()
	if pid <= 0 {
		t.Fatalf("bad pid %d", pid)
	}
	if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); !os.IsNotExist(err) {
		t.Fatalf("process %d still exists (stat: %v)", pid, err)
	}
}

// exerciseFaults runs Pause/Resume, Kill/Restart and Stop against s, with
// probe as the raw-protocol check.
func exerciseFaults(t *testing.T, s *Server, probe func(context.Context) error) {
	t.Helper()
	ctx := ctxTimeout(t, 90*time.Second)
	addr := s.Addr()
	if err := probe(ctx); err != nil {
		t.Fatalf("probe: %v", err)
	}

	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	requireTimeout(t, s.Kind(), probe)
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := probe(ctx); err != nil {
		t.Fatalf("probe after Resume: %v", err)
	}

	pid := s.PID()
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	requireGone(t, pid)
	requireRefused(t, addr)
	if err := s.Kill(); err != nil {
		t.Fatalf("second Kill: %v", err)
	}
	if err := s.Pause(); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("Pause after Kill: %v", err)
	}

	start := time.Now()
	if err := s.Restart(ctx); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	t.Logf("%s restart after kill: %v", s.Kind(), time.Since(start).Round(time.Millisecond))
	if s.Addr() != addr {
		t.Fatalf("address changed: %s -> %s", addr, s.Addr())
	}
	if err := probe(ctx); err != nil {
		t.Fatalf("probe after Restart: %v", err)
	}

	// Restart while running (and paused) kills first.
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	pid = s.PID()
	if err := s.Restart(ctx); err != nil {
		t.Fatalf("Restart while paused: %v", err)
	}
	requireGone(t, pid)
	if err := probe(ctx); err != nil {
		t.Fatalf("probe after second Restart: %v", err)
	}

	pid = s.PID()
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	requireGone(t, pid)
	requireRefused(t, addr)
	if err := s.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if err := s.Restart(ctx); !errors.Is(err, ErrStopped) {
		t.Fatalf("Restart after Stop: want ErrStopped, got %v", err)
	}
}

// ---- Redis ----

func TestRedis(t *testing.T) {
	t.Parallel()
	start := time.Now()
	s := Redis(t, RedisConfig{})
	t.Logf("redis start: %v", time.Since(start).Round(time.Millisecond))
	if !s.Controllable() {
		t.Skip("external server")
	}
	ctx := ctxTimeout(t, 30*time.Second)
	if v, err := redisDo(ctx, s.Addr(), "SET", "k", "v"); err != nil || v != "OK" {
		t.Fatalf("SET: %v %v", v, err)
	}
	exerciseFaults(t, s, func(ctx context.Context) error { return redisPing(ctx, s.Addr()) })
}

func TestRedisPersistence(t *testing.T) {
	t.Parallel()
	s := Redis(t, RedisConfig{Persistence: true})
	if !s.Controllable() {
		t.Skip("external server")
	}
	ctx := ctxTimeout(t, 60*time.Second)
	if _, err := redisDo(ctx, s.Addr(), "SET", "fence", "42"); err != nil {
		t.Fatal(err)
	}
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := s.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	v, err := redisDo(ctx, s.Addr(), "GET", "fence")
	if err != nil || v != "42" {
		t.Fatalf("GET after kill -9 + restart: %v %v", v, err)
	}

	// Without persistence, the same sequence loses the key.
	s2 := Redis(t, RedisConfig{})
	if _, err := redisDo(ctx, s2.Addr(), "SET", "fence", "42"); err != nil {
		t.Fatal(err)
	}
	if err := s2.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := s2.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if v, err := redisDo(ctx, s2.Addr(), "GET", "fence"); err != nil || v != nil {
		t.Fatalf("GET without persistence: %v %v", v, err)
	}
}

func TestRedisN(t *testing.T) {
	t.Parallel()
	start := time.Now()
	servers := RedisN(t, 5)
	t.Logf("5 redis in parallel: %v", time.Since(start).Round(time.Millisecond))
	seen := map[string]bool{}
	ctx := ctxTimeout(t, 30*time.Second)
	for _, s := range servers {
		if seen[s.Addr()] {
			t.Fatalf("duplicate address %s", s.Addr())
		}
		seen[s.Addr()] = true
		if err := redisPing(ctx, s.Addr()); err != nil {
			t.Fatal(err)
		}
	}
}

func TestRedisCluster(t *testing.T) {
	t.Parallel()
	start := time.Now()
	c := RedisCluster(t, 3)
	t.Logf("redis cluster of 3: %v", time.Since(start).Round(time.Millisecond))
	if len(c.Servers) != 3 || !c.Controllable() {
		t.Skipf("external cluster of %d", len(c.Servers))
	}
	ctx := ctxTimeout(t, 90*time.Second)
	for _, a := range c.Addrs() {
		if err := redisClusterOK(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	// Every slot is served: the key "a" lives on exactly one node.
	moved := 0
	for _, a := range c.Addrs() {
		if _, err := redisDo(ctx, a, "SET", "a", "1"); err != nil {
			if !strings.HasPrefix(err.Error(), "MOVED") {
				t.Fatal(err)
			}
			moved++
		}
	}
	if moved != 2 {
		t.Fatalf("want 2 MOVED replies, got %d", moved)
	}

	s := c.Servers[1]
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	requireRefused(t, s.Addr())
	start = time.Now()
	if err := s.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("redis cluster node restart: %v", time.Since(start).Round(time.Millisecond))
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	pids := []int{}
	for _, s := range c.Servers {
		pids = append(pids, s.PID())
	}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		requireGone(t, pid)
	}
}

func TestRedisClusterTooSmall(t *testing.T) {
	t.Parallel()
	if _, err := StartRedisCluster(t.Context(), t.TempDir(), 2); err == nil {
		t.Fatal("want an error for 2 masters")
	}
}

// ---- memcached ----

func TestMemcached(t *testing.T) {
	t.Parallel()
	start := time.Now()
	s := Memcached(t, MemcachedConfig{MemoryMB: 8, NoEvict: true})
	t.Logf("memcached start: %v", time.Since(start).Round(time.Millisecond))
	if !s.Controllable() {
		t.Skip("external server")
	}
	ctx := ctxTimeout(t, 30*time.Second)
	if st, err := memcachedStats(ctx, s.Addr(), "settings"); err != nil {
		t.Fatal(err)
	} else if st["evictions"] != "off" || st["maxbytes"] != strconv.Itoa(8<<20) {
		t.Fatalf("settings: evictions=%q maxbytes=%q", st["evictions"], st["maxbytes"])
	}
	exerciseFaults(t, s, func(ctx context.Context) error { return memcachedVersion(ctx, s.Addr()) })
}

// memcachedStats runs "stats <arg>" and returns the STAT lines.
func memcachedStats(ctx context.Context, addr, arg string) (map[string]string, error) {
	c, err := dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if _, err := fmt.Fprintf(c, "stats %s\r\n", arg); err != nil {
		return nil, err
	}
	out := map[string]string{}
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		line = strings.TrimSpace(line)
		if line == "END" {
			return out, nil
		}
		f := strings.Fields(line)
		if len(f) == 3 && f[0] == "STAT" {
			out[f[1]] = f[2]
		}
	}
}

// ---- ZooKeeper ----

func TestZooKeeper(t *testing.T) {
	t.Parallel()
	start := time.Now()
	s := ZooKeeper(t, ZooKeeperConfig{})
	t.Logf("zookeeper standalone start: %v", time.Since(start).Round(time.Millisecond))
	if !s.Controllable() {
		t.Skip("external server")
	}
	ctx := ctxTimeout(t, 30*time.Second)
	out, err := zk4lw(ctx, s.Addr(), "conf")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"tickTime=200", "minSessionTimeout=400", "maxSessionTimeout=60000"} {
		if !strings.Contains(out, want) {
			t.Errorf("conf lacks %q:\n%s", want, out)
		}
	}
	exerciseFaults(t, s, func(ctx context.Context) error {
		mode, err := zkMode(ctx, s.Addr())
		if err == nil && mode != "standalone" {
			err = fmt.Errorf("mode %q", mode)
		}
		return err
	})
}

func TestZooKeeperEnsemble(t *testing.T) {
	t.Parallel()
	start := time.Now()
	c := ZooKeeperEnsemble(t, 3, ZooKeeperConfig{})
	t.Logf("zookeeper ensemble of 3: %v", time.Since(start).Round(time.Millisecond))
	if !c.Controllable() {
		t.Skip("external ensemble")
	}
	ctx := ctxTimeout(t, 90*time.Second)
	leader := -1
	for i, a := range c.Addrs() {
		mode, err := zkMode(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		switch mode {
		case "leader":
			if leader >= 0 {
				t.Fatalf("two leaders: %d and %d", leader, i)
			}
			leader = i
		case "follower":
		default:
			t.Fatalf("node %d: mode %q", i, mode)
		}
	}
	if leader < 0 {
		t.Fatal("no leader")
	}

	// Kill the leader: the other two elect a new one.
	old := c.Servers[leader]
	if err := old.Kill(); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	var newLeader int
	for newLeader = -1; newLeader < 0; {
		for i, a := range c.Addrs() {
			if i == leader {
				continue
			}
			if mode, err := zkMode(ctx, a); err == nil && mode == "leader" {
				newLeader = i
			}
		}
		if newLeader < 0 {
			select {
			case <-ctx.Done():
				t.Fatal("no new leader elected")
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	t.Logf("zookeeper re-election after leader kill: %v", time.Since(start).Round(time.Millisecond))
	start = time.Now()
	if err := old.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("zookeeper ensemble member restart: %v", time.Since(start).Round(time.Millisecond))
	if mode, err := zkMode(ctx, old.Addr()); err != nil || mode != "follower" {
		t.Fatalf("restarted node: mode %q, %v", mode, err)
	}

	// Lose the quorum, then bring both back with RestartNoWait+WaitReady.
	a, b := c.Servers[(leader+1)%3], c.Servers[(leader+2)%3]
	if err := a.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := b.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := a.RestartNoWait(); err != nil {
		t.Fatal(err)
	}
	if err := b.RestartNoWait(); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
}

// ---- MariaDB ----

func TestMariaDB(t *testing.T) {
	t.Parallel()
	start := time.Now()
	m := MariaDBServer(t)
	t.Logf("mariadb start (install-db + server): %v", time.Since(start).Round(time.Millisecond))
	if !m.Controllable() {
		t.Skip("external server")
	}
	ctx := ctxTimeout(t, 90*time.Second)
	want := fmt.Sprintf("distlock:distlock@tcp(%s)/distlock?parseTime=true", m.Addr())
	if m.DSN() != want {
		t.Fatalf("DSN %q, want %q", m.DSN(), want)
	}
	run := func(sql string) [][]string {
		t.Helper()
		c, err := mysqlConnect(ctx, m.Addr(), m.User, m.Password, m.DB)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		rows, err := c.query(sql)
		if err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return rows
	}
	run("CREATE TABLE fence (id INT PRIMARY KEY, v BIGINT) ENGINE=InnoDB")
	run("INSERT INTO fence VALUES (1, 41)")
	run("UPDATE fence SET v = LAST_INSERT_ID(v + 1) WHERE id = 1")
	if rows := run("SELECT v, DATABASE(), CURRENT_USER() FROM fence"); len(rows) != 1 || rows[0][0] != "42" || rows[0][1] != "distlock" {
		t.Fatalf("rows: %q", rows)
	}

	marker := filepath.Join(m.Dir(), "data", "marker")
	if err := os.WriteFile(marker, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := m.Kill(); err != nil {
		t.Fatal(err)
	}
	requireRefused(t, m.Addr())
	start = time.Now()
	if err := m.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("mariadb restart after kill -9: %v", time.Since(start).Round(time.Millisecond))
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("datadir not kept: %v", err)
	}
	if rows := run("SELECT v FROM fence WHERE id = 1"); len(rows) != 1 || rows[0][0] != "42" {
		t.Fatalf("after kill -9 + restart: %q", rows)
	}
	exerciseFaults(t, m.Server, func(ctx context.Context) error {
		c, err := mysqlConnect(ctx, m.Addr(), m.User, m.Password, m.DB)
		if err != nil {
			return err
		}
		return c.Close()
	})
	if m.Socket() != "" {
		if _, err := os.Stat(m.Socket()); err == nil && len(m.Socket()) > 100 {
			t.Fatalf("socket path too long: %s", m.Socket())
		}
	}
}

// ---- external servers, errors, leaks ----

func TestExternalServers(t *testing.T) {
	// Not parallel: uses t.Setenv. Point the wrappers at a local Redis
	// and check that they hand out non-controllable Servers.
	ctx := ctxTimeout(t, 60*time.Second)
	r, err := StartRedis(ctx, "", RedisConfig{})
	if err != nil {
		t.Fatal(err)
	}
	dir := r.Dir()
	defer func() {
		_ = r.Stop()
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("temporary dir %s not removed: %v", dir, err)
		}
	}()

	t.Setenv(EnvRedisAddr, r.Addr())
	t.Setenv(EnvRedlockAddrs, r.Addr()+", "+r.Addr())
	s := Redis(t, RedisConfig{})
	if s.Controllable() || s.Addr() != r.Addr() {
		t.Fatalf("external: controllable=%v addr=%s", s.Controllable(), s.Addr())
	}
	for name, f := range map[string]func() error{
		"Kill": s.Kill, "Pause": s.Pause, "Resume": s.Resume,
		"Restart": func() error { return s.Restart(ctx) },
	} {
		if err := f(); !errors.Is(err, ErrNotControllable) {
			t.Errorf("%s: want ErrNotControllable, got %v", name, err)
		}
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := redisPing(ctx, r.Addr()); err != nil {
		t.Fatalf("Stop of an external server touched it: %v", err)
	}
	if n := RedisN(t, 2); len(n) != 2 || n[1].Controllable() {
		t.Fatalf("RedisN external: %v", n)
	}

	t.Setenv(EnvMySQLDSN, "u:p@tcp(127.0.0.1:1)/db?parseTime=true")
	user, pass, addr, db, err := parseMySQLDSN(os.Getenv(EnvMySQLDSN))
	if err != nil || user != "u" || pass != "p" || addr != "127.0.0.1:1" || db != "db" {
		t.Fatalf("parseMySQLDSN: %q %q %q %q %v", user, pass, addr, db, err)
	}
}

func TestMissingBinary(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := StartRedis(t.Context(), t.TempDir(), RedisConfig{})
	if !errors.Is(err, ErrMissingBinary) || !strings.Contains(err.Error(), "apt-get install -y redis-server") {
		t.Fatalf("want ErrMissingBinary with install hint, got %v", err)
	}
	_, err = StartMemcached(t.Context(), t.TempDir(), MemcachedConfig{})
	if !errors.Is(err, ErrMissingBinary) || !strings.Contains(err.Error(), "apt-get install -y memcached") {
		t.Fatalf("want ErrMissingBinary with install hint, got %v", err)
	}
}

// TestNoLeakWhenKilled re-runs this test binary as a child that starts a
// Redis and then hangs; SIGKILLing the child must take the Redis with it.
func TestNoLeakWhenKilled(t *testing.T) {
	if os.Getenv("TESTSERVER_CHILD") == "1" {
		s, err := StartRedis(context.Background(), os.Getenv("TESTSERVER_CHILD_DIR"), RedisConfig{})
		if err != nil {
			fmt.Println("ERR", err)
			os.Exit(1)
		}
		fmt.Println("PID", s.PID())
		time.Sleep(time.Minute)
		os.Exit(0)
	}
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^TestNoLeakWhenKilled$", "-test.count=1")
	cmd.Env = append(os.Environ(), "TESTSERVER_CHILD=1", "TESTSERVER_CHILD_DIR="+t.TempDir())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	sc := bufio.NewScanner(out)
	pid := 0
	for sc.Scan() {
		if p, ok := strings.CutPrefix(sc.Text(), "PID "); ok {
			pid, _ = strconv.Atoi(p)
			break
		}
		if strings.HasPrefix(sc.Text(), "ERR") {
			t.Fatal(sc.Text())
		}
	}
	if pid == 0 {
		t.Fatal("child printed no pid")
	}
	if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err != nil {
		t.Fatalf("redis %d not running: %v", pid, err)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for {
		// The redis process is reparented to init (or a subreaper) and
		// reaped there; a zombie counts as gone.
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil || strings.Contains(string(b), ") Z ") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis %d survived its killed parent: %s", pid, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestStartErrorIncludesLog(t *testing.T) {
	t.Parallel()
	_, err := StartRedis(t.Context(), t.TempDir(), RedisConfig{ExtraArgs: []string{"--no-such-option", "x"}})
	t.Log(err)
	if err == nil || !strings.Contains(err.Error(), "no-such-option") {
		t.Fatalf("want the server's complaint in the error, got %v", err)
	}
}

// TestRestartWaitsForPort: Restart retries on the same port while someone
// else holds it.
func TestRestartWaitsForPort(t *testing.T) {
	t.Parallel()
	s := Redis(t, RedisConfig{})
	if !s.Controllable() {
		t.Skip("external server")
	}
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(700*time.Millisecond, func() { l.Close() })
	ctx := ctxTimeout(t, 30*time.Second)
	start := time.Now()
	if err := s.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < 600*time.Millisecond {
		t.Fatalf("Restart returned after %v while the port was taken", el)
	}
	if err := redisPing(ctx, s.Addr()); err != nil {
		t.Fatal(err)
	}

	// With a short deadline and the port still taken, Restart fails and
	// says why.
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	l2, err := net.Listen("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	err = s.Restart(ctxTimeout(t, time.Second))
	if err == nil || !strings.Contains(err.Error(), "Address already in use") {
		t.Fatalf("want address-in-use error, got %v", err)
	}
}

func TestMariaDBLongDir(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), strings.Repeat("d", 90))
	m, err := StartMariaDB(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	sock := m.Socket()
	if len(sock) > 100 || strings.HasPrefix(sock, dir) {
		t.Fatalf("socket %s", sock)
	}
	if _, err := os.Stat(sock); err != nil {
		t.Fatal(err)
	}
	if err := m.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Dir(sock)); !os.IsNotExist(err) {
		t.Fatalf("socket dir not removed: %v", err)
	}
}

// ---- PostgreSQL ----

func TestPostgres(t *testing.T) {
	t.Parallel()
	start := time.Now()
	p := PostgresServer(t)
	t.Logf("postgres start (initdb + server): %v", time.Since(start).Round(time.Millisecond))
	if !p.Controllable() {
		t.Skip("external server")
	}
	want := fmt.Sprintf("postgres://distlock:distlock@%s/distlock?sslmode=disable", p.Addr())
	if p.DSN() != want {
		t.Fatalf("DSN %q, want %q", p.DSN(), want)
	}
	// A backend (a child process in its own process group) must be
	// paused and killed with the postmaster.
	c, err := dial(ctxTimeout(t, 10*time.Second), p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	var kids []int
	for len(kids) < 2 && time.Now().Before(deadline) { // background workers
		kids = ChildPIDs(p.PID())
		time.Sleep(50 * time.Millisecond)
	}
	if len(kids) == 0 {
		t.Fatal("the postmaster has no child process")
	}
	exerciseFaults(t, p.Server, func(ctx context.Context) error { return pgAccepts(ctx, p.Addr(), p.User, p.DB) })
	for _, k := range kids {
		if alive(k) {
			t.Errorf("child process %d of the killed postmaster is alive", k)
		}
	}
}

// The second PostgreSQL and MariaDB servers of a cache start from the
// template the first one left (not initdb or mariadb-install-db again), and
// are whole servers: the test user logs in to the test database.
func TestTemplates(t *testing.T) {
	cache := t.TempDir()
	if os.Geteuid() == 0 {
		// PostgreSQL runs as the user postgres, which must not need to
		// enter the cache (a t.TempDir path is not traversable by it).
		if err := os.Chmod(cache, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("XDG_CACHE_HOME", cache)
	t.Setenv(TemplateEnv, "")
	templates := func(kind string) []string {
		m, _ := filepath.Glob(filepath.Join(cache, "distlock-testserver", kind+"-*"))
		return m
	}
	t.Run("postgres", func(t *testing.T) {
		for i := range 2 {
			start := time.Now()
			p := PostgresServer(t)
			if !p.Controllable() {
				t.Skip("external server")
			}
			t.Logf("server %d: started in %v", i, time.Since(start).Round(time.Millisecond))
			_, initdbLog := os.Stat(filepath.Join(p.Dir(), "initdb.log"))
			if ran := initdbLog == nil; ran != (i == 0) {
				t.Errorf("server %d: initdb ran: %v", i, ran)
			}
			if n := len(templates("postgres")); n != 1 {
				t.Fatalf("server %d: %d templates, want 1", i, n)
			}
			var db string
			if err := pgQueryRow(ctxTimeout(t, 30*time.Second), p.DSN(), "SELECT current_database()", &db); err != nil || db != p.DB {
				t.Fatalf("server %d: current_database() = %q, %v", i, db, err)
			}
		}
	})
	t.Run("mariadb", func(t *testing.T) {
		for i := range 2 {
			start := time.Now()
			m := MariaDBServer(t) // ready means the test user logged in to the test database
			if !m.Controllable() {
				t.Skip("external server")
			}
			t.Logf("server %d: started in %v", i, time.Since(start).Round(time.Millisecond))
			_, installLog := os.Stat(filepath.Join(m.Dir(), "install.log"))
			if ran := installLog == nil; ran != (i == 0) {
				t.Errorf("server %d: mariadb-install-db ran: %v", i, ran)
			}
			if n := len(templates("mariadb")); n != 1 {
				t.Fatalf("server %d: %d templates, want 1", i, n)
			}
		}
	})
}

// pgQueryRow logs in to dsn (password authentication) and scans the one
// value q returns into dst.
func pgQueryRow(ctx context.Context, dsn, q string, dst any) error {
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	return c.QueryRow(ctx, q).Scan(dst)
}

// The test server checks the password (MD5): a wrong one is refused.
func TestPostgresChecksPassword(t *testing.T) {
	t.Parallel()
	p := PostgresServer(t)
	if !p.Controllable() {
		t.Skip("external server")
	}
	var db string
	if err := pgQueryRow(ctxTimeout(t, 30*time.Second), p.DSN(), "SELECT current_database()", &db); err != nil {
		t.Fatalf("the right password: %v", err)
	}
	wrong := strings.Replace(p.DSN(), ":"+p.Password+"@", ":wrong@", 1)
	err := pgQueryRow(ctxTimeout(t, 30*time.Second), wrong, "SELECT 1", &db)
	if err == nil || !strings.Contains(err.Error(), "28P01") {
		t.Fatalf("a wrong password: %v, want SQLSTATE 28P01", err)
	}
}

// A restart succeeds though a backend of the killed server outlived its
// postmaster (here stopped, so it cannot notice the postmaster's death and
// exit, as a backend forked during the kill or starved by a loaded machine
// does not): the restart kills it instead of failing with "pre-existing
// shared memory block is still in use". Stop then removes the server's
// shared memory segment, which a killed server leaves behind.
func TestPostgresRestartAfterStraggler(t *testing.T) {
	t.Parallel()
	p := PostgresServer(t)
	if !p.Controllable() {
		t.Skip("external server")
	}
	ctx := ctxTimeout(t, time.Minute)
	conn, err := pgx.Connect(ctx, p.DSN())
	if err != nil {
		t.Fatal(err)
	}
	var backend int
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&backend); err != nil {
		t.Fatal(err)
	}
	dataDir := filepath.Join(p.Dir(), "data")
	seg, ok := pgSegmentOf(dataDir)
	if !ok {
		t.Fatal("no shared memory segment in postmaster.pid")
	}
	if err := syscall.Kill(backend, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(backend, syscall.SIGKILL) })
	if err := syscall.Kill(p.PID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := p.Restart(ctx); err != nil {
		t.Fatalf("Restart with a backend of the killed server still attached: %v", err)
	}
	if alive(backend) {
		t.Errorf("the straggling backend %d is alive after the restart", backend)
	}
	var one int
	if err := pgQueryRow(ctx, p.DSN(), "SELECT 1", &one); err != nil {
		t.Fatalf("query after the restart: %v", err)
	}
	seg, _ = pgSegmentOf(dataDir)
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	if n := seg.attached(); n != -1 {
		t.Errorf("the killed server's shared memory segment (key %d, id %d) is left after Stop (%d attached)", seg.key, seg.id, n)
	}
}
