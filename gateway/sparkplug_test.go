package gateway_test

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/gateway"
	"github.com/linemq/linemq/gateway/auth"
	"github.com/linemq/linemq/gateway/config"
	"github.com/linemq/linemq/gateway/sparkplug"
	"github.com/linemq/linemq/internal/mqtttest"
)

// spPayload encodes a Sparkplug B payload: a timestamp, seq when seq >= 0,
// and a bdSeq metric (Int64, as the specification's examples) when bdSeq
// >= 0.
func spPayload(seq, bdSeq int) []byte {
	p := sparkplug.Payload{Timestamp: uint64(time.Now().UnixMilli()), HasTimestamp: true,
		Seq: uint64(max(seq, 0)), HasSeq: seq >= 0, BdSeq: uint64(max(bdSeq, 0)), HasBdSeq: bdSeq >= 0}
	return p.Append(nil)
}

// spDDATA encodes a DDATA payload of about 300 bytes: a timestamp, twelve
// Double metrics by alias, each with its own timestamp, and seq.
func spDDATA(seq int) []byte {
	ts := uint64(time.Now().UnixMilli())
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.VarintType)
	b = protowire.AppendVarint(b, ts)
	for alias := range 12 {
		var m []byte
		m = protowire.AppendTag(m, 2, protowire.VarintType)
		m = protowire.AppendVarint(m, uint64(alias+1))
		m = protowire.AppendTag(m, 3, protowire.VarintType)
		m = protowire.AppendVarint(m, ts)
		m = protowire.AppendTag(m, 4, protowire.VarintType)
		m = protowire.AppendVarint(m, 10) // Double
		m = protowire.AppendTag(m, 13, protowire.Fixed64Type)
		m = protowire.AppendFixed64(m, uint64(alias)*0x3ff0000000000000)
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendBytes(b, m)
	}
	b = protowire.AppendTag(b, 3, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(seq))
}

// edgeNode connects a v5 Sparkplug edge node named edge of group G to addr,
// its will the NDEATH with bdSeq, and publishes its NBIRTH (seq 0) and a
// DBIRTH of device D (seq 1).
func edgeNode(t *testing.T, addr, client, edge string, bdSeq int) *mqtttest.V5 {
	t.Helper()
	c, ca := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: client, CleanStart: true, KeepAlive: 30, WillMessage: &paho.WillMessage{
		Topic: "spBv1.0/G/NDEATH/" + edge, QoS: 1, Payload: spPayload(-1, bdSeq),
	}}, nil)
	if ca.ReasonCode != 0 {
		t.Fatalf("edge node %s: CONNACK %#x", client, ca.ReasonCode)
	}
	c.Pub("spBv1.0/G/NBIRTH/"+edge, 0, false, string(spPayload(0, bdSeq)))
	c.Pub("spBv1.0/G/DBIRTH/"+edge+"/D", 0, false, string(spPayload(1, -1)))
	return c
}

