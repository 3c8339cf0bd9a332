//go:build browser

package web

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/gateway/cluster"
	"github.com/linemq/linemq/gateway/health"
	"github.com/linemq/linemq/internal/mqtttest"
)

// screenshotPath is where TestStatusPageInBrowser writes its screenshot;
// by default a temporary file, so a test run leaves the tree unchanged:
//
//	go test ./gateway/web/ -run Browser -args -screenshot ../../docs/img/status.png
var screenshotPath = flag.String("screenshot", "", "write the status page screenshot here (docs/img/status.png is made this way)")

// chromium returns the browser the test drives: Debian's chromium package.
func chromium() string {
	for _, p := range []string{os.Getenv("LINEMQ_CHROMIUM"), "/usr/bin/chromium", "/usr/bin/chromium-browser"} {
		if p == "" {
			continue
		}
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p
		}
	}
	return ""
}

// TestStatusPageInBrowser drives the real page in headless Chromium against
// a broker with a share group of three workers and live traffic: the group
// row shows, members' figures change as messages flow, and after one worker
// stops acknowledging its group and its member row are highlighted.
func TestStatusPageInBrowser(t *testing.T) {
	exe := chromium()
	if exe == "" {
		t.Skip("no Chromium at /usr/bin/chromium (Debian: apt-get install chromium; or set LINEMQ_CHROMIUM): the status page browser test needs one")
	}
	p := newPlant(t)
	ctx := newBrowser(t, exe)

	run := func(what string, timeout time.Duration, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		c, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		if err := chromedp.Do(c, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	text := func(sel string) string {
		t.Helper()
		c, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		s, err := chromedp.Run(c, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return s
	}
	// waitJS waits until a JavaScript predicate holds in the page.
	waitJS := func(what, expr string, timeout time.Duration) {
		t.Helper()
		c, cancel := context.WithTimeout(ctx, timeout+5*time.Second)
		defer cancel()
		if _, err := chromedp.Run(c, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(timeout), chromedp.WithPollingInterval(100*time.Millisecond))); err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
	}

	// waitRedraw waits for the page's next poll to be drawn: the live dot's
	// title carries the time of the last update, to the second.
	waitRedraw := func() {
		t.Helper()
		c, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		seen, err := chromedp.Run(c, chromedp.Evaluate[string](`document.getElementById("live").title`))
		if err != nil {
			t.Fatal(err)
		}
		waitJS("a redraw", fmt.Sprintf(`document.getElementById("live").title !== %q`, seen), 10*time.Second)
	}

	const group = `tr.group[data-group="report-prep"]`
	const w1Delivered = `tr.member[data-member="w1"] td[data-field="delivered"]`
	run("first load", 30*time.Second,
		chromedp.EmulateViewport(1440, 900),
		chromedp.Navigate(p.base+"/"),
		chromedp.WaitVisible(chromedp.CSS(group)),
		chromedp.WaitVisible(chromedp.CSS(w1Delivered)),
	)
	if got := text(group + ` td.gname`); got != "report-prep" {
		t.Errorf("group row name %q", got)
	}
	if got := text(group + ` td[data-field="members"]`); got != "3 / min 3" {
		t.Errorf("group row members %q", got)
	}
	if st := text(`#health-pill`); !strings.EqualFold(st, "healthy") {
		t.Errorf("health pill %q", st)
	}
	// The cluster panel: a row per node, the stream's breaker and round trip.
	if got := text(`#cluster tr[data-node="line3-gw2"]`); !strings.Contains(got, "closed") || !strings.Contains(got, "0.42 ms") {
		t.Errorf("cluster panel's peer row %q", got)
	}

	// The bridges panel: a row per bridge, the one that is down
	// highlighted with its last error.
	if got := text(`#bridges tr[data-bridge="site"] td[data-field="state"]`); !strings.Contains(got, "connected") {
		t.Errorf("site bridge's state %q", got)
	}
	if got := text(`#bridges tr[data-bridge="site"] td[data-field="sent_rate"]`); got != "103" {
		t.Errorf("site bridge's sent rate %q", got)
	}
	run("the down bridge highlighted", 10*time.Second, chromedp.WaitVisible(chromedp.CSS(`#bridges tr.degraded[data-bridge="cloud"]`)))
	if got := text(`#bridges tr[data-bridge="cloud"] td[data-field="queued"]`); got != "84,210 · 25.0 MiB" {
		t.Errorf("cloud bridge's queue %q", got)
	}
	if got := text(`#bridges tr[data-bridge="cloud"] td[data-field="last_error"]`); !strings.Contains(got, "i/o timeout") || !strings.Contains(got, "ago") {
		t.Errorf("cloud bridge's last error %q", got)
	}
	if got := text(`#bridges tr[data-bridge="cloud"] td[data-field="dropped"]`); got != "3" {
		t.Errorf("cloud bridge's drops %q", got)
	}

	// Live: each member's delivered count moves while telemetry flows.
	for _, w := range []string{"w1", "w2", "w3"} {
		sel := `tr.member[data-member="` + w + `"] td[data-field="delivered"]`
		first := text(sel)
		waitJS(w+"'s delivered figure to change",
			fmt.Sprintf(`(() => { const e = document.querySelector(%q); return !!e && e.textContent !== %q; })()`, sel, first),
			15*time.Second)
	}
	waitJS("the group to be shown healthy", `document.querySelector(`+jsString(group)+`).dataset.state === "ok"`, 10*time.Second)

	// w3 wedges: connected, acknowledging nothing.
	p.workers[2].Acking.Store(false)
	run("the degraded highlight", 30*time.Second,
		chromedp.WaitVisible(chromedp.CSS(`tr.group.degraded[data-group="report-prep"]`)),
		chromedp.WaitVisible(chromedp.CSS(`tr.member.degraded[data-member="w3"]`)),
	)
	why := text(`tr.member[data-member="w3"] td.why`)
	if !strings.Contains(why, "send window full") {
		t.Errorf("w3's reason %q", why)
	}
	if n := text(`#kpi-groups-tile .sub`); !strings.Contains(n, "report-prep") {
		t.Errorf("degraded groups tile %q", n)
	}
	for _, w := range []string{"w1", "w2"} {
		if c := text(`tr.member[data-member="` + w + `"] td:last-child`); c != "ok" {
			t.Errorf("%s shown %q, want ok", w, c)
		}
	}

	// The clients table answers its search box.
	run("search", 15*time.Second, chromedp.SendKeys(chromedp.CSS(`#client-search`), "plc-l3"))
	waitJS("the search's answer", `document.getElementById("clients-count").textContent === "8 matching"`, 10*time.Second)
	if n := text(`#clients-body tr:first-child td:first-child`); n != "plc-l3-01" {
		t.Errorf("first match %q", n)
	}
	clear := `(() => { const e = document.getElementById("client-search"); e.value = ""; e.dispatchEvent(new Event("input")); return true; })()`
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](clear)); err != nil {
		t.Fatalf("clearing the search: %v", err)
	}
	waitJS("the whole clients list", `document.querySelectorAll("#clients-body tr").length > 8`, 10*time.Second)

	path := *screenshotPath
	if path == "" {
		path = filepath.Join(t.TempDir(), "status.png")
	} else {
		// For the documentation: wait for a chart with a full history,
		// then for the page to draw it.
		p.fillHistory(t)
		waitRedraw()
	}
	c, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(c, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", path, len(png))

	if *screenshotPath != "" {
		// And as a phone shows it, for the documentation.
		phone := strings.TrimSuffix(path, ".png") + "-phone.png"
		run("phone viewport", 15*time.Second, chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2)))
		if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.scrollTo(0, 0), true`)); err != nil {
			t.Fatal(err)
		}
		waitRedraw()
		png, err := chromedp.Run(c, chromedp.CaptureScreenshot())
		if err != nil {
			t.Fatalf("phone screenshot: %v", err)
		}
		if err := os.WriteFile(phone, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s (%d bytes)", phone, len(png))
	}
}

// jsString quotes s as a JavaScript string literal.
func jsString(s string) string { return fmt.Sprintf("%q", s) }

// newBrowser starts headless Chromium for the test and returns a context
// whose tab is open.
func newBrowser(t *testing.T, exe string) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("no-first-run", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1440, 900),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelCtx(); cancelAlloc() })
	// The first run starts the browser; its context must not time out
	// (that would stop the browser), so the start is bounded by a timer.
	started := make(chan error, 1)
	go func() { started <- chromedp.Do(ctx) }()
	select {
	case err := <-started:
		if err != nil {
			t.Fatalf("starting %s: %v", exe, err)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not start within 60s", exe)
	}
	return ctx
}

// plant is the scene of the browser test: a gateway's broker with a share
// group of three workers, a historian in its own group, an HMI with an
// ordinary subscription, eight idle PLC connections, and a publisher
// sending telemetry all the time.
type plant struct {
	srv     *broker.Server
	web     *Server
	base    string
	workers []*mqtttest.V5
}

func newPlant(t *testing.T) *plant {
	t.Helper()
	tracker := NewTracker()
	srv, addr := brokertest.RunServer(t, broker.Options{
		Events: tracker,
		Shares: broker.ShareOptions{Groups: []broker.GroupPolicy{
			{Name: "report-prep", MinMembers: 3},
			{Name: "hist-ingest-line3", MinMembers: 1, MaxMembers: 1},
		}},
	})
	reg := health.New(health.Options{})
	t.Cleanup(reg.Close)
	if err := reg.Poll("broker", time.Second, 2*time.Second, srv.Probe); err != nil {
		t.Fatal(err)
	}
	reg.Set("mqtt-listener", health.OK, "")
	reg.Set("storage", health.OK, "")
	started := time.Now()
	w, base := startWeb(t, Options{
		Broker: srv, Health: reg, Tracker: tracker, NodeID: "line3-gw", Version: "0.9.0",
		Started:        started.Add(-(3*time.Hour + 14*time.Minute)),
		SampleInterval: 200 * time.Millisecond,
		Degraded:       Thresholds{WindowFull: 2 * time.Second},
		Listeners: func() []Listener {
			return []Listener{{Proto: "mqtt", Addr: addr}, {Proto: "http", Addr: "0.0.0.0:8080"}}
		},
		Cluster: func() any {
			return ClusterPanel{Cluster: "line3", Node: "line3-gw",
				Nodes: []ClusterNode{
					{Name: "line3-gw", Address: "10.3.0.11:7946", Version: "0.9.0", Self: true, Health: "ok"},
					{Name: "line3-gw2", Address: "10.3.0.12:7946", Version: "0.9.0", Health: "ok", Connected: true, Available: true,
						Breaker: "closed", RTTSeconds: 0.00042, RTTMaxSeconds: 0.0031},
				},
				Registry: ClusterRegistry{State: "healthy", Revision: 4711, LagSeconds: 0.0021, LagMaxSeconds: 0.012, Nodes: 2, Members: 4, Routes: 3, Sessions: 15},
				Etcd: cluster.EtcdStatus{Healthy: true, Leader: "line3-gw", Checked: time.Now(), Members: 1, Up: 1, Quorum: 1,
					Margin: "1 of 1 up: one more failure stops the registry", Endpoints: []cluster.EtcdEndpoint{
						{Endpoint: "http://10.3.0.11:2379", Member: "line3-gw", Up: true, Leader: true, Version: "3.5.17", DBSizeBytes: 98304, RaftTerm: 3, RTTSeconds: 0.0008},
					}},
			}
		},
		Bridges: func() []BridgeStats {
			st := srv.Stats()
			return []BridgeStats{
				{Name: "site", State: "connected", Since: started, Remote: []string{"site-broker:1883"}, Protocol: 5,
					Queued: 3, QueuedBytes: 1200, OldestQueued: 40 * time.Millisecond, InFlight: 3,
					Sent: st.MessagesIn / 2, Enqueued: st.MessagesIn / 2, SentRate: 102.5, ReceivedRate: 0.2, Received: 12},
				{Name: "cloud", State: "down", Since: time.Now().Add(-7 * time.Minute), Remote: []string{"tls://mqtt.example.com:8883"}, Protocol: 311,
					Queued: 84210, QueuedBytes: 25 << 20, OldestQueued: 7 * time.Minute, Enqueued: 84210, Dropped: 2, Expired: 1,
					LastError: "connect: dial tcp 203.0.113.7:8883: i/o timeout", LastErrorAt: time.Now().Add(-20 * time.Second)},
			}
		},
		Storage: func() StorageStats {
			st := srv.Stats()
			return StorageStats{
				Path: "/var/lib/linemq/linemq.db", SyncMode: "batch", FileSize: 1 << 21,
				BytesWritten: 180 * st.MessagesIn, PageBytesWritten: 1100 * st.MessagesIn,
				Commits: st.MessagesIn / 40,
			}
		},
	})
	w.Start()
	w.SetReady(true)

	p := &plant{srv: srv, web: w, base: base}
	for _, id := range []string{"w1", "w2", "w3"} {
		c, _ := mqtttest.DialV5Opts(t, addr, connect(id, 10, 300), mqtttest.Options{CountOnly: true, ManualAck: true})
		c.Sub("$share/report-prep/plant/+/telemetry", 1)
		p.workers = append(p.workers, c)
	}
	hist, _ := mqtttest.DialV5Opts(t, addr, connect("historian-line3", 0, 3600), mqtttest.Options{CountOnly: true})
	hist.Sub("$share/hist-ingest-line3/plant/#", 1)
	hmi, _ := mqtttest.DialV5Opts(t, addr, connect("hmi-panel-1", 0, 0), mqtttest.Options{CountOnly: true})
	hmi.Sub("plant/+/telemetry", 0)
	hmi.Sub("plant/+/alarms", 1)
	for i := 1; i <= 8; i++ {
		c, _ := mqtttest.DialV5Opts(t, addr, connect(fmt.Sprintf("plc-l3-%02d", i), 0, 0), mqtttest.Options{CountOnly: true})
		c.Pub(fmt.Sprintf("plant/plc%02d/status", i), 1, false, "running")
	}
	retained, _ := mqtttest.DialV5Opts(t, addr, connect("commissioning", 0, 0), mqtttest.Options{CountOnly: true})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	retained.Publish(ctx, pahoRetained("plant/line3/config", `{"shift":"B"}`))
	publishLoop(t, addr, "plant/l3/telemetry", 5*time.Millisecond)
	return p
}

// fillHistory waits until the rate chart spans its whole history, for a
// screenshot that shows what the page looks like on a running gateway.
func (p *plant) fillHistory(t *testing.T) {
	brokertest.Eventually(t, 2*time.Minute, "a full rate history", func() bool {
		p.web.mu.Lock()
		defer p.web.mu.Unlock()
		return len(p.web.sampled.histIn) >= HistoryLength
	})
}
