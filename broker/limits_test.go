package broker_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/broker/packet"
)

// Tests of the limits against hostile or careless clients (Options
// MaxConnections, MaxPublishRate, MaxSubscriptionsPerClient,
// MaxRetainedMessages/Bytes, MaxSessions), each over real TCP, asserting
// the reason code the client sees.

// v311 is a 3.1.1 CONNECT for the raw client.
func v311(id string, clean bool) *packet.Connect {
	return &packet.Connect{Version: packet.V311, ClientID: []byte(id), CleanStart: clean}
}

// connectV311 sends a 3.1.1 CONNECT and returns the client and the return
// code byte of its CONNACK as it was on the wire (3.1.1 return codes are
// not reason codes: 0x03 is Server unavailable).
func connectV311(t *testing.T, addr, id string, clean bool) (*brokertest.Client, byte) {
	t.Helper()
	c := brokertest.Dial(t, addr, packet.V311)
	c.Send((&packet.Connect{Version: packet.V311, ProtocolName: []byte("MQTT"), ClientID: []byte(id), CleanStart: clean}).Append(nil))
	h, body, err := c.Read(5 * time.Second)
	if err != nil || h.Type != packet.CONNACK || len(body) != 2 {
		t.Fatalf("%s: CONNACK: %v %v % x", id, err, h.Type, body)
	}
	return c, body[1]
}

// TestLimitMaxConnections: past MaxConnections a CONNECT is refused with
// CONNACK 0x97 (3.1.1: 0x03), except one that takes over its own session;
// past MaxConnections and its headroom a connection is closed at accept;
// a place that frees up is usable again.
func TestLimitMaxConnections(t *testing.T) {
	const limit = 3
	srv, addr := brokertest.RunServer(t, broker.Options{MaxConnections: limit})
	var held []*brokertest.Client
	for i := range limit {
		c, ack := brokertest.Connect(t, addr, rawV5(fmt.Sprint("c", i), true))
		if ack.Reason != packet.Success {
			t.Fatalf("client %d within the limit: CONNACK %v", i, ack.Reason)
		}
		held = append(held, c)
	}
	c, ack := brokertest.Connect(t, addr, rawV5("over-v5", true))
	if ack.Reason != packet.QuotaExceeded {
		t.Fatalf("v5 CONNECT over the limit: CONNACK %v, want 0x97", ack.Reason)
	}
	c.ExpectClosed()
	c.Conn.Close()
	c, code := connectV311(t, addr, "over-v3", true)
	if code != 0x03 {
		t.Fatalf("3.1.1 CONNECT over the limit: CONNACK %#x, want 0x03", code)
	}
	c.ExpectClosed()
	c.Conn.Close()

	// A client whose old connection still holds its place takes it over.
	c, ack = brokertest.Connect(t, addr, rawV5("c0", true))
	if ack.Reason != packet.Success {
		t.Fatalf("takeover at the limit: CONNACK %v, want success", ack.Reason)
	}
	held[0].ExpectDisconnect(packet.SessionTakenOver)
	held[0].Conn.Close()
	held[0] = c
	brokertest.Eventually(t, 5*time.Second, "the refused connections gone", func() bool {
		return srv.LimitStats().OpenConnections == limit
	})

	// Connections that never send CONNECT: the headroom (16 for a limit of
	// 3) is let in, the next one is closed unread.
	var raw []net.Conn
	for range 16 {
		raw = append(raw, brokertest.Dial(t, addr, packet.V5).Conn)
	}
	brokertest.Eventually(t, 5*time.Second, "the headroom open", func() bool {
		return srv.LimitStats().OpenConnections == limit+16
	})
	extra := brokertest.Dial(t, addr, packet.V5)
	if _, err := robustReadClosed(extra.Conn, time.Now().Add(5*time.Second)); !errors.Is(err, io.EOF) && !isConnReset(err) {
		t.Fatalf("connection past the headroom: %v, want closed", err)
	}
	for _, nc := range raw {
		nc.Close()
	}

	// One leaves: its place is free again.
	held[1].Conn.Close()
	brokertest.Eventually(t, 5*time.Second, "a place free", func() bool { return srv.Stats().ClientsConnected == limit-1 })
	if _, code := connectV311(t, addr, "late", true); code != 0 {
		t.Fatalf("after a client left: CONNACK %#x", code)
	}
	ls := srv.LimitStats()
	if ls.RefusedConnections != 2 || ls.ClosedAtAccept != 1 {
		t.Fatalf("LimitStats %+v, want 2 refused connections, 1 closed at accept", ls)
	}
}

// isConnReset reports a connection reset, which a close with unread bytes
// may turn into.
func isConnReset(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe)
}

