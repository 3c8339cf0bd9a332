package certs_test

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/linemq/linemq/gateway/certs"
	"github.com/linemq/linemq/internal/certtest"
)

// TestWatcherSettles: the callback runs once per change, after the files
// have stopped moving for one look, however many steps the change took.
func TestWatcherSettles(t *testing.T) {
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "c"), filepath.Join(dir, "k")
	os.WriteFile(cert, []byte("1"), 0o600)
	os.WriteFile(key, []byte("1"), 0o600)
	var calls int
	w := certs.NewWatcher([]string{cert, key, ""}, time.Hour, func() { calls++ })
	look := func(want int, why string) {
		t.Helper()
		w.Check()
		if calls != want {
			t.Fatalf("%s: %d calls, want %d", why, calls, want)
		}
	}
	look(0, "nothing changed")
	os.WriteFile(cert, []byte("22"), 0o600)
	look(0, "certificate written, not yet settled")
	os.WriteFile(key, []byte("22"), 0o600)
	look(0, "key written a look later")
	look(1, "both settled")
	look(1, "no further change")
	os.Remove(key)
	look(1, "key gone")
	look(2, "key gone, settled") // the owner's reload reports the missing file
	os.WriteFile(key, []byte("333"), 0o600)
	look(2, "key back")
	look(3, "key back, settled")
}

// TestLoadCRL: lists are read from PEM and DER, and refused when no
// authority of the CA file signed them or when the file holds none.
func TestLoadCRL(t *testing.T) {
	ca, other := certtest.NewCA(t, "plant-ca"), certtest.NewCA(t, "other-ca")
	cas, err := certs.ParseCAs(ca.File)
	if err != nil {
		t.Fatal(err)
	}
	leafFile, _ := ca.Files(t, "plc-7")
	keptFile, _ := ca.Files(t, "plc-8")
	file := filepath.Join(t.TempDir(), "plant.crl")
	ca.WriteCRL(t, file, leafFile)
	crl, err := certs.LoadCRL(file, cas)
	if err != nil {
		t.Fatal(err)
	}
	chain := func(f string) *tls.Certificate {
		pair, err := tls.LoadX509KeyPair(f, strings.TrimSuffix(f, ".crt")+".key")
		if err != nil {
			t.Fatal(err)
		}
		return &pair
	}
	root := cas[0]
	if r := crl.Revoked([]*x509.Certificate{chain(leafFile).Leaf, root}); r == nil || r.Subject.CommonName != "plc-7" {
		t.Errorf("plc-7 revoked = %v", r)
	}
	if r := crl.Revoked([]*x509.Certificate{chain(keptFile).Leaf, root}); r != nil {
		t.Errorf("plc-8 revoked = %v", r.Subject)
	}
	if r := crl.Revoked([]*x509.Certificate{root}); r != nil {
		t.Error("a root is never revoked by a list")
	}
	if s := crl.Stale(time.Now()); s != nil {
		t.Errorf("fresh list stale: %v", s)
	}
	if s := crl.Stale(time.Now().Add(2 * time.Hour)); len(s) != 1 {
		t.Errorf("list past its next update: stale = %v", s)
	}

	otherFile := filepath.Join(t.TempDir(), "other.crl")
	other.WriteCRL(t, otherFile)
	if _, err := certs.LoadCRL(otherFile, cas); err == nil || !strings.Contains(err.Error(), "not signed by any authority") {
		t.Errorf("another CA's list: %v", err)
	}
	if _, err := certs.LoadCRL(ca.File, cas); err == nil || !strings.Contains(err.Error(), "holds no revocation list") {
		t.Errorf("a certificate given as a list: %v", err)
	}
}

// TestMutualRotation: both ends of a mutual TLS link replace their
// certificates, authorities and revocation list while running; each
// handshake uses what is in force, and a reload that fails changes nothing.
func TestMutualRotation(t *testing.T) {
	ca1 := certtest.NewCA(t, "line-ca-1")
	dir := t.TempDir()
	files := func(node string) certs.Files {
		c, k := ca1.Files(t, node)
		f := certs.Files{Cert: filepath.Join(dir, node+".crt"), Key: filepath.Join(dir, node+".key"), CA: filepath.Join(dir, node+"-ca.pem")}
		copyFile(t, c, f.Cert)
		copyFile(t, k, f.Key)
		copyFile(t, ca1.File, f.CA)
		return f
	}
	af, bf := files("gw1"), files("gw2")
	a, err := certs.LoadMutual(af)
	if err != nil {
		t.Fatal(err)
	}
	b, err := certs.LoadMutual(bf)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", a.ServerConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan error, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				err := c.(*tls.Conn).Handshake()
				accepted <- err
				c.Close()
			}()
		}
	}()
	dial := func(serverName string) error {
		cfg := b.ClientConfig() // one per dial, as gateway/peer asks
		cfg.ServerName = serverName
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", ln.Addr().String(), cfg)
		if err == nil {
			c.Close()
		}
		if aerr := <-accepted; err == nil {
			err = aerr
		}
		return err
	}
	if err := dial("gw1"); err != nil {
		t.Fatalf("first handshake: %v", err)
	}
	if err := dial("gw9"); err == nil {
		t.Error("gw1's certificate accepted for gw9")
	}

	// gw1 moves to a certificate of a new authority that both ends add
	// to their bundles; gw2 first, then gw1.
	ca2 := certtest.NewCA(t, "line-ca-2")
	bundle := filepath.Join(t.TempDir(), "bundle.pem")
	certtest.Concat(t, bundle, ca1.File, ca2.File)
	c2, k2 := ca2.Files(t, "gw1")
	copyFile(t, c2, af.Cert)
	copyFile(t, k2, af.Key)
	copyFile(t, bundle, af.CA)
	if err := a.Reload(); err != nil {
		t.Fatal(err)
	}
	if err := dial("gw1"); err == nil {
		t.Error("gw2 trusted a certificate of an authority it does not know yet")
	}
	copyFile(t, bundle, bf.CA)
	if err := b.Reload(); err != nil {
		t.Fatal(err)
	}
	if err := dial("gw1"); err != nil {
		t.Errorf("after both bundles: %v", err)
	}

	// gw2's certificate revoked by its authority: gw1 refuses it.
	af.CRL = filepath.Join(dir, "line.crl")
	ca1.WriteCRL(t, af.CRL, bf.Cert)
	if a, err = certs.LoadMutual(af); err != nil {
		t.Fatal(err)
	}
	ln.Close()
	if ln, err = tls.Listen("tcp", "127.0.0.1:0", a.ServerConfig()); err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { accepted <- c.(*tls.Conn).Handshake(); c.Close() }()
		}
	}()
	if err := dial("gw1"); err == nil || !strings.Contains(err.Error(), "revoked") {
		t.Errorf("a revoked peer: %v", err)
	}

	// A key that does not match its certificate: refused, the material in
	// force stays.
	_, wrongKey := ca1.Files(t, "x")
	copyFile(t, wrongKey, bf.Key)
	if err := b.Reload(); err == nil || !strings.Contains(err.Error(), "key_file") {
		t.Errorf("mismatched key: %v", err)
	}
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
