package broker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/broker/packet"
	"github.com/linemq/linemq/internal/mqtttest"
)

func TestV5PubSubEachQoS(t *testing.T) {
	_, addr := brokertest.RunServer(t, broker.Options{})
	sub, _ := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: "sub", CleanStart: true}, nil)
	pub, _ := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: "pub", CleanStart: true}, nil)
	sub.Sub("q/#", 2)
	for qos := byte(0); qos <= 2; qos++ {
		r := pub.Pub(fmt.Sprintf("q/%d", qos), qos, false, "x")
		if qos > 0 && r.ReasonCode != 0 {
			t.Fatalf("qos %d: reason %#x", qos, r.ReasonCode)
		}
		m := sub.Next()
		if m.Topic != fmt.Sprintf("q/%d", qos) || m.QoS != qos {
			t.Fatalf("got %s qos %d, want qos %d", m.Topic, m.QoS, qos)
		}
	}
	// QoS delivered is the minimum of published and granted.
	sub.Sub("down/#", 1)
	pub.Pub("down/x", 2, false, "y")
	if m := sub.Next(); m.QoS != 1 {
		t.Fatalf("downgrade: got qos %d, want 1", m.QoS)
	}
}

func TestV5AssignedClientIDAndConnackFlags(t *testing.T) {
	_, addr := brokertest.RunServer(t, broker.Options{DisableSubIDs: true, MaxKeepAlive: 30 * time.Second})
	_, ca := mqtttest.DialV5(t, addr, &paho.Connect{CleanStart: true, KeepAlive: 600}, nil)
	p := ca.Properties
	if p.AssignedClientID == "" {
		t.Fatal("no assigned client identifier for an empty client id")
	}
	if !p.WildcardSubAvailable || !p.SharedSubAvailable || !p.RetainAvailable || p.SubIDAvailable {
		t.Fatalf("availability flags: %+v", p)
	}
	if p.ServerKeepAlive == nil || *p.ServerKeepAlive != 30 {
		t.Fatalf("server keep alive %v, want 30", p.ServerKeepAlive)
	}
	if p.ReceiveMaximum == nil || *p.ReceiveMaximum != broker.DefaultReceiveMaximum {
		t.Fatalf("receive maximum %v", p.ReceiveMaximum)
	}
}

type denyAuth struct{ broker.AllowAll }

func (denyAuth) Authenticate(_ context.Context, r broker.ConnectRequest) packet.ReasonCode {
	if r.Username == "op" && string(r.Password) == "secret" {
		return packet.Success
	}
	return packet.BadUsernameOrPassword
}

func (denyAuth) CanPublish(_ broker.ClientInfo, topic string) bool { return topic != "forbidden" }

func TestV5AuthenticatorSeesCredentials(t *testing.T) {
	_, addr := brokertest.RunServer(t, broker.Options{Auth: denyAuth{}})
	cl, ca := brokertest.Connect(t, addr, &packet.Connect{ClientID: []byte("x"), CleanStart: true,
		UsernameFlag: true, Username: []byte("op"), PasswordFlag: true, Password: []byte("wrong")})
	if ca.Reason != packet.BadUsernameOrPassword {
		t.Fatalf("reason %v, want bad user name or password", ca.Reason)
	}
	cl.ExpectClosed()
	c, _ := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: "ok", CleanStart: true, Username: "op", UsernameFlag: true,
		Password: []byte("secret"), PasswordFlag: true}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := c.Publish(ctx, &paho.Publish{Topic: "forbidden", QoS: 1})
	if err == nil || r == nil {
		t.Fatalf("publish to a forbidden topic succeeded: %v", err)
	}
	if r.ReasonCode != byte(packet.NotAuthorized) {
		t.Fatalf("publish to forbidden topic: reason %#x, want 0x87", r.ReasonCode)
	}
	if r.Properties == nil || r.Properties.ReasonString == "" {
		t.Fatal("no reason string on a refused PUBACK although problem information was not turned off")
	}
}

func TestV5RequestProblemInfoOff(t *testing.T) {
	_, addr := brokertest.RunServer(t, broker.Options{Auth: denyAuth{}})
	cp := &packet.Connect{ClientID: []byte("x"), CleanStart: true, UsernameFlag: true, Username: []byte("op"),
		PasswordFlag: true, Password: []byte("secret")}
	cp.Props.Set(packet.PropRequestProblemInfo)
	cp.Props.RequestProblemInfo = 0
	cl, _ := brokertest.Connect(t, addr, cp)
	cl.Publish(&packet.Publish{Topic: []byte("forbidden"), QoS: 1, PacketID: 1})
	var a packet.Ack
	cl.Expect(packet.PUBACK, &a)
	if a.Reason != packet.NotAuthorized || a.Props.Has(packet.PropReasonString) {
		t.Fatalf("PUBACK %v with reason string %q; want 0x87 without one", a.Reason, a.Props.ReasonString)
	}
}

