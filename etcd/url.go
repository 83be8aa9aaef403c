package etcd

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"time"

	"github.com/distlock/distlock/backend"
)

func init() {
	backend.Register("etcd", open)
	backend.Register("etcds", open)
}

// URL parameters of a TLS connection (etcds:// only), named as in
// postgres:// URLs (libpq's names).
const (
	paramCA   = "sslrootcert" // PEM file of the CA certificates that sign the members' certificates
	paramCert = "sslcert"     // PEM file of the client certificate
	paramKey  = "sslkey"      // PEM file of the client certificate's key
)

// open is the URL opener:
//
//	etcd://[user:password@]h1:2379,h2:2379/prefix?session_ttl=10s&session_margin=1s&connect_timeout=5s&hold_watch=true&log=true
//	etcds://...?sslrootcert=ca.pem&sslcert=client.pem&sslkey=client-key.pem
func open(_ context.Context, u *url.URL) (backend.Driver, error) {
	endpoints, err := urlEndpoints(u)
	if err != nil {
		return nil, err
	}
	opts, err := urlOptions(u)
	if err != nil {
		return nil, err
	}
	d, _, err := dialDriver(endpoints, opts)
	if err != nil {
		return nil, err
	}
	return d, nil
}

// urlEndpoints checks the form of an etcd:// or etcds:// URL and returns
// its hosts.
func urlEndpoints(u *url.URL) ([]string, error) {
	if u.Opaque != "" {
		return nil, fmt.Errorf("%w: etcd URL must be %s://[user:password@]host:port[,host:port...]/prefix, got %q", backend.ErrInvalidOption, u.Scheme, u.Redacted())
	}
	if u.Fragment != "" {
		return nil, fmt.Errorf("%w: etcd URL: unexpected fragment %q", backend.ErrInvalidOption, u.Fragment)
	}
	return backend.Hosts(u, DefaultPort)
}

// urlOptions returns the Options that the URL's credentials, path and
// parameters stand for.
func urlOptions(u *url.URL) ([]Option, error) {
	prefix := u.Path
	if prefix == "" || prefix == "/" {
		prefix = DefaultPrefix
	}
	p := backend.NewParams(u)
	ttl := backend.Parse(p, "session_ttl", DefaultSessionTTL, backend.DurationIn(2*time.Second, 24*time.Hour))
	margin := backend.Parse(p, "session_margin", time.Duration(0), backend.DurationIn(0, 12*time.Hour))
	cw := backend.Parse(p, "connect_timeout", time.Duration(0), backend.DurationIn(time.Millisecond, 24*time.Hour))
	logOn := backend.Parse(p, "log", false, strconv.ParseBool)
	holdWatch := backend.Parse(p, "hold_watch", true, strconv.ParseBool)
	tlsCfg, tlsErr := urlTLS(u.Scheme, p)
	if err := p.Done(); err != nil {
		return nil, err
	}
	if tlsErr != nil {
		return nil, tlsErr
	}
	opts := []Option{WithPrefix(prefix), WithSessionTTL(ttl), WithHoldWatch(holdWatch)}
	if u.User != nil {
		pw, _ := u.User.Password()
		if u.User.Username() == "" || pw == "" {
			return nil, fmt.Errorf("%w: etcd URL: credentials need a user name and a password (%s://user:password@host)", backend.ErrInvalidOption, u.Scheme)
		}
		opts = append(opts, WithAuth(u.User.Username(), pw))
	}
	if tlsCfg != nil {
		opts = append(opts, WithTLS(tlsCfg))
	}
	if margin > 0 {
		opts = append(opts, WithSessionMargin(margin))
	}
	if cw > 0 {
		opts = append(opts, WithConnectTimeout(cw))
	}
	if logOn {
		opts = append(opts, func(c *config) { c.logging = true })
	}
	return opts, nil
}

// urlTLS reads the TLS parameters: nil for etcd:// (which refuses them), a
// configuration with the system's roots or sslrootcert's CAs, and the
// client certificate of sslcert and sslkey (both or neither), for etcds://.
// Its errors wrap ErrInvalidOption and name the parameter and the file.
func urlTLS(scheme string, p *backend.Params) (*tls.Config, error) {
	ca, cert, key := p.String(paramCA, ""), p.String(paramCert, ""), p.String(paramKey, "")
	if scheme != "etcds" {
		for name, v := range map[string]string{paramCA: ca, paramCert: cert, paramKey: key} {
			if v != "" {
				return nil, fmt.Errorf("%w: etcd URL: %s is a TLS parameter: use etcds://", backend.ErrInvalidOption, name)
			}
		}
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("%w: etcd URL: %s: %w", backend.ErrInvalidOption, paramCA, err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: etcd URL: %s=%s: no PEM certificate in the file", backend.ErrInvalidOption, paramCA, ca)
		}
	}
	switch {
	case (cert == "") != (key == ""):
		return nil, fmt.Errorf("%w: etcd URL: %s and %s go together (the client certificate and its key)", backend.ErrInvalidOption, paramCert, paramKey)
	case cert != "":
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("%w: etcd URL: %s=%s, %s=%s: %w", backend.ErrInvalidOption, paramCert, cert, paramKey, key, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}
