//go:build browser

package web

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/eclipse/paho.golang/paho"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/gateway/sparkplug"
	"github.com/linemq/linemq/internal/mqtttest"
)

// TestSparkplugPanelInBrowser drives the Sparkplug panel of a gateway with
// a login: hidden while nothing of Sparkplug has been seen; then, after
// two edge nodes of group G are born (E with a device and a gap in its
// sequence, E2 with a bdSeq other than its will's) and a primary host
// says it is online, it shows the group's summary, the edge nodes' rows
// with the mismatch highlighted, the host and the totals. E's Rebirth
// button says "rebirth sent" and E receives the NCMD.
func TestSparkplugPanelInBrowser(t *testing.T) {
	exe := chromium()
	if exe == "" {
		t.Skip("no Chromium at /usr/bin/chromium (Debian: apt-get install chromium; or set LINEMQ_CHROMIUM): the status page browser test needs one")
	}
	sc := newSparkplugScene(t, &Login{Verifier: oneLogin{"ops", "right"}})
	ctx := newBrowser(t, exe)
	cancelLoginDialogs(t, ctx)
	p := spPage{t, ctx}

	p.run("first load", 30*time.Second, chromedp.Navigate(strings.Replace(sc.base, "http://", "http://ops:right@", 1)+"/"))
	p.waitJS("the panel drawn empty", `document.getElementById("sparkplug-card").dataset.state === "empty"`, 15*time.Second)
	if !p.eval(`document.getElementById("sparkplug-card").classList.contains("hidden")`) {
		t.Error("the Sparkplug panel shows with no edge node and no host")
	}

	sc.births(t)
	const e = `#sparkplug-body tr[data-group="G"][data-edge-node="E"]`
	const e2 = `#sparkplug-body tr[data-group="G"][data-edge-node="E2"]`
	p.run("the panel with E's row", 15*time.Second,
		chromedp.WaitVisible(chromedp.CSS("#sparkplug-card")),
		chromedp.WaitVisible(chromedp.CSS(e)),
		chromedp.WaitVisible(chromedp.CSS(e2)),
	)
	// E's DDATA and out-of-order message may be drawn a poll after its birth.
	p.waitJS("E's out-of-order message", `document.querySelector(`+jsString(e+` td[data-field="out_of_order"]`)+`).textContent === "1"`, 10*time.Second)

	if got := p.text(`#sparkplug-groups li[data-group="G"]`); !strings.Contains(got, "2 / 2 edge nodes online") ||
		!strings.Contains(got, "2 seq gaps") || !strings.Contains(got, "1 bdSeq mismatch") {
		t.Errorf("group G's summary %q", got)
	}
	if !p.eval(`document.querySelector('#sparkplug-groups li[data-group="G"] [data-field="bdseq_mismatches"]').classList.contains("bad")`) {
		t.Error("group G's bdSeq mismatch is not highlighted")
	}
	for field, want := range map[string]string{
		"state": "online", "gateway": "local", "bdseq": "0 · will 0", "births": "1", "deaths": "0",
		"seq_gaps": "2", "out_of_order": "1", "devices": "1 / 1",
	} {
		if got := p.text(e + ` td[data-field="` + field + `"]`); !strings.HasPrefix(got, want) {
			t.Errorf("E's %s %q, want %q", field, got, want)
		}
	}
	if got := p.text(e + ` td[data-field="last_seen"]`); got == "–" {
		t.Errorf("E's last seen %q", got)
	}
	if got := p.text(e2 + ` td[data-field="bdseq"]`); got != "200 · will 0" {
		t.Errorf("E2's bdSeq %q", got)
	}
	if !p.eval(`document.querySelector(` + jsString(e2) + `).classList.contains("degraded") && document.querySelector(` + jsString(e2+` td[data-field="bdseq"]`) + `).classList.contains("bad")`) {
		t.Error("E2's bdSeq mismatch is not highlighted")
	}
	if got := p.text(`#sparkplug-hosts li[data-host="scada"]`); !strings.Contains(got, "online") {
		t.Errorf("host scada %q", got)
	}
	if got := p.text(`#sparkplug-totals dd[data-key="certificates_published"]`); got != "3" {
		t.Errorf("certificates published %q, want 3 (two NBIRTHs, one DBIRTH)", got)
	}
	if got := p.text(`#sparkplug-totals dd[data-key="not_sparkplug"]`); got != "0" {
		t.Errorf("not Sparkplug %q", got)
	}
	if !p.eval(`document.querySelector(` + jsString(e+` button.rebirth`) + `).getAttribute("aria-label") === "Rebirth edge node E of group G"`) {
		t.Error("E's Rebirth button has not its label")
	}

	p.run("clicking E's Rebirth", 10*time.Second, chromedp.Click(chromedp.CSS(e+` button.rebirth`)))
	p.waitJS("rebirth sent", `document.querySelector(`+jsString(e+` [data-field="rebirth"]`)+`).textContent === "rebirth sent"`, 10*time.Second)
	m := sc.edge.Next()
	if m.Topic != "spBv1.0/G/NCMD/E" {
		t.Fatalf("E received %s, want its NCMD", m.Topic)
	}
	if pl, err := sparkplug.Decode(m.Payload, false); err != nil || pl.Metrics != 1 || !bytes.Contains(m.Payload, []byte(sparkplug.RebirthMetric)) {
		t.Errorf("NCMD payload %x (%+v, %v): not a rebirth command", m.Payload, pl, err)
	}
	p.waitJS("the rebirth counted", `document.querySelector('#sparkplug-totals dd[data-key="rebirths_requested"]').textContent === "1"`, 10*time.Second)
	// The outcome stays through the polls' redraws.
	p.waitRedraw()
	if got := p.text(e + ` [data-field="rebirth"]`); got != "rebirth sent" {
		t.Errorf("E's rebirth outcome after a redraw %q", got)
	}
}

