package listen

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/eclipse/paho.golang/paho"
	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/gateway/auth"
	"github.com/linemq/linemq/internal/mqtttest"
)

// dialWS opens an MQTT-over-WebSocket connection with coder/websocket's
// client and returns it as a net.Conn.
func dialWS(t *testing.T, url string, opts *websocket.DialOptions) (net.Conn, error) {
	t.Helper()
	if opts == nil {
		opts = &websocket.DialOptions{}
	}
	if opts.Subprotocols == nil {
		opts.Subprotocols = []string{"mqtt"}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, resp, err := websocket.Dial(ctx, url, opts)
	if resp != nil && resp.Body != nil {
		resp.Body.Close()
	}
	if err != nil {
		return nil, err
	}
	return websocket.NetConn(context.Background(), c, websocket.MessageBinary), nil
}

// viaTCP returns a connection for paho.golang whose bytes reach ws intact.
// paho.golang writes a packet as several Writes (net.Buffers) from
// whichever goroutine sends it, so on a connection where each Write is a
// WebSocket message (or a TLS record), two packets sent at once can
// interleave; a TCP connection writes the buffers in one locked writev. A
// loopback TCP hop in front of the WebSocket keeps each packet whole, and
// the WebSocket still carries exactly paho's bytes.
func viaTCP(t *testing.T, ws net.Conn) net.Conn {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{}, 2)
	pump := func(dst, src net.Conn) {
		io.Copy(dst, src)
		dst.Close()
		src.Close()
		done <- struct{}{}
	}
	go pump(ws, server)
	go pump(server, ws)
	t.Cleanup(func() {
		client.Close()
		<-done
		<-done
	})
	return client
}

// TestWebSocketWithBroker carries real MQTT over a real WebSocket to a
// real broker, through an idle spell long enough for the broker to try to
// park the connection (which sets a read deadline that must not kill it).
func TestWebSocketWithBroker(t *testing.T) {
	l := listen(t, Config{Type: WS}, Options{})
	serve(t, newAuth(t, auth.Config{}), broker.Options{IdleParkAfter: 50 * time.Millisecond}, l)
	if want := "ws://" + l.Addr().String() + "/mqtt"; l.URL() != want {
		t.Errorf("URL %s, want %s", l.URL(), want)
	}
	ws, err := dialWS(t, l.URL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	// Anonymous and accepted: the remote address is the loopback TCP peer.
	c, ca := mqtttest.ConnectV5(t, viaTCP(t, ws), &paho.Connect{ClientID: "ws-1", KeepAlive: 30, CleanStart: true}, mqtttest.Options{})
	if ca.ReasonCode != 0 {
		t.Fatalf("CONNACK 0x%02X", ca.ReasonCode)
	}
	roundTrip(t, c, "ws/a")
	time.Sleep(300 * time.Millisecond) // several idle deadlines
	roundTrip(t, c, "ws/b")

	// A large message crosses many WebSocket frames and read chunks.
	big := strings.Repeat("x", 200<<10)
	c.Pub("ws/a", 1, false, big)
	if m := c.Next(); string(m.Payload) != big {
		t.Fatalf("payload of %d bytes came back as %d", len(big), len(m.Payload))
	}
}

// TestWebSocketPahoV311 uses paho.mqtt.golang's own WebSocket client (a
// second implementation, gorilla/websocket underneath) for MQTT 3.1.1.
func TestWebSocketPahoV311(t *testing.T) {
	l := listen(t, Config{Type: WS, Path: "/ws"}, Options{})
	serve(t, newAuth(t, auth.Config{}), broker.Options{}, l)
	msgs := make(chan mqtt.Message, 4)
	o := mqtt.NewClientOptions().AddBroker(l.URL()).SetClientID("v3-ws").SetProtocolVersion(4).
		SetAutoReconnect(false).SetConnectRetry(false).SetConnectTimeout(5 * time.Second).
		SetDefaultPublishHandler(func(_ mqtt.Client, m mqtt.Message) { msgs <- m })
	c := mqtt.NewClient(o)
	if tok := c.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("connect: %v", tok.Error())
	}
	defer c.Disconnect(50)
	if tok := c.Subscribe("v3/#", 1, nil); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	c.Publish("v3/x", 1, false, "over websocket").WaitTimeout(5 * time.Second)
	select {
	case m := <-msgs:
		if string(m.Payload()) != "over websocket" {
			t.Fatal(m)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no message")
	}
}

func TestWebSocketRefusals(t *testing.T) {
	l := listen(t, Config{Type: WS}, Options{})
	serve(t, newAuth(t, auth.Config{}), broker.Options{}, l)
	base := "http://" + l.Addr().String()

	// No "mqtt" subprotocol: refused in the handshake, at once, with a
	// reason that names the one required.
	for _, offer := range [][]string{{"foo"}, {}} {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		c, resp, err := websocket.Dial(ctx, l.URL(), &websocket.DialOptions{Subprotocols: offer})
		cancel()
		if err == nil {
			c.CloseNow()
			t.Errorf("offering %q: upgraded, want refused", offer)
			continue
		}
		if resp == nil {
			t.Errorf("offering %q: %v, want an HTTP answer", offer, err)
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), `subprotocol "mqtt" is required`) {
			t.Errorf("offering %q: %d %q, want 400 naming mqtt", offer, resp.StatusCode, body)
		}
	}
	// Offered among others, or as mqttv3.1, it is chosen.
	for _, offer := range [][]string{{"foo", "mqtt"}, {"mqttv3.1"}} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		c, _, err := websocket.Dial(ctx, l.URL(), &websocket.DialOptions{Subprotocols: offer})
		cancel()
		if err != nil {
			t.Errorf("offering %q: %v", offer, err)
			continue
		}
		if got, want := c.Subprotocol(), offer[len(offer)-1]; got != want {
			t.Errorf("offering %q: subprotocol %q, want %q", offer, got, want)
		}
		c.CloseNow()
	}

	client := &http.Client{Timeout: 5 * time.Second}
	get := func(path string, hdr map[string]string) int {
		req, _ := http.NewRequest("GET", base+path, nil)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := get("/other", nil); code != http.StatusNotFound {
		t.Errorf("another path: %d", code)
	}
	if code := get("/mqtt", nil); code != http.StatusUpgradeRequired {
		t.Errorf("a plain GET: %d", code)
	}
	upgrade := map[string]string{"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
		"Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Protocol": "mqtt", "Origin": "http://evil.example"}
	if code := get("/mqtt", upgrade); code != http.StatusForbidden {
		t.Errorf("a page from another origin: %d", code)
	}
}

