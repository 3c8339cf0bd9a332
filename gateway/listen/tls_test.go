package listen

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/gateway/auth"
	"github.com/linemq/linemq/internal/mqtttest"
)

// pki is a CA with a server certificate and two client certificates.
type pki struct {
	dir               string
	ca                *testCA
	certFile, keyFile string
	plc, sanOnly      tls.Certificate
	otherCRL          string // a revocation list of another CA
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	p := &pki{dir: t.TempDir()}
	p.ca = newCA(t, p.dir, "plant-ca")
	p.certFile, p.keyFile, _ = p.ca.issue(t, p.dir, "gateway", true, nil)
	_, _, p.plc = p.ca.issue(t, p.dir, "plc-7", false, nil)
	_, _, p.sanOnly = p.ca.issue(t, p.dir, "san", false, func(c *x509.Certificate) {
		c.Subject = pkix.Name{}
		c.URIs = append(c.URIs, uri(t, "spiffe://plant/hmi-2"))
	})
	p.otherCRL = newCA(t, p.dir, "another-ca").writeCRL(t, filepath.Join(p.dir, "another.crl"))
	return p
}

// dialTLS connects to l with cfg (trusting p's CA), or returns the error.
func (p *pki) dialTLS(l *Listener, cfg *tls.Config) (*tls.Conn, error) {
	if cfg == nil {
		cfg = &tls.Config{}
	}
	cfg.RootCAs = p.ca.pool()
	cfg.ServerName = "localhost"
	d := &net.Dialer{Timeout: 5 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", l.Addr().String(), cfg)
	if err != nil {
		return nil, err
	}
	// A TLS 1.3 server verifies the client's certificate after the
	// client's handshake is done: read once to learn whether it did.
	c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if _, err := c.Read(make([]byte, 1)); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		c.Close()
		return nil, err
	}
	c.SetReadDeadline(time.Time{})
	return c, nil
}

// identityACL gives each certificate name its own topics.
const identityACL = "pattern readwrite id/%u/#\n"

func TestTLSClientCertificateIdentity(t *testing.T) {
	p := newPKI(t)
	no := false
	dir := t.TempDir()
	aclFile := filepath.Join(dir, "acl")
	os.WriteFile(aclFile, []byte(identityACL), 0o600)
	a := newAuth(t, auth.Config{ACLFile: aclFile, AllowAnonymous: &no})
	l := listen(t, Config{Type: TLS, CertFile: p.certFile, KeyFile: p.keyFile, CAFile: p.ca.file}, Options{})
	serve(t, a, broker.Options{}, l)

	// The CN is the user name: no password, and whatever CONNECT says.
	nc, err := p.dialTLS(l, &tls.Config{Certificates: []tls.Certificate{p.plc}})
	if err != nil {
		t.Fatal(err)
	}
	c, ca := mqtttest.ConnectV5(t, viaTCP(t, nc), &paho.Connect{ClientID: "x", KeepAlive: 30, CleanStart: true, UsernameFlag: true, Username: "someone-else"}, mqtttest.Options{})
	if ca.ReasonCode != 0 {
		t.Fatalf("CONNACK 0x%02X", ca.ReasonCode)
	}
	roundTrip(t, c, "id/plc-7/temp")
	if got := c.Puback("id/someone-else/temp", "x"); got != 0x87 {
		t.Errorf("publish outside the identity's topics: 0x%02X, want 0x87", got)
	}

	// A SAN when there is no CN.
	nc, err = p.dialTLS(l, &tls.Config{Certificates: []tls.Certificate{p.sanOnly}})
	if err != nil {
		t.Fatal(err)
	}
	if _, ca := mqtttest.ConnectV5(t, viaTCP(t, nc), &paho.Connect{ClientID: "y", KeepAlive: 30, CleanStart: true}, mqtttest.Options{}); ca.ReasonCode != 0 {
		t.Fatalf("SAN identity refused: 0x%02X", ca.ReasonCode)
	}

	// No certificate: anonymous, refused by allow_anonymous: false.
	nc, err = p.dialTLS(l, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ca := mqtttest.ConnectV5(t, viaTCP(t, nc), &paho.Connect{ClientID: "z", KeepAlive: 30, CleanStart: true}, mqtttest.Options{}); ca.ReasonCode != 0x87 {
		t.Errorf("no certificate: CONNACK 0x%02X, want 0x87", ca.ReasonCode)
	}

	// A certificate from another CA, with the same name, fails the
	// handshake. (Sent by force: a Go client does not offer a certificate
	// the server's list of CAs does not take.)
	other := newCA(t, t.TempDir(), "other-ca")
	_, _, stranger := other.issue(t, t.TempDir(), "plc-7", false, nil)
	force := func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &stranger, nil }
	if nc, err := p.dialTLS(l, &tls.Config{GetClientCertificate: force}); err == nil {
		nc.Close()
		t.Error("a certificate from an unknown CA was accepted")
	}
}

