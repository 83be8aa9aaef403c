package mysql_test

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"net"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testkit/sqltest"
	"github.com/distlock/distlock/internal/testkit/testserver"
	"github.com/distlock/distlock/mysql"
)

// shared is the MariaDB server most tests use (with DISTLOCK_MYSQL_DSN,
// the external one), started by the first test that needs it; tests that
// kill or restart a server start their own.
var shared = sqltest.Shared[*testserver.MariaDB]{
	External: func() bool { return os.Getenv(testserver.EnvMySQLDSN) != "" },
	Start:    func(ctx context.Context) (*testserver.MariaDB, error) { return testserver.StartMariaDB(ctx, "") },
	Stop:     func(s *testserver.MariaDB) error { return s.Stop() },
	PerTest:  testserver.MariaDBServer,
	// The four conformance suites (two modes, by URL and over NewSqlx) and
	// two other parallel tests at once.
	Parallel: 6,
}

func TestMain(m *testing.M) { shared.Main(m) }

// server returns the shared server.
func server(t testing.TB) *testserver.MariaDB { return shared.Get(t) }

// ownServer starts a server for a test that kills or restarts it.
func ownServer(t testing.TB) *testserver.MariaDB { return sqltest.Own(t, testserver.MariaDBServer) }

// mysqlURL is the distlock URL of srv with extra query parameters.
func mysqlURL(srv *testserver.MariaDB, query string) string {
	u := url.URL{Scheme: "mysql", User: url.UserPassword(srv.User, srv.Password), Host: srv.Addr(), Path: "/" + srv.DB, RawQuery: query}
	return u.String()
}

// config is a go-sql-driver configuration for srv with interpolateParams.
func config(t testing.TB, srv *testserver.MariaDB) *gomysql.Config {
	t.Helper()
	cfg, err := gomysql.ParseDSN(srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	cfg.InterpolateParams = true
	cfg.ParseTime = true
	return cfg
}

// openDB opens a pool for cfg, closed at the end of the test.
func openDB(t testing.TB, cfg *gomysql.Config) *sql.DB {
	t.Helper()
	c, err := gomysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(c)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// adminDB is a plain pool for inspection and fault injection.
func adminDB(t testing.TB, srv *testserver.MariaDB) *sql.DB {
	t.Helper()
	return openDB(t, config(t, srv))
}

var (
	uniqueTable = sqltest.UniqueTable
	ctxT        = sqltest.Ctx
)

// wire is a dialer that watches the client side of the MySQL protocol: it
// records every command the client sends (COM_QUERY text included, which
// with interpolateParams is the whole statement with its arguments), and
// can swallow the server's reply to the next command, as a network that
// drops a response would.
type wire struct {
	mu       sync.Mutex
	commands []command
	swallow  atomic.Bool // the next command's connection gets no more replies
}

type command struct {
	code  byte
	query string
}

// MySQL command codes.
const (
	comQuit        = 0x01
	comQuery       = 0x03
	comPing        = 0x0e
	comStmtPrepare = 0x16
	comStmtExecute = 0x17
	comStmtClose   = 0x19
)

func (w *wire) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &wireConn{Conn: c, w: w, closed: make(chan struct{})}, nil
}

// reset forgets the recorded commands.
func (w *wire) reset() {
	w.mu.Lock()
	w.commands = nil
	w.mu.Unlock()
}

// roundTrips counts the recorded commands that wait for a reply.
func (w *wire) roundTrips() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, c := range w.commands {
		if c.code != comQuit && c.code != comStmtClose {
			n++
		}
	}
	return n
}

func (w *wire) queries() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var q []string
	for _, c := range w.commands {
		switch c.code {
		case comQuery:
			q = append(q, c.query)
		case comPing:
			q = append(q, "<COM_PING>")
		case comStmtPrepare:
			q = append(q, "<PREPARE> "+c.query)
		case comStmtExecute:
			q = append(q, "<EXECUTE>")
		}
	}
	return q
}

type wireConn struct {
	net.Conn
	w         *wire
	swallowed atomic.Bool
	once      sync.Once
	closed    chan struct{}
}

func (c *wireConn) Write(b []byte) (int, error) {
	// go-sql-driver writes one packet per Write: 3-byte length, sequence
	// id, payload. Sequence 0 starts a command.
	if len(b) >= 5 && b[3] == 0 {
		cmd := command{code: b[4]}
		if cmd.code == comQuery || cmd.code == comStmtPrepare {
			cmd.query = string(b[5:])
		}
		c.w.mu.Lock()
		c.w.commands = append(c.w.commands, cmd)
		c.w.mu.Unlock()
		if cmd.code != comQuit && c.w.swallow.CompareAndSwap(true, false) {
			c.swallowed.Store(true)
		}
	}
	return c.Conn.Write(b)
}

func (c *wireConn) Read(b []byte) (int, error) {
	if c.swallowed.Load() {
		<-c.closed
		return 0, net.ErrClosed
	}
	return c.Conn.Read(b)
}

func (c *wireConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

// wiredDB opens a pool for srv whose connections go through w.
func wiredDB(t testing.TB, srv *testserver.MariaDB, w *wire) *sql.DB {
	cfg := config(t, srv)
	cfg.DialFunc = w.dial
	return openDB(t, cfg)
}

func mysqlKeyHash(key string) [32]byte { return sha256.Sum256([]byte(key)) }

// mustNew is mysql.New for a test: an error fails it.
func mustNew(t testing.TB, db *sql.DB, opts ...mysql.Option) *distlock.Locker {
	t.Helper()
	l, err := mysql.New(db, opts...)
	if err != nil {
		t.Fatalf("mysql.New: %v", err)
	}
	return l
}
