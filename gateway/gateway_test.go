package gateway_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/gateway"
	"github.com/linemq/linemq/gateway/config"
	"github.com/linemq/linemq/gateway/health"
	"github.com/linemq/linemq/gateway/provision"
	"github.com/linemq/linemq/internal/mqtttest"
)

// TestMain fails the package if goroutines of the broker, the gateway or a
// test client outlive the tests: Close must stop everything Start began.
func TestMain(m *testing.M) { brokertest.Main(m) }

// testConfig returns a configuration listening on a free loopback port with
// its data directory under t's temporary directory.
func testConfig(t *testing.T) *config.Config {
	t.Helper()
	cfg := config.Default()
	cfg.NodeID = "test"
	cfg.DataDir = filepath.Join(t.TempDir(), "var", "data") // nested: Start must create parents
	cfg.MQTT.Listen = new("127.0.0.1:0")
	cfg.HTTP.Listen = new("")
	return cfg
}

// testLogger returns a logger writing to t.Log, so a failing test shows
// what the gateway said.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tlogWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tlogWriter struct{ t *testing.T }

func (w tlogWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// connect connects a v5 client with id to addr and disconnects it at the
// end of the test.
func connect(t *testing.T, addr net.Addr, id string) *mqtttest.V5 {
	t.Helper()
	c, ca := mqtttest.DialV5(t, addr.String(), &paho.Connect{ClientID: id, KeepAlive: 30, CleanStart: true}, nil)
	if ca.ReasonCode != 0 {
		t.Fatalf("connect %s: CONNACK reason %#x", id, ca.ReasonCode)
	}
	return c
}

// receive waits for a value on ch, failing the test after timeout.
func receive[T any](t *testing.T, ch <-chan T, timeout time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(timeout):
		t.Fatalf("timed out after %v waiting for %s", timeout, what)
		panic("unreachable")
	}
}

func TestStartServeClose(t *testing.T) {
	cfg := testConfig(t)
	g, err := gateway.Start(t.Context(), gateway.Options{Config: cfg, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(cfg.DataDir); err != nil || !fi.IsDir() {
		t.Errorf("data directory not created: %v", err)
	}
	addr := g.MQTTAddr()
	if addr == nil || g.Broker() == nil {
		t.Fatalf("MQTTAddr = %v, Broker nil: %t", addr, g.Broker() == nil)
	}

	sub := connect(t, addr, "sub")
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if _, err := sub.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "t/#", QoS: 1}}}); err != nil {
		t.Fatal(err)
	}
	pub := connect(t, addr, "pub")
	if _, err := pub.Publish(ctx, &paho.Publish{Topic: "t/1", QoS: 1, Payload: []byte("hello")}); err != nil {
		t.Fatal(err)
	}
	if m := receive(t, sub.Msgs, 5*time.Second, "the published message"); m.Topic != "t/1" || string(m.Payload) != "hello" {
		t.Errorf("received %q %q", m.Topic, m.Payload)
	}

	start := time.Now()
	if err := g.Close(); err != nil {
		t.Errorf("Close = %v", err)
	}
	if took := time.Since(start); took > gateway.ShutdownTimeout {
		t.Errorf("Close took %v with well-behaved clients", took)
	}
	for _, c := range []*mqtttest.V5{sub, pub} {
		if d := receive(t, c.Disc, 5*time.Second, "DISCONNECT"); d.ReasonCode != 0x8B {
			t.Errorf("DISCONNECT reason %#x, want 0x8B", d.ReasonCode)
		}
	}
	if err := g.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
	if err := g.Wait(); err != nil {
		t.Errorf("Wait = %v", err)
	}
	if c, err := net.DialTimeout("tcp", addr.String(), time.Second); err == nil {
		c.Close()
		t.Error("listener still accepts connections after Close")
	}
}

// TestRun checks the daemon's path: Run logs the bound address, serves,
// and returns nil once its context is cancelled.
func TestRun(t *testing.T) {
	addrs := make(chan string, 1)
	log := slog.New(&listenHandler{Handler: testLogger(t).Handler(), addrs: addrs})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- gateway.Run(ctx, gateway.Options{Config: testConfig(t), Logger: log}) }()

	addr := receive(t, addrs, 5*time.Second, `the "listening" log record`)
	tcpAddr, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c := connect(t, tcpAddr, "c")
	cancel()
	if err := receive(t, done, 5*time.Second, "Run to return"); err != nil {
		t.Errorf("Run = %v", err)
	}
	if d := receive(t, c.Disc, time.Second, "DISCONNECT"); d.ReasonCode != 0x8B {
		t.Errorf("DISCONNECT reason %#x, want 0x8B", d.ReasonCode)
	}
}

