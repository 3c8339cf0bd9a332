package gateway_test

import (
	"fmt"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/gateway"
	"github.com/linemq/linemq/gateway/config"
	"github.com/linemq/linemq/gateway/health"
	"github.com/linemq/linemq/internal/mqtttest"
)

// freeURL returns an http URL on a loopback port the OS has just handed
// out: etcd's member URLs must be known before it listens.
func freeURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return "http://" + l.Addr().String()
}

// TestTwoGatewaysShareAGroup: two gateways of one cluster, the first
// running an etcd member inside, the second using it as an external
// endpoint. A worker on each joins one share group; publishes on the first
// alternate between them (local member first, then the remote one), the
// cluster's health check is OK, and the second leaves cleanly.
func TestTwoGatewaysShareAGroup(t *testing.T) {
	peerURL, clientURL := freeURL(t), freeURL(t)
	start := func(name string, tweak func(c *config.Config)) *gateway.Gateway {
		cfg := testConfig(t)
		cfg.NodeID = name
		cfg.DataDir = filepath.Join(t.TempDir(), name)
		cfg.Cluster.Listen = "127.0.0.1:0"
		tweak(cfg)
		g, err := gateway.Start(t.Context(), gateway.Options{Config: cfg, Logger: testLogger(t)})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return g
	}
	gw1 := start("gw1", func(c *config.Config) {
		c.Cluster.Etcd.Embed = true
		c.Cluster.Etcd.PeerListen = peerURL
		c.Cluster.Etcd.ClientListen = clientURL
	})
	defer gw1.Close()
	gw2 := start("gw2", func(c *config.Config) { c.Cluster.Etcd.Endpoints = []string{clientURL} })
	defer gw2.Close()

	w1, _ := mqtttest.DialV5(t, gw1.MQTTAddr().String(), &paho.Connect{ClientID: "w1", CleanStart: true}, nil)
	w1.Sub("$share/g/line/#", 1)
	w2, _ := mqtttest.DialV5(t, gw2.MQTTAddr().String(), &paho.Connect{ClientID: "w2", CleanStart: true}, nil)
	w2.Sub("$share/g/line/#", 1)
	brokertest.Eventually(t, 15*time.Second, "gw1 sees both members and reaches gw2", func() bool {
		for _, gs := range gw1.Broker().ShareGroups() {
			if gs.Name == "g" && gs.Members == 2 {
				c, ok := gw1.Health().Get("cluster")
				return ok && c.State == health.OK
			}
		}
		return false
	})
	pub, _ := mqtttest.DialV5(t, gw1.MQTTAddr().String(), &paho.Connect{ClientID: "pub", CleanStart: true}, nil)
	// The first publishes may find gw2's stream not up yet and go to w1:
	// wait until one reaches w2, then count.
	brokertest.Eventually(t, 15*time.Second, "a message through gw2", func() bool {
		pub.Pub("line/warmup", 1, false, "w")
		select {
		case <-w2.Msgs:
			return true
		case <-time.After(50 * time.Millisecond):
			return false
		}
	})
	for len(w1.Msgs) > 0 {
		<-w1.Msgs
	}
	for i := range 10 {
		pub.Pub("line/1", 1, false, fmt.Sprint(i))
	}
	n1, n2 := 0, 0
	deadline := time.After(10 * time.Second)
	for n1+n2 < 10 {
		select {
		case <-w1.Msgs:
			n1++
		case <-w2.Msgs:
			n2++
		case <-deadline:
			t.Fatalf("after 10 publishes: w1 %d, w2 %d", n1, n2)
		}
	}
	if n1 != 5 || n2 != 5 {
		t.Errorf("w1 got %d, w2 %d; want 5 each", n1, n2)
	}
}
