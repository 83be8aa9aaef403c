package testserver

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Postgres is a PostgreSQL server with a superuser and a database for the
// tests, reachable over TCP on 127.0.0.1 with password (MD5) login.
type Postgres struct {
	*Server
	// User and Password log in over TCP; DB is the database created for
	// the tests ("distlock").
	User, Password, DB string

	dsn string // set for external servers: DSN returns it unchanged
}

// DSN returns a libpq-style URL for the server:
// "postgres://distlock:distlock@127.0.0.1:port/distlock?sslmode=disable".
func (p *Postgres) DSN() string {
	if p.dsn != "" {
		return p.dsn
	}
	u := url.URL{Scheme: "postgres", User: url.UserPassword(p.User, p.Password), Host: p.Addr(), Path: "/" + p.DB, RawQuery: "sslmode=disable"}
	return u.String()
}

const (
	pgUser     = "distlock"
	pgPassword = "distlock"
	pgDB       = "distlock"
)

// postgresBinaries finds initdb and postgres: in PATH, or in the newest
// /usr/lib/postgresql/<version>/bin, where Debian's postgresql package puts
// them.
func postgresBinaries() (initdb, postgres string, err error) {
	if i, err1 := exec.LookPath("initdb"); err1 == nil {
		if p, err2 := exec.LookPath("postgres"); err2 == nil {
			return i, p, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(a, b int) bool { return pgVersion(dirs[a]) > pgVersion(dirs[b]) })
	for _, d := range dirs {
		i, p := filepath.Join(d, "initdb"), filepath.Join(d, "postgres")
		if isExec(i) && isExec(p) {
			return i, p, nil
		}
	}
	return "", "", missing("initdb and postgres", "postgresql")
}

func pgVersion(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

func isExec(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

// pgCredential returns the credential to run initdb and postgres with:
// nil when this process is not root, else the "postgres" system user that
// Debian's postgresql package creates (initdb and postgres refuse to run as
// root).
func pgCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("%w: running as root, and PostgreSQL refuses root: the unprivileged user \"postgres\" is needed (apt-get install -y postgresql creates it): %v", ErrMissingBinary, err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("testserver: user postgres has uid %q gid %q", u.Uid, u.Gid)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
}

// StartPostgres initialises a cluster with initdb and starts postgres on a
// free loopback port, waiting until it accepts logins. The data directory is
// dir/data (dir: a new temporary directory if empty); when this process runs
// as root, both programs run as the unprivileged system user "postgres" and
// dir is ignored: the server's directory is then a new temporary directory
// owned by that user (t.TempDir paths are not traversable by it), removed
// by Stop. The superuser distlock/distlock logs in with a password over
// TCP to the database distlock; no unix socket is opened. The password is
// checked with MD5, not SCRAM: a SCRAM login costs the client 4096 rounds
// of PBKDF2, 0.1s per connection under the race detector on a loaded
// machine, and the tests open thousands (row mode opens a pool per
// Locker). fsync is off (the tests kill the server process, never the
// machine: committed transactions survive kill -9 through the operating
// system's page cache) and synchronous_commit is on. Restart reuses the
// data directory, so committed rows survive Kill.
//
// PostgreSQL's backends leave the postmaster's process group, so Kill,
// Pause and Resume signal each of the postmaster's children as well (found
// through /proc); Kill stops the postmaster first, so that it forks none
// while they are killed, and a restart finds no process still attached to
// the old shared memory.
func StartPostgres(ctx context.Context, dir string) (*Postgres, error) {
	initdb, postgres, err := postgresBinaries()
	if err != nil {
		return nil, err
	}
	cred, err := pgCredential()
	if err != nil {
		return nil, err
	}
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	if cred != nil {
		// The postgres user must be able to enter its working and data
		// directories; dir (often under t.TempDir) may not allow it.
		d, err := os.MkdirTemp("", "distlock-postgres-")
		if err != nil {
			return nil, err
		}
		if err := os.Chown(d, int(cred.Uid), int(cred.Gid)); err != nil {
			_ = os.RemoveAll(d)
			return nil, err
		}
		dir = d
	}
	s, err := newServer("postgres", dir)
	if err != nil {
		return nil, err
	}
	if cred != nil {
		s.cleanup = append(s.cleanup, func() { _ = os.RemoveAll(dir) })
	}
	dataDir := filepath.Join(s.dir, "data")
	s.cleanup = append(s.cleanup, func() { pgRemoveSegment(dataDir) })
	s.prepare = func() error { return pgReleaseSegment(dataDir) }
	p := &Postgres{Server: s, User: pgUser, Password: pgPassword, DB: pgDB}
	fail := func(err error) (*Postgres, error) {
		_ = s.Stop()
		return nil, err
	}
	home := s.dir
	setAttr := func(a *syscall.SysProcAttr) { a.Credential = cred }
	run := pgRunner(ctx, home, setAttr)

	if err := pgInitialise(run, initdb, postgres, home, dataDir, cred, p); err != nil {
		return fail(err)
	}

	s.bin = postgres
	s.procAttr = setAttr
	s.tree = signalChildren
	s.args = func() []string {
		return []string{
			"-D", dataDir,
			"-p", strconv.Itoa(s.ports[0]),
			"-c", "listen_addresses=127.0.0.1",
			"-c", "unix_socket_directories=",
			"-c", "max_connections=300",
			"-c", "shared_buffers=16MB",
			"-c", "fsync=off",
			"-c", "synchronous_commit=on",
			"-c", "full_page_writes=off",
			"-c", "logging_collector=off",
			"-c", "log_min_messages=warning",
			// Dynamic shared memory in the data directory, removed with
			// it: the posix default leaves a /dev/shm segment behind
			// for every server the tests kill.
			"-c", "dynamic_shared_memory_type=mmap",
		}
	}
	s.probe = func(ctx context.Context) error { return pgAccepts(ctx, s.addr, p.User, p.DB) }
	if err := s.launch(ctx, 1); err != nil {
		return nil, err // launch has stopped s
	}
	return p, nil
}

// pgRunner returns a function that runs a program in home with the
// server's credentials (setAttr), logging its output to home/<name>.log.
func pgRunner(ctx context.Context, home string, setAttr func(*syscall.SysProcAttr)) func(stdin, name string, args ...string) error {
	return func(stdin, name string, args ...string) error {
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir = home
		cmd.Stdin = strings.NewReader(stdin)
		cmd.SysProcAttr = sysProcAttr()
		setAttr(cmd.SysProcAttr)
		cmd.Cancel = func() error { return killGroup(cmd) }
		cmd.WaitDelay = 5 * time.Second
		out, err := cmd.CombinedOutput()
		_ = os.WriteFile(filepath.Join(home, filepath.Base(name)+".log"), out, 0o644)
		if err != nil {
			return fmt.Errorf("testserver: %s %s: %v\n%s", name, strings.Join(args, " "), err, tail(string(out), 40))
		}
		return nil
	}
}

// pgInitialise creates the cluster in dataDir with initdb, and the test
// database (or copies the template of such a cluster, see
// initFromTemplate), unless dataDir holds one already (Restart, a reused
// dir). run runs a program as the server's user.
func pgInitialise(run func(stdin, name string, args ...string) error, initdb, postgres, home, dataDir string, cred *syscall.Credential, p *Postgres) error {
	if _, err := os.Stat(filepath.Join(dataDir, "PG_VERSION")); err == nil {
		return nil
	}
	fingerprint := []string{binaryStamp(initdb), binaryStamp(postgres), p.User, p.Password, p.DB, "md5 UTF8 C"}
	return initFromTemplate("postgres", dataDir, cred, fingerprint, func() error {
		return pgInitdb(run, initdb, postgres, home, dataDir, cred, p)
	})
}

// pgInitdb runs initdb and creates the test database.
func pgInitdb(run func(stdin, name string, args ...string) error, initdb, postgres, home, dataDir string, cred *syscall.Credential, p *Postgres) error {
	pwFile := filepath.Join(home, "pwfile")
	if err := os.WriteFile(pwFile, []byte(p.Password+"\n"), 0o600); err != nil {
		return err
	}
	if cred != nil {
		if err := os.Chown(pwFile, int(cred.Uid), int(cred.Gid)); err != nil {
			return err
		}
	}
	err := run("", initdb, "-D", dataDir, "-U", p.User, "--pwfile="+pwFile,
		"--auth-host=md5", "--auth-local=trust", "-E", "UTF8", "--locale=C", "--no-sync")
	_ = os.Remove(pwFile)
	if err != nil {
		return err
	}
	// The test database, created in single-user mode (no socket or
	// port needed), and the password stored as MD5, which md5 login
	// needs (initdb stored it for SCRAM).
	setup := "SET password_encryption = 'md5';\nALTER USER " + p.User + " PASSWORD '" + p.Password + "';\nCREATE DATABASE " + p.DB + ";\n"
	if err := run(setup, postgres, "--single", "-D", dataDir, "-F", "-c", "exit_on_error=true", "postgres"); err != nil {
		return err
	}
	return nil
}

// signalChildren signals the child processes of the postmaster pid, which
// run in process groups of their own. For SIGKILL and SIGSTOP the postmaster
// is stopped first, so it forks no new child meanwhile (the caller then
// signals the postmaster's group).
func signalChildren(pid int, sig syscall.Signal) error {
	if sig == syscall.SIGKILL || sig == syscall.SIGSTOP {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			return err
		}
		// kill(2) returns before the postmaster has stopped: until it
		// has, it may still fork a child the list below would miss.
		for deadline := time.Now().Add(2 * time.Second); !allStopped([]int{pid}) && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
	}
	kids := ChildPIDs(pid)
	for _, c := range kids {
		_ = syscall.Kill(c, sig)
	}
	if sig == syscall.SIGKILL {
		// Killed children are reaped by whoever inherits them; wait
		// (bounded) until each has died, so none is still attached to the
		// server's shared memory when it restarts.
		for _, c := range kids {
			for deadline := time.Now().Add(5 * time.Second); alive(c) && time.Now().Before(deadline); {
				time.Sleep(5 * time.Millisecond)
			}
		}
	}
	return nil
}

// alive reports whether process pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	return i >= 0 && len(f) > 0 && f[0] != "Z" && f[0] != "X"
}

// ChildPIDs lists the processes whose parent is pid, from /proc (empty where
// there is no /proc).
func ChildPIDs(pid int) []int {
	parent := strconv.Itoa(pid)
	return procsWhere("stat", func(b []byte) bool {
		// "pid (comm) state ppid ...": comm may hold spaces and parens.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			return false
		}
		f := strings.Fields(string(b[i+1:]))
		return len(f) > 1 && f[1] == parent
	})
}

