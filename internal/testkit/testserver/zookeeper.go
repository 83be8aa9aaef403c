package testserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// ZooKeeperConfig configures StartZooKeeper and StartZooKeeperEnsemble.
type ZooKeeperConfig struct {
	// TickTime is the server tick (whole milliseconds); 0 means 200ms.
	// The server clamps a client's session timeout to at least 2 ticks;
	// the maximum is fixed at 60 s (maxSessionTimeout=60000).
	TickTime time.Duration
}

// ZooKeeper jars from the Debian package "zookeeper". zookeeper.jar's
// manifest Class-Path names its other dependencies (jute, netty, metrics,
// commons-cli, ...), and slf4j-simple sends the log to stderr.
const (
	zkJar         = "/usr/share/java/zookeeper.jar"
	zkSlf4jSimple = "/usr/share/java/slf4j-simple.jar"
	zkMain        = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
)

// zkClasspath is the classpath given to java.
const zkClasspath = zkJar + ":" + zkSlf4jSimple

func zkJava() (string, error) {
	java, err := lookBinary("zookeeper", "java")
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(zkJar); err != nil {
		return "", missing(zkJar, "zookeeper")
	}
	return java, nil
}

// zkNode describes one ensemble member for zoo.cfg.
type zkNode struct{ client, peer, election int }

func (c ZooKeeperConfig) tickMS() int {
	t := int(c.TickTime / time.Millisecond)
	if t <= 0 {
		t = 200
	}
	return t
}

// newZooKeeper prepares server id (1-based) in dir. nodes returns the
// current port assignment of the whole ensemble (nil for standalone).
func newZooKeeper(dir string, cfg ZooKeeperConfig, id int, nodes func() []zkNode) (*Server, error) {
	java, err := zkJava()
	if err != nil {
		return nil, err
	}
	s, err := newServer("zookeeper", dir)
	if err != nil {
		return nil, err
	}
	s.bin = java
	dataDir := filepath.Join(s.dir, "data")
	cfgPath := filepath.Join(s.dir, "zoo.cfg")
	tick := cfg.tickMS()
	ensemble := nodes != nil
	s.prepare = func() error {
		if err := os.MkdirAll(dataDir, 0o755); err != nil {
			return err
		}
		var b strings.Builder
		fmt.Fprintf(&b, "tickTime=%d\n", tick)
		fmt.Fprintf(&b, "dataDir=%s\n", dataDir)
		fmt.Fprintf(&b, "clientPort=%d\n", s.ports[0])
		b.WriteString("clientPortAddress=127.0.0.1\n")
		fmt.Fprintf(&b, "minSessionTimeout=%d\n", 2*tick)
		b.WriteString("maxSessionTimeout=60000\n")
		b.WriteString("admin.enableServer=false\n")
		b.WriteString("4lw.commands.whitelist=*\n")
		// kill -9 keeps the page cache: fsync buys nothing here.
		b.WriteString("forceSync=no\n")
		b.WriteString("preAllocSize=1024\n")
		b.WriteString("maxClientCnxns=0\n")
		if ensemble {
			// initLimit generous for slow JVM starts (10 s at the
			// default tick); syncLimit short so a paused peer is
			// dropped quickly (3 s).
			fmt.Fprintf(&b, "initLimit=%d\n", max(10, 10000/tick))
			fmt.Fprintf(&b, "syncLimit=%d\n", max(5, 3000/tick))
			b.WriteString("standaloneEnabled=false\n")
			b.WriteString("reconfigEnabled=false\n")
			b.WriteString("electionPortBindRetry=3\n")
			for i, n := range nodes() {
				fmt.Fprintf(&b, "server.%d=127.0.0.1:%d:%d\n", i+1, n.peer, n.election)
			}
			if err := os.WriteFile(filepath.Join(dataDir, "myid"), []byte(strconv.Itoa(id)+"\n"), 0o644); err != nil {
				return err
			}
		}
		return os.WriteFile(cfgPath, []byte(b.String()), 0o644)
	}
	s.args = func() []string {
		return []string{
			"-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
			"-Djava.net.preferIPv4Stack=true",
			"-Dzookeeper.admin.enableServer=false",
			"-Dzookeeper.4lw.commands.whitelist=*",
			"-Dzookeeper.jmx.log4j.disable=true",
			"-cp", zkClasspath,
			zkMain, cfgPath,
		}
	}
	s.probe = func(ctx context.Context) error {
		mode, err := zkMode(ctx, s.addr)
		if err != nil {
			return err
		}
		switch mode {
		case "leader", "follower", "observer":
			return nil
		case "standalone":
			if !ensemble {
				return nil
			}
		}
		return fmt.Errorf("zookeeper %s: mode %q", s.addr, mode)
	}
	return s, nil
}

