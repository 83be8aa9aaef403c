package testserver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// RedisConfig configures StartRedis.
type RedisConfig struct {
	// Persistence enables the append-only file with fsync on every write
	// (appendonly yes, appendfsync always), so data survives Kill+Restart.
	// Without it the server has no persistence at all (save "",
	// appendonly no).
	Persistence bool
	// ClusterEnabled starts the server in cluster mode (cluster-enabled
	// yes) without forming a cluster; see StartRedisCluster.
	ClusterEnabled bool
	// ExtraArgs are appended to the redis-server command line, e.g.
	// []string{"--maxmemory", "10mb"}.
	ExtraArgs []string
}

// StartRedis starts redis-server on a free loopback port with its data in
// dir (a new temporary directory if dir is empty) and waits until it answers
// PING.
func StartRedis(ctx context.Context, dir string, cfg RedisConfig) (*Server, error) {
	s, err := newRedis(dir, cfg)
	if err != nil {
		return nil, err
	}
	nports := 1
	if cfg.ClusterEnabled {
		nports = 2 // client port and cluster bus port
	}
	if err := s.launch(ctx, nports); err != nil {
		return nil, err
	}
	return s, nil
}

func newRedis(dir string, cfg RedisConfig) (*Server, error) {
	bin, err := lookBinary("redis-server", "redis-server")
	if err != nil {
		return nil, err
	}
	s, err := newServer("redis", dir)
	if err != nil {
		return nil, err
	}
	s.bin = bin
	extra := append([]string(nil), cfg.ExtraArgs...)
	s.args = func() []string {
		a := []string{
			"--port", strconv.Itoa(s.ports[0]),
			"--bind", "127.0.0.1",
			"--protected-mode", "no",
			"--daemonize", "no",
			"--dir", s.dir,
			"--save", "",
			"--logfile", "",
		}
		if cfg.Persistence {
			a = append(a, "--appendonly", "yes", "--appendfsync", "always")
		} else {
			a = append(a, "--appendonly", "no")
		}
		if cfg.ClusterEnabled {
			a = append(a,
				"--cluster-enabled", "yes",
				"--cluster-port", strconv.Itoa(s.ports[1]),
				"--cluster-config-file", filepath.Join(s.dir, "nodes.conf"),
				"--cluster-node-timeout", "2000",
			)
		}
		return append(a, extra...)
	}
	s.probe = func(ctx context.Context) error { return redisPing(ctx, s.addr) }
	return s, nil
}

// StartRedisCluster starts masters (at least 3) cluster-mode redis-servers in
// subdirectories of dir (a new temporary directory if dir is empty), forms a
// cluster without replicas with redis-cli --cluster create and waits until
// every node reports cluster_state:ok. Restart of a member waits until that
// node reports cluster_state:ok again.
func StartRedisCluster(ctx context.Context, dir string, masters int) (*Cluster, error) {
	return StartRedisClusterConfig(ctx, dir, ClusterConfig{Masters: masters})
}

// ClusterConfig configures StartRedisClusterConfig.
type ClusterConfig struct {
	// Masters is the number of masters, at least 3.
	Masters int
	// Replicas is the number of replicas of each master (0: none). The
	// cluster has Masters×(1+Replicas) nodes; which node replicates
	// which master is redis-cli's choice (see CLUSTER NODES).
	Replicas int
	// Persistence gives every node the append-only file with fsync on
	// every write (see RedisConfig.Persistence).
	Persistence bool
}