// TestLimitPublishRate: a v5 client publishing faster than MaxPublishRate
// (beyond its burst) is disconnected with 0x96; a 3.1.1 client is slowed
// down instead and every one of its publishes is acknowledged; a client
// within the rate is not affected.
func TestLimitPublishRate(t *testing.T) {
	const rate, burst = 20, 5
	srv, addr := brokertest.RunServer(t, broker.Options{MaxPublishRate: rate, PublishBurst: burst})
	pair := newRobustPair(t, addr, "rate", packet.V5, 60)

	t.Run("v5", func(t *testing.T) {
		c, _ := brokertest.Connect(t, addr, rawV5("fast-v5", true))
		var buf []byte
		for i := range 3 * burst {
			buf = (&packet.Publish{Topic: []byte("rate/x"), QoS: 1, PacketID: uint16(i + 1), Payload: []byte("x")}).Append(buf, packet.V5)
		}
		c.Send(buf)
		acks := 0
		for {
			h, body, err := c.Read(5 * time.Second)
			if err != nil {
				t.Fatalf("after %d PUBACKs: %v, want DISCONNECT 0x96", acks, err)
			}
			if h.Type == packet.PUBACK {
				acks++
				continue
			}
			var d packet.Disconnect
			if h.Type != packet.DISCONNECT || d.Decode(packet.V5, body) != nil || d.Reason != packet.MessageRateTooHigh {
				t.Fatalf("got %v % x, want DISCONNECT 0x96", h.Type, body)
			}
			break
		}
		c.ExpectClosed()
		// The burst passed; at most a token or so more was earned meanwhile.
		if acks < burst || acks > burst+2 {
			t.Errorf("%d publishes acknowledged before the DISCONNECT, want about the burst (%d)", acks, burst)
		}
	})

	t.Run("v311", func(t *testing.T) {
		c, _ := brokertest.Connect(t, addr, v311("fast-v3", true))
		const n = 3 * burst
		var buf []byte
		for i := range n {
			buf = (&packet.Publish{Topic: []byte("rate/y"), QoS: 1, PacketID: uint16(i + 1), Payload: []byte("y")}).Append(buf, packet.V311)
		}
		start := time.Now()
		c.Send(buf)
		for i := range n {
			var a packet.Ack
			c.Expect(packet.PUBACK, &a)
			if a.PacketID != uint16(i+1) {
				t.Fatalf("PUBACK %d, want %d", a.PacketID, i+1)
			}
		}
		// n-burst publishes had to wait for their tokens.
		if took, least := time.Since(start), time.Duration(n-burst)*time.Second/rate; took < least*8/10 {
			t.Errorf("%d publishes acknowledged in %v: not slowed to %d/s (at least %v)", n, took, rate, least)
		}
		robustPing(t, c, "paused 3.1.1 client")
		if srv.LimitStats().RatePauses == 0 {
			t.Error("no pause counted")
		}
	})

	// Within the rate: never refused.
	for range 3 {
		pair.check(t)
	}
	if ls := srv.LimitStats(); ls.RateDisconnects != 1 {
		t.Errorf("RateDisconnects %d, want 1", ls.RateDisconnects)
	}
}

// TestLimitSubscriptionsPerClient: filters beyond MaxSubscriptionsPerClient
// get SUBACK 0x97 (3.1.1: 0x80); resubscribing to a filter the session has
// is allowed; an unsubscribe makes room.
func TestLimitSubscriptionsPerClient(t *testing.T) {
	srv, addr := brokertest.RunServer(t, broker.Options{MaxSubscriptionsPerClient: 3})
	subs := func(filters ...string) []packet.Subscription {
		var s []packet.Subscription
		for _, f := range filters {
			s = append(s, packet.Subscription{Filter: []byte(f), QoS: 1})
		}
		return s
	}
	c, _ := brokertest.Connect(t, addr, rawV5("many-v5", true))
	ack := c.Subscribe(&packet.Subscribe{PacketID: 1, Subs: subs("a/1", "a/2", "$share/g/a/3", "a/4", "a/5")})
	if got, want := codes(ack.Reasons), codes([]packet.ReasonCode{1, 1, 1, packet.QuotaExceeded, packet.QuotaExceeded}); got != want {
		t.Fatalf("SUBACK %v, want %v", got, want)
	}
	ack = c.Subscribe(&packet.Subscribe{PacketID: 2, Subs: subs("a/1", "a/6")})
	if got, want := codes(ack.Reasons), codes([]packet.ReasonCode{1, packet.QuotaExceeded}); got != want {
		t.Fatalf("resubscription at the limit: SUBACK %v, want %v", got, want)
	}
	c.Send((&packet.Unsubscribe{PacketID: 3, Filters: [][]byte{[]byte("a/2")}}).Append(nil, packet.V5))
	c.Expect(packet.UNSUBACK, nil)
	ack = c.Subscribe(&packet.Subscribe{PacketID: 4, Subs: subs("a/6")})
	if ack.Reasons[0] != 1 {
		t.Fatalf("after an unsubscribe: SUBACK %v", ack.Reasons)
	}

	v3, _ := brokertest.Connect(t, addr, v311("many-v3", true))
	ack = v3.Subscribe(&packet.Subscribe{PacketID: 1, Subs: subs("b/1", "b/2", "b/3", "b/4")})
	if got, want := codes(ack.Reasons), codes([]packet.ReasonCode{1, 1, 1, 0x80}); got != want {
		t.Fatalf("3.1.1 SUBACK %v, want %v", got, want)
	}
	if n := srv.LimitStats().RefusedSubscriptions; n != 4 {
		t.Errorf("RefusedSubscriptions %d, want 4", n)
	}
}

