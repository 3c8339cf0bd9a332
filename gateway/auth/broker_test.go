package auth

// End to end over real sockets: a real broker with an Authenticator, and
// the Eclipse Paho clients (paho.golang for 5.0, paho.mqtt.golang for
// 3.1.1), or raw bytes where the exact wire answer is the point.

import (
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/eclipse/paho.mqtt.golang/packets"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/broker/packet"
	"github.com/linemq/linemq/internal/mqtttest"
)

// e2eACL is a Mosquitto-syntax ACL for the end-to-end tests.
const e2eACL = `# anonymous: nothing
user alice
topic readwrite data/#
topic deny secret/#
share hist
user bob
topic readwrite data/#
topic readwrite secret/#
pattern readwrite clients/%c/#
`

// runBroker starts a broker on 127.0.0.1:0 with a, and returns its address.
func runBroker(t *testing.T, a broker.Authenticator) string {
	t.Helper()
	_, addr := brokertest.RunServer(t, broker.Options{Auth: a, ConnectTimeout: 5 * time.Second})
	return addr
}

// e2eAuth makes an Authenticator over alice ($7$) and bob ($6$) with
// e2eACL, in files of its own.
func e2eAuth(t *testing.T, cfg Config) (*Authenticator, string, string) {
	t.Helper()
	dir := t.TempDir()
	cfg.PasswordFile = writeFile(t, dir, "passwd", mosqAlice+"\n"+mosqBob+"\n")
	cfg.ACLFile = writeFile(t, dir, "acl", e2eACL)
	return newAuth(t, cfg, Options{}), cfg.PasswordFile, cfg.ACLFile
}

// rawConnack sends a CONNECT and returns the CONNACK's bytes as they came.
func rawConnack(t *testing.T, addr string, c *packet.Connect) []byte {
	t.Helper()
	c.ProtocolName = []byte("MQTT")
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := nc.Write(c.Append(nil)); err != nil {
		t.Fatal(err)
	}
	head := make([]byte, 2)
	if _, err := io.ReadFull(nc, head); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, head[1])
	if _, err := io.ReadFull(nc, body); err != nil {
		t.Fatal(err)
	}
	return append(head, body...)
}

func TestWireConnackCodes(t *testing.T) {
	no := false
	a, _, _ := e2eAuth(t, Config{AllowAnonymous: &no})
	addr := runBroker(t, a)
	login := func(v packet.Version, user, pw string) *packet.Connect {
		c := &packet.Connect{Version: v, CleanStart: true, ClientID: []byte("wire")}
		if user != "" {
			c.UsernameFlag, c.Username = true, []byte(user)
			c.PasswordFlag, c.Password = true, []byte(pw)
		}
		return c
	}
	for _, tc := range []struct {
		name string
		c    *packet.Connect
		want byte // the reason or return code byte
	}{
		{"v5 good", login(packet.V5, "alice", "s3cret pass"), 0x00},
		{"v5 bad password", login(packet.V5, "alice", "nope"), 0x86},
		{"v5 anonymous", login(packet.V5, "", ""), 0x87},
		{"3.1.1 good", login(packet.V311, "bob", "hunter2"), 0x00},
		{"3.1.1 bad password", login(packet.V311, "bob", "nope"), 0x04},
		{"3.1.1 anonymous", login(packet.V311, "", ""), 0x05},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := rawConnack(t, addr, tc.c)
			if b[0] != 0x20 || len(b) < 4 || b[3] != tc.want {
				t.Errorf("CONNACK % X, want code 0x%02X", b, tc.want)
			}
		})
	}
}

// TestSafeDefaultOverSockets: with no configuration a client on loopback
// connects anonymously, as the README's quick start needs.
func TestSafeDefaultOverSockets(t *testing.T) {
	a := newAuth(t, Config{}, Options{})
	addr := runBroker(t, a)
	c, _ := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: "local", CleanStart: true, KeepAlive: 30}, nil)
	c.Sub("a/#", 1)
	c.Pub("a/b", 1, false, "hi")
	if m := c.Next(); string(m.Payload) != "hi" {
		t.Fatal(m)
	}
}

