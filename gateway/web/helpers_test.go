package web

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/internal/mqtttest"
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

// connect is the CONNECT of the web tests' clients: a clean start, and the
// receive maximum and session expiry that the pages show, when not 0.
func connect(id string, receiveMax uint16, expiry uint32) *paho.Connect {
	cp := &paho.Connect{ClientID: id, CleanStart: true, Properties: &paho.ConnectProperties{}}
	if receiveMax > 0 {
		cp.Properties.ReceiveMaximum = &receiveMax
	}
	if expiry > 0 {
		cp.Properties.SessionExpiryInterval = &expiry
	}
	return cp
}

// kept adds the messages c received since the last call to last (topic ->
// payload, the newest of each, as a $SYS explorer shows them) and returns
// it.
func kept(c *mqtttest.V5, last map[string]string) map[string]string {
	for {
		select {
		case m := <-c.Msgs:
			last[m.Topic] = string(m.Payload)
		default:
			return last
		}
	}
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
