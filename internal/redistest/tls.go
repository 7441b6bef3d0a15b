package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// CA is a throwaway certificate authority (ECDSA P-256) whose certificate is
// written to CertFile.
type CA struct {
	CertFile string
	cert     *x509.Certificate
	key      *ecdsa.PrivateKey
}

// NewCA generates a CA named name and writes its certificate as PEM to
// dir/name.pem.
func NewCA(t testing.TB, dir, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("creating CA certificate: %v", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("parsing CA certificate: %v", err)
	}
	ca := &CA{CertFile: filepath.Join(dir, name+".pem"), cert: cert, key: key}
	writePEM(t, ca.CertFile, "CERTIFICATE", der)
	return ca
}

// IssueServer signs a server certificate for the IP 127.0.0.1 and writes it
// and its key as PEM to dir/name.pem and dir/name-key.pem.
func (ca *CA) IssueServer(t testing.TB, dir, name string) (certFile, keyFile string) {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatalf("creating server certificate: %v", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatalf("encoding server key: %v", err)
	}
	certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "PRIVATE KEY", keyDER)
	return certFile, keyFile
}

// Pool is a cert pool holding only the CA.
func (ca *CA) Pool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	return pool
}

// TLSServer is a redis-server that listens only for TLS (its plain port is
// off), with a certificate for 127.0.0.1 signed by CA.
type TLSServer struct {
	Addr string // 127.0.0.1:port, the TLS port
	Dir  string
	CA   *CA
	cmd  *exec.Cmd
}

// StartTLS generates a CA and a server certificate into a temporary
// directory and runs redis-server with TLS on a free port, no plain port, and
// no client certificates required. It waits until PING answers over TLS.
func StartTLS(t testing.TB, extra ...string) *TLSServer {
	t.Helper()
	bin := Binary(t)
	dir := t.TempDir()
	ca := NewCA(t, dir, "redis-ca")
	certFile, keyFile := ca.IssueServer(t, dir, "redis-server")
	port := FreePort(t)
	args := append([]string{
		"--port", "0", "--tls-port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--tls-cert-file", certFile, "--tls-key-file", keyFile,
		"--tls-ca-cert-file", ca.CertFile, "--tls-auth-clients", "no",
		"--save", "", "--appendonly", "no", "--dir", dir,
	}, extra...)
	s := &TLSServer{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Dir: dir, CA: ca}
	s.cmd = exec.Command(bin, args...)
	out := &SyncBuffer{}
	s.cmd.Stdout, s.cmd.Stderr = out, out
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("starting redis-server with TLS: %v", err)
	}
	t.Cleanup(s.Stop)
	if err := s.waitPing(); err != nil {
		t.Fatalf("redis-server with TLS at %s: %v\nits output:\n%s", s.Addr, err, out.String())
	}
	return s
}

// URL is the server's rediss:// URL.
func (s *TLSServer) URL() string { return "rediss://" + s.Addr + "/0" }

// Client returns a TLS client that trusts the server's CA, closed at the
// test's end.
func (s *TLSServer) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := s.newClient()
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func (s *TLSServer) newClient() *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:       s.Addr,
		MaxRetries: -1,
		TLSConfig:  &tls.Config{RootCAs: s.CA.Pool(), ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12},
	})
}

// Stop kills the server; it is safe to call twice.
func (s *TLSServer) Stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
		s.cmd = nil
	}
}

func (s *TLSServer) waitPing() error {
	c := s.newClient()
	defer c.Close()
	if err := pingUntilUp(c); err != nil {
		return fmt.Errorf("over TLS: %w", err)
	}
	return nil
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("generating key: %v", err)
	}
	return key
}

func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatalf("generating serial number: %v", err)
	}
	return n
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	data := pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatalf("writing %s: %v", path, err)
	}
}
