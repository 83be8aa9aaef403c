package etcd

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend"
	"github.com/distlock/distlock/internal/testkit/slack"
	"github.com/distlock/distlock/internal/testkit/testserver"
)

// testCA is a self-signed CA that issues certificates into a directory.
type testCA struct {
	dir  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	file string // the CA certificate, PEM
}

func newTestCA(t *testing.T, dir, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &testCA{dir: dir, cert: cert, key: key, file: filepath.Join(dir, name+".pem")}
	writePEM(t, ca.file, "CERTIFICATE", der)
	return ca
}

// issue writes a certificate for 127.0.0.1 usable by servers and clients,
// and its key; it returns their files.
func (ca *testCA) issue(t *testing.T, name string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(ca.dir, name+".pem"), filepath.Join(ca.dir, name+"-key.pem")
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "EC PRIVATE KEY", kb)
	return certFile, keyFile
}

func writePEM(t *testing.T, file, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestURLTLS: etcds:// with sslrootcert, sslcert and sslkey talks TLS to a
// member that serves clients over TLS only and requires client
// certificates signed by its CA; a client without a certificate, or one
// that trusts another CA, gets no lock.
func TestURLTLS(t *testing.T) {
	t.Parallel()
	testserver.SkipShort(t, "etcd")
	dir := t.TempDir()
	ca := newTestCA(t, dir, "ca")
	serverCert, serverKey := ca.issue(t, "server")
	clientCert, clientKey := ca.issue(t, "client")
	s := ownMember(t, testserver.EtcdConfig{TLS: &testserver.EtcdTLS{CertFile: serverCert, KeyFile: serverKey, ClientCAFile: ca.file}}, "TLS is set up on a member of our own")
	q := url.Values{"sslrootcert": {ca.file}, "sslcert": {clientCert}, "sslkey": {clientKey}, "session_ttl": {"4s"}}
	l, err := distlock.Open(ctxT(t, 10*time.Second), "etcds://"+s.Addr()+"/tls?"+q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	mustAcquireRelease(t, l, "k")

	other := newTestCA(t, dir, "other-ca")
	for name, q := range map[string]url.Values{
		"no client certificate": {"sslrootcert": {ca.file}},
		"another CA":            {"sslrootcert": {other.file}, "sslcert": {clientCert}, "sslkey": {clientKey}},
	} {
		l, err := distlock.Open(ctxT(t, 10*time.Second), "etcds://"+s.Addr()+"/tls?"+q.Encode())
		if err != nil {
			t.Fatalf("%s: Open: %v", name, err)
		}
		start := time.Now()
		_, err = l.TryAcquire(ctxT(t, 10*time.Second), "k")
		switch {
		case err == nil || !errors.Is(err, distlock.ErrUnavailable) || backend.IsTransient(err):
			t.Errorf("%s: TryAcquire = %v, want a lasting ErrUnavailable", name, err)
		case !strings.Contains(err.Error(), "TLS with "+s.Addr()):
			t.Errorf("%s: %v does not say that TLS with %s failed", name, err, s.Addr())
		}
		if took := time.Since(start); took > slack.D(2*time.Second) {
			t.Errorf("%s: refused after %v, want at once", name, took)
		}
		t.Logf("%s: %v", name, err)
		_ = l.Close()
	}
}