// opsPasswordFile writes a password file with one user, ops (password
// op-pass), for the tests that log in to the status page.
func opsPasswordFile(t *testing.T) string {
	t.Helper()
	pwfile := filepath.Join(t.TempDir(), "passwd")
	h, err := auth.NewHash([]byte("op-pass"), 100)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pwfile, []byte("ops:"+h+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return pwfile
}

// sparkplugState reads /api/v1/sparkplug.
type sparkplugState struct {
	Enabled bool `json:"enabled"`
	sparkplug.Stats
}

func getSparkplug(t *testing.T, g *gateway.Gateway) sparkplugState {
	t.Helper()
	resp, err := http.Get("http://" + g.HTTPAddr().String() + "/api/v1/sparkplug")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s sparkplugState
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

func edgeState(s sparkplugState, group, edge string) (sparkplug.EdgeNode, bool) {
	for _, n := range s.EdgeNodes {
		if n.Group == group && n.EdgeNode == edge {
			return n, true
		}
	}
	return sparkplug.EdgeNode{}, false
}

func startSparkplugGateway(t *testing.T, tweak func(*config.Config)) *gateway.Gateway {
	t.Helper()
	cfg := testConfig(t)
	cfg.HTTP.Listen = new("127.0.0.1:0")
	if tweak != nil {
		tweak(cfg)
	}
	g, err := gateway.Start(t.Context(), gateway.Options{Config: cfg, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}

// TestSparkplugAware: the Aware profile on one gateway. Births are
// republished, retained, under $sparkplug/certificates/ and a subscriber
// that comes after them gets the NBIRTH's before the DBIRTH's, payloads
// unchanged; the edge node's state is in the API and /metrics; its
// connection dropped without DISCONNECT publishes its NDEATH, which the
// API shows, and the certificates stay.
func TestSparkplugAware(t *testing.T) {
	g := startSparkplugGateway(t, func(c *config.Config) { c.MQTT.SysInterval = new(config.Duration(time.Second)) })
	addr := g.MQTTAddr().String()
	host, _ := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: "scada", CleanStart: true}, nil)
	host.Sub("spBv1.0/G/#", 1)

	edge := edgeNode(t, addr, "edge-E", "E", 7)
	for _, want := range []string{"spBv1.0/G/NBIRTH/E", "spBv1.0/G/DBIRTH/E/D"} {
		if m := host.Next(); m.Topic != want {
			t.Fatalf("host got %s, want %s", m.Topic, want)
		}
	}
	for seq := 2; seq < 6; seq++ {
		edge.Pub("spBv1.0/G/DDATA/E/D", 0, false, string(spPayload(seq, -1)))
	}
	for range 4 {
		host.Next()
	}

	late, _ := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: "late", CleanStart: true}, nil)
	late.Sub("$sparkplug/certificates/#", 1)
	nb, db := late.Next(), late.Next()
	if p, err := sparkplug.Decode(nb.Payload, true); nb.Topic != "$sparkplug/certificates/spBv1.0/G/NBIRTH/E" || !nb.Retain || err != nil || p.BdSeq != 7 || p.Seq != 0 {
		t.Errorf("first certificate %s retain=%v: %+v %v", nb.Topic, nb.Retain, p, err)
	}
	if db.Topic != "$sparkplug/certificates/spBv1.0/G/DBIRTH/E/D" || !db.Retain {
		t.Errorf("second certificate %s retain=%v", db.Topic, db.Retain)
	}

	brokertest.Eventually(t, 5*time.Second, "the edge node online in the API", func() bool {
		n, ok := edgeState(getSparkplug(t, g), "G", "E")
		return ok && n.Online && n.BdSeq == 7 && n.WillBdSeq == 7 && !n.Mismatch && n.Births == 1 &&
			n.Messages == 6 && n.SeqGaps == 0 && n.Devices == 1 && n.DevicesOn == 1 && n.Client == "edge-E"
	})
	m := scrape(t, g)
	if v := m[`linemq_sparkplug_edge_online{edge_node="E",group="G"}`]; v != 1 {
		t.Errorf("linemq_sparkplug_edge_online = %v, want 1", v)
	}
	if v := m[`linemq_sparkplug_edge_nodes_online{group="G"}`]; v != 1 {
		t.Errorf("linemq_sparkplug_edge_nodes_online = %v, want 1", v)
	}

	sys, _ := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: "sys", CleanStart: true}, nil)
	sys.Sub("$SYS/broker/sparkplug/groups/G/edge_nodes/online", 0)
	if m := sys.Next(); string(m.Payload) != "1" {
		t.Errorf("$SYS %s = %q, want 1", m.Topic, m.Payload)
	}

	edge.NC.Close() // dies without DISCONNECT
	if d := host.Next(); d.Topic != "spBv1.0/G/NDEATH/E" {
		t.Fatalf("host got %s, want the NDEATH", d.Topic)
	}
	brokertest.Eventually(t, 5*time.Second, "the edge node offline in the API", func() bool {
		n, ok := edgeState(getSparkplug(t, g), "G", "E")
		return ok && !n.Online && n.Deaths == 1 && n.DevicesOn == 0
	})
	after, _ := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: "after", CleanStart: true}, nil)
	after.Sub("$sparkplug/certificates/#", 1)
	if a, b := after.Next(), after.Next(); a.Topic != nb.Topic || b.Topic != db.Topic {
		t.Errorf("after the death the certificates are %s, %s", a.Topic, b.Topic)
	}
}