func TestV5ACLOverSockets(t *testing.T) {
	a, _, _ := e2eAuth(t, Config{})
	addr := runBroker(t, a)
	alice, _ := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: "alice-1", CleanStart: true, KeepAlive: 30,
		UsernameFlag: true, Username: "alice", PasswordFlag: true, Password: []byte("s3cret pass")}, nil)
	bob, _ := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: "bob-1", CleanStart: true, KeepAlive: 30,
		UsernameFlag: true, Username: "bob", PasswordFlag: true, Password: []byte("hunter2")}, nil)

	sa := suback(t, alice,
		paho.SubscribeOptions{Topic: "data/#", QoS: 1},
		paho.SubscribeOptions{Topic: "secret/#", QoS: 1},
		paho.SubscribeOptions{Topic: "#", QoS: 1},
		paho.SubscribeOptions{Topic: "$share/g/secret/#", QoS: 1},
		paho.SubscribeOptions{Topic: "$share/hist/data/x", QoS: 1},
		paho.SubscribeOptions{Topic: "clients/alice-1/#", QoS: 1},
		paho.SubscribeOptions{Topic: "clients/bob-1/#", QoS: 1},
	)
	want := []byte{0x01, 0x87, 0x87, 0x87, 0x01, 0x01, 0x87}
	if string(sa.Reasons) != string(want) {
		t.Errorf("alice's SUBACK % X, want % X", sa.Reasons, want)
	}
	// The share name hist is reserved for alice.
	sb := suback(t, bob, paho.SubscribeOptions{Topic: "$share/hist/data/x", QoS: 1}, paho.SubscribeOptions{Topic: "$share/g/secret/#", QoS: 1})
	if string(sb.Reasons) != "\x87\x01" {
		t.Errorf("bob's SUBACK % X, want 87 01", sb.Reasons)
	}

	// Publishing: allowed, denied with PUBACK 0x87, and a denied message
	// reaches nobody.
	if r := alice.Puback("secret/x", "x"); r != 0x87 {
		t.Errorf("alice publish to secret/x: PUBACK 0x%02X, want 0x87", r)
	}
	if r := alice.Pub("data/x", 1, false, "ok"); r == nil || r.ReasonCode >= 0x80 {
		t.Errorf("alice publish to data/x: %+v", r)
	}
	if m := alice.Next(); m.Topic != "data/x" { // from data/#; the share member may also get it
		t.Errorf("alice got %s", m.Topic)
	}
	bob.Pub("secret/y", 1, false, "s")
	if m := bob.Next(); m.Topic != "secret/y" {
		t.Errorf("bob got %s", m.Topic)
	}
	for {
		select {
		case m := <-alice.Msgs:
			if strings.HasPrefix(m.Topic, "secret") {
				t.Fatalf("alice received %s", m.Topic)
			}
			continue
		case <-time.After(200 * time.Millisecond):
		}
		break
	}
}

// suback subscribes and returns the SUBACK, refusals and all (the
// mqtttest helper fails on a refusal).
func suback(t *testing.T, c *mqtttest.V5, opts ...paho.SubscribeOptions) *paho.Suback {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sa, err := c.Subscribe(ctx, &paho.Subscribe{Subscriptions: opts})
	if sa == nil {
		t.Fatalf("subscribe: %v", err)
	}
	return sa
}

