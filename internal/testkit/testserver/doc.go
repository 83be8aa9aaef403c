// Package testserver starts real Redis, memcached, ZooKeeper, MariaDB and
// PostgreSQL servers for tests and demos.
//
// Each server runs as a child process on free loopback ports with its data
// in a private directory. Start functions return once the server answers
// its own protocol: Redis PING, memcached "version", the ZooKeeper "srvr"
// four-letter word, for MariaDB a real login over TCP, and for PostgreSQL
// an authentication request in answer to a StartupMessage. The package uses
// only the standard library and speaks just enough of each protocol to check
// readiness.
//
// Processes never outlive the caller. Every child runs in its own process
// group, with PR_SET_PDEATHSIG set to SIGKILL (on Linux). Stop and Kill
// SIGKILL the whole group and reap it. The test wrappers register
// t.Cleanup(Stop), so a failing test leaves nothing behind. A killed test
// binary leaves nothing behind either.
//
// A controllable Server can also inject faults:
//
//   - Kill: SIGKILL, like a crash. The port is freed and the data directory
//     is kept.
//   - Pause and Resume: SIGSTOP and SIGCONT. Connections stay open but
//     nothing answers.
//   - Restart: start again on the same port with the same data directory.
//     MariaDB data survives kill -9, and so does Redis data with
//     RedisConfig.Persistence.
//
// # Core API and test wrappers
//
// The Start* functions (StartRedis, StartRedisCluster, StartMemcached,
// StartZooKeeper, StartZooKeeperEnsemble, StartMariaDB, StartPostgres) need no testing.TB,
// so a CLI demo can use them. Pass dir == "" to use a fresh temporary
// directory that Stop removes.
//
// The test wrappers (Redis, RedisN, RedisCluster, Memcached, ZooKeeper,
// ZooKeeperEnsemble, MariaDBServer, PostgresServer) work in t.TempDir(). They register
// cleanup and fail the test with an apt-get hint if a binary is missing.
// scripts/install-deps.sh installs every binary. The Debian packages are
// redis-server, redis-tools, memcached, zookeeper, mariadb-server and
// postgresql.
//
// # PostgreSQL as root
//
// initdb and postgres refuse to run as root. When the test binary is root
// (CI, containers), StartPostgres runs both as the unprivileged system user
// "postgres" that Debian's postgresql package creates: the children get
// that user's uid and gid (SysProcAttr.Credential, the equivalent of
// runuser -u postgres), and the data directory is a temporary directory
// chowned to that user outside t.TempDir (whose parents only root may
// enter); Stop removes it. A non-root test binary runs them as itself.
// The binaries are looked up in PATH, then in the newest
// /usr/lib/postgresql/<version>/bin.
//
// # External servers
//
// If these environment variables are set, the test wrappers start no
// process. They return non-controllable Servers that point at the given
// servers, for example the ones in docker-compose.yml. The fault methods
// of such Servers return ErrNotControllable, and Stop does nothing.
//
//	DISTLOCK_REDIS_ADDR            host:port of one Redis (Redis)
//	DISTLOCK_REDLOCK_ADDRS         comma-separated independent Redis masters (RedisN)
//	DISTLOCK_REDIS_CLUSTER_ADDRS   comma-separated Redis Cluster nodes (RedisCluster)
//	DISTLOCK_MEMCACHED_ADDR        host:port of one memcached (Memcached)
//	DISTLOCK_ZOOKEEPER_ADDRS       comma-separated ZooKeeper servers (ZooKeeper uses
//	                               the first one, ZooKeeperEnsemble all of them)
//	DISTLOCK_MYSQL_DSN             go-sql-driver DSN, e.g.
//	                               distlock:distlock@tcp(127.0.0.1:13306)/distlock?parseTime=true
//	DISTLOCK_POSTGRES_DSN          postgres:// URL, e.g.
//	                               postgres://distlock:distlock@127.0.0.1:15432/distlock?sslmode=disable
//
// Tests that need fault injection should check Server.Controllable and skip
// when it is false.
package testserver