// TestSparkplugReservedTopics: clients can neither publish under
// $sparkplug/ nor make it their will's topic; with the awareness off they
// can.
func TestSparkplugReservedTopics(t *testing.T) {
	g := startSparkplugGateway(t, nil)
	addr := g.MQTTAddr().String()
	c, _ := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: "forger", CleanStart: true}, nil)
	if rc := c.Puback("$sparkplug/certificates/spBv1.0/G/NBIRTH/E", "forged"); rc != 0x87 {
		t.Errorf("PUBACK for a publish under $sparkplug/: %#x, want 0x87", rc)
	}
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	_, ca := mqtttest.ConnectV5(t, nc, &paho.Connect{ClientID: "forged-will", CleanStart: true,
		WillMessage: &paho.WillMessage{Topic: "$sparkplug/certificates/x", Payload: []byte("x")}}, mqtttest.Options{})
	if ca.ReasonCode != 0x87 {
		t.Errorf("CONNACK for a will under $sparkplug/: %#x, want 0x87", ca.ReasonCode)
	}

	off := startSparkplugGateway(t, func(c *config.Config) { c.Sparkplug.Aware = new(false) })
	c2, _ := mqtttest.DialV5(t, off.MQTTAddr().String(), &paho.Connect{ClientID: "plain", CleanStart: true}, nil)
	if rc := c2.Puback("$sparkplug/certificates/x", "mine"); rc != 0 && rc != 0x10 {
		t.Errorf("awareness off: PUBACK %#x, want success", rc)
	}
	if s := getSparkplug(t, off); s.Enabled {
		t.Errorf("awareness off: the API says enabled")
	}
}

// TestSparkplugNotSparkplugPassesThrough: a payload that is not Sparkplug
// B, or lacks its sequence number, reaches subscribers unchanged and is
// counted; the publisher stays connected. Sequence gaps and a late
// message are counted per edge node.
func TestSparkplugNotSparkplugPassesThrough(t *testing.T) {
	g := startSparkplugGateway(t, nil)
	addr := g.MQTTAddr().String()
	sub, _ := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: "sub", CleanStart: true}, nil)
	sub.Sub("spBv1.0/#", 1)
	edge := edgeNode(t, addr, "edge-E", "E", 0)
	sub.Next()
	sub.Next()
	bad := []string{"not protobuf \xff\xff", string(spPayload(-1, -1)), "", "spBv1.0/G/DDATA/E/D/extra"}
	for _, p := range bad[:3] {
		if rc := edge.Puback("spBv1.0/G/DDATA/E/D", p); rc != 0 {
			t.Fatalf("PUBACK %#x for a payload that is not Sparkplug", rc)
		}
		if m := sub.Next(); string(m.Payload) != p {
			t.Errorf("payload changed: %q, want %q", m.Payload, p)
		}
	}
	edge.Pub(bad[3], 1, false, "a topic too deep for Sparkplug")
	sub.Next()
	for _, seq := range []int{2, 3, 5, 4, 6} { // 4 is missing, then late
		edge.Pub("spBv1.0/G/DDATA/E/D", 1, false, string(spPayload(seq, -1)))
		sub.Next()
	}
	brokertest.Eventually(t, 5*time.Second, "the counts in the API", func() bool {
		s := getSparkplug(t, g)
		n, ok := edgeState(s, "G", "E")
		return ok && s.NotSparkplug == 4 && n.Invalid == 3 && n.SeqGaps == 1 && n.OutOfOrder == 1 && n.Online
	})
}

