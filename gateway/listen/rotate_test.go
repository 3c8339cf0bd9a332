package listen

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/gateway/auth"
	"github.com/linemq/linemq/internal/certtest"
	"github.com/linemq/linemq/internal/mqtttest"
)

// waitFor polls cond until it holds or the deadline passes, and returns
// how long it took.
func waitFor(t *testing.T, what string, within time.Duration, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > within {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

// serverCN is the common name of the certificate l serves to a new
// handshake, or "" if the handshake fails.
func (p *pki) serverCN(l *Listener, roots *tls.Config) string {
	nc, err := p.dialTLS(l, roots)
	if err != nil {
		return ""
	}
	defer nc.Close()
	return nc.ConnectionState().PeerCertificates[0].Subject.CommonName
}

// TestTLSFilesWatched: certificate, key and CA replaced on disk, with no
// SIGHUP: new handshakes use them within a second, connected clients
// stay.
func TestTLSFilesWatched(t *testing.T) {
	p := newPKI(t)
	caFile := filepath.Join(p.dir, "clients-ca.pem")
	replaceFile(t, p.ca.file, caFile)
	l := listen(t, Config{Type: TLS, CertFile: p.certFile, KeyFile: p.keyFile, CAFile: caFile}, Options{})
	serve(t, newAuth(t, auth.Config{}), broker.Options{}, l)

	nc, err := p.dialTLS(l, &tls.Config{Certificates: []tls.Certificate{p.plc}})
	if err != nil {
		t.Fatal(err)
	}
	c, ca := mqtttest.ConnectV5(t, viaTCP(t, nc), &paho.Connect{ClientID: "stays", KeepAlive: 30, CleanStart: true}, mqtttest.Options{})
	if ca.ReasonCode != 0 {
		t.Fatal(ca.ReasonCode)
	}

	// The server's certificate renewed: key first, then certificate, as
	// an operator copying two files would; nothing in between is served.
	cert, key, _ := p.ca.issue(t, t.TempDir(), "gateway-renewed", true, nil)
	replaceFile(t, key, p.keyFile)
	replaceFile(t, cert, p.certFile)
	took := waitFor(t, "the renewed certificate served", 5*time.Second, func() bool { return p.serverCN(l, nil) == "gateway-renewed" })
	t.Logf("renewed certificate served %v after the files were written", took.Round(time.Millisecond))
	roundTrip(t, c, "still/connected")

	// A new client authority added to the bundle: its clients are
	// accepted, with their certificate's name (read from a second
	// listener of the same files that no broker accepts from).
	bare := listen(t, Config{Type: TLS, CertFile: p.certFile, KeyFile: p.keyFile, CAFile: caFile}, Options{})
	newCA := newCA(t, t.TempDir(), "line-2-ca")
	_, _, line2 := newCA.issue(t, t.TempDir(), "plc-line-2", false, nil)
	if id := identityOf(t, p, bare, line2); id != "" {
		t.Fatalf("before the CA is added, plc-line-2 is %q", id)
	}
	bundle := filepath.Join(t.TempDir(), "bundle.pem")
	certtest.Concat(t, bundle, p.ca.file, newCA.file)
	replaceFile(t, bundle, caFile)
	took = waitFor(t, "the new authority's clients verified", 5*time.Second, func() bool { return identityOf(t, p, bare, line2) == "plc-line-2" })
	t.Logf("new CA in force %v after the file was written", took.Round(time.Millisecond))
	roundTrip(t, c, "still/connected/2")
}

// identityOf connects with cert and returns the name the listener gave
// the connection ("" when the certificate was not verified).
func identityOf(t *testing.T, p *pki, l *Listener, cert tls.Certificate) string {
	t.Helper()
	nc, err := p.dialTLS(l, &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		return ""
	}
	nc.Close()
	got, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	return got.(interface{ Identity() string }).Identity()
}

// TestTLSRevocation: a client whose certificate a new revocation list
// names is disconnected and refused from then on; the others stay, and a
// list from another authority is refused, leaving the one in force.
func TestTLSRevocation(t *testing.T) {
	p := newPKI(t)
	crl := p.ca.writeCRL(t, filepath.Join(p.dir, "plant.crl"))
	l := listen(t, Config{Type: TLS, CertFile: p.certFile, KeyFile: p.keyFile, CAFile: p.ca.file, CRLFile: crl}, Options{})
	serve(t, newAuth(t, auth.Config{}), broker.Options{}, l)

	connect := func(id string, cert tls.Certificate) *mqtttest.V5 {
		nc, err := p.dialTLS(l, &tls.Config{Certificates: []tls.Certificate{cert}})
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		c, ca := mqtttest.ConnectV5(t, viaTCP(t, nc), &paho.Connect{ClientID: id, KeepAlive: 30, CleanStart: true}, mqtttest.Options{})
		if ca.ReasonCode != 0 {
			t.Fatalf("%s: CONNACK %#x", id, ca.ReasonCode)
		}
		return c
	}
	connect("plc-7", p.plc)
	hmi := connect("hmi-2", p.sanOnly)
	if n := l.Conns(); n != 2 {
		t.Fatalf("%d connections open", n)
	}

	p.ca.writeCRL(t, crl, p.plc)
	took := waitFor(t, "the revoked client disconnected", 5*time.Second, func() bool { return l.Conns() == 1 })
	t.Logf("revoked client's connection closed %v after the list was written", took.Round(time.Millisecond))
	if _, err := p.dialTLS(l, &tls.Config{Certificates: []tls.Certificate{p.plc}}); err == nil {
		t.Fatal("a revoked certificate was accepted")
	}
	roundTrip(t, hmi, "hmi/stays")

	// A list signed by another authority: refused by name, the list in
	// force stays (plc-7 still refused, hmi-2 still accepted).
	replaceFile(t, p.otherCRL, crl)
	err := l.Reload()
	var e *Error
	if !errors.As(err, &e) || e.Key != "crl_file" || !strings.Contains(err.Error(), "not signed by any authority") {
		t.Fatalf("reload with another CA's list: %v", err)
	}
	if _, err := p.dialTLS(l, &tls.Config{Certificates: []tls.Certificate{p.plc}}); err == nil {
		t.Error("after a refused list, the revoked certificate was accepted")
	}
	connect("hmi-3", p.sanOnly)
}

// TestTLSRotationWithManyClients is the appliance's certificate check on
// loopback: 100 TLS clients connected; the server certificate, the client
// CA bundle and the CRL replaced on disk. None of the 99 in good standing
// is dropped, a new handshake gets the new certificate, and the one whose
// certificate the list revokes is disconnected and refused.
func TestTLSRotationWithManyClients(t *testing.T) {
	p := newPKI(t)
	caFile, crl := filepath.Join(p.dir, "clients.pem"), filepath.Join(p.dir, "clients.crl")
	replaceFile(t, p.ca.file, caFile)
	p.ca.writeCRL(t, crl)
	l := listen(t, Config{Type: TLS, CertFile: p.certFile, KeyFile: p.keyFile, CAFile: caFile, CRLFile: crl, MaxConnections: 200}, Options{})
	serve(t, newAuth(t, auth.Config{}), broker.Options{}, l)

	_, _, doomed := p.ca.issue(t, t.TempDir(), "plc-doomed", false, nil)
	var good []*mqtttest.V5
	for i := range 100 {
		cert := p.plc
		if i == 99 {
			cert = doomed
		}
		nc, err := p.dialTLS(l, &tls.Config{Certificates: []tls.Certificate{cert}})
		if err != nil {
			t.Fatalf("client %d: %v", i, err)
		}
		c, ca := mqtttest.ConnectV5(t, viaTCP(t, nc), &paho.Connect{ClientID: "c" + strconv.Itoa(i), KeepAlive: 30, CleanStart: true}, mqtttest.Options{})
		if ca.ReasonCode != 0 {
			t.Fatalf("client %d: CONNACK %#x", i, ca.ReasonCode)
		}
		if i < 99 {
			good = append(good, c)
		}
	}

	cert, key, _ := p.ca.issue(t, t.TempDir(), "gateway-2027", true, nil)
	replaceFile(t, key, p.keyFile)
	replaceFile(t, cert, p.certFile)
	other := newCA(t, t.TempDir(), "line-2-ca")
	bundle := filepath.Join(t.TempDir(), "bundle.pem")
	certtest.Concat(t, bundle, p.ca.file, other.file)
	replaceFile(t, bundle, caFile)
	p.ca.writeCRL(t, crl, doomed)

	took := waitFor(t, "the new certificate served and the revoked client gone", 5*time.Second, func() bool {
		return l.Conns() == 99 && p.serverCN(l, nil) == "gateway-2027"
	})
	t.Logf("100 clients: rotation in force %v after the files were written, 99 still connected", took.Round(time.Millisecond))
	if _, err := p.dialTLS(l, &tls.Config{Certificates: []tls.Certificate{doomed}}); err == nil {
		t.Error("the revoked certificate was accepted after the rotation")
	}
	for i, c := range good {
		roundTrip(t, c, "still/"+strconv.Itoa(i))
	}
}

// TestClockBehindTheCertificates: a gateway whose clock reads earlier
// than its own certificate's issue (a board without a real-time clock,
// before NTP answers) checks client certificates at that issue time, not
// at its clock: a client certificate valid then is accepted rather than
// refused as not yet valid. (Here the certificates are dated ahead of the
// clock instead, which is the same to the check.)
func TestClockBehindTheCertificates(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, dir, "plant-ca")
	ahead := func(d time.Duration) func(*x509.Certificate) {
		return func(c *x509.Certificate) { c.NotBefore = time.Now().Add(d) }
	}
	certFile, keyFile, _ := ca.issue(t, dir, "gateway", true, ahead(2*time.Hour))
	_, _, issuedBefore := ca.issue(t, dir, "plc-early", false, ahead(time.Hour))
	_, _, issuedAfter := ca.issue(t, dir, "plc-late", false, ahead(3*time.Hour))
	l := listen(t, Config{Type: TLS, CertFile: certFile, KeyFile: keyFile, CAFile: ca.file, RequireClientCert: true}, Options{})
	p := &pki{dir: dir, ca: ca}
	dial := func(cert tls.Certificate) error {
		c, err := p.dialTLS(l, &tls.Config{Certificates: []tls.Certificate{cert},
			Time: func() time.Time { return time.Now().Add(3 * time.Hour) }}) // the client's clock is right
		if err == nil {
			c.Close()
			got, aerr := l.Accept()
			if aerr == nil {
				got.Close()
			}
		}
		return err
	}
	if err := dial(issuedBefore); err != nil {
		t.Errorf("a client certificate issued before the gateway's own: %v", err)
	}
	if err := dial(issuedAfter); err == nil {
		t.Error("a client certificate issued after every time the gateway knows has passed was accepted")
	}
}
