package broker_test

// MQTT 3.1.1 end to end with Eclipse Paho (github.com/eclipse/paho.mqtt.golang),
// the most used Go client for that version. Where Paho will not send what a
// test needs (an empty client id without clean session, a filter it
// validates away) the raw brokertest client is used instead.
//
// Helpers here are prefixed "v3" so they do not collide with other test
// files of package broker_test.

import (
	"fmt"
	"net"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/broker/packet"
)

const v3Wait = 10 * time.Second

// v3Client is a Paho 3.1.1 client whose every received message (on any
// subscription made with a nil handler) lands in msgs, and whose network
// connection the test can cut.
type v3Client struct {
	mqtt.Client
	id   string
	msgs chan mqtt.Message

	mu sync.Mutex
	nc net.Conn
}

// v3Connect connects a Paho client with protocol version 4 (3.1.1), no
// automatic reconnection, and a dialer that keeps the net.Conn. mod may
// adjust the options. It returns the client and its CONNACK's session
// present flag.
func v3Connect(t *testing.T, addr, id string, clean bool, mod func(*mqtt.ClientOptions)) (*v3Client, bool) {
	t.Helper()
	c := &v3Client{id: id, msgs: make(chan mqtt.Message, 1024)}
	o := mqtt.NewClientOptions().
		AddBroker("tcp://" + addr).
		SetClientID(id).
		SetCleanSession(clean).
		SetProtocolVersion(4).
		SetKeepAlive(30 * time.Second).
		SetConnectTimeout(5 * time.Second).
		SetAutoReconnect(false).
		SetConnectRetry(false).
		SetOrderMatters(true).
		SetDefaultPublishHandler(func(_ mqtt.Client, m mqtt.Message) { c.msgs <- m }).
		SetCustomOpenConnectionFn(func(u *url.URL, _ mqtt.ClientOptions) (net.Conn, error) {
			nc, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
			if err == nil {
				c.mu.Lock()
				c.nc = nc
				c.mu.Unlock()
			}
			return nc, err
		})
	if mod != nil {
		mod(o)
	}
	c.Client = mqtt.NewClient(o)
	tok := c.Connect()
	if !tok.WaitTimeout(v3Wait) {
		t.Fatalf("%s: CONNECT timed out", id)
	}
	if err := tok.Error(); err != nil {
		t.Fatalf("%s: connect: %v", id, err)
	}
	t.Cleanup(func() {
		if c.IsConnected() {
			c.Disconnect(50)
		}
		c.kill()
	})
	return c, tok.(*mqtt.ConnectToken).SessionPresent()
}

// kill closes the client's TCP connection under it: no DISCONNECT is sent.
func (c *v3Client) kill() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.nc != nil {
		c.nc.Close()
	}
}

