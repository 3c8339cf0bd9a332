package web

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/gateway/health"
	"github.com/linemq/linemq/internal/mqtttest"
)

// traffic is a small plant: a historian with an ordinary subscription,
// two workers in a share group, and a publisher whose client id has a
// slash in it. It sends telemetry at QoS 1 and noise at QoS 0, and waits
// until every delivery has been acknowledged, so that every figure the
// API shows is known exactly.
type traffic struct {
	srv        *broker.Server
	addr       string
	clk        *brokertest.FakeClock
	hist       *mqtttest.V5
	w1, w2     *mqtttest.V5
	pub        *mqtttest.V5
	telemetry  int // QoS 1 messages to plant/l1/telemetry
	noise      int // QoS 0 messages to other/topic (no subscriber)
	payloadLen int
}

func newTraffic(t *testing.T, tracker *Tracker) *traffic {
	t.Helper()
	opts := broker.Options{Shares: broker.ShareOptions{Groups: []broker.GroupPolicy{{Name: "workers", MinMembers: 2}}}}
	if tracker != nil {
		opts.Events = tracker
	}
	srv, addr := brokertest.RunServer(t, opts)
	tr := &traffic{srv: srv, addr: addr, telemetry: 30, noise: 5, payloadLen: 10}
	tr.hist, _ = mqtttest.DialV5Opts(t, addr, connect("hist", 0, 0), mqtttest.Options{CountOnly: true})
	tr.hist.Sub("plant/+/telemetry", 1)
	tr.w1, _ = mqtttest.DialV5Opts(t, addr, connect("w1", 0, 0), mqtttest.Options{CountOnly: true})
	tr.w1.Sub("$share/workers/plant/+/telemetry", 1)
	tr.w2, _ = mqtttest.DialV5Opts(t, addr, connect("w2", 0, 0), mqtttest.Options{CountOnly: true})
	tr.w2.Sub("$share/workers/plant/+/telemetry", 1)
	tr.pub, _ = mqtttest.DialV5Opts(t, addr, connect("line/3/pub", 0, 0), mqtttest.Options{CountOnly: true})
	payload := bytes.Repeat([]byte("x"), tr.payloadLen)
	for range tr.telemetry {
		tr.pub.Pub("plant/l1/telemetry", 1, false, string(payload))
	}
	for range tr.noise {
		tr.pub.Pub("other/topic", 0, false, string(payload))
	}
	brokertest.Eventually(t, 10*time.Second, "every delivery acknowledged", func() bool {
		st := srv.Stats()
		return tr.hist.Received.Load() == int64(tr.telemetry) &&
			tr.w1.Received.Load()+tr.w2.Received.Load() == int64(tr.telemetry) &&
			st.MessagesIn == uint64(tr.telemetry+tr.noise) && st.Acknowledged == uint64(2*tr.telemetry)
	})
	return tr
}

func TestStatusMatchesTraffic(t *testing.T) {
	clk := brokertest.NewFakeClock()
	tracker := NewTracker()
	tr := newTraffic(t, tracker)
	reg := health.New(health.Options{Clock: clk})
	reg.Set("broker", health.OK, "")
	_, base := startWeb(t, Options{
		Broker: tr.srv, Health: reg, Tracker: tracker, NodeID: "line3-gw", Version: "1.2.3", Clock: clk,
		Listeners: func() []Listener { return []Listener{{Proto: "mqtt", Addr: tr.addr}} },
	})
	clk.Advance(90 * time.Second)

	var st statusJSON
	getJSON(t, base+"/api/v1/status", &st)
	n := uint64(tr.telemetry + tr.noise)
	want := brokerJSON{
		ClientsConnected: 4, Connects: 4, Sessions: 4, Subscriptions: 1, SharedSubscriptions: 2, ShareGroups: 1,
		// CONNECT x4, SUBSCRIBE x3, PUBLISH, and one PUBACK per delivery.
		PacketsIn:  4 + 3 + n + 2*uint64(tr.telemetry),
		MessagesIn: n, BytesIn: n * uint64(tr.payloadLen), MessagesOut: 2 * uint64(tr.telemetry),
		Acknowledged: 2 * uint64(tr.telemetry), ClientsParked: st.Broker.ClientsParked,
	}
	if st.Broker != want {
		t.Errorf("broker figures\n got %+v\nwant %+v", st.Broker, want)
	}
	if st.Node.ID != "line3-gw" || st.Node.Version != "1.2.3" || st.Node.UptimeSeconds != 90 ||
		len(st.Node.Listeners) != 1 || st.Node.Listeners[0].Addr != tr.addr {
		t.Errorf("node %+v", st.Node)
	}
	if st.Health.State != health.OK || st.Health.Ready || len(st.Health.Checks) != 1 || st.Health.Checks[0].Name != "broker" {
		t.Errorf("health %+v", st.Health)
	}
	if st.Groups.Total != 1 || st.Groups.Degraded != 0 {
		t.Errorf("groups summary %+v", st.Groups)
	}
	for name, raw := range map[string]json.RawMessage{"storage": st.Storage, "cluster": st.Cluster, "hw": st.HW} {
		var p notConfigured
		if err := json.Unmarshal(raw, &p); err != nil || p.Configured || p.Reason == "" {
			t.Errorf("%s panel %s", name, raw)
		}
	}
}

