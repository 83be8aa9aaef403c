package testserver

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// MariaDB is a MariaDB server with a database and a user that has all
// privileges, reachable over TCP on 127.0.0.1 (and through a unix socket in
// its directory).
type MariaDB struct {
	*Server
	// User and Password log in over TCP; DB is the database created for
	// the tests ("distlock").
	User, Password, DB string

	socket string
	dsn    string // set for external servers: DSN returns it unchanged
}

// DSN returns a go-sql-driver/mysql data source name for the server:
// "user:pass@tcp(127.0.0.1:port)/distlock?parseTime=true".
func (m *MariaDB) DSN() string {
	if m.dsn != "" {
		return m.dsn
	}
	return fmt.Sprintf("%s:%s@tcp(%s)/%s?parseTime=true", m.User, m.Password, m.Addr(), m.DB)
}

// Socket returns the path of the server's unix socket ("" for external
// servers). root@localhost can log in through it without a password.
func (m *MariaDB) Socket() string { return m.socket }

const (
	mariaUser     = "distlock"
	mariaPassword = "distlock"
	mariaDB       = "distlock"
)

// mariaInit runs at every server start (--init-file) and is idempotent.
const mariaInit = `CREATE DATABASE IF NOT EXISTS ` + mariaDB + `;
CREATE USER IF NOT EXISTS '` + mariaUser + `'@'%' IDENTIFIED BY '` + mariaPassword + `';
GRANT ALL PRIVILEGES ON *.* TO '` + mariaUser + `'@'%' WITH GRANT OPTION;
`

// StartMariaDB initialises a data directory with mariadb-install-db in dir
// (a new temporary directory if empty; an existing data directory there is
// reused), starts mariadbd on a free loopback port with its own unix socket,
// and waits until the user distlock/distlock can log in over TCP to the
// database distlock. Both programs get --no-defaults, so /etc/mysql is
// ignored. Restart reuses the data directory: committed data survives Kill.
func StartMariaDB(ctx context.Context, dir string) (*MariaDB, error) {
	mariadbd, err := lookBinary("mariadb-server", "mariadbd", "mysqld")
	if err != nil {
		return nil, err
	}
	installDB, err := lookBinary("mariadb-server", "mariadb-install-db", "mysql_install_db")
	if err != nil {
		return nil, err
	}
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	s, err := newServer("mariadb", dir)
	if err != nil {
		return nil, err
	}
	m := &MariaDB{Server: s, User: mariaUser, Password: mariaPassword, DB: mariaDB}
	fail := func(err error) (*MariaDB, error) {
		_ = s.Stop()
		return nil, err
	}

	dataDir := filepath.Join(s.dir, "data")
	errLog := filepath.Join(s.dir, "err.log")
	initFile := filepath.Join(s.dir, "init.sql")
	s.logs = []string{errLog}
	// Unix socket paths are limited to 108 bytes; t.TempDir() paths can
	// be longer.
	m.socket = filepath.Join(s.dir, "mysql.sock")
	if len(m.socket) > 100 {
		sd, err := os.MkdirTemp("", "dlmy")
		if err != nil {
			return fail(err)
		}
		s.cleanup = append(s.cleanup, func() { _ = os.RemoveAll(sd) })
		m.socket = filepath.Join(sd, "mysql.sock")
	}
	if err := os.WriteFile(initFile, []byte(mariaInit), 0o644); err != nil {
		return fail(err)
	}
	root := os.Geteuid() == 0
	// A private tmpdir: the server names its temporary tables after its pid
	// in tmpdir, and two installs sharing /tmp have been seen to collide
	// ("Unknown table 'mysql.tmp_user_sys'").
	tmpDir := filepath.Join(s.dir, "tmp")
	if err := os.MkdirAll(tmpDir, 0o755); err != nil {
		return fail(err)
	}

	if err := mariaInstall(ctx, installDB, mariadbd, s.dir, dataDir, tmpDir, root); err != nil {
		return fail(err)
	}

	s.bin = mariadbd
	s.args = func() []string { return mariadbArgs(s, m.socket, dataDir, tmpDir, errLog, initFile, root) }
	s.probe = func(ctx context.Context) error {
		c, err := mysqlConnect(ctx, s.addr, m.User, m.Password, m.DB)
		if err != nil {
			return err
		}
		return c.Close()
	}
	if err := s.launch(ctx, 1); err != nil {
		return nil, err // launch has stopped s
	}
	return m, nil
}