// StartZooKeeper starts a standalone ZooKeeper server (QuorumPeerMain from
// the Debian package) with its data in dir (a new temporary directory if
// empty) and waits until "srvr" reports Mode: standalone. The JVM start
// takes a few seconds; the wait is bounded by ctx or 60 s.
func StartZooKeeper(ctx context.Context, dir string, cfg ZooKeeperConfig) (*Server, error) {
	s, err := newZooKeeper(dir, cfg, 0, nil)
	if err != nil {
		return nil, err
	}
	if err := s.launch(ctx, 1); err != nil {
		return nil, err
	}
	return s, nil
}

// StartZooKeeperEnsemble starts an n-node quorum ensemble (n=3 normally) in
// subdirectories of dir (a new temporary directory if empty), each node with
// a client, peer and election port on loopback, and waits until "srvr"
// reports leader or follower on every node. Restart of a member waits until
// it has rejoined the quorum.
func StartZooKeeperEnsemble(ctx context.Context, dir string, n int, cfg ZooKeeperConfig) (*Cluster, error) {
	if n < 1 {
		return nil, fmt.Errorf("testserver: ZooKeeper ensemble size must be >= 1, got %d", n)
	}
	if _, err := zkJava(); err != nil {
		return nil, err
	}
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	var cleanup func()
	if dir == "" {
		d, err := os.MkdirTemp("", "distlock-zkensemble-")
		if err != nil {
			return nil, err
		}
		dir = d
		cleanup = func() { _ = os.RemoveAll(d) }
	}
	var err error
	for attempt := 0; attempt < startAttempts; attempt++ {
		var c *Cluster
		c, err = startZKEnsemble(ctx, dir, attempt, n, cfg)
		if err == nil {
			c.cleanup = cleanup
			return c, nil
		}
		if !errors.Is(err, errAddrInUse) || ctx.Err() != nil {
			break
		}
	}
	if cleanup != nil {
		cleanup()
	}
	return nil, err
}

func startZKEnsemble(ctx context.Context, dir string, attempt, n int, cfg ZooKeeperConfig) (*Cluster, error) {
	ports, err := freePorts(3 * n)
	if err != nil {
		return nil, err
	}
	nodes := make([]zkNode, n)
	for i := range nodes {
		nodes[i] = zkNode{ports[3*i], ports[3*i+1], ports[3*i+2]}
	}
	c := &Cluster{Servers: make([]*Server, n)}
	for i := range n {
		sub := filepath.Join(dir, fmt.Sprintf("node%d", i+1))
		if attempt > 0 {
			sub = filepath.Join(dir, fmt.Sprintf("try%d-node%d", attempt, i+1))
		}
		s, err := newZooKeeper(sub, cfg, i+1, func() []zkNode { return nodes })
		if err != nil {
			c.stopMembers()
			return nil, err
		}
		s.ports = []int{nodes[i].client, nodes[i].peer, nodes[i].election}
		s.addr = fmt.Sprintf("127.0.0.1:%d", nodes[i].client)
		c.Servers[i] = s
	}
	if err := c.startMembers(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// zkMode runs the "srvr" four-letter word and returns the Mode line value
// ("standalone", "leader", "follower", ...).
func zkMode(ctx context.Context, addr string) (string, error) {
	out, err := zk4lw(ctx, addr, "srvr")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(out, "\n") {
		if m, ok := strings.CutPrefix(line, "Mode: "); ok {
			return strings.TrimSpace(m), nil
		}
	}
	return "", fmt.Errorf("zookeeper srvr: %q", strings.TrimSpace(out))
}

// zk4lw sends a four-letter word and reads the answer until the server
// closes the connection.
func zk4lw(ctx context.Context, addr, word string) (string, error) {
	c, err := dial(ctx, addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if _, err := io.WriteString(c, word); err != nil {
		return "", err
	}
	b, err := io.ReadAll(io.LimitReader(c, 1<<20))
	if err != nil {
		return string(b), err
	}
	return string(b), nil
}
