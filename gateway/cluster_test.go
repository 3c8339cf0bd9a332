package gateway_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
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

// startGateway starts a clustered gateway named name on loopback, its
// transport on an OS-chosen port; tweak says where its etcd is (and
// whatever else the test needs). It is closed when the test ends.
func startGateway(t *testing.T, name string, tweak func(c *config.Config)) *gateway.Gateway {
	t.Helper()
	cfg := testConfig(t)
	cfg.NodeID = name
	cfg.DataDir = filepath.Join(t.TempDir(), name)
	cfg.Cluster.Listen = "127.0.0.1:0"
	cfg.HTTP.Listen = new("127.0.0.1:0") // for /metrics
	tweak(cfg)
	g, err := gateway.Start(t.Context(), gateway.Options{Config: cfg, Logger: testLogger(t)})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}

// scrape reads g's /metrics into a map from series (name{labels}, as
// printed) to value.
func scrape(t *testing.T, g *gateway.Gateway) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + g.HTTPAddr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// clusterHealthy reports whether g's cluster health check is OK.
func clusterHealthy(g *gateway.Gateway) bool {
	c, ok := g.Health().Get("cluster")
	return ok && c.State == health.OK
}

// groupMembers returns how many members g's broker counts in share group
// name (local and remote), 0 if there is no such group.
func groupMembers(g *gateway.Gateway, name string) int {
	for _, gs := range g.Broker().ShareGroups() {
		if gs.Name == name {
			return gs.Members
		}
	}
	return 0
}

// splitScenario is the two-gateway scenario the cluster tests share: a
// worker on each gateway joins share group group (client ids
// <group>-w1 and <group>-w2), and ten QoS 1 publishes on gw1 must go five
// to each, alternating local and remote. It returns the two workers.
func splitScenario(t *testing.T, gw1, gw2 *gateway.Gateway, group string) (w1, w2 *mqtttest.V5) {
	t.Helper()
	filter := "$share/" + group + "/line/#"
	w1, _ = mqtttest.DialV5(t, gw1.MQTTAddr().String(), &paho.Connect{ClientID: group + "-w1", CleanStart: true}, nil)
	w1.Sub(filter, 1)
	w2, _ = mqtttest.DialV5(t, gw2.MQTTAddr().String(), &paho.Connect{ClientID: group + "-w2", CleanStart: true}, nil)
	w2.Sub(filter, 1)
	brokertest.Eventually(t, 15*time.Second, "gw1 sees both members of "+group+" and its registry is in step", func() bool {
		return groupMembers(gw1, group) == 2 && groupMembers(gw2, group) == 2 && clusterHealthy(gw1) && clusterHealthy(gw2)
	})
	pub, _ := mqtttest.DialV5(t, gw1.MQTTAddr().String(), &paho.Connect{ClientID: group + "-pub", CleanStart: true}, nil)
	defer pub.Disconnect(&paho.Disconnect{})
	// The first publishes may find gw2's stream not up yet and go to w1:
	// wait until one reaches w2, then count only the counted topic.
	brokertest.Eventually(t, 15*time.Second, "a message through gw2", func() bool {
		pub.Pub("line/warmup", 1, false, "w")
		select {
		case <-w2.Msgs:
			return true
		case <-time.After(50 * time.Millisecond):
			return false
		}
	})
	topic := "line/" + group
	for i := range 10 {
		pub.Pub(topic, 1, false, fmt.Sprint(i))
	}
	n1, n2 := 0, 0
	deadline := time.After(10 * time.Second)
	for n1+n2 < 10 {
		select {
		case m := <-w1.Msgs:
			if m.Topic == topic {
				n1++
			}
		case m := <-w2.Msgs:
			if m.Topic == topic {
				n2++
			}
		case <-deadline:
			t.Fatalf("%s: after 10 publishes: w1 %d, w2 %d", group, n1, n2)
		}
	}
	if n1 != 5 || n2 != 5 {
		t.Errorf("%s: w1 got %d, w2 %d; want 5 each", group, n1, n2)
	}
	return w1, w2
}

// hostEtcd makes a gateway host the cluster's etcd member; useEtcd makes
// one use it as an external endpoint.
func hostEtcd(peerURL, clientURL string) func(*config.Config) {
	return func(c *config.Config) {
		c.Cluster.Etcd.Embed = true
		c.Cluster.Etcd.PeerListen = peerURL
		c.Cluster.Etcd.ClientListen = clientURL
	}
}

func useEtcd(clientURL string) func(*config.Config) {
	return func(c *config.Config) { c.Cluster.Etcd.Endpoints = []string{clientURL} }
}