func TestTLSConnIdentityAndAddr(t *testing.T) {
	p := newPKI(t)
	l := listen(t, Config{Type: TLS, CertFile: p.certFile, KeyFile: p.keyFile, CAFile: p.ca.file, RequireClientCert: true}, Options{})
	got := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err == nil {
			got <- c
		}
	}()
	nc, err := p.dialTLS(l, &tls.Config{Certificates: []tls.Certificate{p.plc}})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c := <-got
	defer c.Close()
	if id := c.(interface{ Identity() string }).Identity(); id != "plc-7" {
		t.Errorf("Identity %q", id)
	}
	pa, ok := c.RemoteAddr().(*PeerAddr)
	if !ok || pa.Identity() != "plc-7" || pa.String() != nc.LocalAddr().String() {
		t.Errorf("RemoteAddr %#v", c.RemoteAddr())
	}
	if _, ok := c.(syscall.Conn); ok {
		t.Error("a TLS connection offers SyscallConn: the broker would poll under TLS")
	}
}

func TestTLSRequireClientCert(t *testing.T) {
	p := newPKI(t)
	l := listen(t, Config{Type: TLS, CertFile: p.certFile, KeyFile: p.keyFile, CAFile: p.ca.file, RequireClientCert: true}, Options{})
	serve(t, newAuth(t, auth.Config{}), broker.Options{}, l)
	if nc, err := p.dialTLS(l, nil); err == nil {
		nc.Close()
		t.Fatal("a client without a certificate got through")
	}
	if nc, err := p.dialTLS(l, &tls.Config{Certificates: []tls.Certificate{p.plc}}); err != nil {
		t.Fatal(err)
	} else {
		nc.Close()
	}
	// TLS 1.1 is refused.
	if nc, err := p.dialTLS(l, &tls.Config{Certificates: []tls.Certificate{p.plc}, MaxVersion: tls.VersionTLS11}); err == nil {
		nc.Close()
		t.Error("TLS 1.1 accepted")
	}
}

// TestTLSReload: a reload serves the new certificate to new clients,
// keeps connected ones, and a broken pair leaves the old one in force.
func TestTLSReload(t *testing.T) {
	p := newPKI(t)
	l := listen(t, Config{Type: TLS, CertFile: p.certFile, KeyFile: p.keyFile}, Options{})
	serve(t, newAuth(t, auth.Config{}), broker.Options{}, l)
	serverCN := func() string {
		nc, err := p.dialTLS(l, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		return nc.ConnectionState().PeerCertificates[0].Subject.CommonName
	}
	if cn := serverCN(); cn != "gateway" {
		t.Fatalf("serving %q", cn)
	}
	nc, _ := p.dialTLS(l, nil)
	c, ca := mqtttest.ConnectV5(t, viaTCP(t, nc), &paho.Connect{ClientID: "stays", KeepAlive: 30, CleanStart: true}, mqtttest.Options{})
	if ca.ReasonCode != 0 {
		t.Fatal(ca.ReasonCode)
	}

	// Renewed: new files at the same paths.
	cert, key, _ := p.ca.issue(t, t.TempDir(), "gateway-renewed", true, nil)
	for src, dst := range map[string]string{cert: p.certFile, key: p.keyFile} {
		b, _ := os.ReadFile(src)
		os.WriteFile(dst, b, 0o600)
	}
	if err := l.Reload(); err != nil {
		t.Fatal(err)
	}
	if cn := serverCN(); cn != "gateway-renewed" {
		t.Errorf("after reload serving %q", cn)
	}
	roundTrip(t, c, "still/connected")

	// A key that does not match: the error names key_file, the renewed
	// certificate stays.
	_, otherKey, _ := p.ca.issue(t, t.TempDir(), "x", true, nil)
	b, _ := os.ReadFile(otherKey)
	os.WriteFile(p.keyFile, b, 0o600)
	err := l.Reload()
	var e *Error
	if !errors.As(err, &e) || e.Key != "key_file" || !strings.Contains(err.Error(), "does not match") {
		t.Errorf("reload with a mismatched key: %v", err)
	}
	if cn := serverCN(); cn != "gateway-renewed" {
		t.Errorf("after a failed reload serving %q", cn)
	}
	roundTrip(t, c, "still/connected/2")
}

// TestHandshakeTimeout: a client that connects and says nothing is cut
// off after the handshake timeout, and its place is given back.
func TestHandshakeTimeout(t *testing.T) {
	p := newPKI(t)
	l := listen(t, Config{Type: TLS, CertFile: p.certFile, KeyFile: p.keyFile, MaxConnections: 1}, Options{HandshakeTimeout: 200 * time.Millisecond})
	serve(t, newAuth(t, auth.Config{}), broker.Options{}, l)
	silent, err := net.DialTimeout("tcp", l.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	start := time.Now()
	silent.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := silent.Read(make([]byte, 1)); errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatal("a silent client was not cut off")
	}
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Errorf("cut off after %v, before the timeout", d)
	}
	brokertest.Eventually(t, 5*time.Second, "place freed", func() bool { return l.Conns() == 0 })
	nc, err := p.dialTLS(l, nil)
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
}

// TestCloseDuringHandshake: Close ends handshakes in progress and returns.
func TestCloseDuringHandshake(t *testing.T) {
	p := newPKI(t)
	l, err := Listen(context.Background(), Config{Type: TLS, Address: "127.0.0.1:0", CertFile: p.certFile, KeyFile: p.keyFile}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	silent, err := net.DialTimeout("tcp", l.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	brokertest.Eventually(t, 5*time.Second, "accepted", func() bool { return l.Conns() == 1 })
	done := make(chan struct{})
	go func() {
		l.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close waited for a handshake")
	}
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept after Close: %v", err)
	}
	if l.Close() != nil {
		t.Error("second Close")
	}
}