func TestWebSocketOrigins(t *testing.T) {
	l := listen(t, Config{Type: WS, Origins: []string{"*.plant.local"}}, Options{})
	serve(t, newAuth(t, auth.Config{}), broker.Options{}, l)
	h := http.Header{"Origin": {"http://hmi.plant.local"}}
	nc, err := dialWS(t, l.URL(), &websocket.DialOptions{HTTPHeader: h})
	if err != nil {
		t.Fatalf("allowed origin refused: %v", err)
	}
	nc.Close()
	h = http.Header{"Origin": {"http://hmi.elsewhere"}}
	if nc, err := dialWS(t, l.URL(), &websocket.DialOptions{HTTPHeader: h}); err == nil {
		nc.Close()
		t.Error("another origin accepted")
	}
}

func TestWebSocketConnectionLimit(t *testing.T) {
	l := listen(t, Config{Type: WS, MaxConnections: 1}, Options{})
	serve(t, newAuth(t, auth.Config{}), broker.Options{}, l)
	first, err := dialWS(t, l.URL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if nc, err := dialWS(t, l.URL(), nil); err == nil {
		nc.Close()
		t.Fatal("second connection upgraded past max_connections 1")
	}
	if l.Refused() == 0 {
		t.Error("refusal not counted")
	}
	first.Close()
	var nc net.Conn
	// The place is given back once the server side closes.
	if !brokertest.Until(5*time.Second, func() bool { nc, err = dialWS(t, l.URL(), nil); return err == nil }) {
		t.Fatalf("no place after the first closed: %v", err)
	}
	nc.Close()
}

// TestSecureWebSocketIdentity: wss with a client certificate, whose name
// the ACL sees as the user name.
func TestSecureWebSocketIdentity(t *testing.T) {
	p := newPKI(t)
	aclFile := filepath.Join(t.TempDir(), "acl")
	os.WriteFile(aclFile, []byte(identityACL), 0o600)
	no := false
	a := newAuth(t, auth.Config{ACLFile: aclFile, AllowAnonymous: &no})
	l := listen(t, Config{Type: WSS, CertFile: p.certFile, KeyFile: p.keyFile, CAFile: p.ca.file, RequireClientCert: true}, Options{})
	serve(t, a, broker.Options{}, l)
	client := func(certs ...tls.Certificate) *http.Client {
		return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
			RootCAs: p.ca.pool(), ServerName: "localhost", Certificates: certs}}}
	}
	ws, err := dialWS(t, l.URL(), &websocket.DialOptions{HTTPClient: client(p.plc)})
	if err != nil {
		t.Fatal(err)
	}
	c, ca := mqtttest.ConnectV5(t, viaTCP(t, ws), &paho.Connect{ClientID: "wss-1", KeepAlive: 30, CleanStart: true}, mqtttest.Options{})
	if ca.ReasonCode != 0 {
		t.Fatalf("CONNACK 0x%02X", ca.ReasonCode)
	}
	roundTrip(t, c, "id/plc-7/x")
	if got := c.Puback("id/other/x", "x"); got != 0x87 {
		t.Errorf("publish outside the identity: 0x%02X", got)
	}
	if nc, err := dialWS(t, l.URL(), &websocket.DialOptions{HTTPClient: client()}); err == nil {
		nc.Close()
		t.Error("wss without a client certificate got through require_client_cert")
	}
}