// TestSparkplugRebirthNeedsLoginInBrowser: on a gateway without a login
// the Rebirth button shows the gateway's refusal (403: a rebirth needs a
// logged-in user) in the row, sends nothing, and the page polls on as
// before (a refused action is not a refused login).
func TestSparkplugRebirthNeedsLoginInBrowser(t *testing.T) {
	exe := chromium()
	if exe == "" {
		t.Skip("no Chromium at /usr/bin/chromium (Debian: apt-get install chromium; or set LINEMQ_CHROMIUM): the status page browser test needs one")
	}
	sc := newSparkplugScene(t, nil)
	sc.births(t)
	ctx := newBrowser(t, exe)
	p := spPage{t, ctx}

	const e = `#sparkplug-body tr[data-group="G"][data-edge-node="E"]`
	p.run("first load", 30*time.Second,
		chromedp.Navigate(sc.base+"/"),
		chromedp.WaitVisible(chromedp.CSS(e+` button.rebirth`)),
		chromedp.Click(chromedp.CSS(e+` button.rebirth`)),
	)
	const outcome = e + ` [data-field="rebirth"]`
	p.waitJS("the refusal", `document.querySelector(`+jsString(outcome)+`).classList.contains("bad")`, 10*time.Second)
	if got := p.text(outcome); !strings.Contains(got, "a rebirth needs a logged-in user") {
		t.Errorf("E's rebirth outcome %q, want the 403's message", got)
	}
	if n := sc.tracker.Stats(time.Now()).Rebirths; n != 0 {
		t.Errorf("%d rebirths requested, want none", n)
	}
	p.waitRedraw()
	if p.eval(`!document.getElementById("banner").classList.contains("hidden")`) {
		t.Errorf("banner shown after a refused rebirth: %q", p.text("#banner"))
	}
}