// mariadbArgs are mariadbd's arguments for s's current port.
func mariadbArgs(s *Server, socket, dataDir, tmpDir, errLog, initFile string, root bool) []string {
	a := []string{
		"--no-defaults",
		"--datadir=" + dataDir,
		"--tmpdir=" + tmpDir,
		"--port=" + strconv.Itoa(s.ports[0]),
		"--bind-address=127.0.0.1",
		"--socket=" + socket,
		"--pid-file=" + filepath.Join(s.dir, "mariadb.pid"),
		"--log-error=" + errLog,
		"--init-file=" + initFile,
		"--skip-name-resolve",
		"--skip-log-bin",
		"--innodb-buffer-pool-size=32M",
		"--innodb-use-native-aio=0",
		"--max-connections=500",
	}
	if root {
		a = append(a, "--user=root")
	}
	return a
}

// mariaInstall initialises dataDir with mariadb-install-db (or copies the
// template of such a directory, see initFromTemplate), unless it holds a
// data directory already (Restart and a reused dir).
func mariaInstall(ctx context.Context, installDB, mariadbd, dir, dataDir, tmpDir string, root bool) error {
	if _, err := os.Stat(filepath.Join(dataDir, "mysql")); err == nil {
		return nil
	}
	fingerprint := []string{binaryStamp(installDB), binaryStamp(mariadbd), fmt.Sprint("root=", root)}
	return initFromTemplate("mariadb", dataDir, nil, fingerprint, func() error {
		return mariaInstallDB(ctx, installDB, dir, dataDir, tmpDir, root)
	})
}

// mariaInstallDB runs mariadb-install-db.
func mariaInstallDB(ctx context.Context, installDB, dir, dataDir, tmpDir string, root bool) error {
	args := []string{
		"--no-defaults",
		"--datadir=" + dataDir,
		"--tmpdir=" + tmpDir,
		"--auth-root-authentication-method=normal",
		"--skip-test-db",
		"--skip-name-resolve",
	}
	if root {
		args = append(args, "--user=root")
	}
	cmd := exec.CommandContext(ctx, installDB, args...)
	cmd.Dir = dir
	cmd.SysProcAttr = sysProcAttr()
	cmd.Cancel = func() error { return killGroup(cmd) }
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	_ = os.WriteFile(filepath.Join(dir, "install.log"), out, 0o644)
	if err != nil {
		return fmt.Errorf("testserver: %s --datadir=%s: %v\n%s", installDB, dataDir, err, tail(string(out), 40))
	}
	return nil
}

// killGroup SIGKILLs the process group of a started command.
func killGroup(cmd *exec.Cmd) error {
	if cmd.Process == nil {
		return nil
	}
	return killPG(cmd.Process.Pid)
}

func tail(s string, n int) string {
	lines := strings.SplitAfter(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "")
}

// parseMySQLDSN extracts user, password, address and database from a
// go-sql-driver DSN "user:pass@tcp(host:port)/db?params".
func parseMySQLDSN(dsn string) (user, pass, addr, db string, err error) {
	slash := strings.LastIndex(dsn, "/")
	if slash < 0 {
		return "", "", "", "", fmt.Errorf("testserver: DSN %q has no /dbname", dsn)
	}
	db, _, _ = strings.Cut(dsn[slash+1:], "?")
	head := dsn[:slash]
	if at := strings.LastIndex(head, "@"); at >= 0 {
		user, pass, _ = strings.Cut(head[:at], ":")
		head = head[at+1:]
	}
	if open := strings.Index(head, "("); open >= 0 && strings.HasSuffix(head, ")") {
		addr = head[open+1 : len(head)-1]
	}
	if addr == "" {
		addr = "127.0.0.1:3306"
	}
	return user, pass, addr, db, nil
}