// startPair starts two gateways, gw1 hosting the etcd member and gw2
// using it.
func startPair(t *testing.T) (gw1, gw2 *gateway.Gateway) {
	peerURL, clientURL := freeURL(t), freeURL(t)
	gw1 = startGateway(t, "gw1", hostEtcd(peerURL, clientURL))
	gw2 = startGateway(t, "gw2", useEtcd(clientURL))
	return gw1, gw2
}

// TestTwoGatewaysShareAGroup: two gateways of one cluster, the first
// running an etcd member inside, the second using it as an external
// endpoint. A worker on each joins one share group; publishes on the first
// alternate between them (local member first, then the remote one), the
// cluster's health check is OK, and the second leaves cleanly.
func TestTwoGatewaysShareAGroup(t *testing.T) {
	gw1, gw2 := startPair(t)
	splitScenario(t, gw1, gw2, "g")
	if err := gw2.Close(); err != nil {
		t.Errorf("gw2 Close = %v", err)
	}
	brokertest.Eventually(t, 10*time.Second, "gw1 sees gw2's member leave", func() bool { return groupMembers(gw1, "g") == 1 })
}

// TestClusterMetrics: /metrics on both gateways of a two-node cluster shows
// the registry, each peer stream and the broker's cluster counters, with
// exact counts for known traffic: ten group publishes on gw1 (five remote
// deliveries, all accepted) and seven QoS 1 publishes to an ordinary
// subscriber on gw2 (seven forwards, each kept in gw2's outbox and sent as
// a delivery gw2 answers: the stream carries twelve).
func TestClusterMetrics(t *testing.T) {
	gw1, gw2 := startPair(t)
	w1, w2 := splitScenario(t, gw1, gw2, "m")
	sub, _ := mqtttest.DialV5(t, gw2.MQTTAddr().String(), &paho.Connect{ClientID: "m-sub", CleanStart: true}, nil)
	sub.Sub("fwd/#", 1)
	// Three routes: each gateway's spBv1.0/# (its Sparkplug tracker's, see
	// docs/sparkplug.md) and the subscriber's.
	brokertest.Eventually(t, 10*time.Second, "gw1 sees gw2's route", func() bool {
		return scrape(t, gw1)["linemq_cluster_registry_routes"] == 3
	})
	pub, _ := mqtttest.DialV5(t, gw1.MQTTAddr().String(), &paho.Connect{ClientID: "m-pub2", CleanStart: true}, nil)

	before1, before2 := scrape(t, gw1), scrape(t, gw2)
	for i := range 10 {
		pub.Pub("line/m", 1, false, fmt.Sprint(i))
	}
	for range 5 {
		receive(t, w1.Msgs, 5*time.Second, "w1's share")
		receive(t, w2.Msgs, 5*time.Second, "w2's share")
	}
	for i := range 7 {
		pub.Pub("fwd/x", 1, false, fmt.Sprint(i))
	}
	for range 7 {
		receive(t, sub.Msgs, 5*time.Second, "a forwarded message")
	}
	m1, m2 := scrape(t, gw1), scrape(t, gw2)

	delta := func(before, after map[string]float64, k string) float64 {
		t.Helper()
		v, ok := after[k]
		if !ok {
			t.Fatalf("%s missing from /metrics", k)
		}
		return v - before[k]
	}
	exact := []struct {
		m, before map[string]float64
		node, key string
		want      float64
	}{
		{m1, before1, "gw1", "linemq_cluster_delivers_total", 5},
		{m1, before1, "gw1", `linemq_cluster_peer_deliveries_sent_total{peer="gw2"}`, 12},
		{m1, before1, "gw1", `linemq_cluster_peer_deliveries_total{outcome="accepted",peer="gw2"}`, 12},
		{m1, before1, "gw1", `linemq_cluster_forward_handed_total{peer="gw2"}`, 7},
		{m1, before1, "gw1", `linemq_cluster_forward_resent_total{peer="gw2"}`, 0},
		{m1, before1, "gw1", `linemq_cluster_peer_deliveries_total{outcome="not_here",peer="gw2"}`, 0},
		{m1, before1, "gw1", `linemq_cluster_peer_deliveries_total{outcome="timeout",peer="gw2"}`, 0},
		{m1, before1, "gw1", "linemq_cluster_repicks_total", 0},
		{m1, before1, "gw1", "linemq_cluster_forwards_total", 7},
		{m2, before2, "gw2", "linemq_cluster_not_here_total", 0},
		{m2, before2, "gw2", "linemq_cluster_delivers_total", 0},
		{m2, before2, "gw2", "linemq_cluster_forwards_total", 0},
	}
	for _, e := range exact {
		if got := delta(e.before, e.m, e.key); got != e.want {
			t.Errorf("%s: %s went up by %v, want %v", e.node, e.key, got, e.want)
		}
	}
	// The records gw1 sent gw2 include at least the 5 deliveries and 7
	// forwards; gw2 received at least as many, and answered the 5.
	if got := delta(before1, m1, `linemq_cluster_peer_sent_records_total{peer="gw2"}`); got < 12 {
		t.Errorf("gw1 sent gw2 %v records, want >= 12", got)
	}
	if got := delta(before2, m2, `linemq_cluster_peer_received_records_total{peer="gw1"}`); got < 12 {
		t.Errorf("gw2 received %v records from gw1, want >= 12", got)
	}
	if got := delta(before2, m2, `linemq_cluster_peer_sent_records_total{peer="gw1"}`); got < 12 {
		t.Errorf("gw2 sent gw1 %v records, want >= 12 answers", got)
	}
	if q := m1[`linemq_cluster_forward_queued{peer="gw2"}`]; q != 0 {
		t.Errorf("gw1 still keeps %v messages for gw2", q)
	}

	for _, c := range []struct {
		name string
		m    map[string]float64
		peer string
	}{{"gw1", m1, "gw2"}, {"gw2", m2, "gw1"}} {
		p := `{peer="` + c.peer + `"}`
		want := map[string]float64{
			`linemq_cluster_registry_state{state="healthy"}`:  1,
			`linemq_cluster_registry_state{state="degraded"}`: 0,
			"linemq_cluster_registry_nodes":                   2,
			"linemq_cluster_registry_routes":                  3,
			"linemq_cluster_registry_members":                 2,
			"linemq_cluster_registry_resyncs_total":           0,
			"linemq_cluster_registry_reregistrations_total":   0,
			"linemq_cluster_peer_up" + p:                      1,
			"linemq_cluster_peer_available" + p:               1,
			"linemq_cluster_peer_breaker_state" + p:           0,
			"linemq_cluster_peer_forwards_dropped_total" + p:  0,
			"linemq_cluster_peer_streams_total" + p:           1,
		}
		for k, v := range want {
			if got, ok := c.m[k]; !ok || got != v {
				t.Errorf("%s: %s = %v (present %t), want %v", c.name, k, got, ok, v)
			}
		}
		// Clients of both gateways hold session records: m-w1, m-w2, m-sub,
		// m-pub2 at least (splitScenario's publisher may have left).
		if s := c.m["linemq_cluster_registry_sessions"]; s < 4 {
			t.Errorf("%s: %v session records, want >= 4", c.name, s)
		}
		if lag := c.m["linemq_cluster_registry_lag_max_seconds"]; lag <= 0 || lag > 5 {
			t.Errorf("%s: registry lag max %vs, want (0, 5]", c.name, lag)
		}
		if n := c.m["linemq_cluster_registry_lag_measurements_total"]; n < 1 {
			t.Errorf("%s: %v registry lags measured", c.name, n)
		}
		if rtt := c.m["linemq_cluster_peer_rtt_seconds"+p]; rtt <= 0 || rtt > 1 {
			t.Errorf("%s: rtt to %s %vs, want (0, 1]", c.name, c.peer, rtt)
		}
		if f := c.m["linemq_cluster_peer_sent_frames_total"+p]; f < 1 {
			t.Errorf("%s: %v frames sent to %s", c.name, f, c.peer)
		}
		if txns := c.m["linemq_cluster_registry_txns_total"]; txns < 2 {
			t.Errorf("%s: %v registry transactions", c.name, txns)
		}
	}
}

// TestStartGivenUpWhileJoining: a clustered gateway whose etcd never
// answers serves its listeners while it waits to join (a CONNECT is then
// refused with 0x88), and when its start is given up (the context ends:
// systemd's stop, a timeout) it unwinds once and cleanly: the listeners
// that were serving see their sockets closed and stop the gateway too,
// which once closed the hardware's stop channel twice (a panic seen by
// linemq-compare stopping a line that had not come up).
func TestStartGivenUpWhileJoining(t *testing.T) {
	for range 5 {
		cfg := testConfig(t)
		cfg.NodeID = "lonely"
		cfg.DataDir = t.TempDir()
		cfg.Cluster.Listen = "127.0.0.1:0"
		cfg.HTTP.Listen = new("127.0.0.1:0")
		cfg.Cluster.Etcd.Endpoints = []string{freeURL(t)} // nothing listens there
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		g, err := gateway.Start(ctx, gateway.Options{Config: cfg, Logger: testLogger(t)})
		cancel()
		if err == nil {
			g.Close()
			t.Fatal("started without etcd")
		}
		if !strings.Contains(err.Error(), "registry not ready") {
			t.Fatalf("error %v, want the registry not ready", err)
		}
	}
}