// listenHandler passes on the addr of "listening" records.
type listenHandler struct {
	slog.Handler
	addrs chan<- string
}

func (h *listenHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "listening" {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "addr" {
				h.addrs <- a.Value.String()
			}
			return true
		})
	}
	return h.Handler.Handle(ctx, r)
}

func TestStartErrors(t *testing.T) {
	// A port that is taken: the broker made before the listener must be
	// closed again (TestMain's leak check would see its goroutines).
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()

	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()

	tests := []struct {
		name   string
		ctx    context.Context
		modify func(*config.Config)
		want   string
	}{
		{
			name:   "invalid configuration",
			modify: func(c *config.Config) { c.MQTT.ReceiveMaximum = 70000 },
			want:   "mqtt.receive_maximum: 70000 out of range (1..65535)",
		},
		{
			name:   "port in use",
			modify: func(c *config.Config) { c.MQTT.Listen = new(taken.Addr().String()) },
			want:   "gateway: mqtt listener: listen tcp " + taken.Addr().String() + ": bind: address already in use",
		},
		{
			name:   "data directory is a file",
			modify: func(c *config.Config) { c.DataDir = filepath.Join(file, "data") },
			want:   "gateway: data directory: mkdir " + file + ": not a directory",
		},
		{
			name: "context cancelled",
			ctx:  cancelled,
			want: "gateway: start: context canceled",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(t)
			if tt.modify != nil {
				tt.modify(cfg)
			}
			ctx := tt.ctx
			if ctx == nil {
				ctx = t.Context()
			}
			g, err := gateway.Start(ctx, gateway.Options{Config: cfg, Logger: testLogger(t)})
			if err == nil {
				g.Close()
				t.Fatalf("Start succeeded, want %q", tt.want)
			}
			if err.Error() != tt.want {
				t.Errorf("Start error\n got: %v\nwant: %s", err, tt.want)
			}
		})
	}
}

func TestListenerDisabled(t *testing.T) {
	cfg := testConfig(t)
	cfg.MQTT.Listen = new("")
	g, err := gateway.Start(t.Context(), gateway.Options{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	if a := g.MQTTAddr(); a != nil {
		t.Errorf("MQTTAddr = %v, want nil", a)
	}
	if err := g.Close(); err != nil {
		t.Errorf("Close = %v", err)
	}
}

// TestConcurrentClose checks that Close may be called from several
// goroutines at once, and that they all see the same result.
func TestConcurrentClose(t *testing.T) {
	g, err := gateway.Start(t.Context(), gateway.Options{Config: testConfig(t)})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() { errs <- g.Close() })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("Close = %v", err)
		}
	}
	select {
	case <-g.Done():
	default:
		t.Error("Done not closed after Close")
	}
	if err := g.Wait(); err != nil {
		t.Errorf("Wait = %v", err)
	}
}