func v3Wait1(t *testing.T, what string, tok mqtt.Token) {
	t.Helper()
	if !tok.WaitTimeout(v3Wait) {
		t.Fatalf("%s: timed out", what)
	}
	if err := tok.Error(); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func (c *v3Client) sub(t *testing.T, filter string, qos byte) {
	t.Helper()
	tok := c.Subscribe(filter, qos, nil)
	v3Wait1(t, c.id+" SUBSCRIBE "+filter, tok)
	// One filter, one result. (Paho keys it by the filter without its
	// "$share/<group>/" prefix, so look at the value only.)
	res := tok.(*mqtt.SubscribeToken).Result()
	if len(res) != 1 {
		t.Fatalf("%s: SUBACK for %s: results %v", c.id, filter, res)
	}
	for _, got := range res {
		if got != qos {
			t.Fatalf("%s: SUBACK for %s: %#x, want %d", c.id, filter, got, qos)
		}
	}
}

func (c *v3Client) pub(t *testing.T, topic string, qos byte, retain bool, payload string) {
	t.Helper()
	v3Wait1(t, c.id+" PUBLISH "+topic, c.Publish(topic, qos, retain, payload))
}

// next returns the next message received, failing after a timeout.
func (c *v3Client) next(t *testing.T) mqtt.Message {
	t.Helper()
	select {
	case m := <-c.msgs:
		return m
	case <-time.After(v3Wait):
		t.Fatalf("%s: no message within %v", c.id, v3Wait)
		return nil
	}
}

// expect checks the next message's topic, payload, QoS and retain flag.
func (c *v3Client) expect(t *testing.T, topic, payload string, qos byte, retained bool) mqtt.Message {
	t.Helper()
	m := c.next(t)
	if m.Topic() != topic || string(m.Payload()) != payload || m.Qos() != qos || m.Retained() != retained {
		t.Fatalf("%s got %s %q qos %d retained %v, want %s %q qos %d retained %v", c.id,
			m.Topic(), m.Payload(), m.Qos(), m.Retained(), topic, payload, qos, retained)
	}
	return m
}

// none checks, without waiting out a timer, that nothing is pending for c
// ahead of a marker: it publishes a non-retained marker through from on a
// topic c subscribes to, and the marker must be the next message.
func (c *v3Client) none(t *testing.T, from *v3Client, markerTopic, why string) {
	t.Helper()
	from.pub(t, markerTopic, 1, false, "marker")
	m := c.next(t)
	if m.Topic() != markerTopic || string(m.Payload()) != "marker" {
		t.Fatalf("%s: %s: got %s %q (retained %v) before the marker", c.id, why, m.Topic(), m.Payload(), m.Retained())
	}
}

func TestV311PubSubQoS012(t *testing.T) {
	srv, addr := brokertest.RunServer(t, broker.Options{})
	sub, _ := v3Connect(t, addr, "v3-sub", true, nil)
	pub, _ := v3Connect(t, addr, "v3-pub", true, nil)

	for qos := byte(0); qos <= 2; qos++ {
		t.Run(fmt.Sprintf("QoS%d", qos), func(t *testing.T) {
			topic := fmt.Sprintf("v311/qos%d", qos)
			sub.sub(t, topic, qos)
			acked := srv.Stats().Acknowledged
			for i := range 5 {
				pub.pub(t, topic, qos, false, fmt.Sprintf("m%d", i))
			}
			for i := range 5 {
				m := sub.expect(t, topic, fmt.Sprintf("m%d", i), qos, false)
				if m.Duplicate() {
					t.Errorf("message %d has DUP set on its first delivery", i)
				}
			}
			if qos > 0 {
				// The subscriber's PUBACKs / PUBCOMPs reach the broker.
				brokertest.Eventually(t, 5*time.Second, "the subscriber's acknowledgements", func() bool {
					return srv.Stats().Acknowledged-acked == 5
				})
			}
		})
	}
	// Delivered QoS is the minimum of the published and the granted QoS.
	t.Run("Downgrade", func(t *testing.T) {
		sub.sub(t, "v311/granted1", 1)
		sub.sub(t, "v311/granted0", 0)
		pub.pub(t, "v311/granted1", 2, false, "two")
		sub.expect(t, "v311/granted1", "two", 1, false)
		pub.pub(t, "v311/granted0", 1, false, "one")
		sub.expect(t, "v311/granted0", "one", 0, false)
	})
	t.Run("NoUpgrade", func(t *testing.T) {
		sub.sub(t, "v311/granted2", 2)
		pub.pub(t, "v311/granted2", 1, false, "one")
		sub.expect(t, "v311/granted2", "one", 1, false)
	})
}

func TestV311RetainedAndClear(t *testing.T) {
	srv, addr := brokertest.RunServer(t, broker.Options{})
	pub, _ := v3Connect(t, addr, "v3-ret-pub", true, nil)
	live, _ := v3Connect(t, addr, "v3-ret-live", true, nil)
	live.sub(t, "v311/ret/#", 1)

	pub.pub(t, "v311/ret/a", 1, true, "hello")
	// A current subscriber gets it with RETAIN 0 [MQTT-3.3.1-9].
	live.expect(t, "v311/ret/a", "hello", 1, false)
	brokertest.Eventually(t, 5*time.Second, "one retained message", func() bool { return srv.Stats().Retained == 1 })

	// A new subscriber gets it with RETAIN 1 [MQTT-3.3.1-6], at the lower
	// of the stored and granted QoS.
	late, _ := v3Connect(t, addr, "v3-ret-late", true, nil)
	late.sub(t, "v311/ret/+", 1)
	late.expect(t, "v311/ret/a", "hello", 1, true)
	late0, _ := v3Connect(t, addr, "v3-ret-late0", true, nil)
	late0.sub(t, "v311/ret/a", 0)
	late0.expect(t, "v311/ret/a", "hello", 0, true)

	// A newer retained message replaces it.
	pub.pub(t, "v311/ret/a", 1, true, "hello again")
	live.expect(t, "v311/ret/a", "hello again", 1, false)
	late.expect(t, "v311/ret/a", "hello again", 1, false)

	// An empty retained message is delivered to current subscribers as
	// normal, and clears the topic [MQTT-3.3.1-10] [MQTT-3.3.1-11].
	pub.pub(t, "v311/ret/a", 1, true, "")
	live.expect(t, "v311/ret/a", "", 1, false)
	brokertest.Eventually(t, 5*time.Second, "no retained message", func() bool { return srv.Stats().Retained == 0 })

	fresh, _ := v3Connect(t, addr, "v3-ret-fresh", true, nil)
	fresh.sub(t, "v311/ret/+", 1)
	fresh.none(t, pub, "v311/ret/marker", "a cleared retained message was delivered")
}

func TestV311Will(t *testing.T) {
	srv, addr := brokertest.RunServer(t, broker.Options{})
	watcher, _ := v3Connect(t, addr, "v3-will-watcher", true, nil)
	watcher.sub(t, "v311/will/#", 1)
	pub, _ := v3Connect(t, addr, "v3-will-pub", true, nil)

	// A connection that breaks without DISCONNECT publishes the will.
	dying, _ := v3Connect(t, addr, "v3-dying", true, func(o *mqtt.ClientOptions) {
		o.SetWill("v311/will/dying", "gone", 1, false)
	})
	dying.pub(t, "v311/will/alive", 1, false, "still here")
	watcher.expect(t, "v311/will/alive", "still here", 1, false)
	dying.kill()
	watcher.expect(t, "v311/will/dying", "gone", 1, false)

	// A retained will is retained.
	dyingR, _ := v3Connect(t, addr, "v3-dying-retained", true, func(o *mqtt.ClientOptions) {
		o.SetWill("v311/will/retained", "gone for good", 1, true)
	})
	dyingR.kill()
	watcher.expect(t, "v311/will/retained", "gone for good", 1, false)
	brokertest.Eventually(t, 5*time.Second, "the retained will", func() bool { return srv.Stats().Retained == 1 })
	late, _ := v3Connect(t, addr, "v3-will-late", true, nil)
	late.sub(t, "v311/will/retained", 1)
	late.expect(t, "v311/will/retained", "gone for good", 1, true)

	// A DISCONNECT discards the will [MQTT-3.1.2-10].
	polite, _ := v3Connect(t, addr, "v3-polite", true, func(o *mqtt.ClientOptions) {
		o.SetWill("v311/will/polite", "should not appear", 1, false)
	})
	connected := srv.Stats().ClientsConnected
	polite.Disconnect(100)
	brokertest.Eventually(t, 5*time.Second, "the polite client to be gone", func() bool {
		return srv.Stats().ClientsConnected == connected-1
	})
	watcher.none(t, pub, "v311/will/marker", "will published after a DISCONNECT")
}

func TestV311PersistentSession(t *testing.T) {
	srv, addr := brokertest.RunServer(t, broker.Options{})
	pub, _ := v3Connect(t, addr, "v3-persist-pub", true, nil)

	c, present := v3Connect(t, addr, "v3-persist", false, nil)
	if present {
		t.Errorf("first connection: session present, want a new session")
	}
	c.sub(t, "v311/persist/#", 1)
	c.Disconnect(100)
	brokertest.Eventually(t, 5*time.Second, "the persistent client to be offline", func() bool {
		st := srv.Stats()
		return st.ClientsConnected == 1 && st.Sessions == 2
	})

	// Published while it is away: QoS 1 and 2 are queued for it; QoS 0
	// need not be.
	for i := range 3 {
		pub.pub(t, "v311/persist/x", 1, false, fmt.Sprintf("offline-%d", i))
	}
	pub.pub(t, "v311/persist/x", 2, false, "offline-qos2")

	c2, present := v3Connect(t, addr, "v3-persist", false, nil)
	if !present {
		t.Fatalf("reconnection with clean session 0: session present 0, want 1 [MQTT-3.2.2-2]")
	}
	for i := range 3 {
		c2.expect(t, "v311/persist/x", fmt.Sprintf("offline-%d", i), 1, false)
	}
	c2.expect(t, "v311/persist/x", "offline-qos2", 1, false) // granted QoS 1
	// The subscription survived too: no resubscription needed.
	pub.pub(t, "v311/persist/x", 1, false, "online")
	c2.expect(t, "v311/persist/x", "online", 1, false)
	c2.Disconnect(100)

	// Clean session 1 discards it [MQTT-3.1.2-6]...
	c3, present := v3Connect(t, addr, "v3-persist", true, nil)
	if present {
		t.Errorf("clean session 1: session present 1, want 0 [MQTT-3.2.2-1]")
	}
	c3.Disconnect(100)
	// ... and its own session ends with the connection.
	brokertest.Eventually(t, 5*time.Second, "only the publisher's session left", func() bool {
		st := srv.Stats()
		return st.ClientsConnected == 1 && st.Sessions == 1 && st.Subscriptions == 0
	})
}

func TestV311EmptyClientID(t *testing.T) {
	srv, addr := brokertest.RunServer(t, broker.Options{})

	// Clean session 1 with a zero-length client id: accepted, with an
	// identifier the broker makes up [MQTT-3.1.3-6].
	anon, present := v3Connect(t, addr, "", true, nil)
	if present {
		t.Errorf("session present for a zero-length client id")
	}
	anon.sub(t, "v311/anon", 1)
	anon.pub(t, "v311/anon", 1, false, "me")
	anon.expect(t, "v311/anon", "me", 1, false)
	sessions := srv.Stats().Sessions

	// Clean session 0 with a zero-length client id: CONNACK return code
	// 0x02 Identifier rejected, then the close [MQTT-3.1.3-8]. Paho will
	// not send this CONNECT, so the raw client does.
	c, ack := brokertest.Connect(t, addr, &packet.Connect{Version: packet.V311, CleanStart: false, KeepAlive: 30})
	if ack.Reason != packet.ClientIDNotValid || ack.SessionPresent {
		t.Errorf("CONNACK %#x (%v) present %v, want return code 2 (identifier rejected)", ack.Reason.V3ConnackCode(), ack.Reason, ack.SessionPresent)
	}
	c.ExpectClosed()
	if st := srv.Stats(); st.Sessions != sessions {
		t.Errorf("Sessions %d after a refused CONNECT, want %d", st.Sessions, sessions)
	}

	// The raw bytes, too: 20 02 00 02.
	raw := brokertest.Dial(t, addr, packet.V311)
	raw.Send((&packet.Connect{Version: packet.V311, ProtocolName: []byte("MQTT"), KeepAlive: 30}).Append(nil))
	raw.Conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	got := make([]byte, 8)
	n, _ := raw.Conn.Read(got)
	if want := []byte{0x20, 0x02, 0x00, 0x02}; !slices.Equal(got[:n], want) {
		t.Errorf("CONNACK bytes % x, want % x", got[:n], want)
	}
}

func TestV311SharedSubscription(t *testing.T) {
	srv, addr := brokertest.RunServer(t, broker.Options{})
	a, _ := v3Connect(t, addr, "v3-share-a", true, nil)
	b, _ := v3Connect(t, addr, "v3-share-b", true, nil)
	a.sub(t, "$share/g/t", 1)
	b.sub(t, "$share/g/t", 1)
	if st := srv.Stats(); st.ShareGroups != 1 || st.Subscriptions != 0 {
		t.Fatalf("ShareGroups %d Subscriptions %d, want 1 and 0", st.ShareGroups, st.Subscriptions)
	}
	pub, _ := v3Connect(t, addr, "v3-share-pub", true, nil)
	for i := 1; i <= 4; i++ {
		pub.pub(t, "t", 1, false, fmt.Sprint(i))
	}
	collect := func(c *v3Client) []string {
		var got []string
		for range 2 {
			m := c.next(t)
			if m.Topic() != "t" || m.Qos() != 1 {
				t.Fatalf("%s got %s qos %d, want t qos 1", c.id, m.Topic(), m.Qos())
			}
			got = append(got, string(m.Payload()))
		}
		return got
	}
	ga, gb := collect(a), collect(b)
	// Nothing more for either: 4 messages, 2 each. A marker published
	// now must be the next message of both.
	a.sub(t, "marker", 1)
	b.sub(t, "marker", 1)
	pub.pub(t, "marker", 1, false, "marker")
	for _, c := range []*v3Client{a, b} {
		if m := c.next(t); m.Topic() != "marker" {
			t.Errorf("%s got a third share group message %s %q before the marker", c.id, m.Topic(), m.Payload())
		}
	}
	odd, even := []string{"1", "3"}, []string{"2", "4"}
	if !(slices.Equal(ga, odd) && slices.Equal(gb, even)) && !(slices.Equal(ga, even) && slices.Equal(gb, odd)) {
		t.Errorf("members got %q and %q, want alternating messages (round robin)", ga, gb)
	}
}

func TestV311BadFilter(t *testing.T) {
	srv, addr := brokertest.RunServer(t, broker.Options{})

	// Paho refuses "a/#/b" itself, so the raw client sends it, next to a
	// valid filter in the same SUBSCRIBE [MQTT-3.8.4-5]: each is answered
	// on its own, 0x80 for the bad one.
	c, _ := robustConnectOK(t, addr, &packet.Connect{Version: packet.V311, ClientID: []byte("v3-badfilter"), CleanStart: true, KeepAlive: 30})
	sa := c.Subscribe(&packet.Subscribe{PacketID: 9, Subs: []packet.Subscription{
		{Filter: []byte("a/#/b"), QoS: 1},
		{Filter: []byte("a/+"), QoS: 1},
		{Filter: []byte("a/b+"), QoS: 0},
		{Filter: []byte("#"), QoS: 2},
	}})
	want := []packet.ReasonCode{0x80, packet.GrantedQoS1, 0x80, packet.GrantedQoS2}
	if sa.PacketID != 9 || !slices.Equal(sa.Reasons, want) {
		t.Fatalf("SUBACK id %d %#x, want id 9 %#x", sa.PacketID, sa.Reasons, want)
	}
	if st := srv.Stats(); st.Subscriptions != 2 {
		t.Errorf("Subscriptions %d, want 2 (the refused filters installed nothing)", st.Subscriptions)
	}
	// The connection goes on, and the granted filters work.
	c.Publish(&packet.Publish{Topic: []byte("a/x"), QoS: 0, Payload: []byte("ok")})
	var p packet.Publish
	c.Expect(packet.PUBLISH, &p)
	if string(p.Topic) != "a/x" || string(p.Payload) != "ok" {
		t.Fatalf("got %s %q, want a/x ok", p.Topic, p.Payload)
	}

	// The same through Paho, with bad filters it does not catch.
	pc, _ := v3Connect(t, addr, "v3-badfilter-paho", true, nil)
	tok := pc.SubscribeMultiple(map[string]byte{"x/y#": 1, "x/+y": 1, "x/+": 1}, nil)
	v3Wait1(t, "SUBSCRIBE", tok)
	res := tok.(*mqtt.SubscribeToken).Result()
	if res["x/y#"] != 0x80 || res["x/+y"] != 0x80 || res["x/+"] != 1 {
		t.Errorf("SUBACK results %v, want x/y#: 0x80, x/+y: 0x80, x/+: 1", res)
	}
	pc.pub(t, "x/z", 1, false, "fine")
	pc.expect(t, "x/z", "fine", 1, false)
}
