// Package certtest makes certificate authorities and node certificates
// for tests of mutual TLS between nodes, as PEM files in a test's
// temporary directory, loaded back the way a gateway loads its own.
package certtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority whose files live in Dir.
type CA struct {
	Dir  string
	File string // the CA certificate, PEM
	key  *ecdsa.PrivateKey
	cert *x509.Certificate
}

// NewCA makes a CA named name, valid for an hour either side of now.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &CA{Dir: t.TempDir(), key: key, cert: cert}
	ca.File = filepath.Join(ca.Dir, name+".pem")
	writePEM(t, ca.File, "CERTIFICATE", der)
	return ca
}

// Issue makes a certificate naming names (see Files), for use as both
// server and client, and returns a TLS config loaded from its files: the
// certificate, and the CA as the only root.
func (ca *CA) Issue(t testing.TB, names ...string) *tls.Config {
	t.Helper()
	certFile, keyFile := ca.Files(t, names...)
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(ca.File)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatalf("no CA certificate in %s", ca.File)
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: pool, MinVersion: tls.VersionTLS13}
}

// Files makes a certificate naming names (DNS SANs, or IP SANs for those
// that parse as addresses; the first is also the common name), for use as
// both server and client, and writes it and its key next to the CA as PEM
// files, whose paths it returns.
func (ca *CA) Files(t testing.TB, names ...string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: names[0]},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	base := filepath.Join(ca.Dir, serial.String())
	writePEM(t, base+".crt", "CERTIFICATE", der)
	writePEM(t, base+".key", "EC PRIVATE KEY", keyDER)
	return base + ".crt", base + ".key"
}

// WriteCRL writes to file (through a rename, so that a watcher never
// reads half of it) the CA's revocation list of the certificates in
// certFiles; none makes an empty list.
func (ca *CA) WriteCRL(t testing.TB, file string, certFiles ...string) {
	t.Helper()
	tmpl := &x509.RevocationList{
		Number:     big.NewInt(time.Now().UnixNano()),
		ThisUpdate: time.Now().Add(-time.Minute),
		NextUpdate: time.Now().Add(time.Hour),
	}
	for _, f := range certFiles {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		blk, _ := pem.Decode(b)
		if blk == nil {
			t.Fatalf("%s: no PEM", f)
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.RevokedCertificateEntries = append(tmpl.RevokedCertificateEntries,
			x509.RevocationListEntry{SerialNumber: c.SerialNumber, RevocationTime: time.Now()})
	}
	der, err := x509.CreateRevocationList(rand.Reader, tmpl, ca.cert, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, file+".new", "X509 CRL", der)
	if err := os.Rename(file+".new", file); err != nil {
		t.Fatal(err)
	}
}

// Concat writes the files srcs one after the other into dst: a bundle of
// CA certificates, for one.
func Concat(t testing.TB, dst string, srcs ...string) {
	t.Helper()
	var b []byte
	for _, s := range srcs {
		more, err := os.ReadFile(s)
		if err != nil {
			t.Fatal(err)
		}
		b = append(b, more...)
	}
	if err := os.WriteFile(dst, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
