package gateway_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/gateway/config"
	"github.com/linemq/linemq/gateway/health"
	"github.com/linemq/linemq/internal/certtest"
	"github.com/linemq/linemq/internal/mqtttest"
)

// meshTLS sets cluster.tls to a certificate of ca for the gateway.
func meshTLS(t *testing.T, c *config.Config, ca *certtest.CA) {
	cert, key := ca.Files(t, c.NodeID, "127.0.0.1")
	c.Cluster.TLS = config.ClusterTLS{CertFile: cert, KeyFile: key, CAFile: ca.File}
}

// TestClusterMutualTLS: gw1 and gw2 run the mesh on mutual TLS with
// certificates of one CA, and share a group as without TLS. gw3's
// certificate comes from another CA: it registers (etcd is not the
// mesh), but no stream to it is established, its member is passed over,
// and gw1's cluster_peers health check and the peer metrics say why.
func TestClusterMutualTLS(t *testing.T) {
	plant, other := certtest.NewCA(t, "plant CA"), certtest.NewCA(t, "another CA")
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

	var gw3TLS config.ClusterTLS
	gw3 := startGateway(t, "gw3", func(c *config.Config) {
		c.Cluster.Etcd.Endpoints = []string{clientURL}
		meshTLS(t, c, other)
		gw3TLS = c.Cluster.TLS
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

	// gw3 is given a certificate of the line's CA, and the CA, in place of
	// its files, with no restart and no SIGHUP: it reloads them by
	// itself, the others' next dials succeed, and its member takes its
	// share again.
	cert, key := plant.Files(t, "gw3", "127.0.0.1")
	for src, dst := range map[string]string{cert: gw3TLS.CertFile, key: gw3TLS.KeyFile, plant.File: gw3TLS.CAFile} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	brokertest.Eventually(t, 15*time.Second, "gw1 reaches gw3 with its new certificate", func() bool {
		c, ok := gw1.Health().Get("cluster_peers")
		return ok && c.State == health.OK
	})
	for i := range 30 {
		pub.Pub("line/rotated", 1, false, fmt.Sprint(i))
	}
	w3.Next()
}

// TestEmbeddedEtcdMutualTLS: gw1's embedded etcd member serves its peers
// and clients over mutual TLS from cluster.etcd.tls; gw2 reaches it with
// a certificate of the same CA and the two share a group. A client with
// no certificate, or one of another CA, is refused, and a member
// certificate replaced on disk is served at the next handshake.
func TestEmbeddedEtcdMutualTLS(t *testing.T) {
	plant, other := certtest.NewCA(t, "plant CA"), certtest.NewCA(t, "another CA")
	peerURL := strings.Replace(freeURL(t), "http://", "https://", 1)
	clientURL := strings.Replace(freeURL(t), "http://", "https://", 1)
	var memberTLS config.EtcdTLS
	gw1 := startGateway(t, "gw1", func(c *config.Config) {
		hostEtcd(peerURL, clientURL)(c)
		cert, key := plant.Files(t, "gw1", "127.0.0.1")
		memberTLS = config.EtcdTLS{CertFile: cert, KeyFile: key, CAFile: plant.File}
		c.Cluster.Etcd.TLS = memberTLS
	})
	gw2 := startGateway(t, "gw2", func(c *config.Config) {
		useEtcd(clientURL)(c)
		cert, key := plant.Files(t, "gw2")
		c.Cluster.Etcd.TLS = config.EtcdTLS{CertFile: cert, KeyFile: key, CAFile: plant.File}
	})
	splitScenario(t, gw1, gw2, "etcd-tls")

	endpoint := strings.TrimPrefix(clientURL, "https://")
	handshake := func(cert *tls.Certificate) (*x509.Certificate, error) {
		roots := x509.NewCertPool()
		b, _ := os.ReadFile(plant.File)
		roots.AppendCertsFromPEM(b)
		cfg := &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
		if cert != nil {
			cfg.Certificates = []tls.Certificate{*cert}
		}
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", endpoint, cfg)
		if err != nil {
			return nil, err
		}
		defer c.Close()
		// TLS 1.3 servers check the client's certificate after the
		// client's side of the handshake: a read shows the verdict.
		c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, err
		}
		return c.ConnectionState().PeerCertificates[0], nil
	}
	pair := func(ca *certtest.CA, name string) *tls.Certificate {
		cf, kf := ca.Files(t, name)
		p, err := tls.LoadX509KeyPair(cf, kf)
		if err != nil {
			t.Fatal(err)
		}
		return &p
	}
	if _, err := handshake(nil); err == nil {
		t.Error("a client without a certificate reached the member")
	}
	if _, err := handshake(pair(other, "intruder")); err == nil {
		t.Error("a client with another CA's certificate reached the member")
	}
	first, err := handshake(pair(plant, "tool"))
	if err != nil {
		t.Fatalf("a client of the plant CA: %v", err)
	}

	// The member's certificate renewed in place: served at the next
	// handshake, the line still working.
	cert, key := plant.Files(t, "gw1", "127.0.0.1")
	for src, dst := range map[string]string{cert: memberTLS.CertFile, key: memberTLS.KeyFile} {
		b, _ := os.ReadFile(src)
		if err := os.WriteFile(dst, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	brokertest.Eventually(t, 5*time.Second, "the renewed member certificate served", func() bool {
		c, err := handshake(pair(plant, "tool"))
		return err == nil && c.SerialNumber.Cmp(first.SerialNumber) != 0
	})
	splitScenario(t, gw1, gw2, "etcd-tls-2")
}