// TestLimitRetained: a retained PUBLISH that would take the store past
// MaxRetainedMessages or MaxRetainedBytes is routed to the subscribers but
// not retained, and a v5 publisher is told 0x97 (PUBACK and PUBREC);
// replacing a retained message with one no larger, and clearing one, are
// always accepted.
func TestLimitRetained(t *testing.T) {
	srv, addr := brokertest.RunServer(t, broker.Options{MaxRetainedMessages: 3, MaxRetainedBytes: 1000})
	live := windowSub(t, addr, "live", "r/#", 100, 0)
	pub, _ := brokertest.Connect(t, addr, rawV5("retainer", true))
	retained := func(pid uint16, topic string, payload []byte, qos byte) packet.ReasonCode {
		t.Helper()
		pub.Publish(&packet.Publish{Topic: []byte(topic), QoS: qos, PacketID: pid, Retain: true, Payload: payload})
		var a packet.Ack
		if qos == 2 {
			pub.Expect(packet.PUBREC, &a)
			if !a.Reason.IsError() {
				pub.Send((&packet.Ack{Type: packet.PUBREL, PacketID: pid}).Append(nil, packet.V5))
				pub.Expect(packet.PUBCOMP, nil)
			}
		} else {
			pub.Expect(packet.PUBACK, &a)
		}
		return a.Reason
	}
	small := []byte("v")
	for i := range 3 {
		if rc := retained(uint16(i+1), fmt.Sprint("r/", i), small, 1); rc != packet.Success {
			t.Fatalf("retained %d within the limit: %v", i, rc)
		}
	}
	expectPayloads(t, live, "v", "v", "v")
	if rc := retained(4, "r/3", []byte("over"), 1); rc != packet.QuotaExceeded {
		t.Fatalf("4th retained message: PUBACK %v, want 0x97", rc)
	}
	expectPayloads(t, live, "over") // routed all the same
	if rc := retained(5, "r/4", []byte("over2"), 2); rc != packet.QuotaExceeded {
		t.Fatalf("4th retained message at QoS 2: PUBREC %v, want 0x97", rc)
	}
	expectPayloads(t, live, "over2")
	if rc := retained(6, "r/0", []byte("w"), 1); rc != packet.Success {
		t.Fatalf("replacing a retained message at the limit: %v", rc)
	}
	expectPayloads(t, live, "w")
	// Bytes: growing one past MaxRetainedBytes is refused.
	if rc := retained(7, "r/1", bytes.Repeat([]byte("x"), 1000), 1); rc != packet.QuotaExceeded {
		t.Fatalf("retained message past MaxRetainedBytes: %v, want 0x97", rc)
	}
	expectPayloads(t, live, string(bytes.Repeat([]byte("x"), 1000)))
	// Clearing is always allowed, and makes room.
	if rc := retained(8, "r/2", nil, 1); rc != packet.Success {
		t.Fatalf("clearing a retained message: %v", rc)
	}
	expectPayloads(t, live, "")
	if rc := retained(9, "r/5", []byte("fits"), 1); rc != packet.Success {
		t.Fatalf("after clearing one: %v", rc)
	}
	expectPayloads(t, live, "fits")

	// A 3.1.1 publisher cannot be told: acknowledged, routed, not retained.
	v3, _ := brokertest.Connect(t, addr, v311("retainer-v3", true))
	v3.Publish(&packet.Publish{Topic: []byte("r/6"), QoS: 1, PacketID: 1, Retain: true, Payload: []byte("v3")})
	var a packet.Ack
	v3.Expect(packet.PUBACK, &a)
	expectPayloads(t, live, "v3")

	// What a new subscriber gets is what was kept.
	late, _ := brokertest.Connect(t, addr, rawV5("late", true))
	late.Subscribe(&packet.Subscribe{Subs: []packet.Subscription{{Filter: []byte("r/#")}}})
	got := map[string]string{}
	for range 3 {
		var p packet.Publish
		late.Expect(packet.PUBLISH, &p)
		got[string(p.Topic)] = string(p.Payload)
	}
	late.ExpectNothing(100 * time.Millisecond)
	if fmt.Sprint(got) != "map[r/0:w r/1:v r/5:fits]" {
		t.Fatalf("retained after the refusals: %v", got)
	}
	ls := srv.LimitStats()
	if ls.RefusedRetained != 4 || ls.RetainedBytes != int64(3*len("r/0")+len("w")+len("v")+len("fits")) {
		t.Errorf("LimitStats %+v", ls)
	}
}

