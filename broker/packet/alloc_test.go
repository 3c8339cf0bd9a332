package packet_test

import (
	"bytes"
	"testing"

	"github.com/linemq/linemq/broker/packet"
)

// The hot path must not allocate per packet (STYLE.md 8.6): decoding into a
// reused struct, and encoding into a buffer with room.

// publishWithProps is a QoS 1 v5 PUBLISH carrying the properties a
// request/response client typically sends, with a 300-byte payload.
func publishWithProps() *packet.Publish {
	return &packet.Publish{QoS: 1, PacketID: 42, Topic: bs("sensors/kitchen/temperature"),
		Props: present(packet.Properties{PayloadFormat: 1, MessageExpiry: 3600, ContentType: bs("application/json"),
			ResponseTopic: bs("replies/kitchen"), CorrelationData: bs("req-0001"), SubscriptionIDs: []uint32{7, 300},
			User: user("trace", "abc123", "origin", "gw-1")},
			packet.PropPayloadFormat, packet.PropMessageExpiry, packet.PropContentType, packet.PropResponseTopic,
			packet.PropCorrelationData, packet.PropSubscriptionID, packet.PropUser),
		Payload: bytes.Repeat(bs("x"), 300)}
}

func publishQoS0() *packet.Publish {
	return &packet.Publish{Topic: bs("sensors/kitchen/temperature"), Payload: bytes.Repeat(bs("x"), 300)}
}

// frame splits an encoded packet into its header and body.
func frame(t testing.TB, wire []byte) (packet.FixedHeader, []byte) {
	t.Helper()
	h, n, err := packet.ReadFrame(wire, 0)
	if err != nil || n == 0 {
		t.Fatalf("ReadFrame: %d %v", n, err)
	}
	return h, wire[n:]
}

func assertNoAllocs(t *testing.T, name string, f func()) {
	t.Helper()
	if n := testing.AllocsPerRun(100, f); n != 0 {
		t.Errorf("%s: %v allocations per run, want 0", name, n)
	}
}

func TestDecodeAllocs(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    packet.Version
		p    *packet.Publish
	}{
		{"publish qos0 v311", packet.V311, publishQoS0()},
		{"publish qos0 v5", packet.V5, publishQoS0()},
		{"publish qos1 v5 props", packet.V5, publishWithProps()},
	} {
		h, body := frame(t, tc.p.Append(nil, tc.v))
		var p packet.Publish // reused across runs; the first run sizes its slices
		assertNoAllocs(t, tc.name, func() {
			if err := p.Decode(tc.v, h.Flags, body); err != nil {
				t.Fatal(err)
			}
		})
	}

	ackWire := (&packet.Ack{Type: packet.PUBREC, PacketID: 9, Reason: packet.QuotaExceeded,
		Props: present(packet.Properties{ReasonString: bs("full"), User: user("k", "v")}, packet.PropReasonString)}).Append(nil, packet.V5)
	h, body := frame(t, ackWire)
	var a packet.Ack
	assertNoAllocs(t, "ack v5 props", func() {
		if err := a.Decode(packet.V5, h.Type, body); err != nil {
			t.Fatal(err)
		}
	})
	short, zeroID := []byte{0, 1}, []byte{0, 0} // outside the closures: a literal body would escape and count
	assertNoAllocs(t, "ack v311", func() {
		if err := a.Decode(packet.V311, packet.PUBACK, short); err != nil {
			t.Fatal(err)
		}
	})

	subWire := (&packet.Subscribe{PacketID: 3, Props: present(packet.Properties{SubscriptionIDs: []uint32{5}}),
		Subs: []packet.Subscription{{Filter: bs("a/+/c"), QoS: 1}, {Filter: bs("d/#"), QoS: 2, NoLocal: true}, {Filter: bs("e")}}}).Append(nil, packet.V5)
	h, body = frame(t, subWire)
	var s packet.Subscribe
	assertNoAllocs(t, "subscribe v5", func() {
		if err := s.Decode(packet.V5, body); err != nil {
			t.Fatal(err)
		}
	})

	connWire := roundTripV5[0].(*packet.Connect).Append(nil)
	h, body = frame(t, connWire)
	var c packet.Connect
	assertNoAllocs(t, "connect v5", func() {
		if err := c.Decode(body); err != nil {
			t.Fatal(err)
		}
	})

	assertNoAllocs(t, "read frame", func() {
		if _, _, err := packet.ReadFrame(connWire, 1<<20); err != nil {
			t.Fatal(err)
		}
	})

	// Errors are package-level values: rejecting a packet does not allocate either.
	assertNoAllocs(t, "decode error", func() {
		if err := a.Decode(packet.V5, packet.PUBACK, zeroID); err == nil {
			t.Fatal("no error")
		}
	})
}

func TestEncodeAllocs(t *testing.T) {
	buf := make([]byte, 0, 1024)
	for _, tc := range []struct {
		name string
		v    packet.Version
		p    *packet.Publish
	}{
		{"publish qos0 v311", packet.V311, publishQoS0()},
		{"publish qos1 v5 props", packet.V5, publishWithProps()},
	} {
		assertNoAllocs(t, tc.name+" Append", func() { buf = tc.p.Append(buf[:0], tc.v) })
		assertNoAllocs(t, tc.name+" AppendHeader", func() { buf = tc.p.AppendHeader(buf[:0], tc.v) })
		assertNoAllocs(t, tc.name+" Size", func() {
			if tc.p.Size(tc.v) == 0 {
				t.Fatal("zero size")
			}
		})
	}
	acks := []*packet.Ack{
		{Type: packet.PUBACK, PacketID: 1},
		{Type: packet.PUBREL, PacketID: 2, Reason: packet.PacketIDNotFound},
		{Type: packet.PUBREC, PacketID: 3, Reason: packet.QuotaExceeded,
			Props: present(packet.Properties{ReasonString: bs("full"), User: user("k", "v")}, packet.PropReasonString)},
	}
	for _, a := range acks {
		for _, v := range []packet.Version{packet.V311, packet.V5} {
			assertNoAllocs(t, "ack", func() { buf = a.Append(buf[:0], v) })
		}
	}
	for _, p := range roundTripV5 {
		assertNoAllocs(t, dumpPacket(p), func() { buf = encodePacket(buf[:0], packet.V5, p) })
	}
}
