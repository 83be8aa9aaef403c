package testserver

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// EnvEtcdEndpoints lists the client endpoints ("host:port") of an external
// etcd cluster, comma-separated, used by Etcd (first endpoint) and
// EtcdCluster (all of them).
const EnvEtcdEndpoints = "DISTLOCK_ETCD_ENDPOINTS"

// EtcdConfig configures StartEtcd and StartEtcdCluster.
type EtcdConfig struct {
	// Heartbeat is the Raft heartbeat interval; 0 means 50ms.
	Heartbeat time.Duration
	// ElectionTimeout is the Raft election timeout; 0 means 500ms. A
	// lost leader is replaced about this long after it stops answering,
	// and the server's shortest lease TTL is 1.5 × this.
	ElectionTimeout time.Duration
	// TLS, when set, makes the members serve clients over TLS only
	// (https client URLs); the readiness probe trusts any certificate.
	TLS *EtcdTLS
}

// EtcdTLS is the client-side TLS of the members of StartEtcd and
// StartEtcdCluster.
type EtcdTLS struct {
	// CertFile and KeyFile are the members' certificate (valid for
	// 127.0.0.1) and its key, PEM.
	CertFile, KeyFile string
	// ClientCAFile, if set, makes the members require client certificates
	// signed by it (--client-cert-auth); the readiness probe then presents
	// CertFile and KeyFile, which must allow client authentication too.
	ClientCAFile string
}

// scheme is the members' client URL scheme.
func (c EtcdConfig) scheme() string {
	if c.TLS != nil {
		return "https"
	}
	return "http"
}

// tlsArgs are the etcd flags of c.TLS.
func (c EtcdConfig) tlsArgs() []string {
	if c.TLS == nil {
		return nil
	}
	args := []string{"--cert-file", c.TLS.CertFile, "--key-file", c.TLS.KeyFile}
	if c.TLS.ClientCAFile != "" {
		args = append(args, "--client-cert-auth", "--trusted-ca-file", c.TLS.ClientCAFile)
	}
	return args
}

// httpClient is the client of the gRPC gateway probes of members
// configured by c.
func (c EtcdConfig) httpClient() (*http.Client, error) {
	if c.TLS == nil {
		return http.DefaultClient, nil
	}
	tc := &tls.Config{InsecureSkipVerify: true} //nolint:gosec // a readiness probe of our own test server
	if c.TLS.ClientCAFile != "" {
		pair, err := tls.LoadX509KeyPair(c.TLS.CertFile, c.TLS.KeyFile)
		if err != nil {
			return nil, err
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}, nil
}

func (c EtcdConfig) ms() (hb, election int) {
	hb, election = int(c.Heartbeat/time.Millisecond), int(c.ElectionTimeout/time.Millisecond)
	if hb <= 0 {
		hb = 50
	}
	if election <= 0 {
		election = 500
	}
	return hb, election
}

// etcdMember is one member's name and ports.
type etcdMember struct {
	name         string
	client, peer int
}

func (m etcdMember) peerURL() string { return fmt.Sprintf("http://127.0.0.1:%d", m.peer) }

// newEtcd prepares member i of members (Debian package etcd-server, binary
// etcd) with its data in dir.
func newEtcd(dir string, cfg EtcdConfig, i int, members func() []etcdMember) (*Server, error) {
	bin, err := lookBinary("etcd-server", "etcd")
	if err != nil {
		return nil, err
	}
	s, err := newServer("etcd", dir)
	if err != nil {
		return nil, err
	}
	s.bin = bin
	hb, election := cfg.ms()
	s.args = func() []string {
		ms := members()
		me := ms[i]
		var initial []string
		for _, m := range ms {
			initial = append(initial, m.name+"="+m.peerURL())
		}
		client := fmt.Sprintf("%s://127.0.0.1:%d", cfg.scheme(), me.client)
		return append([]string{
			"--name", me.name,
			"--data-dir", filepath.Join(s.dir, "data"),
			"--listen-client-urls", client,
			"--advertise-client-urls", client,
			"--listen-peer-urls", me.peerURL(),
			"--initial-advertise-peer-urls", me.peerURL(),
			"--initial-cluster", strings.Join(initial, ","),
			"--initial-cluster-state", "new",
			"--initial-cluster-token", "distlock-test",
			"--heartbeat-interval", strconv.Itoa(hb),
			"--election-timeout", strconv.Itoa(election),
			"--logger", "zap", "--log-outputs", "stderr", "--log-level", "warn",
			"--snapshot-count", "10000",
			"--quota-backend-bytes", strconv.Itoa(1 << 30),
		}, cfg.tlsArgs()...)
	}
	hc, err := cfg.httpClient()
	if err != nil {
		return nil, err
	}
	s.probe = func(ctx context.Context) error { return etcdProbe(ctx, hc, cfg.scheme(), s.addr) }
	return s, nil
}

// etcdPost posts a JSON body to etcd's gRPC gateway at addr and decodes the
// answer into out.
func etcdPost(ctx context.Context, addr, path string, body, out any) error {
	return etcdPostWith(ctx, http.DefaultClient, "http", addr, path, body, out)
}

// etcdPostWith is etcdPost with a client and a scheme of its own.
func etcdPostWith(ctx context.Context, hc *http.Client, scheme, addr, path string, body, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, scheme+"://"+addr+path, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	rb, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("etcd %s%s: %s: %s", addr, path, resp.Status, strings.TrimSpace(string(rb)))
	}
	return json.Unmarshal(rb, out)
}

