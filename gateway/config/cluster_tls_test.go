package config

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/linemq/linemq/gateway/certs"
)

// writeCertPair writes a CA and a certificate it issued for dnsName with
// the given extended key usages into dir, and returns the three files.
func writeCertPair(t *testing.T, dir, dnsName string, eku ...x509.ExtKeyUsage) (caFile, certFile, keyFile string) {
	t.Helper()
	write := func(name, typ string, der []byte) string {
		f := filepath.Join(dir, name)
		if err := os.WriteFile(f, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: dnsName},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		DNSNames: []string{dnsName}, ExtKeyUsage: eku}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	return write("ca.crt", "CERTIFICATE", caDER), write(dnsName+".crt", "CERTIFICATE", der), write(dnsName+".key", "EC PRIVATE KEY", kder)
}

func TestClusterTLS(t *testing.T) {
	dir := t.TempDir()
	both := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	ca, cert, key := writeCertPair(t, dir, "gw1", both...)
	_, serverOnly, serverOnlyKey := writeCertPair(t, t.TempDir(), "gw1", x509.ExtKeyUsageServerAuth)
	notPEM := filepath.Join(dir, "not.pem")
	os.WriteFile(notPEM, []byte("hello"), 0o600)

	base := "node_id: gw1\ncluster:\n  listen: 10.0.0.11:7946\n"
	r := strings.NewReplacer("CA", ca, "CERT", cert, "KEY", key, "SRVONLY", serverOnly, "SOKEY", serverOnlyKey, "NOTPEM", notPEM)
	for _, tc := range []struct {
		name, yaml string
		errs       []string // each a substring of one error; none: valid
	}{
		{"mesh", base + "  etcd: {endpoints: [http://10.0.0.5:2379]}\n  tls:\n    cert_file: CERT\n    key_file: KEY\n    ca_file: CA\n", nil},
		{"shared server name", "node_id: gw9\ncluster:\n  listen: 10.0.0.11:7946\n  etcd: {endpoints: [http://10.0.0.5:2379]}\n  tls:\n    cert_file: CERT\n    key_file: KEY\n    ca_file: CA\n    server_name: gw1\n", nil},
		{"names another node", "node_id: gw2\ncluster:\n  listen: 10.0.0.11:7946\n  etcd: {endpoints: [http://10.0.0.5:2379]}\n  tls:\n    cert_file: CERT\n    key_file: KEY\n    ca_file: CA\n", []string{
			`linemq.yaml:6: cluster.tls.cert_file: the certificate does not name node_id "gw2", which the other gateways check (DNS names: gw1); or set cluster.tls.server_name`}},
		{"server only", base + "  etcd: {endpoints: [http://10.0.0.5:2379]}\n  tls:\n    cert_file: SRVONLY\n    key_file: SOKEY\n    ca_file: CA\n", []string{
			"linemq.yaml:6: cluster.tls.cert_file: the certificate is not valid for client authentication"}},
		{"no ca, no key", base + "  etcd: {endpoints: [http://10.0.0.5:2379]}\n  tls:\n    cert_file: CERT\n", []string{
			"linemq.yaml:5: cluster.tls.key_file: required with cert_file",
			"linemq.yaml:5: cluster.tls.ca_file: required"}},
		{"bad files", base + "  etcd: {endpoints: [http://10.0.0.5:2379]}\n  tls:\n    cert_file: /nonexistent.crt\n    key_file: KEY\n    ca_file: NOTPEM\n", []string{
			"linemq.yaml:6: cluster.tls.cert_file: open /nonexistent.crt",
			"linemq.yaml:8: cluster.tls.ca_file: " + notPEM + " holds no PEM certificate"}},
		{"bad crl", base + "  etcd: {endpoints: [http://10.0.0.5:2379]}\n  tls:\n    cert_file: CERT\n    key_file: KEY\n    ca_file: CA\n    crl_file: NOTPEM\n", []string{
			"linemq.yaml:9: cluster.tls.crl_file: " + notPEM + " holds no revocation list"}},
		{"etcd tls", base + "  etcd:\n    endpoints: [https://10.0.0.5:2379]\n    tls:\n      ca_file: CA\n      cert_file: CERT\n      key_file: KEY\n", nil},
		{"etcd tls over http", base + "  etcd:\n    endpoints: [http://10.0.0.5:2379]\n    tls:\n      ca_file: CA\n", []string{
			`linemq.yaml:5: cluster.etcd.endpoints[0]: "http://10.0.0.5:2379" is plain HTTP while cluster.etcd.tls is set: write https://`}},
		{"etcd tls embedded", base + "  etcd:\n    embed: true\n    peer_listen: http://10.0.0.11:2380\n    client_listen: http://10.0.0.11:2379\n    tls:\n      key_file: KEY\n", []string{
			"linemq.yaml:8: cluster.etcd.tls.cert_file: required with key_file",
			"linemq.yaml:8: cluster.etcd.tls.ca_file: required with embed: true",
			`linemq.yaml:6: cluster.etcd.peer_listen: "http://10.0.0.11:2380" has plain http:// URLs while cluster.etcd.tls is set: write https://`,
			`linemq.yaml:7: cluster.etcd.client_listen: "http://10.0.0.11:2379" has plain http:// URLs`}},
		{"etcd tls embedded, good", base + "  etcd:\n    embed: true\n    peer_listen: https://10.0.0.11:2380\n    client_listen: https://10.0.0.11:2379\n    tls:\n      ca_file: CA\n      cert_file: CERT\n      key_file: KEY\n      crl_file: NOTPEM\n", []string{
			"linemq.yaml:12: cluster.etcd.tls.crl_file: " + notPEM + " holds no revocation list"}},
		{"https without tls", base + "  etcd:\n    embed: true\n    peer_listen: https://10.0.0.11:2380\n    client_listen: http://10.0.0.11:2379\n", []string{
			`linemq.yaml:6: cluster.etcd.peer_listen: "https://10.0.0.11:2380" has https:// URLs: set cluster.etcd.tls`}},
		{"crl for an external etcd", base + "  etcd:\n    endpoints: [https://10.0.0.5:2379]\n    tls:\n      ca_file: CA\n      crl_file: CA\n", []string{
			"linemq.yaml:8: cluster.etcd.tls.crl_file: only with embed: true"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(r.Replace(tc.yaml)), "linemq.yaml")
			if err != nil {
				t.Fatal(err)
			}
			err = c.Validate()
			if len(tc.errs) == 0 {
				if err != nil {
					t.Fatalf("Validate = %v", err)
				}
				if c.Cluster.TLS.Set() {
					if _, err := certs.LoadMutual(c.Cluster.TLS.Files()); err != nil {
						t.Fatalf("the mesh's files validated but do not load: %v", err)
					}
				}
				etcd, err := c.Cluster.Etcd.TLS.Load()
				if err != nil {
					t.Fatal(err)
				}
				if c.Cluster.Etcd.TLS.Set() && (etcd == nil || len(etcd.Certificates) != 1 || etcd.RootCAs == nil) {
					t.Errorf("etcd TLS = %+v", etcd)
				}
				return
			}
			if err == nil {
				t.Fatal("Validate = nil")
			}
			got := unjoin(err)
			if len(got) != len(tc.errs) {
				t.Errorf("%d errors, want %d:\n%v", len(got), len(tc.errs), err)
			}
			for _, want := range tc.errs {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("no error has %q:\n%v", want, err)
				}
			}
		})
	}

	// No TLS: the etcd client's Load returns nil, so it runs plain (and
	// the gateway loads the mesh's files only when the section is set).
	var none Cluster
	if none.TLS.Set() {
		t.Error("an empty cluster.tls is set")
	}
	if e, err := none.Etcd.TLS.Load(); e != nil || err != nil {
		t.Errorf("unset cluster.etcd.tls: Load = %v, %v", e, err)
	}
}