// TestV311ACLOverSockets: 3.1.1 has SUBACK 0x80 for a refused filter, and
// no way to refuse a publish: it is dropped.
func TestV311ACLOverSockets(t *testing.T) {
	a, _, _ := e2eAuth(t, Config{})
	addr := runBroker(t, a)
	msgs := make(chan mqtt.Message, 16)
	o := mqtt.NewClientOptions().AddBroker("tcp://" + addr).SetClientID("alice-3").SetProtocolVersion(4).
		SetUsername("alice").SetPassword("s3cret pass").SetAutoReconnect(false).SetConnectRetry(false).
		SetConnectTimeout(5 * time.Second).
		SetDefaultPublishHandler(func(_ mqtt.Client, m mqtt.Message) { msgs <- m })
	c := mqtt.NewClient(o)
	if tok := c.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("connect: %v", tok.Error())
	}
	defer c.Disconnect(50)
	tok := c.SubscribeMultiple(map[string]byte{"data/#": 1, "secret/#": 1}, nil)
	if !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	res := tok.(*mqtt.SubscribeToken).Result()
	if res["data/#"] != 1 || res["secret/#"] != 0x80 {
		t.Errorf("SUBACK %v, want data/# 1 and secret/# 0x80", res)
	}
	c.Publish("secret/x", 1, false, "dropped").WaitTimeout(5 * time.Second)
	c.Publish("data/x", 1, false, "kept").WaitTimeout(5 * time.Second)
	select {
	case m := <-msgs:
		if m.Topic() != "data/x" {
			t.Errorf("got %s", m.Topic())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no message")
	}

	// Wrong password with the 3.1.1 client.
	o2 := mqtt.NewClientOptions().AddBroker("tcp://" + addr).SetClientID("mallory").SetProtocolVersion(4).
		SetUsername("alice").SetPassword("guess").SetAutoReconnect(false).SetConnectRetry(false).SetConnectTimeout(5 * time.Second).
		SetCustomOpenConnectionFn(func(u *url.URL, _ mqtt.ClientOptions) (net.Conn, error) {
			return net.DialTimeout("tcp", u.Host, 5*time.Second)
		})
	bad := mqtt.NewClient(o2)
	tok2 := bad.Connect()
	tok2.WaitTimeout(5 * time.Second)
	if !errors.Is(tok2.Error(), packets.ErrorRefusedBadUsernameOrPassword) {
		t.Errorf("wrong password: %v", tok2.Error())
	}
}

// TestReloadKeepsClients: a reload changes the rules for clients already
// connected, without dropping them, and a broken file changes nothing.
func TestReloadKeepsClients(t *testing.T) {
	a, pwFile, aclFile := e2eAuth(t, Config{})
	addr := runBroker(t, a)
	alice, _ := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: "alice-r", CleanStart: true, KeepAlive: 30,
		UsernameFlag: true, Username: "alice", PasswordFlag: true, Password: []byte("s3cret pass")}, nil)
	alice.Sub("data/#", 1)

	// alice loses her password and gains secret/#.
	writeFile(t, "", pwFile, mosqBob+"\n")
	writeFile(t, "", aclFile, "user alice\ntopic readwrite data/#\ntopic readwrite secret/#\n")
	if err := a.Reload(); err != nil {
		t.Fatal(err)
	}
	if r := alice.Pub("secret/x", 1, false, "now allowed"); r.ReasonCode >= 0x80 {
		t.Errorf("after reload: publish to secret/x %v", r.ReasonCode)
	}
	alice.Pub("data/x", 1, false, "still here")
	if m := alice.Next(); string(m.Payload) != "still here" {
		t.Errorf("subscription lost: got %q", m.Payload)
	}
	// A new login with the removed password fails.
	b := rawConnack(t, addr, &packet.Connect{Version: packet.V5, CleanStart: true, ClientID: []byte("alice-2"),
		UsernameFlag: true, Username: []byte("alice"), PasswordFlag: true, Password: []byte("s3cret pass")})
	if b[3] != 0x86 {
		t.Errorf("removed user's CONNACK % X", b)
	}

	// A broken ACL: Reload fails naming the line, and secret/x stays allowed.
	writeFile(t, "", aclFile, "user alice\ntopic readwrite data/#\ntopic readwrite secret/#\ntopic nope x y\n")
	if err := a.Reload(); err == nil || !strings.Contains(err.Error(), ":4:") {
		t.Errorf("broken reload: %v", err)
	}
	if r := alice.Pub("secret/x", 1, false, "still allowed"); r.ReasonCode >= 0x80 {
		t.Errorf("after a failed reload: %v", r.ReasonCode)
	}
	select {
	case d := <-alice.Disc:
		t.Fatalf("client disconnected: %+v", d)
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := alice.Unsubscribe(ctx, &paho.Unsubscribe{Topics: []string{"data/#"}}); err != nil {
		t.Errorf("connection unusable after reloads: %v", err)
	}
}