// etcdHealthy is ready when the member answers a linearizable read through
// the cluster (it has a leader and the quorum is up).
func etcdHealthy(ctx context.Context, addr string) error {
	return etcdProbe(ctx, http.DefaultClient, "http", addr)
}

// etcdProbe is etcdHealthy with a client and a scheme of its own.
func etcdProbe(ctx context.Context, hc *http.Client, scheme, addr string) error {
	var out struct {
		Header struct {
			Revision string `json:"revision"`
		} `json:"header"`
	}
	// A range request on a key nobody uses: linearizable by default.
	return etcdPostWith(ctx, hc, scheme, addr, "/v3/kv/range", map[string]string{"key": "X19kaXN0bG9ja19wcm9iZV9f"}, &out)
}

// EtcdStatus is what a member says of itself.
type EtcdStatus struct {
	MemberID, Leader uint64
	Version          string
}

// IsLeader reports whether the member leads the cluster.
func (s EtcdStatus) IsLeader() bool { return s.MemberID != 0 && s.MemberID == s.Leader }

// EtcdMemberStatus asks the member at addr for its status (the Maintenance
// Status call, through the gRPC gateway), waiting at most a second: a
// paused member does not answer.
func EtcdMemberStatus(ctx context.Context, addr string) (EtcdStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var out struct {
		Header struct {
			MemberID string `json:"member_id"`
		} `json:"header"`
		Leader  string `json:"leader"`
		Version string `json:"version"`
	}
	if err := etcdPost(ctx, addr, "/v3/maintenance/status", struct{}{}, &out); err != nil {
		return EtcdStatus{}, err
	}
	id, _ := strconv.ParseUint(out.Header.MemberID, 10, 64)
	leader, _ := strconv.ParseUint(out.Leader, 10, 64)
	return EtcdStatus{MemberID: id, Leader: leader, Version: out.Version}, nil
}

// EtcdLeader returns the member of c that leads the cluster, asking each
// member that answers.
func EtcdLeader(ctx context.Context, c *Cluster) (*Server, error) {
	for _, s := range c.Servers {
		if st, err := EtcdMemberStatus(ctx, s.Addr()); err == nil && st.IsLeader() {
			return s, nil
		}
	}
	return nil, errors.New("testserver: no etcd member reports itself leader")
}

// EtcdFollower returns a member of c that answers and is not the leader.
func EtcdFollower(ctx context.Context, c *Cluster) (*Server, error) {
	for _, s := range c.Servers {
		if st, err := EtcdMemberStatus(ctx, s.Addr()); err == nil && st.Leader != 0 && !st.IsLeader() {
			return s, nil
		}
	}
	return nil, errors.New("testserver: no etcd follower answers")
}

// StartEtcd starts a single-member etcd cluster with its data in dir (a new
// temporary directory if empty) and waits until it serves linearizable
// reads. Its client port is Addr; its peer port is the second port.
func StartEtcd(ctx context.Context, dir string, cfg EtcdConfig) (*Server, error) {
	c, err := StartEtcdCluster(ctx, dir, 1, cfg)
	if err != nil {
		return nil, err
	}
	s := c.Servers[0]
	if c.cleanup != nil {
		s.cleanup = append(s.cleanup, c.cleanup)
	}
	return s, nil
}