func TestV5UnsupportedProtocolVersion(t *testing.T) {
	_, addr := brokertest.RunServer(t, broker.Options{})
	cl := brokertest.Dial(t, addr, packet.V311)
	// CONNECT, protocol "MQTT" level 9.
	cl.Send([]byte{0x10, 0x0d, 0, 4, 'M', 'Q', 'T', 'T', 9, 0x02, 0, 60, 0, 1, 'x'})
	var ca packet.Connack
	cl.Expect(packet.CONNACK, &ca)
	if ca.Reason.V3ConnackCode() != 0x01 {
		t.Fatalf("CONNACK %v, want unacceptable protocol version", ca.Reason)
	}
	cl.ExpectClosed()
}

func TestV5ClientIDRules(t *testing.T) {
	_, addr := brokertest.RunServer(t, broker.Options{MaxClientIDLength: 8})
	cl, ca := brokertest.Connect(t, addr, rawV5("much-too-long", true))
	if ca.Reason != packet.ClientIDNotValid {
		t.Fatalf("reason %v, want client identifier not valid", ca.Reason)
	}
	cl.ExpectClosed()
	// 3.1.1: an empty id needs a clean session [MQTT-3.1.3-8].
	cl, ca = brokertest.Connect(t, addr, &packet.Connect{Version: packet.V311, CleanStart: false})
	if ca.Reason.V3ConnackCode() != 0x02 {
		t.Fatalf("3.1.1 empty id without clean session: %v, want identifier rejected", ca.Reason)
	}
	cl.ExpectClosed()
	_, ca = brokertest.Connect(t, addr, &packet.Connect{Version: packet.V311, CleanStart: true})
	if ca.Reason != packet.Success {
		t.Fatalf("3.1.1 empty id with clean session: %v", ca.Reason)
	}
}

func TestV5KeepAliveTimeout(t *testing.T) {
	_, addr := brokertest.RunServer(t, broker.Options{})
	cp := rawV5("sleepy", true)
	cp.KeepAlive = 1
	cl, _ := brokertest.Connect(t, addr, cp)
	start := time.Now()
	cl.ExpectDisconnect(packet.KeepAliveTimeout)
	if d := time.Since(start); d < time.Second {
		t.Fatalf("disconnected after %v, before one and a half keep alive periods", d)
	}
}

func TestV5SessionPresentAndTakeover(t *testing.T) {
	_, addr := brokertest.RunServer(t, broker.Options{})
	first, ca := brokertest.Connect(t, addr, withExpiry(rawV5("dev", true), 60))
	if ca.SessionPresent {
		t.Fatal("session present on a clean start")
	}
	first.Subscribe(&packet.Subscribe{Subs: []packet.Subscription{{Filter: []byte("t"), QoS: 1}}})
	second, ca := brokertest.Connect(t, addr, withExpiry(rawV5("dev", false), 60))
	if !ca.SessionPresent {
		t.Fatal("no session present on resuming a persistent session")
	}
	first.ExpectDisconnect(packet.SessionTakenOver)
	// The subscription came along with the session.
	pub, _ := brokertest.Connect(t, addr, rawV5("pub", true))
	pub.Publish(&packet.Publish{Topic: []byte("t"), Payload: []byte("still here")})
	var p packet.Publish
	second.Expect(packet.PUBLISH, &p)
	// Clean start discards it.
	third, ca := brokertest.Connect(t, addr, withExpiry(rawV5("dev", true), 60))
	if ca.SessionPresent {
		t.Fatal("session present after clean start")
	}
	second.ExpectDisconnect(packet.SessionTakenOver)
	pub.Publish(&packet.Publish{Topic: []byte("t"), Payload: []byte("gone")})
	third.ExpectNothing(200 * time.Millisecond)
}

func TestV5SessionExpiryWhileOffline(t *testing.T) {
	clock := brokertest.NewFakeClock()
	srv, addr := brokertest.RunServer(t, broker.Options{Clock: clock})
	cl, _ := brokertest.Connect(t, addr, withExpiry(rawV5("dev", true), 30))
	cl.Subscribe(&packet.Subscribe{Subs: []packet.Subscription{{Filter: []byte("t"), QoS: 1}}})
	cl.Conn.Close()
	brokertest.Eventually(t, 5*time.Second, "client detached", func() bool { return srv.Stats().ClientsConnected == 0 })
	clock.Advance(29 * time.Second)
	if srv.Stats().Sessions != 1 {
		t.Fatal("session gone before its expiry")
	}
	clock.Advance(2 * time.Second)
	if n := srv.Stats().Sessions; n != 0 {
		t.Fatalf("%d sessions after expiry", n)
	}
	_, ca := brokertest.Connect(t, addr, withExpiry(rawV5("dev", false), 30))
	if ca.SessionPresent {
		t.Fatal("expired session still present")
	}
}