// TestSparkplugPanelHiddenInBrowser: with the awareness off
// (Options.Sparkplug nil) the page draws the Sparkplug panel as off and
// keeps it hidden.
func TestSparkplugPanelHiddenInBrowser(t *testing.T) {
	exe := chromium()
	if exe == "" {
		t.Skip("no Chromium at /usr/bin/chromium (Debian: apt-get install chromium; or set LINEMQ_CHROMIUM): the status page browser test needs one")
	}
	srv, _ := brokertest.RunServer(t, broker.Options{})
	_, base := startWeb(t, Options{Broker: srv, NodeID: "gw-no-sparkplug"})
	ctx := newBrowser(t, exe)
	p := spPage{t, ctx}

	p.run("first load", 30*time.Second, chromedp.Navigate(base+"/"))
	p.waitJS("the panel drawn off", `document.getElementById("node-id").textContent === "gw-no-sparkplug" && document.getElementById("sparkplug-card").dataset.state === "off"`, 15*time.Second)
	if !p.eval(`document.getElementById("sparkplug-card").classList.contains("hidden")`) {
		t.Error("the Sparkplug panel shows with the awareness off")
	}
}

// sparkplugScene is a broker with a Sparkplug tracker, its web server, and,
// once births has run, edge node E's connection (subscribed to its NCMD).
type sparkplugScene struct {
	addr, base string
	tracker    *sparkplug.Tracker
	edge       *mqtttest.V5
}

// newSparkplugScene starts the broker, its tracker (which publishes its
// certificates and rebirth commands through the broker, as the gateway's
// does) and the web server with login. No client is connected yet: an
// edge node's will alone makes the tracker know it.
func newSparkplugScene(t *testing.T, login *Login) *sparkplugScene {
	t.Helper()
	var srvp atomic.Pointer[broker.Server] // set once the broker exists; the tracker publishes only after
	tr := sparkplug.NewTracker(sparkplug.Options{Publish: func(m *broker.Message) { srvp.Load().Publish(m) }})
	srv, addr := brokertest.RunServer(t, broker.Options{Observer: tr})
	srvp.Store(srv)
	_, base := startWeb(t, Options{Broker: srv, NodeID: "gw-sparkplug", Sparkplug: tr, SparkplugEdgeSeries: 10, Login: login})
	return &sparkplugScene{addr: addr, base: base, tracker: tr}
}

// births connects E (subscribed to its NCMD) and has it born: NBIRTH with
// bdSeq 0 as its will's, DBIRTH of D1, DDATA with seq 2, then 5 (two
// missing), then the fixture with seq 255 (out of order). E2 is born with
// bdSeq 200 where its will says 0, and primary host scada publishes its
// STATE online.
func (sc *sparkplugScene) births(t *testing.T) {
	t.Helper()
	pub := func(c *mqtttest.V5, topic string, payload []byte) {
		t.Helper()
		c.PubProps(&paho.Publish{Topic: topic, QoS: 1, Payload: payload})
	}
	sc.edge = dialEdge(t, sc.addr, "E")
	sc.edge.Sub("spBv1.0/G/NCMD/E", 1)
	pub(sc.edge, "spBv1.0/G/NBIRTH/E", spFixture(t, "nbirth.bin"))
	pub(sc.edge, "spBv1.0/G/DBIRTH/E/D1", spFixture(t, "dbirth.bin"))
	pub(sc.edge, "spBv1.0/G/DDATA/E/D1", spData(2, 7))
	pub(sc.edge, "spBv1.0/G/DDATA/E/D1", spData(5, 8))
	pub(sc.edge, "spBv1.0/G/DDATA/E/D1", spFixture(t, "ddata_seq255.bin"))
	e2 := dialEdge(t, sc.addr, "E2")
	pub(e2, "spBv1.0/G/NBIRTH/E2", spFixture(t, "nbirth_bdseq200.bin"))
	host, _ := mqtttest.DialV5(t, sc.addr, connect("scada", 0, 0), nil)
	host.PubProps(&paho.Publish{Topic: "spBv1.0/STATE/scada", QoS: 1, Retain: true,
		Payload: []byte(fmt.Sprintf(`{"online":true,"timestamp":%d}`, time.Now().UnixMilli()))})
}

