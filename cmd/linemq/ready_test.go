package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// readyListenersRE reads the ready line as scripts do: mqtt= first, http=
// right after it, then the configured listeners.
var readyListenersRE = regexp.MustCompile(`msg=ready .*mqtt=(\S+) http=(\S+) listeners="([^"]*)"`)

// TestReadyNamesListeners starts the daemon with the mqtt.listen shortcut
// and a tcp, a tls and a ws listener from the file: the ready line must
// name each of them with the port it was given for :0, after mqtt= and
// http=, and each address must accept connections.
func TestReadyNamesListeners(t *testing.T) {
	dir := t.TempDir()
	cert, key := selfSigned(t, dir)
	cfgFile := filepath.Join(dir, "linemq.yaml")
	writeFile(t, cfgFile, `listeners:
  - type: tcp
    address: 127.0.0.1:0
  - type: tls
    address: 127.0.0.1:0
    cert_file: `+cert+`
    key_file: `+key+`
  - type: ws
    address: 127.0.0.1:0
`)
	d := start(t,
		"-config", cfgFile,
		"-mqtt-listen", "127.0.0.1:0",
		"-http-listen", "127.0.0.1:0",
		"-data-dir", filepath.Join(dir, "data"),
	)
	m := d.waitLine(t, readyListenersRE, 30*time.Second)
	if m[1] == "127.0.0.1:0" || m[2] == "127.0.0.1:0" {
		t.Errorf("mqtt=%s http=%s: not the bound ports", m[1], m[2])
	}
	// The other tests' pattern must still find both addresses.
	if am := readyAddrsRE.FindStringSubmatch(m[0]); am == nil || am[1] != m[1] || am[2] != m[2] {
		t.Errorf("readyAddrsRE reads %q from %q", am, m[0])
	}

	us := strings.Fields(m[3])
	wantSchemes := []string{"mqtt", "mqtts", "ws"}
	if len(us) != len(wantSchemes) {
		t.Fatalf("listeners=%q: want %d listeners", m[3], len(wantSchemes))
	}
	for i, s := range us {
		u, err := url.Parse(s)
		if err != nil {
			t.Errorf("listener %d: %v", i, err)
			continue
		}
		if u.Scheme != wantSchemes[i] {
			t.Errorf("listener %d: %s: scheme %q, want %q", i, s, u.Scheme, wantSchemes[i])
		}
		if u.Port() == "0" || u.Port() == "" {
			t.Errorf("listener %d: %s: not the bound port", i, s)
			continue
		}
		if wantSchemes[i] == "ws" && u.Path != "/mqtt" {
			t.Errorf("listener %d: %s: path %q, want /mqtt", i, s, u.Path)
		}
		c, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
		if err != nil {
			t.Errorf("listener %d: %s: %v", i, s, err)
			continue
		}
		c.Close()
	}
}

// selfSigned writes a self-signed certificate for 127.0.0.1 and its key
// into dir and returns their file names.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "linemq-test"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile = filepath.Join(dir, "server.crt")
	keyFile = filepath.Join(dir, "server.key")
	for _, f := range []struct {
		name, typ string
		der       []byte
	}{{certFile, "CERTIFICATE", der}, {keyFile, "EC PRIVATE KEY", kder}} {
		if err := os.WriteFile(f.name, pem.EncodeToMemory(&pem.Block{Type: f.typ, Bytes: f.der}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return certFile, keyFile
}