func TestV5ResendWithDupAfterReconnect(t *testing.T) {
	_, addr := brokertest.RunServer(t, broker.Options{})
	sub, _ := brokertest.Connect(t, addr, withExpiry(rawV5("worker", true), 60))
	sub.Subscribe(&packet.Subscribe{Subs: []packet.Subscription{{Filter: []byte("job"), QoS: 2}}})
	pub, _ := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: "pub", CleanStart: true}, nil)
	pub.Pub("job", 1, false, "one")
	pub.Pub("job", 2, false, "two")
	var p1, p2 packet.Publish
	sub.Expect(packet.PUBLISH, &p1)
	sub.Expect(packet.PUBLISH, &p2)
	if p1.Dup || p2.Dup {
		t.Fatal("DUP on first delivery")
	}
	// Acknowledge nothing; reconnect.
	sub.Conn.Close()
	sub, ca := brokertest.Connect(t, addr, withExpiry(rawV5("worker", false), 60))
	if !ca.SessionPresent {
		t.Fatal("session not present")
	}
	var r1, r2 packet.Publish
	sub.Expect(packet.PUBLISH, &r1)
	sub.Expect(packet.PUBLISH, &r2)
	if !r1.Dup || !r2.Dup || r1.PacketID != p1.PacketID || r2.PacketID != p2.PacketID ||
		string(r1.Payload) != "one" || string(r2.Payload) != "two" {
		t.Fatalf("resent %+v %+v; want DUP, same ids %d %d, same order", r1, r2, p1.PacketID, p2.PacketID)
	}
	// Complete QoS 2 after PUBREC: a reconnect then resends PUBREL, not PUBLISH.
	sub.Send((&packet.Ack{Type: packet.PUBACK, PacketID: r1.PacketID}).Append(nil, packet.V5))
	sub.Send((&packet.Ack{Type: packet.PUBREC, PacketID: r2.PacketID}).Append(nil, packet.V5))
	var rel packet.Ack
	sub.Expect(packet.PUBREL, &rel)
	sub.Conn.Close()
	sub, _ = brokertest.Connect(t, addr, withExpiry(rawV5("worker", false), 60))
	sub.Expect(packet.PUBREL, &rel)
	if rel.PacketID != r2.PacketID {
		t.Fatalf("PUBREL for %d, want %d", rel.PacketID, r2.PacketID)
	}
	sub.Send((&packet.Ack{Type: packet.PUBCOMP, PacketID: rel.PacketID}).Append(nil, packet.V5))
	sub.ExpectNothing(100 * time.Millisecond)
}

func TestV5Retained(t *testing.T) {
	_, addr := brokertest.RunServer(t, broker.Options{})
	pub, _ := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: "pub", CleanStart: true}, nil)
	pub.Pub("cfg/a", 1, true, "A")
	pub.Pub("cfg/b", 1, true, "B")
	pub.Pub("cfg/b", 1, true, "") // clears cfg/b
	sub, _ := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: "sub", CleanStart: true}, nil)
	sub.Sub("cfg/#", 1)
	m := sub.Next()
	if m.Topic != "cfg/a" || string(m.Payload) != "A" || !m.Retain {
		t.Fatalf("retained delivery %s %q retain=%v", m.Topic, m.Payload, m.Retain)
	}
	sub.None(100 * time.Millisecond)

	// Retain Handling 1: only for a new subscription; 2: never.
	sub.SubOpts(nil, paho.SubscribeOptions{Topic: "cfg/#", QoS: 1, RetainHandling: 1})
	sub.None(100 * time.Millisecond)
	sub2, _ := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: "sub2", CleanStart: true}, nil)
	sub2.SubOpts(nil, paho.SubscribeOptions{Topic: "cfg/#", QoS: 1, RetainHandling: 2})
	sub2.None(100 * time.Millisecond)
	sub2.SubOpts(nil, paho.SubscribeOptions{Topic: "cfg/+", QoS: 1, RetainHandling: 1})
	if m := sub2.Next(); m.Topic != "cfg/a" {
		t.Fatalf("retain handling 1 on a new subscription: got %s", m.Topic)
	}

	// Retain As Published: live messages keep RETAIN only for RAP subscribers.
	rap, _ := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: "rap", CleanStart: true}, nil)
	rap.SubOpts(nil, paho.SubscribeOptions{Topic: "live", QoS: 1, RetainAsPublished: true})
	plain, _ := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: "plain", CleanStart: true}, nil)
	plain.Sub("live", 1)
	pub.Pub("live", 1, true, "L")
	if m := rap.Next(); !m.Retain {
		t.Fatal("retain as published: RETAIN cleared")
	}
	if m := plain.Next(); m.Retain {
		t.Fatal("without retain as published: RETAIN kept on a live message")
	}
}