// StartEtcdCluster starts an n-member etcd cluster (n=3 normally) in
// subdirectories of dir (a new temporary directory if empty), each member
// with a client and a peer port on loopback, and waits until every member
// serves linearizable reads. A member restarted with Restart keeps its
// data and waits until it serves again, which needs a quorum: to bring back
// a cluster that lost its quorum, call RestartNoWait on each member and then
// WaitReady.
func StartEtcdCluster(ctx context.Context, dir string, n int, cfg EtcdConfig) (*Cluster, error) {
	if n < 1 {
		return nil, fmt.Errorf("testserver: etcd cluster size must be >= 1, got %d", n)
	}
	if _, err := lookBinary("etcd-server", "etcd"); err != nil {
		return nil, err
	}
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	var cleanup func()
	if dir == "" {
		d, err := os.MkdirTemp("", "distlock-etcd-")
		if err != nil {
			return nil, err
		}
		dir = d
		cleanup = func() { _ = os.RemoveAll(d) }
	}
	var err error
	for attempt := 0; attempt < startAttempts; attempt++ {
		var c *Cluster
		c, err = startEtcdCluster(ctx, dir, attempt, n, cfg)
		if err == nil {
			c.cleanup = cleanup
			return c, nil
		}
		if !strings.Contains(strings.ToLower(err.Error()), "address already in use") || ctx.Err() != nil {
			break
		}
	}
	if cleanup != nil {
		cleanup()
	}
	return nil, err
}

func startEtcdCluster(ctx context.Context, dir string, attempt, n int, cfg EtcdConfig) (*Cluster, error) {
	ports, err := freePorts(2 * n)
	if err != nil {
		return nil, err
	}
	members := make([]etcdMember, n)
	for i := range members {
		members[i] = etcdMember{name: fmt.Sprintf("m%d", i+1), client: ports[2*i], peer: ports[2*i+1]}
	}
	c := &Cluster{Servers: make([]*Server, n)}
	for i := range n {
		sub := filepath.Join(dir, fmt.Sprintf("try%d-%s", attempt, members[i].name))
		s, err := newEtcd(sub, cfg, i, func() []etcdMember { return members })
		if err != nil {
			c.stopMembers()
			return nil, err
		}
		s.ports = []int{members[i].client, members[i].peer}
		s.addr = fmt.Sprintf("127.0.0.1:%d", members[i].client)
		c.Servers[i] = s
	}
	if err := c.startMembers(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// Etcd starts a single-member etcd for the test (see StartEtcd) and stops it
// on cleanup. With DISTLOCK_ETCD_ENDPOINTS set it returns a non-controllable
// Server for the first endpoint instead.
func Etcd(t testing.TB, cfg EtcdConfig) *Server {
	t.Helper()
	SkipShort(t, "etcd")
	if v := os.Getenv(EnvEtcdEndpoints); v != "" {
		addrs := splitAddrs(v)
		if len(addrs) == 0 {
			t.Fatalf("testserver: %s is empty", EnvEtcdEndpoints)
		}
		return external(t, "etcd", EnvEtcdEndpoints, addrs[0], etcdHealthy)
	}
	ctx, cancel := startCtx(t)
	defer cancel()
	s, err := StartEtcd(ctx, t.TempDir(), cfg)
	if err != nil {
		fatalStart(t, "etcd", err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	return s
}

// EtcdCluster starts an n-member etcd cluster for the test (see
// StartEtcdCluster) and stops it on cleanup. With DISTLOCK_ETCD_ENDPOINTS
// set it returns non-controllable Servers for those endpoints instead.
func EtcdCluster(t testing.TB, n int, cfg EtcdConfig) *Cluster {
	t.Helper()
	SkipShort(t, "etcd")
	if v := os.Getenv(EnvEtcdEndpoints); v != "" {
		addrs := splitAddrs(v)
		if len(addrs) != n {
			t.Logf("testserver: %s lists %d endpoints, the test asked for %d: using the list", EnvEtcdEndpoints, len(addrs), n)
		}
		return externalCluster(t, "etcd", EnvEtcdEndpoints, addrs, etcdHealthy)
	}
	ctx, cancel := startCtx(t)
	defer cancel()
	c, err := StartEtcdCluster(ctx, t.TempDir(), n, cfg)
	if err != nil {
		fatalStart(t, "etcd cluster", err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	return c
}