// dialEdge connects edge node id of group G with its NDEATH (bdSeq 0) as
// will.
func dialEdge(t *testing.T, addr, id string) *mqtttest.V5 {
	t.Helper()
	cp := connect(id, 0, 0)
	cp.WillMessage = &paho.WillMessage{Topic: "spBv1.0/G/NDEATH/" + id, QoS: 1, Payload: spFixture(t, "ndeath.bin")}
	c, _ := mqtttest.DialV5(t, addr, cp, nil)
	return c
}

// spFixture reads one of gateway/sparkplug's payload fixtures
// (testdata/fixtures/fixtures.json describes them).
func spFixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "sparkplug", "testdata", "fixtures", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// spData encodes a DDATA payload by hand: a timestamp, one Int64 metric
// "Count" and seq.
func spData(seq, count uint64) []byte {
	var m []byte
	m = protowire.AppendTag(m, 1, protowire.BytesType) // Metric.name
	m = protowire.AppendString(m, "Count")
	m = protowire.AppendTag(m, 4, protowire.VarintType) // Metric.datatype: Int64
	m = protowire.AppendVarint(m, 4)
	m = protowire.AppendTag(m, 11, protowire.VarintType) // Metric.long_value
	m = protowire.AppendVarint(m, count)
	var p []byte
	p = protowire.AppendTag(p, 1, protowire.VarintType) // Payload.timestamp
	p = protowire.AppendVarint(p, uint64(time.Now().UnixMilli()))
	p = protowire.AppendTag(p, 2, protowire.BytesType) // Payload.metrics
	p = protowire.AppendBytes(p, m)
	p = protowire.AppendTag(p, 3, protowire.VarintType) // Payload.seq
	return protowire.AppendVarint(p, seq)
}

// spPage drives a tab with the helpers of TestStatusPageInBrowser, each
// step bounded by a deadline.
type spPage struct {
	t   *testing.T
	ctx context.Context
}

func (p spPage) run(what string, timeout time.Duration, steps ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	c, cancel := context.WithTimeout(p.ctx, timeout)
	defer cancel()
	if err := chromedp.Do(c, steps...); err != nil {
		p.t.Fatalf("%s: %v", what, err)
	}
}

func (p spPage) text(sel string) string {
	p.t.Helper()
	c, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	s, err := chromedp.Run(c, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		p.t.Fatalf("text of %s: %v", sel, err)
	}
	return s
}

// eval evaluates a JavaScript predicate in the page.
func (p spPage) eval(expr string) bool {
	p.t.Helper()
	c, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	ok, err := chromedp.Run(c, chromedp.Evaluate[bool](expr))
	if err != nil {
		p.t.Fatalf("%s: %v", expr, err)
	}
	return ok
}

// waitJS waits until a JavaScript predicate holds in the page; on a
// timeout it reports the panel's text, to see what the page drew.
func (p spPage) waitJS(what, expr string, timeout time.Duration) {
	p.t.Helper()
	c, cancel := context.WithTimeout(p.ctx, timeout+5*time.Second)
	defer cancel()
	if _, err := chromedp.Run(c, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(timeout), chromedp.WithPollingInterval(100*time.Millisecond))); err != nil {
		shown, _ := chromedp.Run(c, chromedp.Evaluate[string](`document.getElementById("sparkplug-card").dataset.state + " | " + document.getElementById("sparkplug-card").textContent`))
		p.t.Fatalf("waiting for %s: %v; the panel: %q", what, err, shown)
	}
}

// waitRedraw waits for the page's next poll to be drawn (the live dot's
// title carries the time of the last update, to the second).
func (p spPage) waitRedraw() {
	p.t.Helper()
	c, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	seen, err := chromedp.Run(c, chromedp.Evaluate[string](`document.getElementById("live").title`))
	if err != nil {
		p.t.Fatal(err)
	}
	p.waitJS("a redraw", fmt.Sprintf(`document.getElementById("live").title !== %q`, seen), 10*time.Second)
}