// pgAccepts sends a protocol-3 StartupMessage and reports whether the server
// answers with an authentication request, which it sends only once it
// accepts connections (while starting up or recovering it answers with an
// error instead).
func pgAccepts(ctx context.Context, addr, user, db string) error {
	c, err := dial(ctx, addr)
	if err != nil {
		return err
	}
	defer c.Close()
	var body bytes.Buffer
	_ = binary.Write(&body, binary.BigEndian, int32(196608))
	for _, kv := range []string{"user", user, "database", db} {
		body.WriteString(kv)
		body.WriteByte(0)
	}
	body.WriteByte(0)
	msg := binary.BigEndian.AppendUint32(nil, uint32(body.Len()+4))
	if _, err := c.Write(append(msg, body.Bytes()...)); err != nil {
		return err
	}
	var head [5]byte
	if _, err := io.ReadFull(c, head[:]); err != nil {
		return err
	}
	switch head[0] {
	case 'R':
		return nil
	case 'E':
		n := int(binary.BigEndian.Uint32(head[1:])) - 4
		if n < 0 || n > 1<<16 {
			return errors.New("postgres: malformed error response")
		}
		b := make([]byte, n)
		_, _ = io.ReadFull(c, b)
		var msg []string
		for _, f := range bytes.Split(b, []byte{0}) {
			if len(f) > 1 && (f[0] == 'M' || f[0] == 'C') {
				msg = append(msg, string(f[1:]))
			}
		}
		return fmt.Errorf("postgres: %s", strings.Join(msg, " "))
	}
	return fmt.Errorf("postgres: unexpected startup reply %q", head[0])
}

// parsePostgresDSN extracts user, password, address and database from a
// postgres:// URL.
func parsePostgresDSN(dsn string) (user, pass, addr, db string, err error) {
	u, err := url.Parse(dsn)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", "", "", "", fmt.Errorf("testserver: want postgres://user:pass@host:port/db, got a malformed URL")
	}
	if u.User != nil {
		user = u.User.Username()
		pass, _ = u.User.Password()
	}
	addr = u.Host
	if addr == "" {
		addr = "127.0.0.1:5432"
	} else if u.Port() == "" {
		addr += ":5432"
	}
	return user, pass, addr, strings.TrimPrefix(u.Path, "/"), nil
}