func TestV5Wills(t *testing.T) {
	clock := brokertest.NewFakeClock()
	_, addr := brokertest.RunServer(t, broker.Options{Clock: clock})
	watcher, _ := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: "watch", CleanStart: true}, nil)
	watcher.Sub("will/#", 1)

	withWill := func(id string, delay uint32, expiry uint32) *packet.Connect {
		c := withExpiry(rawV5(id, true), expiry)
		c.WillFlag, c.WillQoS, c.WillTopic, c.WillPayload = true, 1, []byte("will/"+id), []byte("gone")
		if delay > 0 {
			c.WillProps.Set(packet.PropWillDelay)
			c.WillProps.WillDelay = delay
		}
		return c
	}

	// Abrupt close: published at once.
	cl, _ := brokertest.Connect(t, addr, withWill("abrupt", 0, 0))
	cl.Conn.Close()
	if m := watcher.Next(); m.Topic != "will/abrupt" {
		t.Fatalf("got %s", m.Topic)
	}
	// Normal DISCONNECT: discarded.
	cl, _ = brokertest.Connect(t, addr, withWill("polite", 0, 0))
	cl.Send((&packet.Disconnect{}).Append(nil, packet.V5))
	cl.ExpectClosed()
	watcher.None(100 * time.Millisecond)
	// DISCONNECT 0x04: published.
	cl, _ = brokertest.Connect(t, addr, withWill("withwill", 0, 0))
	cl.Send((&packet.Disconnect{Reason: packet.DisconnectWithWill}).Append(nil, packet.V5))
	if m := watcher.Next(); m.Topic != "will/withwill" {
		t.Fatalf("got %s", m.Topic)
	}
	// Will delay: not before the delay, and cancelled by a reconnect.
	cl, _ = brokertest.Connect(t, addr, withWill("delayed", 10, 100))
	closeAndWaitTimers(t, clock, cl, 2)
	watcher.None(100 * time.Millisecond)
	clock.Advance(9 * time.Second)
	watcher.None(50 * time.Millisecond)
	clock.Advance(2 * time.Second)
	if m := watcher.Next(); m.Topic != "will/delayed" {
		t.Fatalf("got %s", m.Topic)
	}
	cl, _ = brokertest.Connect(t, addr, withWill("back", 10, 100))
	closeAndWaitTimers(t, clock, cl, 2)
	c := withWill("back", 10, 100)
	c.CleanStart = false
	brokertest.Connect(t, addr, c)
	clock.Advance(20 * time.Second)
	watcher.None(100 * time.Millisecond)
	// Session expiry shorter than the will delay: the will goes at expiry.
	cl, _ = brokertest.Connect(t, addr, withWill("short", 60, 5))
	closeAndWaitTimers(t, clock, cl, 2)
	clock.Advance(6 * time.Second)
	if m := watcher.Next(); m.Topic != "will/short" {
		t.Fatalf("got %s", m.Topic)
	}
}

// closeAndWaitTimers closes the client's connection and waits until the
// broker has armed n more timers on clock (the will delay and the session
// expiry; the teardown runs on the connection's goroutine).
func closeAndWaitTimers(t *testing.T, clock *brokertest.FakeClock, c *brokertest.Client, n int) {
	t.Helper()
	before := clock.Pending()
	c.Conn.Close()
	brokertest.Eventually(t, 5*time.Second, "timers armed", func() bool { return clock.Pending() >= before+n })
}

func TestV5NoLocalAndSubscriptionIDs(t *testing.T) {
	_, addr := brokertest.RunServer(t, broker.Options{})
	c, _ := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: "self", CleanStart: true}, nil)
	c.SubOpts(nil, paho.SubscribeOptions{Topic: "echo", QoS: 1, NoLocal: true})
	c.Pub("echo", 1, false, "mine")
	c.None(100 * time.Millisecond)
	other, _ := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: "other", CleanStart: true}, nil)
	other.Pub("echo", 1, false, "theirs")
	if m := c.Next(); string(m.Payload) != "theirs" {
		t.Fatalf("got %q", m.Payload)
	}

	// Overlapping subscriptions: one delivery, highest QoS, both
	// identifiers (paho keeps only one identifier, so a raw client looks).
	raw, _ := brokertest.Connect(t, addr, rawV5("ids", true))
	for i, f := range []string{"ids/#", "ids/+"} {
		s := &packet.Subscribe{PacketID: uint16(i + 1), Subs: []packet.Subscription{{Filter: []byte(f), QoS: byte(1 - i)}}}
		s.Props.SubscriptionIDs = []uint32{uint32(42 - 35*i)} // 42, then 7
		raw.Subscribe(s)
	}
	other.Pub("ids/x", 1, false, "x")
	var m packet.Publish
	raw.Expect(packet.PUBLISH, &m)
	if m.QoS != 1 {
		t.Fatalf("overlap delivered at QoS %d, want 1", m.QoS)
	}
	raw.ExpectNothing(100 * time.Millisecond)
	if fmt.Sprint(m.Props.SubscriptionIDs) != "[42 7]" && fmt.Sprint(m.Props.SubscriptionIDs) != "[7 42]" {
		t.Fatalf("subscription identifiers %v, want 42 and 7", m.Props.SubscriptionIDs)
	}
}

