package gateway_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/gateway/config"
	"github.com/linemq/linemq/gateway/health"
	"github.com/linemq/linemq/internal/mqtttest"
)

// testCA is a certificate authority made for one test, its files in a
// temporary directory.
type testCA struct {
	dir  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	File string // the CA certificate, PEM
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &testCA{dir: t.TempDir(), cert: cert, key: key}
	ca.File = writePEMFile(t, filepath.Join(ca.dir, "ca.crt"), "CERTIFICATE", der)
	return ca
}

// issue makes a certificate for a gateway (or etcd) named node, valid for
// server and client authentication, naming node and 127.0.0.1, and
// returns its certificate and key files.
func (ca *testCA) issue(t *testing.T, node string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: node},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		DNSNames: []string{node}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return writePEMFile(t, filepath.Join(ca.dir, node+".crt"), "CERTIFICATE", der),
		writePEMFile(t, filepath.Join(ca.dir, node+".key"), "EC PRIVATE KEY", kder)
}

func writePEMFile(t *testing.T, file, typ string, der []byte) string {
	t.Helper()
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// meshTLS sets cluster.tls to a certificate of ca for the gateway.
func meshTLS(t *testing.T, c *config.Config, ca *testCA) {
	cert, key := ca.issue(t, c.NodeID)
	c.Cluster.TLS = config.ClusterTLS{CertFile: cert, KeyFile: key, CAFile: ca.File}
}

// TestClusterMutualTLS: gw1 and gw2 run the mesh on mutual TLS with
// certificates of one CA, and share a group as without TLS. gw3's
// certificate comes from another CA: it registers (etcd is not the
// mesh), but no stream to it is established, its member is passed over,
// and gw1's cluster_peers health check and the peer metrics say why.
func TestClusterMutualTLS(t *testing.T) {
	plant, other := newTestCA(t, "plant CA"), newTestCA(t, "another CA")
	peerURL, clientURL := freeURL(t), freeURL(t)
	gw1 := startGateway(t, "gw1", func(c *config.Config) {
		hostEtcd(peerURL, clientURL)(c)
		meshTLS(t, c, plant)
	})
	gw2 := startGateway(t, "gw2", func(c *config.Config) {
		useEtcd(clientURL)(c)
		meshTLS(t, c, plant)
	})
	w1, w2 := splitScenario(t, gw1, gw2, "tls")

	gw3 := startGateway(t, "gw3", func(c *config.Config) {
		c.Cluster.Etcd.Endpoints = []string{clientURL}
		meshTLS(t, c, other)
	})
	w3, _ := mqtttest.DialV5(t, gw3.MQTTAddr().String(), &paho.Connect{ClientID: "tls-w3", CleanStart: true}, nil)
	w3.Sub("$share/tls/line/#", 1)
	brokertest.Eventually(t, 15*time.Second, "gw1 knows gw3's member, and says it cannot reach gw3 because of its certificate", func() bool {
		c, ok := gw1.Health().Get("cluster_peers")
		return groupMembers(gw1, "tls") == 3 && ok && c.State == health.Degraded &&
			strings.Contains(c.Reason, "gw3: ") && strings.Contains(c.Reason, "certificate")
	})
	c, _ := gw1.Health().Get("cluster_peers")
	t.Logf("gw1 cluster_peers: %s", c.Reason)
	m := scrape(t, gw1)
	if m[`linemq_cluster_peer_up{peer="gw3"}`] != 0 || m[`linemq_cluster_peer_dial_errors_total{peer="gw3"}`] < 1 ||
		m[`linemq_cluster_peer_up{peer="gw2"}`] != 1 {
		t.Errorf("gw1's peer metrics: gw3 up %v, dial errors %v; gw2 up %v; want 0, >= 1, 1",
			m[`linemq_cluster_peer_up{peer="gw3"}`], m[`linemq_cluster_peer_dial_errors_total{peer="gw3"}`], m[`linemq_cluster_peer_up{peer="gw2"}`])
	}

	// Publishes on gw1 pass gw3's member over: w1 and w2 share them.
	pub, _ := mqtttest.DialV5(t, gw1.MQTTAddr().String(), &paho.Connect{ClientID: "tls-pub2", CleanStart: true}, nil)
	for i := range 10 {
		pub.Pub("line/after", 1, false, fmt.Sprint(i))
	}
	n1, n2 := 0, 0
	for n1+n2 < 10 {
		select {
		case <-w1.Msgs:
			n1++
		case <-w2.Msgs:
			n2++
		case <-time.After(10 * time.Second):
			t.Fatalf("after 10 publishes: w1 %d, w2 %d", n1, n2)
		}
	}
	w3.None(200 * time.Millisecond)
	// Round robin over w1, w2 and w3 with w3 passed over to the next in
	// order: how the ten fall depends on where the cursor stood.
	if n1 == 0 || n2 == 0 {
		t.Errorf("w1 got %d, w2 %d; want both some, gw3's member passed over", n1, n2)
	}
	brokertest.Eventually(t, 5*time.Second, "gw2 says it cannot reach gw3", func() bool {
		c, ok := gw2.Health().Get("cluster_peers")
		return ok && c.State == health.Degraded && strings.Contains(c.Reason, "gw3: ")
	})
	// gw3 dials nobody (its name sorts last) and refuses gw1 and gw2's
	// handshakes: it has no stream either.
	brokertest.Eventually(t, 5*time.Second, "gw3 says it has no stream to gw1 and gw2", func() bool {
		c, ok := gw3.Health().Get("cluster_peers")
		return ok && c.State == health.Degraded && strings.Contains(c.Reason, "gw1: ") && strings.Contains(c.Reason, "gw2: ")
	})
}