// StartRedisClusterConfig is StartRedisCluster with replicas and
// persistence as cfg says.
func StartRedisClusterConfig(ctx context.Context, dir string, cfg ClusterConfig) (*Cluster, error) {
	masters := cfg.Masters
	if masters < 3 {
		return nil, fmt.Errorf("testserver: a Redis Cluster needs at least 3 masters, got %d", masters)
	}
	if cfg.Replicas < 0 {
		return nil, fmt.Errorf("testserver: %d replicas per master", cfg.Replicas)
	}
	nodes := masters * (1 + cfg.Replicas)
	cli, err := lookBinary("redis-tools", "redis-cli")
	if err != nil {
		return nil, err
	}
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	var cleanup func()
	if dir == "" {
		d, err := os.MkdirTemp("", "distlock-rediscluster-")
		if err != nil {
			return nil, err
		}
		dir = d
		cleanup = func() { _ = os.RemoveAll(d) }
	}
	c := &Cluster{Servers: make([]*Server, nodes)}
	formed := new(atomic.Bool)
	errs := make([]error, nodes)
	var wg sync.WaitGroup
	for i := range nodes {
		wg.Go(func() {
			s, err := newRedis(filepath.Join(dir, fmt.Sprintf("node%d", i+1)), RedisConfig{ClusterEnabled: true, Persistence: cfg.Persistence})
			if err != nil {
				errs[i] = err
				return
			}
			s.probe = func(ctx context.Context) error {
				if err := redisPing(ctx, s.addr); err != nil {
					return err
				}
				if !formed.Load() {
					return nil
				}
				return redisClusterOK(ctx, s.addr)
			}
			if err := s.launch(ctx, 2); err != nil {
				errs[i] = err
				return
			}
			c.Servers[i] = s
		})
	}
	wg.Wait()
	fail := func(err error) (*Cluster, error) {
		for _, s := range c.Servers {
			if s != nil {
				_ = s.Stop()
			}
		}
		if cleanup != nil {
			cleanup()
		}
		return nil, err
	}
	if err := errors.Join(errs...); err != nil {
		return fail(err)
	}
	c.cleanup = cleanup

	args := []string{"--cluster", "create"}
	args = append(args, c.Addrs()...)
	args = append(args, "--cluster-replicas", strconv.Itoa(cfg.Replicas), "--cluster-yes")
	cmd := exec.CommandContext(ctx, cli, args...)
	cmd.SysProcAttr = sysProcAttr()
	cmd.Cancel = func() error { return killGroup(cmd) }
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fail(fmt.Errorf("testserver: redis-cli --cluster create: %v\n%s", err, out))
	}
	formed.Store(true)
	if err := c.WaitReady(ctx); err != nil {
		return fail(fmt.Errorf("%w\nredis-cli output:\n%s", err, out))
	}
	if err := WaitClusterReplicas(ctx, c, cfg.Replicas); err != nil {
		return fail(fmt.Errorf("%w\nredis-cli output:\n%s", err, out))
	}
	return c, nil
}

// redisPing sends PING and expects +PONG.
func redisPing(ctx context.Context, addr string) error {
	v, err := redisDo(ctx, addr, "PING")
	if err != nil {
		return err
	}
	if v != "PONG" {
		return fmt.Errorf("redis PING: unexpected reply %q", v)
	}
	return nil
}

// redisClusterOK checks CLUSTER INFO for cluster_state:ok.
func redisClusterOK(ctx context.Context, addr string) error {
	v, err := redisDo(ctx, addr, "CLUSTER", "INFO")
	if err != nil {
		return err
	}
	info, _ := v.(string)
	if !strings.Contains(info, "cluster_state:ok") {
		return fmt.Errorf("redis %s: cluster not ok: %q", addr, firstLine(info))
	}
	return nil
}

func firstLine(s string) string {
	if i := strings.IndexAny(s, "\r\n"); i >= 0 {
		return s[:i]
	}
	return s
}

// redisError is an error reply (-ERR ...).
type redisError string

func (e redisError) Error() string { return string(e) }

// redisDo sends one command on a new connection and returns the reply:
// string for simple and bulk strings, int64, nil, []any, or a redisError.
func redisDo(ctx context.Context, addr string, args ...string) (any, error) {
	c, err := dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(c, b.String()); err != nil {
		return nil, err
	}
	v, err := readRESP(bufio.NewReader(c))
	if err != nil {
		return nil, err
	}
	if e, ok := v.(redisError); ok {
		return nil, e
	}
	return v, nil
}

func readRESP(r *bufio.Reader) (any, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return nil, errors.New("redis: empty reply line")
	}
	switch line[0] {
	case '+':
		return line[1:], nil
	case '-':
		return redisError(line[1:]), nil
	case ':':
		return strconv.ParseInt(line[1:], 10, 64)
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return nil, err
		}
		if n < 0 {
			return nil, nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return nil, err
		}
		if n < 0 {
			return nil, nil
		}
		out := make([]any, n)
		for i := range out {
			if out[i], err = readRESP(r); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("redis: unexpected reply %q", line)
}