// TestSparkplugRebirth: POST /api/v1/sparkplug/rebirth sends the edge node
// its Node Control/Rebirth NCMD, for a logged-in user only; without a
// login the gateway refuses (403), an unknown edge node is 404, a form
// post 415.
func TestSparkplugRebirth(t *testing.T) {
	pwfile := opsPasswordFile(t)
	g := startSparkplugGateway(t, func(c *config.Config) {
		c.Auth.PasswordFile = pwfile
		c.Auth.AllowAnonymous = new(true)
	})
	edge := edgeNode(t, g.MQTTAddr().String(), "edge-E", "E", 0)
	edge.Sub("spBv1.0/G/NCMD/E", 0)
	brokertest.Eventually(t, 5*time.Second, "the edge node known", func() bool {
		req, _ := http.NewRequest(http.MethodGet, "http://"+g.HTTPAddr().String()+"/api/v1/sparkplug", nil)
		req.SetBasicAuth("ops", "op-pass")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var s sparkplugState
		json.NewDecoder(resp.Body).Decode(&s)
		_, ok := edgeState(s, "G", "E")
		return ok
	})
	post := func(g *gateway.Gateway, user, ctype, body string) int {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, "http://"+g.HTTPAddr().String()+"/api/v1/sparkplug/rebirth", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", ctype)
		if user != "" {
			req.SetBasicAuth(user, "op-pass")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	const js = "application/json"
	if code := post(g, "", js, `{"group":"G","edge_node":"E"}`); code != http.StatusUnauthorized {
		t.Errorf("no credentials: %d, want 401", code)
	}
	if code := post(g, "ops", "application/x-www-form-urlencoded", `group=G&edge_node=E`); code != http.StatusUnsupportedMediaType {
		t.Errorf("a form: %d, want 415", code)
	}
	if code := post(g, "ops", js, `{"group":"G","edge_node":"nope"}`); code != http.StatusNotFound {
		t.Errorf("unknown edge node: %d, want 404", code)
	}
	if code := post(g, "ops", js, `{"group":"G"}`); code != http.StatusBadRequest {
		t.Errorf("no edge node: %d, want 400", code)
	}
	if code := post(g, "ops", js, `{"group":"G","edge_node":"E"}`); code != http.StatusAccepted {
		t.Fatalf("rebirth: %d, want 202", code)
	}
	m := edge.Next()
	p, err := sparkplug.Decode(m.Payload, false)
	if m.Topic != "spBv1.0/G/NCMD/E" || err != nil || p.Metrics != 1 || !bytes.Contains(m.Payload, []byte(sparkplug.RebirthMetric)) {
		t.Errorf("the edge node got %s %+v %v", m.Topic, p, err)
	}

	// An ACL that does not let ops publish to the NCMD topic stops the
	// rebirth too.
	aclFile := filepath.Join(t.TempDir(), "acl")
	if err := os.WriteFile(aclFile, []byte("topic readwrite spBv1.0/#\n\nuser ops\ntopic read spBv1.0/#\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	acl := startSparkplugGateway(t, func(c *config.Config) {
		c.Auth.PasswordFile = pwfile
		c.Auth.ACLFile = aclFile
		c.Auth.AllowAnonymous = new(true)
	})
	edgeNode(t, acl.MQTTAddr().String(), "edge-E", "E", 0)
	// 404 until the birth is seen, then 403.
	brokertest.Eventually(t, 5*time.Second, "the rebirth refused by the ACL", func() bool {
		return post(acl, "ops", js, `{"group":"G","edge_node":"E"}`) == http.StatusForbidden
	})

	open := startSparkplugGateway(t, nil)
	edgeNode(t, open.MQTTAddr().String(), "edge-E", "E", 0)
	brokertest.Eventually(t, 5*time.Second, "the edge node known", func() bool {
		_, ok := edgeState(getSparkplug(t, open), "G", "E")
		return ok
	})
	if code := post(open, "", js, `{"group":"G","edge_node":"E"}`); code != http.StatusForbidden {
		t.Errorf("without a login configured: %d, want 403", code)
	}
}

// sessionOrder checks what a Sparkplug host received for edge node E: an
// NDEATH never comes after the NBIRTH of a later session (bdSeq higher),
// and a DBIRTH always comes after its session's NBIRTH. It returns the
// births seen.
func sessionOrder(t *testing.T, msgs []*paho.Publish) (births int) {
	t.Helper()
	current := -1 // bdSeq of the last NBIRTH
	born := false
	seen := map[string]bool{}
	dupsWithoutDUP := 0
	defer func() {
		if dupsWithoutDUP > 0 {
			t.Logf("%d messages received again without DUP (not what this test checks)", dupsWithoutDUP)
		}
	}()
	for i, m := range msgs {
		key := m.Topic + "\x00" + string(m.Payload)
		if seen[key] {
			// A QoS 1 message resent to a resumed session whose
			// acknowledgement had not arrived: the same message again,
			// not a message out of order (what is checked here).
			if !m.Duplicate() {
				dupsWithoutDUP++
			}
			continue
		}
		seen[key] = true
		p, err := sparkplug.Decode(m.Payload, true)
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		tp, _ := sparkplug.ParseTopic(m.Topic)
		switch tp.Kind {
		case sparkplug.NBIRTH:
			current, born = int(p.BdSeq), true
			births++
		case sparkplug.NDEATH:
			if int(p.BdSeq) < current {
				t.Fatalf("message %d: NDEATH of session %d after the NBIRTH of session %d", i, p.BdSeq, current)
			}
			born = false
		case sparkplug.DBIRTH:
			if !born {
				t.Fatalf("message %d: DBIRTH with no NBIRTH before it (session %d)", i, current)
			}
		}
	}
	return births
}

// collect reads messages from c until want of them are NBIRTHs or
// timeout.
func collect(t *testing.T, c *mqtttest.V5, births int, timeout time.Duration) []*paho.Publish {
	t.Helper()
	var out []*paho.Publish
	n := 0
	deadline := time.After(timeout)
	for n < births {
		select {
		case m := <-c.Msgs:
			out = append(out, m)
			if strings.Contains(m.Topic, "/NBIRTH/") {
				n++
			}
		case <-deadline:
			t.Fatalf("%d of %d births within %v", n, births, timeout)
		}
	}
	return out
}

// TestSparkplugOrderTakeover: an edge node reconnecting 100 times, each
// connection taking the session over from the one before (which dies
// with its will registered): the host never sees a session's NDEATH after
// the next session's NBIRTH, nor a DBIRTH before its NBIRTH.
func TestSparkplugOrderTakeover(t *testing.T) {
	g := startSparkplugGateway(t, nil)
	addr := g.MQTTAddr().String()
	host, _ := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: "scada", CleanStart: true}, nil)
	host.Sub("spBv1.0/G/+/E/#", 1)
	host.Sub("spBv1.0/G/+/E", 1)
	const rounds = 100
	var msgs []*paho.Publish
	for i := range rounds {
		edgeNode(t, addr, "edge-E", "E", i) // takes over the previous connection
		// Its births are read before the next connection comes, as an
		// edge node's are (one that reconnects while its own births are
		// still in the socket races itself, whatever the broker does).
		for n := 0; n < 2; {
			m := host.Next()
			msgs = append(msgs, m)
			if !strings.Contains(m.Topic, "/NDEATH/") {
				n++
			}
		}
	}
	if n := sessionOrder(t, msgs); n != rounds {
		t.Errorf("%d births, want %d", n, rounds)
	}
	deaths := 0
	for _, m := range msgs {
		if strings.Contains(m.Topic, "/NDEATH/") {
			deaths++
		}
	}
	// Each connection taken over published its will before the next
	// session's first packet was read: all 99 arrive, in place.
	if deaths != rounds-1 {
		t.Errorf("%d NDEATHs before the last birth, want %d", deaths, rounds-1)
	}
}