func TestV5PropertiesPassThrough(t *testing.T) {
	_, addr := brokertest.RunServer(t, broker.Options{})
	sub, _ := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: "sub", CleanStart: true}, nil)
	sub.Sub("rpc/#", 1)
	pub, _ := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: "pub", CleanStart: true}, nil)
	format := byte(1)
	pub.PubProps(&paho.Publish{Topic: "rpc/req", QoS: 1, Payload: []byte(`{"a":1}`), Properties: &paho.PublishProperties{
		PayloadFormat: &format, ContentType: "application/json", ResponseTopic: "rpc/resp",
		CorrelationData: []byte{1, 2, 3}, User: paho.UserProperties{{Key: "line", Value: "3"}, {Key: "line", Value: "4"}},
	}})
	m := sub.Next()
	p := m.Properties
	if p.PayloadFormat == nil || *p.PayloadFormat != 1 || p.ContentType != "application/json" ||
		p.ResponseTopic != "rpc/resp" || string(p.CorrelationData) != "\x01\x02\x03" ||
		len(p.User) != 2 || p.User[0].Value != "3" || p.User[1].Value != "4" {
		t.Fatalf("properties not passed through: %+v", p)
	}
}

func TestV5MessageExpiry(t *testing.T) {
	clock := brokertest.NewFakeClock()
	srv, addr := brokertest.RunServer(t, broker.Options{Clock: clock})
	sub, _ := brokertest.Connect(t, addr, withExpiry(rawV5("sub", true), 600))
	sub.Subscribe(&packet.Subscribe{Subs: []packet.Subscription{{Filter: []byte("e/#"), QoS: 1}}})
	sub.Conn.Close()
	// Offline for sure: a message sent on the dying connection would count
	// as started and be completed despite its expiry.
	brokertest.Eventually(t, 5*time.Second, "sub offline", func() bool { return srv.Stats().ClientsConnected == 0 })
	pub, _ := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: "pub", CleanStart: true}, nil)
	pub.PubProps(&paho.Publish{Topic: "e/short", QoS: 1, Payload: []byte("s"), Properties: &paho.PublishProperties{MessageExpiry: u32(5)}})
	pub.PubProps(&paho.Publish{Topic: "e/long", QoS: 1, Payload: []byte("l"), Properties: &paho.PublishProperties{MessageExpiry: u32(100)}})
	clock.Advance(10 * time.Second)
	sub, _ = brokertest.Connect(t, addr, withExpiry(rawV5("sub", false), 600))
	var p packet.Publish
	sub.Expect(packet.PUBLISH, &p)
	if string(p.Topic) != "e/long" {
		t.Fatalf("got %s; the expired message should have been dropped", p.Topic)
	}
	if p.Props.MessageExpiry != 90 {
		t.Fatalf("message expiry %d, want 90 (100 less the 10 s it waited)", p.Props.MessageExpiry)
	}
	sub.ExpectNothing(100 * time.Millisecond)
}

func TestV5TopicAliases(t *testing.T) {
	_, addr := brokertest.RunServer(t, broker.Options{TopicAliasMaximum: 4})
	// Client to broker.
	sub, _ := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: "sub", CleanStart: true}, nil)
	sub.Sub("alias/#", 0)
	pub, _ := brokertest.Connect(t, addr, rawV5("pub", true))
	p := &packet.Publish{Topic: []byte("alias/long/topic"), Payload: []byte("1")}
	p.Props.Set(packet.PropTopicAlias)
	p.Props.TopicAlias = 3
	pub.Publish(p)
	p.Topic, p.Payload = nil, []byte("2")
	pub.Publish(p)
	for _, want := range []string{"1", "2"} {
		if m := sub.Next(); m.Topic != "alias/long/topic" || string(m.Payload) != want {
			t.Fatalf("got %s %q", m.Topic, m.Payload)
		}
	}
	p.Props.TopicAlias = 5 // above the maximum the broker granted
	pub.Publish(p)
	pub.ExpectDisconnect(packet.TopicAliasInvalid)

	// Broker to client.
	cp := rawV5("aliased", true)
	cp.Props.Set(packet.PropTopicAliasMaximum)
	cp.Props.TopicAliasMaximum = 2
	rc, _ := brokertest.Connect(t, addr, cp)
	rc.Subscribe(&packet.Subscribe{Subs: []packet.Subscription{{Filter: []byte("alias/#")}}})
	other, _ := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: "other", CleanStart: true}, nil)
	other.Pub("alias/a", 0, false, "x")
	other.Pub("alias/a", 0, false, "y")
	var first, second packet.Publish
	rc.Expect(packet.PUBLISH, &first)
	rc.Expect(packet.PUBLISH, &second)
	if string(first.Topic) != "alias/a" || first.Props.TopicAlias == 0 {
		t.Fatalf("first delivery should carry the topic and a new alias: %q alias %d", first.Topic, first.Props.TopicAlias)
	}
	if len(second.Topic) != 0 || second.Props.TopicAlias != first.Props.TopicAlias {
		t.Fatalf("second delivery should use the alias alone: %q alias %d", second.Topic, second.Props.TopicAlias)
	}
}