// TestLimitMaxSessions: at MaxSessions, a CONNECT asking for a new session
// that would outlive its connection is refused with CONNACK 0x97 (3.1.1:
// 0x03); clean sessions and resumed ones are not; no existing session is
// expired to make room.
func TestLimitMaxSessions(t *testing.T) {
	srv, addr := brokertest.RunServer(t, broker.Options{MaxSessions: 2})
	for _, id := range []string{"keep-1", "keep-2"} {
		c, _ := brokertest.Connect(t, addr, withExpiry(rawV5(id, true), 300))
		c.Subscribe(&packet.Subscribe{Subs: []packet.Subscription{{Filter: []byte("s/" + id), QoS: 1}}})
		c.Conn.Close()
	}
	brokertest.Eventually(t, 5*time.Second, "two offline sessions", func() bool {
		st := srv.Stats()
		return st.ClientsConnected == 0 && st.Sessions == 2
	})
	if _, ack := brokertest.Connect(t, addr, withExpiry(rawV5("new", true), 300)); ack.Reason != packet.QuotaExceeded {
		t.Fatalf("new persistent v5 session at the limit: CONNACK %v, want 0x97", ack.Reason)
	}
	if _, code := connectV311(t, addr, "new-v3", false); code != 0x03 {
		t.Fatalf("new persistent 3.1.1 session at the limit: CONNACK %#x, want 0x03", code)
	}
	clean, ack := brokertest.Connect(t, addr, rawV5("clean", true))
	if ack.Reason != packet.Success {
		t.Fatalf("clean session at the limit: CONNACK %v", ack.Reason)
	}
	clean.Conn.Close()
	// The kept sessions resume, with what they had.
	c, ack := brokertest.Connect(t, addr, withExpiry(rawV5("keep-1", false), 300))
	if ack.Reason != packet.Success || !ack.SessionPresent {
		t.Fatalf("resuming at the limit: CONNACK %v present %v", ack.Reason, ack.SessionPresent)
	}
	// Ending one (expiry 0 on the way out) makes room.
	d := packet.Disconnect{}
	d.Props.Set(packet.PropSessionExpiry)
	c.Send(d.Append(nil, packet.V5))
	brokertest.Eventually(t, 5*time.Second, "one session left", func() bool { return srv.Stats().Sessions == 1 })
	if _, code := connectV311(t, addr, "new-v3", false); code != 0 {
		t.Fatalf("after a session ended: CONNACK %#x", code)
	}
	if n := srv.LimitStats().RefusedSessions; n != 2 {
		t.Errorf("RefusedSessions %d, want 2", n)
	}
}

// BenchmarkPublishRate measures a QoS 0 publisher feeding one subscriber
// over loopback with the publish rate limit off and on (at a rate it never
// reaches): the token bucket must cost no allocation and little time.
func BenchmarkPublishRate(b *testing.B) {
	for _, bc := range []struct {
		name string
		rate int
	}{{"off", 0}, {"on", 1 << 30}} {
		b.Run(bc.name, func(b *testing.B) {
			_, addr := brokertest.RunServer(b, broker.Options{MaxPublishRate: bc.rate})
			var received atomic.Int64
			sub, _ := brokertest.Connect(b, addr, rawV5("sub", true))
			sub.Subscribe(&packet.Subscribe{Subs: []packet.Subscription{{Filter: []byte("bench/#")}}})
			go brokertest.Drain(sub.Conn, packet.V5, &received)
			pub, _ := brokertest.Connect(b, addr, rawV5("pub", true))
			go io.Copy(io.Discard, pub.Conn)
			payload := make([]byte, 300)
			var batch []byte
			b.SetBytes(int64(len(payload)))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; {
				batch = batch[:0]
				for j := 0; j < 64 && i < b.N; j++ {
					batch = (&packet.Publish{Topic: []byte("bench/line1/telemetry"), Payload: payload}).Append(batch, packet.V5)
					i++
				}
				pub.Conn.Write(batch)
			}
			deadline := time.Now().Add(5 * time.Second)
			for {
				if r := received.Load(); r >= int64(b.N) || time.Now().After(deadline) {
					break
				}
				time.Sleep(100 * time.Microsecond)
			}
			b.StopTimer()
			b.ReportMetric(float64(received.Load())/float64(b.N), "delivered/op")
		})
	}
}
