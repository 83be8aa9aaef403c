package memcached

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/distlock/distlock/backend"
)

func init() { backend.Register("memcached", open) }

// Defaults of the URL opener's client.
const (
	defaultURLTimeout = time.Second
	defaultURLMaxIdle = 16
)

// open is the OpenFunc of "memcached://" URLs; the parameters are listed in
// docs/backends/memcached.md, and any other is ErrInvalidOption. Host names
// are resolved once, within ctx; open does not connect. The Locker closes
// the client it creates.
func open(ctx context.Context, u *url.URL) (backend.Driver, error) {
	bad := func(format string, args ...any) (backend.Driver, error) {
		return nil, fmt.Errorf("%w: %s", backend.ErrInvalidOption, fmt.Sprintf(format, args...))
	}
	if u.Opaque != "" {
		return bad("memcached URL must look like memcached://host:port[,host:port...], got %q", u.Redacted())
	}
	if u.User != nil {
		return bad("memcached URL must not carry user info: the text protocol has no authentication")
	}
	if u.Path != "" && u.Path != "/" {
		return bad("memcached URL must not have a path (%q): memcached has no databases; use prefix= to separate namespaces", u.Path)
	}
	if u.Fragment != "" {
		return bad("memcached URL must not have a fragment (#%q)", u.Fragment)
	}
	hosts, err := backend.Hosts(u, "11211")
	if err != nil {
		return nil, err
	}
	p := backend.NewParams(u)
	opts := []Option{
		WithPrefix(p.String("prefix", DefaultPrefix)),
		WithRelease(backend.Parse(p, "release", ReleaseAuto, parseMode[ReleaseMode](releaseNames))),
		WithPin(backend.Parse(p, "pin", PinCheck, parseMode[PinMode](pinNames))),
		WithCloseClient(),
	}
	timeout := backend.Parse(p, "timeout", defaultURLTimeout, backend.DurationIn(time.Millisecond, time.Hour))
	maxIdle := backend.Parse(p, "max_idle", defaultURLMaxIdle, backend.IntIn(1, 10_000))
	if err := p.Done(); err != nil {
		return nil, err
	}
	if _, err := newConfig(opts); err != nil { // before any name is resolved
		return nil, err
	}
	addrs := make([]string, len(hosts))
	for i, h := range hosts {
		if addrs[i], err = resolve(ctx, h); err != nil {
			return nil, err
		}
	}
	ss := new(memcache.ServerList)
	if err := ss.SetServers(addrs...); err != nil {
		return bad("servers %v: %v", addrs, err)
	}
	client := memcache.NewFromSelector(ss)
	client.Timeout = timeout
	client.MaxIdleConns = maxIdle
	d, err := newDriver(client, append(opts, WithSelector(ss)))
	if err != nil {
		return nil, err
	}
	return d, nil
}

// resolve turns host:port into ip:port, resolving a name within ctx.
func resolve(ctx context.Context, hostport string) (string, error) {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return "", fmt.Errorf("%w: bad host %q: %v", backend.ErrInvalidOption, hostport, err)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("%w: bad port in %q (want 1 to 65535)", backend.ErrInvalidOption, hostport)
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return hostport, nil
	}
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		var dnsErr *net.DNSError
		if ctx.Err() != nil || (errors.As(err, &dnsErr) && (dnsErr.IsTemporary || dnsErr.IsTimeout)) {
			return "", fmt.Errorf("%w: resolve %q: %w", backend.ErrUnavailable, host, err)
		}
		return "", fmt.Errorf("%w: resolve %q: %w", backend.ErrInvalidOption, host, err)
	}
	ip := ips[0]
	for _, a := range ips { // prefer IPv4, as net.ResolveTCPAddr does
		if a.Is4() || a.Is4In6() {
			ip = a.Unmap()
			break
		}
	}
	return net.JoinHostPort(ip.String(), port), nil
}
