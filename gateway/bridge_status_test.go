package gateway_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/gateway"
	"github.com/linemq/linemq/gateway/bridge"
)

// bridgeJSON is the part of a bridge in /api/v1/bridges this test reads.
type bridgeJSON struct {
	Name                string   `json:"name"`
	State               string   `json:"state"`
	Remote              []string `json:"remote"`
	Protocol            int      `json:"protocol"`
	Queued              int      `json:"queued"`
	QueuedBytes         int64    `json:"queued_bytes"`
	OldestQueuedSeconds float64  `json:"oldest_queued_seconds"`
	InFlight            int      `json:"in_flight"`
	Sent                uint64   `json:"sent"`
	Received            uint64   `json:"received"`
	Enqueued            uint64   `json:"enqueued"`
	Dropped             uint64   `json:"dropped"`
	Expired             uint64   `json:"expired"`
	Rejected            uint64   `json:"rejected"`
	DroppedQoS0         uint64   `json:"dropped_qos0"`
	Loops               uint64   `json:"loops"`
	Retries             uint64   `json:"retries"`
}

// getBridges reads g's /api/v1/bridges.
func getBridges(t *testing.T, g *gateway.Gateway) []bridgeJSON {
	t.Helper()
	resp, err := http.Get("http://" + g.HTTPAddr().String() + "/api/v1/bridges")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Bridges []bridgeJSON `json:"bridges"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out.Bridges
}

// TestBridgeStatus runs a gateway with a bridge to a second broker in the
// process, sends messages out and in through it, and checks that
// /api/v1/bridges and /metrics show the bridge connected with counts
// matching that traffic exactly.
func TestBridgeStatus(t *testing.T) {
	remote, remoteAddr := brokertest.RunServer(t, broker.Options{})

	cfg := testConfig(t)
	cfg.HTTP.Listen = new("127.0.0.1:0")
	cfg.Bridges = []bridge.Config{{
		Name:      "site",
		Addresses: []string{remoteAddr},
		Out:       []bridge.Rule{{Filter: "plant/#", Prefix: "site/gw1/", QoS: new(1)}},
		In:        []bridge.Rule{{Filter: "cmd/gw1/#", QoS: new(1)}},
	}}
	g, err := gateway.Start(t.Context(), gateway.Options{Config: cfg, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })

	// The bridge is connected once both its subscriptions are in place:
	// the local one (out) and the remote one (in).
	subscribed := func(srv *broker.Server, id string) bool {
		_, subs, ok := srv.Client(id)
		return ok && len(subs) == 1
	}
	brokertest.Eventually(t, 20*time.Second, "the bridge connected and subscribed on both sides", func() bool {
		bs := getBridges(t, g)
		return len(bs) == 1 && bs[0].State == "connected" &&
			subscribed(g.Broker(), "$bridge/site") && subscribed(remote, cfg.NodeID+"-site")
	})

	// Out: 20 QoS 1 messages (through the queue) and 5 QoS 0 (sent at
	// once). In: 7 QoS 1 commands.
	const out1, out0, in1 = 20, 5, 7
	siteSub := connect(t, addrOf(remoteAddr), "site-historian")
	siteSub.Sub("site/gw1/plant/#", 1)
	localSub := connect(t, g.MQTTAddr(), "plc-cmd")
	localSub.Sub("cmd/gw1/#", 1)
	pub := connect(t, g.MQTTAddr(), "plc-l3")
	for i := range out1 {
		pub.Pub("plant/l3/telemetry", 1, false, fmt.Sprintf("q1-%d", i))
	}
	for i := range out0 {
		pub.Pub("plant/l3/status", 0, false, fmt.Sprintf("q0-%d", i))
	}
	cmd := connect(t, addrOf(remoteAddr), "site-scada")
	for i := range in1 {
		cmd.Pub("cmd/gw1/setpoint", 1, false, fmt.Sprintf("sp-%d", i))
	}
	for range out1 + out0 {
		siteSub.Next()
	}
	for range in1 {
		localSub.Next()
	}

	// Sent counts a QoS 1 message when the remote's PUBACK arrives, which
	// may be just after the remote delivered it.
	var b bridgeJSON
	brokertest.Eventually(t, 10*time.Second, "the bridge's counts to settle", func() bool {
		bs := getBridges(t, g)
		if len(bs) != 1 {
			return false
		}
		b = bs[0]
		return b.Sent == out1+out0 && b.Queued == 0 && b.InFlight == 0 && b.Received == in1
	})
	want := bridgeJSON{
		Name: "site", State: "connected", Remote: []string{remoteAddr}, Protocol: 5,
		Sent: out1 + out0, Received: in1, Enqueued: out1,
	}
	if fmt.Sprint(b) != fmt.Sprint(want) {
		t.Errorf("/api/v1/bridges:\n got %+v\nwant %+v", b, want)
	}

	m := scrape(t, g)
	for k, v := range map[string]float64{
		`linemq_bridge_up{bridge="site"}`:                           1,
		`linemq_bridge_state{bridge="site",state="connected"}`:      1,
		`linemq_bridge_state{bridge="site",state="connecting"}`:     0,
		`linemq_bridge_state{bridge="site",state="down"}`:           0,
		`linemq_bridge_queued_messages{bridge="site"}`:              0,
		`linemq_bridge_queued_bytes{bridge="site"}`:                 0,
		`linemq_bridge_oldest_queued_seconds{bridge="site"}`:        0,
		`linemq_bridge_in_flight{bridge="site"}`:                    0,
		`linemq_bridge_sent_total{bridge="site"}`:                   out1 + out0,
		`linemq_bridge_received_total{bridge="site"}`:               in1,
		`linemq_bridge_enqueued_total{bridge="site"}`:               out1,
		`linemq_bridge_dropped_total{bridge="site"}`:                0,
		`linemq_bridge_expired_total{bridge="site"}`:                0,
		`linemq_bridge_rejected_total{bridge="site"}`:               0,
		`linemq_bridge_dropped_qos0_total{bridge="site"}`:           0,
		`linemq_bridge_loops_total{bridge="site"}`:                  0,
		`linemq_bridge_retries_total{bridge="site"}`:                0,
		`linemq_bridge_last_error_timestamp_seconds{bridge="site"}`: 0,
	} {
		if got, ok := m[k]; !ok {
			t.Errorf("%s missing", k)
		} else if got != v {
			t.Errorf("%s = %v, want %v", k, got, v)
		}
	}
}

// addrOf is a host:port as the net.Addr connect takes.
type addrOf string

func (a addrOf) Network() string { return "tcp" }
func (a addrOf) String() string  { return string(a) }