// TestSparkplugOrderRestart: a gateway restarted 100 times under an edge
// node that comes back each time: a host (persistent session, QoS 1)
// never sees a DBIRTH before its NBIRTH, and a late subscriber to the
// certificates always gets the NBIRTH's first, across restarts.
func TestSparkplugOrderRestart(t *testing.T) {
	cfg := testConfig(t)
	cfg.MQTT.Listen = new("127.0.0.1:0")
	var g *gateway.Gateway
	start := func() {
		var err error
		g, err = gateway.Start(t.Context(), gateway.Options{Config: cfg})
		if err != nil {
			t.Fatal(err)
		}
		cfg.MQTT.Listen = new(g.MQTTAddr().String()) // the same port next time
	}
	start()
	const rounds = 100
	var all []*paho.Publish
	for i := range rounds {
		addr := g.MQTTAddr().String()
		host, _ := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: "scada", CleanStart: i == 0,
			Properties: &paho.ConnectProperties{SessionExpiryInterval: new(uint32(3600))}}, nil)
		if i == 0 {
			host.Sub("spBv1.0/G/#", 1)
		}
		edge := edgeNode(t, addr, "edge-E", "E", i)
		all = append(all, collect(t, host, 1, 10*time.Second)...)
		// The DBIRTH follows its NBIRTH on the same connection.
		all = append(all, host.Next())
		certs, _ := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: "certs", CleanStart: true}, nil)
		certs.Sub("$sparkplug/certificates/#", 1)
		if a, b := certs.Next(), certs.Next(); !strings.Contains(a.Topic, "/NBIRTH/") || !strings.Contains(b.Topic, "/DBIRTH/") {
			t.Fatalf("round %d: certificates in the order %s, %s", i, a.Topic, b.Topic)
		}
		certs.Disconnect(&paho.Disconnect{})
		edge.Disconnect(&paho.Disconnect{})
		host.Disconnect(&paho.Disconnect{})
		if err := g.Close(); err != nil {
			t.Fatal(err)
		}
		start()
	}
	g.Close()
	if n := sessionOrder(t, all); n != rounds {
		t.Errorf("%d births, want %d", n, rounds)
	}
}
