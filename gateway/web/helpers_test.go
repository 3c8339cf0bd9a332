package web

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/linemq/linemq/broker"
)

// startWeb makes a web server for b with opts and serves it over a real
// HTTP listener on loopback, shut down with the test.
func startWeb(t testing.TB, opts Options) (*Server, string) {
	t.Helper()
	s, err := New(opts)
	if err != nil {
		t.Fatalf("web.New: %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Serve(l)
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("web shutdown: %v", err)
		}
		<-done
	})
	return s, "http://" + l.Addr().String()
}

// get fetches url and returns the status code and body.
func get(t testing.TB, url string) (int, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, b
}

// getJSON fetches url, expects 200 and decodes the body into v.
func getJSON(t testing.TB, url string, v any) {
	t.Helper()
	code, b := get(t, url)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, code, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("GET %s: %v in %s", url, err, b)
	}
}

// mqttClient is a paho.golang v5 client that counts what it receives.
// With manual acknowledgements, it acknowledges while acking is true, so
// a test can make it stop like a wedged worker.
type mqttClient struct {
	*paho.Client
	t        testing.TB
	received atomic.Int64
	acking   atomic.Bool

	mu   sync.Mutex
	msgs []*paho.Publish
}

type clientOpts struct {
	receiveMax uint16 // 0: the default
	expiry     uint32 // Session Expiry Interval
	manualAck  bool   // acknowledge only while acking is true
	keep       bool   // keep received messages (for $SYS)
}

// dial connects a paho client to addr as id.
func dial(t testing.TB, addr, id string, o clientOpts) *mqttClient {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c := &mqttClient{t: t}
	c.acking.Store(true)
	cfg := paho.ClientConfig{
		Conn:                       nc,
		EnableManualAcknowledgment: o.manualAck,
		SendAcksInterval:           5 * time.Millisecond,
		OnClientError:              func(error) {},
	}
	cfg.OnPublishReceived = []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
		c.received.Add(1)
		if o.keep {
			c.mu.Lock()
			c.msgs = append(c.msgs, pr.Packet)
			c.mu.Unlock()
		}
		if o.manualAck && c.acking.Load() {
			pr.Client.Ack(pr.Packet)
		}
		return true, nil
	}}
	c.Client = paho.NewClient(cfg)
	cp := &paho.Connect{ClientID: id, CleanStart: true, Properties: &paho.ConnectProperties{}}
	if o.receiveMax > 0 {
		cp.Properties.ReceiveMaximum = &o.receiveMax
	}
	if o.expiry > 0 {
		cp.Properties.SessionExpiryInterval = &o.expiry
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if ca, err := c.Connect(ctx, cp); err != nil {
		t.Fatalf("connect %s: %v (%+v)", id, err, ca)
	}
	t.Cleanup(func() {
		c.Client.Disconnect(&paho.Disconnect{})
		nc.Close()
	})
	return c
}

func (c *mqttClient) sub(filter string, qos byte) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if sa, err := c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: filter, QoS: qos}}}); err != nil {
		c.t.Fatalf("subscribe %s: %v (%+v)", filter, err, sa)
	}
}

func (c *mqttClient) pub(topic string, qos byte, payload []byte) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Publish(ctx, &paho.Publish{Topic: topic, QoS: qos, Payload: payload}); err != nil {
		c.t.Fatalf("publish %s: %v", topic, err)
	}
}

// kept returns the messages kept so far, by topic (the last of each).
func (c *mqttClient) kept() map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]string, len(c.msgs))
	for _, m := range c.msgs {
		out[m.Topic] = string(m.Payload)
	}
	return out
}

// metricLines scrapes url and returns its sample lines ("name{labels}" ->
// value text), so tests compare series exactly as Prometheus reads them.
func metricLines(t testing.TB, url string) map[string]string {
	t.Helper()
	code, b := get(t, url)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, code, b)
	}
	out := make(map[string]string)
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		out[line[:i]] = line[i+1:]
	}
	return out
}

// newTestServer is a Server for rule tests that never serves: just the
// options and the sampler's state.
func newTestServer(b *broker.Server, opts Options) *Server {
	opts.Broker = b
	s, err := New(opts)
	if err != nil {
		panic(err)
	}
	return s
}

// pahoPublish is a QoS 1 telemetry sample.
func pahoPublish(topic string) *paho.Publish {
	return &paho.Publish{Topic: topic, QoS: 1, Payload: []byte(`{"flow":12.5,"unit":"m3/h"}`)}
}

// pahoRetained is a retained QoS 1 message.
func pahoRetained(topic, payload string) *paho.Publish {
	return &paho.Publish{Topic: topic, QoS: 1, Retain: true, Payload: []byte(payload)}
}