func TestV5ReceiveMaximumIsASendQuota(t *testing.T) {
	_, addr := brokertest.RunServer(t, broker.Options{})
	sub := windowSub(t, addr, "slow", "w", 2, 0)
	pub, _ := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: "pub", CleanStart: true}, nil)
	for i := range 5 {
		pub.Pub("w", 1, false, fmt.Sprint(i))
	}
	var got []packet.Publish
	for range 2 {
		var p packet.Publish
		sub.Expect(packet.PUBLISH, &p)
		got = append(got, p)
	}
	sub.ExpectNothing(150 * time.Millisecond) // window full
	sub.Send((&packet.Ack{Type: packet.PUBACK, PacketID: got[0].PacketID}).Append(nil, packet.V5))
	var p packet.Publish
	sub.Expect(packet.PUBLISH, &p)
	if string(p.Payload) != "2" {
		t.Fatalf("got %q, want the next queued message", p.Payload)
	}
	sub.ExpectNothing(100 * time.Millisecond)
}

func TestV5QueueLimitDropsOldest(t *testing.T) {
	srv, addr := brokertest.RunServer(t, broker.Options{MaxQueuedMessages: 3, Overload: broker.OverloadDropOldest})
	sub, _ := brokertest.Connect(t, addr, withExpiry(rawV5("offline", true), 60))
	sub.Subscribe(&packet.Subscribe{Subs: []packet.Subscription{{Filter: []byte("q"), QoS: 1}}})
	sub.Conn.Close()
	brokertest.Eventually(t, 5*time.Second, "detach", func() bool { return srv.Stats().ClientsConnected == 0 })
	pub, _ := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: "pub", CleanStart: true}, nil)
	for i := range 5 {
		pub.Pub("q", 1, false, fmt.Sprint(i))
	}
	if d := srv.Stats().DroppedQueueFull; d != 2 {
		t.Fatalf("dropped %d, want 2", d)
	}
	sub, _ = brokertest.Connect(t, addr, withExpiry(rawV5("offline", false), 60))
	for _, want := range []string{"2", "3", "4"} {
		var p packet.Publish
		sub.Expect(packet.PUBLISH, &p)
		if string(p.Payload) != want {
			t.Fatalf("got %q, want %q", p.Payload, want)
		}
	}
}

func TestV5MaximumPacketSize(t *testing.T) {
	srv, addr := brokertest.RunServer(t, broker.Options{MaxPacketSize: 200})
	// Client to broker: too large ends the connection with 0x95.
	big, _ := brokertest.Connect(t, addr, rawV5("big", true))
	big.Publish(&packet.Publish{Topic: []byte("t"), Payload: make([]byte, 300)})
	big.ExpectDisconnect(packet.PacketTooLarge)
	// Broker to client: a message larger than the client accepts is not sent.
	cp := rawV5("small", true)
	cp.Props.Set(packet.PropMaximumPacketSize)
	cp.Props.MaximumPacketSize = 40
	small, _ := brokertest.Connect(t, addr, cp)
	small.Subscribe(&packet.Subscribe{Subs: []packet.Subscription{{Filter: []byte("t"), QoS: 1}}})
	pub, _ := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: "pub", CleanStart: true}, nil)
	pub.Pub("t", 1, false, string(make([]byte, 100)))
	pub.Pub("t", 1, false, "fits")
	var p packet.Publish
	small.Expect(packet.PUBLISH, &p)
	if string(p.Payload) != "fits" {
		t.Fatalf("got %d bytes, want the small message only", len(p.Payload))
	}
	if srv.Stats().DroppedTooLarge != 1 {
		t.Fatalf("DroppedTooLarge = %d", srv.Stats().DroppedTooLarge)
	}
}

func TestV5Unsubscribe(t *testing.T) {
	_, addr := brokertest.RunServer(t, broker.Options{})
	c, _ := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: "c", CleanStart: true}, nil)
	c.Sub("a", 0)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ua, err := c.Unsubscribe(ctx, &paho.Unsubscribe{Topics: []string{"a", "never"}})
	if err != nil && ua == nil {
		t.Fatal(err)
	}
	if len(ua.Reasons) != 2 || ua.Reasons[0] != 0 || ua.Reasons[1] != byte(packet.NoSubscriptionExisted) {
		t.Fatalf("UNSUBACK reasons %v, want [0 0x11]", ua.Reasons)
	}
	c.Pub("a", 0, false, "x")
	c.None(100 * time.Millisecond)
}

