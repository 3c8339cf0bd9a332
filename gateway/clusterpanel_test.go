package gateway_test

import (
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/gateway"
	"github.com/linemq/linemq/gateway/config"
	"github.com/linemq/linemq/gateway/web"
)

// clusterJSON is /api/v1/cluster as a client reads it.
type clusterJSON struct {
	Configured bool `json:"configured"`
	web.ClusterPanel
}

func getCluster(t *testing.T, g *gateway.Gateway) clusterJSON {
	t.Helper()
	resp, err := http.Get("http://" + g.HTTPAddr().String() + "/api/v1/cluster")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/api/v1/cluster: %d %v %s", resp.StatusCode, err, b)
	}
	var c clusterJSON
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatalf("%v in %s", err, b)
	}
	return c
}

// TestClusterPanel: /api/v1/cluster of two gateways sharing an embedded
// etcd lists both nodes with their addresses and versions, each one's
// stream to the other (up, breaker closed, a round trip measured), the
// registry in step, and etcd's one member as healthy leader.
func TestClusterPanel(t *testing.T) {
	peerURL, clientURL := freeURL(t), freeURL(t)
	start := func(name string, tweak func(c *config.Config)) *gateway.Gateway {
		cfg := testConfig(t)
		cfg.NodeID = name
		cfg.DataDir = filepath.Join(t.TempDir(), name)
		cfg.Cluster.Listen = "127.0.0.1:0"
		cfg.HTTP.Listen = new("127.0.0.1:0")
		tweak(cfg)
		g, err := gateway.Start(t.Context(), gateway.Options{Config: cfg, Logger: testLogger(t), Version: "9.9.9"})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		t.Cleanup(func() { g.Close() })
		return g
	}
	gw1 := start("gw1", hostEtcd(peerURL, clientURL))
	gw2 := start("gw2", useEtcd(clientURL))

	var c clusterJSON
	brokertest.Eventually(t, 30*time.Second, "both panels with a healthy peer, a round trip, etcd polled healthy and every node ok", func() bool {
		for _, g := range []*gateway.Gateway{gw1, gw2} {
			c = getCluster(t, g)
			if len(c.Nodes) != 2 || !c.Etcd.Healthy || c.Registry.State != "healthy" {
				return false
			}
			for _, n := range c.Nodes {
				if !n.Self && (!n.Available || n.RTTSeconds == 0) {
					return false
				}
				// Its own health follows the polled checks (every second),
				// cluster_peers among them.
				if n.Health != "ok" {
					return false
				}
			}
		}
		return true
	})
	for i, g := range []*gateway.Gateway{gw1, gw2} {
		c := getCluster(t, g)
		self := []string{"gw1", "gw2"}[i]
		if !c.Configured || c.Cluster != "linemq" || c.Node != self {
			t.Errorf("%s: configured %v, cluster %q, node %q", self, c.Configured, c.Cluster, c.Node)
		}
		for j, n := range c.Nodes {
			name := []string{"gw1", "gw2"}[j]
			if n.Name != name || n.Address == "" || n.Version != "9.9.9" || n.Self != (name == self) || n.Health != "ok" {
				t.Errorf("%s: node %d = %+v", self, j, n)
			}
			if n.Self {
				if n.Breaker != "" || n.Connected {
					t.Errorf("%s: itself with stream figures %+v", self, n)
				}
			} else if !n.Connected || n.Breaker != "closed" || n.RTTSeconds <= 0 || n.RTTMaxSeconds < n.RTTSeconds {
				t.Errorf("%s: stream to %s = %+v", self, n.Name, n)
			}
		}
		r := c.Registry
		if r.State != "healthy" || r.Reason != "" || r.Revision == 0 || r.Nodes != 2 || r.LagMaxSeconds <= 0 {
			t.Errorf("%s: registry %+v", self, r)
		}
		e := c.Etcd
		if !e.Healthy || e.Leader != "gw1" || e.Error != "" || len(e.Endpoints) != 1 {
			t.Fatalf("%s: etcd %+v", self, e)
		}
		if ep := e.Endpoints[0]; ep.Endpoint != clientURL || ep.Member != "gw1" || !ep.Leader || ep.Version == "" ||
			ep.DBSizeBytes == 0 || ep.RaftTerm == 0 || ep.Error != "" {
			t.Errorf("%s: etcd endpoint %+v", self, ep)
		}
	}
}