func TestGroupsMatchTraffic(t *testing.T) {
	tr := newTraffic(t, nil)
	_, base := startWeb(t, Options{Broker: tr.srv, NodeID: "gw"})

	var gs groupsJSON
	getJSON(t, base+"/api/v1/groups", &gs)
	if len(gs.Groups) != 1 {
		t.Fatalf("groups %+v", gs)
	}
	g := gs.Groups[0]
	tel := uint64(tr.telemetry)
	if g.Name != "workers" || g.Filter != "plant/+/telemetry" || g.Strategy != "round_robin" || g.State != "ok" ||
		g.MemberCount != 2 || g.MinMembers != 2 || g.MessagesIn != tel || g.Delivered != tel ||
		g.Acknowledged != tel || g.Queued != 0 || g.InFlight != 0 || g.Dropped != 0 || len(g.Reasons) != 0 {
		t.Errorf("group %+v", g)
	}
	got := map[string]uint64{}
	for _, m := range g.Members {
		got[m.ClientID] = m.Delivered
		if m.Node != "gw" || !m.Connected || m.State != "ok" || m.ReceiveMaximum != 65535 || m.InFlight != 0 {
			t.Errorf("member %+v", m)
		}
	}
	want := map[string]uint64{"w1": uint64(tr.w1.Received.Load()), "w2": uint64(tr.w2.Received.Load())}
	if fmt.Sprint(got) != fmt.Sprint(want) || want["w1"] != tel/2 {
		t.Errorf("delivered by member %v, want %v (round robin: %d each)", got, want, tel/2)
	}

	var one groupsJSON
	getJSON(t, base+"/api/v1/groups/workers", &one)
	if len(one.Groups) != 1 || one.Groups[0].Delivered != tel {
		t.Errorf("groups/workers %+v", one)
	}
	if code, body := get(t, base+"/api/v1/groups/nope"); code != http.StatusNotFound || !strings.Contains(string(body), `"error"`) {
		t.Errorf("groups/nope: %d %s", code, body)
	}
}

func TestClientsMatchTraffic(t *testing.T) {
	tracker := NewTracker()
	tr := newTraffic(t, tracker)
	_, base := startWeb(t, Options{Broker: tr.srv, Tracker: tracker})

	var page clientsJSON
	getJSON(t, base+"/api/v1/clients", &page)
	ids := []string{}
	for _, c := range page.Clients {
		ids = append(ids, c.ClientID)
	}
	if page.Total != 4 || page.Next != "" || strings.Join(ids, ",") != "hist,line/3/pub,w1,w2" {
		t.Fatalf("clients page %+v", page)
	}
	h := page.Clients[0]
	if !h.Connected || h.Protocol != "5.0" || h.Subscriptions != 1 || h.InFlight != 0 || h.Queued != 0 ||
		h.ConnectedSince == nil || h.ConnectedSince.After(time.Now()) || h.DisconnectedAt != nil ||
		!strings.HasPrefix(h.Address, "127.0.0.1:") || h.ReceiveMaximum != 65535 {
		t.Errorf("hist %+v", h)
	}

	// Pages of two: the cursor is the last id of a page.
	getJSON(t, base+"/api/v1/clients?limit=2", &page)
	if len(page.Clients) != 2 || page.Next != "line/3/pub" || page.Total != 4 {
		t.Fatalf("first page %+v", page)
	}
	getJSON(t, base+"/api/v1/clients?limit=2&after="+url.QueryEscape(page.Next), &page)
	if len(page.Clients) != 2 || page.Clients[0].ClientID != "w1" || page.Next != "" {
		t.Fatalf("second page %+v", page)
	}
	getJSON(t, base+"/api/v1/clients?q=W", &page)
	if page.Total != 2 || page.Clients[0].ClientID != "w1" {
		t.Fatalf("search %+v", page)
	}
	if code, _ := get(t, base+"/api/v1/clients?limit=0"); code != http.StatusBadRequest {
		t.Errorf("limit=0: %d", code)
	}

	// One client, with a slash in its id, and its subscriptions.
	var d clientDetailJSON
	getJSON(t, base+"/api/v1/clients/line%2F3%2Fpub", &d)
	if d.ClientID != "line/3/pub" || len(d.Filters) != 0 {
		t.Errorf("line/3/pub %+v", d)
	}
	getJSON(t, base+"/api/v1/clients/w1", &d)
	if len(d.Filters) != 1 || d.Filters[0].Filter != "$share/workers/plant/+/telemetry" || d.Filters[0].Group != "workers" ||
		d.Filters[0].QoS != 1 || d.Filters[0].Delivered != uint64(tr.w1.Received.Load()) {
		t.Errorf("w1 %+v", d)
	}
	if code, _ := get(t, base+"/api/v1/clients/nobody"); code != http.StatusNotFound {
		t.Errorf("unknown client: %d", code)
	}
}