func TestV5ProtocolErrors(t *testing.T) {
	_, addr := brokertest.RunServer(t, broker.Options{ReceiveMaximum: 2})
	cases := []struct {
		name string
		send func(c *brokertest.Client)
		want packet.ReasonCode
	}{
		{"second CONNECT", func(c *brokertest.Client) { c.Send(rawV5("x", true).Append(nil)) }, packet.ProtocolError},
		{"malformed UTF-8 topic", func(c *brokertest.Client) {
			c.Send([]byte{0x30, 0x05, 0x00, 0x02, 0xc3, 0x28, 0x00})
		}, packet.MalformedPacket},
		{"wildcard in topic name", func(c *brokertest.Client) {
			c.Publish(&packet.Publish{Topic: []byte("a/+")})
		}, packet.TopicNameInvalid},
		{"receive maximum exceeded", func(c *brokertest.Client) {
			for i := range 3 {
				c.Publish(&packet.Publish{Topic: []byte("x"), QoS: 2, PacketID: uint16(i + 1)})
			}
		}, packet.ReceiveMaximumExceeded},
		{"no local on shared", func(c *brokertest.Client) {
			s := &packet.Subscribe{PacketID: 1, Subs: []packet.Subscription{{Filter: []byte("$share/g/x"), NoLocal: true}}}
			c.Send(s.Append(nil, packet.V5))
		}, packet.ProtocolError},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := brokertest.Connect(t, addr, rawV5(fmt.Sprint("pe", i), true))
			tc.send(c)
			for {
				h, body, err := c.Read(5 * time.Second)
				if err != nil {
					t.Fatalf("closed without DISCONNECT: %v", err)
				}
				if h.Type == packet.PUBREC {
					continue
				}
				if h.Type != packet.DISCONNECT {
					t.Fatalf("got %v", h.Type)
				}
				var d packet.Disconnect
				if err := d.Decode(packet.V5, body); err != nil {
					t.Fatal(err)
				}
				if d.Reason != tc.want {
					t.Fatalf("DISCONNECT %v, want %v", d.Reason, tc.want)
				}
				break
			}
			c.ExpectClosed()
		})
	}
}

func TestV5QoS2DuplicateNotRoutedTwice(t *testing.T) {
	srv, addr := brokertest.RunServer(t, broker.Options{})
	sub, _ := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: "sub", CleanStart: true}, nil)
	sub.Sub("once", 2)
	pub, _ := brokertest.Connect(t, addr, rawV5("pub", true))
	p := &packet.Publish{Topic: []byte("once"), QoS: 2, PacketID: 9, Payload: []byte("x")}
	pub.Publish(p)
	var rec packet.Ack
	pub.Expect(packet.PUBREC, &rec)
	p.Dup = true
	pub.Publish(p)
	pub.Expect(packet.PUBREC, &rec)
	pub.Send((&packet.Ack{Type: packet.PUBREL, PacketID: 9}).Append(nil, packet.V5))
	var comp packet.Ack
	pub.Expect(packet.PUBCOMP, &comp)
	sub.Next()
	sub.None(150 * time.Millisecond)
	if srv.Stats().DuplicateQoS2 != 1 {
		t.Fatalf("DuplicateQoS2 = %d", srv.Stats().DuplicateQoS2)
	}
	// After the release the same id starts a new message.
	p.Dup = false
	pub.Publish(p)
	pub.Expect(packet.PUBREC, &rec)
	sub.Next()
}

func TestV5BadFiltersInSuback(t *testing.T) {
	_, addr := brokertest.RunServer(t, broker.Options{})
	c, _ := brokertest.Connect(t, addr, rawV5("f", true))
	sa := c.Subscribe(&packet.Subscribe{Subs: []packet.Subscription{
		{Filter: []byte("ok/#"), QoS: 1},
		{Filter: []byte("a/#/b")},
		{Filter: []byte("a+")},
		{Filter: []byte("$share/workers")},
		{Filter: []byte("$share//x")},
		{Filter: []byte("fine/+"), QoS: 2},
	}})
	want := []packet.ReasonCode{1, 0x8F, 0x8F, 0x8F, 0x8F, 2}
	if codes(sa.Reasons) != codes(want) {
		t.Fatalf("SUBACK %v, want %v", sa.Reasons, want)
	}
}

func TestV5ShutdownSendsServerShuttingDown(t *testing.T) {
	for _, park := range []time.Duration{time.Hour, time.Millisecond} {
		shutdownSendsServerShuttingDown(t, park)
	}
}