// TestPersistenceAndWearMetric: a retained message survives a restart of
// the gateway on its data directory, and the store's writes show up as
// the bytes-per-message wear figure.
func TestPersistenceAndWearMetric(t *testing.T) {
	cfg := testConfig(t)
	g, err := gateway.Start(t.Context(), gateway.Options{Config: cfg, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	pub := connect(t, g.MQTTAddr(), "pub")
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	for i := range 10 {
		if _, err := pub.Publish(ctx, &paho.Publish{Topic: fmt.Sprint("cfg/", i), QoS: 1, Retain: true, Payload: []byte("v")}); err != nil {
			t.Fatal(err)
		}
	}
	brokertest.Eventually(t, 5*time.Second, "condition", func() bool { return g.Stats().Store.PageBytesWritten > 0 })
	if st := g.Stats(); st.DiskBytesPerMessage <= 0 || st.Broker.MessagesIn != 10 {
		t.Fatalf("wear metric %v with %d messages", st.DiskBytesPerMessage, st.Broker.MessagesIn)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	g, err = gateway.Start(t.Context(), gateway.Options{Config: cfg, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if n := g.Broker().Stats().Retained; n != 10 {
		t.Fatalf("%d retained messages after restart, want 10", n)
	}
}

// TestDegradedGroupIsDegradedHealth: a share group the page shows degraded
// (here a persistent member offline) makes the share_groups check
// degraded, with the page's reason: the gateway stays ready (/readyz 200)
// and its overall health says DEGRADED, as the group table does; once the
// member is back, all is OK again.
func TestDegradedGroupIsDegradedHealth(t *testing.T) {
	cfg := testConfig(t)
	cfg.HTTP.Listen = new("127.0.0.1:0")
	cfg.Health.ProbeInterval = config.Duration(100 * time.Millisecond)
	cfg.Health.ProbeTimeout = config.Duration(100 * time.Millisecond)
	g, err := gateway.Start(t.Context(), gateway.Options{Config: cfg, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	dial := func() *mqtttest.V5 {
		c, _ := mqtttest.DialV5(t, g.MQTTAddr().String(), &paho.Connect{ClientID: "worker", KeepAlive: 30, CleanStart: false,
			Properties: &paho.ConnectProperties{SessionExpiryInterval: new(uint32(3600))}}, nil)
		return c
	}
	w := dial()
	w.Sub("$share/line/t/#", 1)
	other := connect(t, g.MQTTAddr(), "other")
	other.Sub("$share/line/t/#", 1)
	state := func() (string, string) {
		c, ok := g.Health().Get("share_groups")
		if !ok {
			return "", ""
		}
		return c.State.String(), c.Reason
	}
	brokertest.Eventually(t, 5*time.Second, "share_groups ok", func() bool { s, _ := state(); return s == "ok" })

	w.NC.Close() // gone without DISCONNECT: its session stays
	brokertest.Eventually(t, 5*time.Second, "share_groups degraded", func() bool { s, _ := state(); return s == "degraded" })
	if _, reason := state(); !strings.Contains(reason, "line: member worker: offline") {
		t.Errorf("share_groups reason %q does not name the offline member", reason)
	}
	if code, body := getBody(t, "http://"+g.HTTPAddr().String()+"/readyz"); code != 200 {
		t.Errorf("/readyz %d with a degraded group: %s", code, body)
	}
	dial()
	brokertest.Eventually(t, 5*time.Second, "share_groups ok again", func() bool { s, _ := state(); return s == "ok" })
}

// TestStorageMaxSize: storage.max_size reaches the database: once the file
// would grow past it, a retained publish is refused (0x97) instead of
// filling the partition.
func TestStorageMaxSize(t *testing.T) {
	cfg := testConfig(t)
	cfg.Storage.MaxSize = 2 << 20
	g, err := gateway.Start(t.Context(), gateway.Options{Config: cfg, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	pub := connect(t, g.MQTTAddr(), "pub")
	payload := make([]byte, 60<<10)
	// 200 retained messages of 60 KiB are 12 MB: far past the bound.
	for i := range 200 {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		resp, err := pub.Publish(ctx, &paho.Publish{Topic: fmt.Sprint("big/", i), QoS: 1, Retain: true, Payload: payload})
		cancel()
		if resp != nil && resp.ReasonCode == 0x97 {
			t.Logf("refused at message %d (%d KiB written)", i+1, (i+1)*60)
			return
		}
		if err != nil {
			t.Fatalf("publish %d: %v", i+1, err)
		}
	}
	t.Fatal("200 retained messages of 60 KiB accepted with storage.max_size 2MiB")
}

// TestProvisioningHealth: a refused provisioning set keeps the gateway on
// its earlier configuration, and says so in the "provisioning" health
// check (and so on the page, in /readyz's details and on the status LED)
// until a good one is applied.
func TestProvisioningHealth(t *testing.T) {
	at := time.Date(2026, 12, 6, 22, 40, 0, 0, time.UTC)
	for _, tc := range []struct {
		status *provision.Status
		state  health.State
		reason string
	}{
		{&provision.Status{At: at, Files: []string{"linemq/acl"}, Problems: []string{`linemq/acl:3: unknown access "sometimes"`, "linemq/hostname:1: x"}},
			health.Degraded, `the set of 2026-12-06 22:40 UTC was refused, the configuration before it runs: linemq/acl:3: unknown access "sometimes" (and 1 more)`},
		{&provision.Status{At: at, Applied: true, Files: []string{"linemq.yaml", "linemq/passwd"}}, health.OK, "applied (2 files)"},
	} {
		g, err := gateway.Start(t.Context(), gateway.Options{Config: testConfig(t), Provisioned: tc.status})
		if err != nil {
			t.Fatal(err)
		}
		c, ok := g.Health().Get("provisioning")
		g.Close()
		if !ok || c.State != tc.state || !strings.Contains(c.Reason, tc.reason) {
			t.Errorf("provisioning check = %+v (present %v), want %v with %q", c, ok, tc.state, tc.reason)
		}
	}
}