func TestPanelsAndErrors(t *testing.T) {
	srv, _ := brokertest.RunServer(t, broker.Options{})
	_, base := startWeb(t, Options{
		Broker:   srv,
		Storage:  func() StorageStats { return StorageStats{SyncMode: "batch", FileSize: 32768, Commits: 7} },
		Cluster:  func() any { return map[string]any{"nodes": 3, "leader": "gw-a"} },
		Hardware: func() any { return struct{}{} },
	})
	var storage map[string]any
	getJSON(t, base+"/api/v1/storage", &storage)
	if storage["configured"] != true || storage["sync_mode"] != "batch" || storage["file_size_bytes"] != 32768.0 ||
		storage["commits"] != 7.0 || storage["disk_bytes_per_message"] != 0.0 {
		t.Errorf("storage %v", storage)
	}
	var cluster map[string]any
	getJSON(t, base+"/api/v1/cluster", &cluster)
	if cluster["configured"] != true || cluster["nodes"] != 3.0 || cluster["leader"] != "gw-a" {
		t.Errorf("cluster %v", cluster)
	}
	var hw map[string]any
	getJSON(t, base+"/api/v1/hw", &hw)
	if len(hw) != 1 || hw["configured"] != true {
		t.Errorf("hw %v", hw)
	}

	// Read-only: anything but GET and HEAD is refused.
	resp, err := http.Post(base+"/api/v1/status", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST status: %d", resp.StatusCode)
	}
	if code, body := get(t, base+"/api/v1/nothing"); code != http.StatusNotFound || !strings.Contains(string(body), "no such endpoint") {
		t.Errorf("unknown endpoint: %d %s", code, body)
	}
	// The page and its assets are served, with a CSP that allows nothing
	// from elsewhere.
	for _, p := range []string{"/", "/static/app.js", "/static/app.css"} {
		resp, err := http.Get(base + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(resp.Header.Get("Content-Security-Policy"), "default-src 'self'") {
			t.Errorf("%s: %d %q", p, resp.StatusCode, resp.Header.Get("Content-Security-Policy"))
		}
	}
}

func TestProbes(t *testing.T) {
	srv, _ := brokertest.RunServer(t, broker.Options{})
	reg := health.New(health.Options{})
	s, base := startWeb(t, Options{Broker: srv, Health: reg})

	if code, body := get(t, base+"/healthz"); code != http.StatusOK || string(body) != "ok\n" {
		t.Errorf("healthz: %d %q", code, body)
	}
	check := func(wantCode int, wantBody string) {
		t.Helper()
		code, body := get(t, base+"/readyz")
		if code != wantCode || string(body) != wantBody {
			t.Errorf("readyz: %d %q, want %d %q", code, body, wantCode, wantBody)
		}
	}
	check(http.StatusServiceUnavailable, "not ready\ngateway: not started, or shutting down\n")
	s.SetReady(true)
	check(http.StatusOK, "ready\n")
	reg.Set("storage", health.Degraded, "commit took 3s")
	check(http.StatusOK, "ready\nstorage: degraded: commit took 3s\n")
	reg.Set("broker", health.Failed, "no answer within 2s")
	check(http.StatusServiceUnavailable, "not ready\nbroker: failed: no answer within 2s\nstorage: degraded: commit took 3s\n")
	reg.Set("broker", health.OK, "")
	check(http.StatusOK, "ready\nstorage: degraded: commit took 3s\n")
}
