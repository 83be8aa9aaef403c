package testserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// SentinelConfig configures StartRedisSentinel.
type SentinelConfig struct {
	// Master is the name the sentinels monitor the primary under
	// (default "distlock").
	Master string
	// Replicas is the number of replicas of the primary (default 2).
	Replicas int
	// Sentinels is the number of sentinels (default 3); the quorum is a
	// majority of them.
	Sentinels int
	// DownAfter is the sentinels' down-after-milliseconds: how long the
	// primary must not answer before a failover starts (default 1s).
	DownAfter time.Duration
	// Persistence gives every data node the append-only file with fsync
	// on every write (see RedisConfig.Persistence).
	Persistence bool
}

// SentinelSet is a Redis primary with replicas, monitored by sentinels
// that fail it over: Debian's redis-server started with --sentinel (the
// redis-sentinel binary is the same program).
type SentinelSet struct {
	// Master is the name the sentinels know the primary by.
	Master string
	// Nodes are the data nodes: Nodes[0] was the primary at start, the
	// others its replicas. After a failover another node is the primary
	// (see Primary).
	Nodes []*Server
	// Sentinels are the sentinel processes.
	Sentinels []*Server

	cfg         SentinelConfig
	cleanup     func()
	cleanupOnce sync.Once
}

// StartRedisSentinel starts a primary, cfg.Replicas replicas of it and
// cfg.Sentinels sentinels in subdirectories of dir (a new temporary
// directory if dir is empty), and waits until every replica is in sync and
// every sentinel knows every replica and every other sentinel, so that a
// failover can start as soon as the primary fails.
func StartRedisSentinel(ctx context.Context, dir string, cfg SentinelConfig) (*SentinelSet, error) {
	if cfg.Master == "" {
		cfg.Master = "distlock"
	}
	if cfg.Replicas <= 0 {
		cfg.Replicas = 2
	}
	if cfg.Sentinels <= 0 {
		cfg.Sentinels = 3
	}
	if cfg.DownAfter <= 0 {
		cfg.DownAfter = time.Second
	}
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	set := &SentinelSet{Master: cfg.Master, cfg: cfg}
	if dir == "" {
		d, err := os.MkdirTemp("", "distlock-redissentinel-")
		if err != nil {
			return nil, err
		}
		dir = d
		set.cleanup = func() { _ = os.RemoveAll(d) }
	}
	fail := func(err error) (*SentinelSet, error) {
		_ = set.Stop()
		return nil, err
	}
	primary, err := StartRedis(ctx, filepath.Join(dir, "node1"), RedisConfig{Persistence: cfg.Persistence})
	if err != nil {
		return fail(err)
	}
	set.Nodes = append(set.Nodes, primary)
	_, port, _ := strings.Cut(primary.Addr(), ":")
	replicas := make([]*Server, cfg.Replicas)
	errs := make([]error, cfg.Replicas)
	var wg sync.WaitGroup
	for i := range replicas {
		wg.Go(func() {
			replicas[i], errs[i] = StartRedis(ctx, filepath.Join(dir, fmt.Sprintf("node%d", i+2)), RedisConfig{
				Persistence: cfg.Persistence,
				ExtraArgs:   []string{"--replicaof", "127.0.0.1", port},
			})
		})
	}
	wg.Wait()
	for _, r := range replicas {
		if r != nil {
			set.Nodes = append(set.Nodes, r)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fail(err)
	}
	if err := waitReplicasOnline(ctx, primary.Addr(), cfg.Replicas); err != nil {
		return fail(err)
	}
	quorum := cfg.Sentinels/2 + 1
	sentinels := make([]*Server, cfg.Sentinels)
	errs = make([]error, cfg.Sentinels)
	for i := range sentinels {
		wg.Go(func() {
			sentinels[i], errs[i] = startSentinel(ctx, filepath.Join(dir, fmt.Sprintf("sentinel%d", i+1)), cfg, primary.Addr(), quorum)
		})
	}
	wg.Wait()
	for _, s := range sentinels {
		if s != nil {
			set.Sentinels = append(set.Sentinels, s)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fail(err)
	}
	if err := set.WaitSettled(ctx); err != nil {
		return fail(err)
	}
	return set, nil
}

// startSentinel starts one sentinel monitoring the primary at addr. Its
// configuration file is written at the first start only: the sentinel
// rewrites it with what it learns (replicas, other sentinels, the current
// primary after a failover), which a restart keeps.
func startSentinel(ctx context.Context, dir string, cfg SentinelConfig, addr string, quorum int) (*Server, error) {
	bin, err := lookBinary("redis-server", "redis-server")
	if err != nil {
		return nil, err
	}
	s, err := newServer("redis-sentinel", dir)
	if err != nil {
		return nil, err
	}
	s.bin = bin
	conf := filepath.Join(s.dir, "sentinel.conf")
	host, port, _ := strings.Cut(addr, ":")
	s.prepare = func() error {
		if b, err := os.ReadFile(conf); err == nil && strings.Contains(string(b), fmt.Sprintf("\nport %d\n", s.ports[0])) {
			return nil // written by an earlier start on this port, and kept up to date by the sentinel
		}
		lines := []string{
			"",
			fmt.Sprintf("port %d", s.ports[0]),
			"bind 127.0.0.1",
			"protected-mode no",
			"daemonize no",
			`logfile ""`,
			"dir " + s.dir,
			fmt.Sprintf("sentinel monitor %s %s %s %d", cfg.Master, host, port, quorum),
			fmt.Sprintf("sentinel down-after-milliseconds %s %d", cfg.Master, cfg.DownAfter.Milliseconds()),
			fmt.Sprintf("sentinel failover-timeout %s %d", cfg.Master, max(3*cfg.DownAfter.Milliseconds(), 3000)),
			fmt.Sprintf("sentinel parallel-syncs %s 1", cfg.Master),
			"",
		}
		return os.WriteFile(conf, []byte(strings.Join(lines, "\n")), 0o644)
	}
	s.args = func() []string { return []string{conf, "--sentinel"} }
	s.probe = func(ctx context.Context) error {
		_, err := redisDo(ctx, s.addr, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", cfg.Master)
		return err
	}
	if err := s.launch(ctx, 1); err != nil {
		return nil, err
	}
	return s, nil
}

// SentinelAddrs returns the sentinels' addresses.
func (s *SentinelSet) SentinelAddrs() []string {
	out := make([]string, len(s.Sentinels))
	for i, n := range s.Sentinels {
		out[i] = n.Addr()
	}
	return out
}

// URL returns a redis+sentinel:// URL of the set with the given query
// (without '?'; may be empty).
func (s *SentinelSet) URL(query string) string {
	u := "redis+sentinel://" + strings.Join(s.SentinelAddrs(), ",") + "/0?master=" + s.Master
	if query != "" {
		u += "&" + query
	}
	return u
}

// PrimaryAddr returns the primary's address as the first sentinel that
// answers reports it.
func (s *SentinelSet) PrimaryAddr(ctx context.Context) (string, error) {
	var errs []error
	for _, sn := range s.Sentinels {
		v, err := redisDo(ctx, sn.Addr(), "SENTINEL", "GET-MASTER-ADDR-BY-NAME", s.Master)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		hp, ok := v.([]any)
		if !ok || len(hp) != 2 {
			errs = append(errs, fmt.Errorf("sentinel %s: unexpected reply %v", sn.Addr(), v))
			continue
		}
		h, _ := hp[0].(string)
		p, _ := hp[1].(string)
		return h + ":" + p, nil
	}
	return "", fmt.Errorf("testserver: no sentinel reports the primary: %w", errors.Join(errs...))
}

// Node returns the data node listening on addr, nil if none.
func (s *SentinelSet) Node(addr string) *Server {
	for _, n := range s.Nodes {
		if n.Addr() == addr {
			return n
		}
	}
	return nil
}

// Primary returns the data node the sentinels report as the primary.
func (s *SentinelSet) Primary(ctx context.Context) (*Server, error) {
	addr, err := s.PrimaryAddr(ctx)
	if err != nil {
		return nil, err
	}
	if n := s.Node(addr); n != nil {
		return n, nil
	}
	return nil, fmt.Errorf("testserver: the sentinels report primary %s, not a node of the set", addr)
}

// WaitPrimaryChange waits until every sentinel reports a primary other
// than old, and that node answers as a primary (role:master); it returns
// the new primary.
func (s *SentinelSet) WaitPrimaryChange(ctx context.Context, old string) (*Server, error) {
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	for {
		addr, err := s.agreedPrimary(ctx)
		if err == nil && addr != old {
			if n := s.Node(addr); n != nil && isRole(ctx, addr, "master") == nil {
				return n, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("testserver: no failover away from %s: %w (last: %s, %v)", old, ctx.Err(), addr, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// agreedPrimary returns the primary every running sentinel reports.
func (s *SentinelSet) agreedPrimary(ctx context.Context) (string, error) {
	agreed := ""
	for _, sn := range s.Sentinels {
		if sn.PID() == 0 {
			continue
		}
		v, err := redisDo(ctx, sn.Addr(), "SENTINEL", "GET-MASTER-ADDR-BY-NAME", s.Master)
		if err != nil {
			return "", err
		}
		hp, _ := v.([]any)
		if len(hp) != 2 {
			return "", fmt.Errorf("sentinel %s: unexpected reply %v", sn.Addr(), v)
		}
		h, _ := hp[0].(string)
		p, _ := hp[1].(string)
		a := h + ":" + p
		if agreed != "" && a != agreed {
			return "", fmt.Errorf("sentinels disagree: %s and %s", agreed, a)
		}
		agreed = a
	}
	return agreed, nil
}

// WaitSettled waits until the sentinels agree on a primary that answers
// as one, every other running data node replicates from it in sync, and
// every running sentinel knows all the running replicas and the other
// running sentinels (a failover needs them to agree): the state in which
// the next failure of the primary is failed over.
func (s *SentinelSet) WaitSettled(ctx context.Context) error {
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	var last error
	for {
		last = s.settled(ctx)
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testserver: redis sentinel set not settled: %w (last: %v)", ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (s *SentinelSet) settled(ctx context.Context) error {
	primary, err := s.agreedPrimary(ctx)
	if err != nil {
		return err
	}
	if err := isRole(ctx, primary, "master"); err != nil {
		return err
	}
	replicas, sentinels := 0, 0
	for _, n := range s.Nodes {
		if n.PID() != 0 && n.Addr() != primary {
			replicas++
		}
	}
	for _, sn := range s.Sentinels {
		if sn.PID() != 0 {
			sentinels++
		}
	}
	if err := waitReplicasOnline(ctx, primary, -replicas); err != nil {
		return err
	}
	for _, sn := range s.Sentinels {
		if sn.PID() == 0 {
			continue
		}
		v, err := redisDo(ctx, sn.Addr(), "SENTINEL", "MASTER", s.Master)
		if err != nil {
			return err
		}
		f := fields(v)
		if f["num-slaves"] != strconv.Itoa(replicas) || f["num-other-sentinels"] != strconv.Itoa(sentinels-1) || strings.Contains(f["flags"], "down") {
			return fmt.Errorf("sentinel %s: flags %s, %s replicas (want %d), %s other sentinels (want %d)", sn.Addr(), f["flags"], f["num-slaves"], replicas, f["num-other-sentinels"], sentinels-1)
		}
		// num-slaves counts replicas that are down too. (Their
		// master-link-status is the sentinel's last INFO, up to 10s old
		// while the primary is up; the primary's own view is checked
		// above.)
		rv, err := redisDo(ctx, sn.Addr(), "SENTINEL", "REPLICAS", s.Master)
		if err != nil {
			return err
		}
		list, _ := rv.([]any)
		for _, r := range list {
			if rf := fields(r); strings.Contains(rf["flags"], "down") {
				return fmt.Errorf("sentinel %s: replica %s:%s flags %s", sn.Addr(), rf["ip"], rf["port"], rf["flags"])
			}
		}
	}
	return nil
}

// Rejoin restarts node n (killed, or the primary failed away from) and
// makes it a replica of the current primary at once, as an operator
// would, rather than waiting for the sentinels to convert it (they look
// at a node that is not the primary every 10s); it returns when the set
// is settled again.
func (s *SentinelSet) Rejoin(ctx context.Context, n *Server) error {
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	primary, err := s.agreedPrimary(ctx)
	if err != nil {
		return err
	}
	if primary == n.Addr() {
		return fmt.Errorf("testserver: Rejoin(%s): it is the primary", n)
	}
	if err := n.Restart(ctx); err != nil {
		return err
	}
	host, port, _ := strings.Cut(primary, ":")
	if _, err := redisDo(ctx, n.Addr(), "REPLICAOF", host, port); err != nil {
		return fmt.Errorf("testserver: Rejoin(%s): %w", n, err)
	}
	return s.WaitSettled(ctx)
}

// fields turns a flat reply [k1 v1 k2 v2 ...] into a map.
func fields(v any) map[string]string {
	list, _ := v.([]any)
	out := map[string]string{}
	for i := 0; i+1 < len(list); i += 2 {
		k, _ := list[i].(string)
		val, _ := list[i+1].(string)
		out[k] = val
	}
	return out
}

// isRole checks that the server at addr reports the role.
func isRole(ctx context.Context, addr, role string) error {
	v, err := redisDo(ctx, addr, "INFO", "replication")
	if err != nil {
		return err
	}
	info, _ := v.(string)
	if !strings.Contains(info, "role:"+role+"\r\n") {
		return fmt.Errorf("redis %s: not role:%s: %q", addr, role, firstLine(strings.TrimPrefix(info, "# Replication\r\n")))
	}
	return nil
}

// waitReplicasOnline waits until the primary at addr reports n replicas
// online with its own replication offset (in sync: before the sentinels
// start, whose hello messages keep the offset moving); n < 0: check once
// for -n replicas online, without waiting and without comparing offsets.
func waitReplicasOnline(ctx context.Context, addr string, n int) error {
	once := n < 0
	if once {
		n = -n
	}
	for {
		err := replicasOnline(ctx, addr, n, !once)
		if err == nil || once {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testserver: redis %s: replicas not in sync: %w (last: %v)", addr, ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func replicasOnline(ctx context.Context, addr string, n int, inSync bool) error {
	v, err := redisDo(ctx, addr, "INFO", "replication")
	if err != nil {
		return err
	}
	info, _ := v.(string)
	var offset string
	online := 0
	for _, line := range strings.Split(info, "\r\n") {
		if o, ok := strings.CutPrefix(line, "master_repl_offset:"); ok {
			offset = o
		}
	}
	for _, line := range strings.Split(info, "\r\n") {
		if strings.HasPrefix(line, "slave") && strings.Contains(line, "state=online") && (!inSync || strings.Contains(line, ",offset="+offset+",")) {
			online++
		}
	}
	if online != n {
		return fmt.Errorf("redis %s: %d replicas online (in sync: %v), want %d", addr, online, inSync, n)
	}
	return nil
}

// Stop stops every sentinel and data node and removes the directory the
// set created, if any.
func (s *SentinelSet) Stop() error {
	all := append(append([]*Server(nil), s.Sentinels...), s.Nodes...)
	errs := make([]error, len(all))
	var wg sync.WaitGroup
	for i, n := range all {
		wg.Go(func() { errs[i] = n.Stop() })
	}
	wg.Wait()
	if s.cleanup != nil {
		s.cleanupOnce.Do(s.cleanup)
	}
	return errors.Join(errs...)
}

// RedisSentinel starts a Sentinel-managed primary with replicas for the
// test (see StartRedisSentinel) in t.TempDir() and stops it on cleanup.
func RedisSentinel(t testing.TB, cfg SentinelConfig) *SentinelSet {
	t.Helper()
	SkipShort(t, "redis sentinel")
	ctx, cancel := startCtx(t)
	defer cancel()
	s, err := StartRedisSentinel(ctx, t.TempDir(), cfg)
	if err != nil {
		fatalStart(t, "redis sentinel set", err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	return s
}