func shutdownSendsServerShuttingDown(t *testing.T, park time.Duration) {
	srv, addr := brokertest.RunServer(t, broker.Options{IdleParkAfter: park})
	c, _ := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: "c", CleanStart: true}, nil)
	watcher, _ := brokertest.Connect(t, addr, rawV5("w", true))
	wc := rawV5("dying", true)
	wc.WillFlag, wc.WillTopic, wc.WillPayload = true, []byte("will/dying"), []byte("x")
	brokertest.Connect(t, addr, wc)
	watcher.Subscribe(&packet.Subscribe{Subs: []packet.Subscription{{Filter: []byte("will/#")}}})
	raw, _ := brokertest.Connect(t, addr, rawV5("raw", true))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	go srv.Shutdown(ctx)
	raw.ExpectDisconnect(packet.ServerShuttingDown)
	// paho hands the DISCONNECT to its callback from goroutines of its own,
	// after closing itself: give it time on a loaded machine.
	select {
	case d := <-c.Disc:
		if d.ReasonCode != byte(packet.ServerShuttingDown) {
			t.Fatalf("reason %#x, want 0x8B", d.ReasonCode)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("paho client: no DISCONNECT on shutdown")
	}
}

func TestV5QueueDropsQoS0First(t *testing.T) {
	srv, addr := brokertest.RunServer(t, broker.Options{MaxQueuedMessages: 3, QueueQoS0: true, Overload: broker.OverloadDropOldest})
	sub, _ := brokertest.Connect(t, addr, withExpiry(rawV5("offline", true), 60))
	sub.Subscribe(&packet.Subscribe{Subs: []packet.Subscription{{Filter: []byte("q/#"), QoS: 1}}})
	sub.Conn.Close()
	brokertest.Eventually(t, 5*time.Second, "detach", func() bool { return srv.Stats().ClientsConnected == 0 })
	pub, _ := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: "pub", CleanStart: true}, nil)
	pub.Pub("q/1", 1, false, "a")
	pub.Pub("q/0", 0, false, "b") // the QoS 0 message goes first when the queue overflows
	pub.Pub("q/1", 1, false, "c")
	pub.Pub("q/1", 1, false, "d")
	pub.Pub("q/0", 0, false, "e")
	brokertest.Eventually(t, 5*time.Second, "two drops", func() bool { return srv.Stats().DroppedQueueFull == 2 })
	sub, _ = brokertest.Connect(t, addr, withExpiry(rawV5("offline", false), 60))
	var got []string
	for range 3 {
		var p packet.Publish
		sub.Expect(packet.PUBLISH, &p)
		got = append(got, string(p.Payload))
	}
	// "b" (QoS 0) was dropped for "d", then "a" (oldest; no QoS 0 left) for "e".
	if fmt.Sprint(got) != "[c d e]" {
		t.Fatalf("delivered %v, want [c d e]", got)
	}
}

func TestV5GlobalQueueLimit(t *testing.T) {
	srv, addr := brokertest.RunServer(t, broker.Options{MaxQueuedTotal: 4, Overload: broker.OverloadDropOldest})
	for _, id := range []string{"a", "b"} {
		c, _ := brokertest.Connect(t, addr, withExpiry(rawV5(id, true), 60))
		c.Subscribe(&packet.Subscribe{Subs: []packet.Subscription{{Filter: []byte("g"), QoS: 1}}})
		c.Conn.Close()
	}
	brokertest.Eventually(t, 5*time.Second, "offline", func() bool { return srv.Stats().ClientsConnected == 0 })
	pub, _ := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: "pub", CleanStart: true}, nil)
	for i := range 4 {
		pub.Pub("g", 1, false, fmt.Sprint(i))
	}
	if d := srv.Stats().DroppedQueueFull; d != 4 {
		t.Fatalf("dropped %d, want 4 (8 deliveries, 4 allowed in all)", d)
	}
	for _, id := range []string{"a", "b"} {
		c, _ := brokertest.Connect(t, addr, withExpiry(rawV5(id, false), 60))
		for _, want := range []string{"2", "3"} {
			var p packet.Publish
			c.Expect(packet.PUBLISH, &p)
			if string(p.Payload) != want {
				t.Fatalf("%s got %q, want %q", id, p.Payload, want)
			}
		}
	}
}

// TestV311NotHeldToReceiveMaximum: a 3.1.1 client was never told the
// broker's Receive Maximum, so a burst beyond it is served, not refused.
func TestV311NotHeldToReceiveMaximum(t *testing.T) {
	_, addr := brokertest.RunServer(t, broker.Options{ReceiveMaximum: 16})
	c, _ := brokertest.Connect(t, addr, &packet.Connect{Version: packet.V311, ClientID: []byte("burst"), CleanStart: true})
	var burst []byte
	for i := range 200 {
		burst = (&packet.Publish{Topic: []byte("b"), QoS: 1, PacketID: uint16(i + 1)}).Append(burst, packet.V311)
	}
	c.Send(burst)
	for range 200 {
		c.Expect(packet.PUBACK, nil)
	}
}
