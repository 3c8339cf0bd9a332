package broker_test

import (
	"testing"
	"time"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/broker/packet"
)

// TestQoS0WaitsBehindQueuedQoS1: a client whose send window (Receive
// Maximum 1) is full gets a QoS 0 message published after a queued QoS 1
// one after it, not before: one order per client, whatever the QoS.
func TestQoS0WaitsBehindQueuedQoS1(t *testing.T) {
	_, addr := brokertest.RunServer(t, broker.Options{})
	cp := rawV5("sub", true)
	cp.Props.Set(packet.PropReceiveMaximum)
	cp.Props.ReceiveMaximum = 1
	sub, _ := brokertest.Connect(t, addr, cp)
	sub.Subscribe(&packet.Subscribe{PacketID: 1, Subs: []packet.Subscription{{Filter: []byte("q/#"), QoS: 1}}})
	pub, _ := brokertest.Connect(t, addr, rawV5("pub", true))
	pub.Publish(&packet.Publish{Topic: []byte("q/a"), QoS: 1, PacketID: 1, Payload: []byte("a")})
	pub.Expect(packet.PUBACK, nil)
	pub.Publish(&packet.Publish{Topic: []byte("q/b"), QoS: 1, PacketID: 2, Payload: []byte("b")})
	pub.Expect(packet.PUBACK, nil)
	pub.Publish(&packet.Publish{Topic: []byte("q/c"), QoS: 0, Payload: []byte("c")})

	var p packet.Publish
	sub.Expect(packet.PUBLISH, &p)
	if string(p.Topic) != "q/a" {
		t.Fatalf("first %s, want q/a", p.Topic)
	}
	sub.ExpectNothing(100 * time.Millisecond) // b waits for the window, and c behind it
	sub.Send((&packet.Ack{Type: packet.PUBACK, PacketID: p.PacketID}).Append(nil, packet.V5))
	for _, want := range []string{"q/b", "q/c"} {
		sub.Expect(packet.PUBLISH, &p)
		if string(p.Topic) != want {
			t.Fatalf("got %s, want %s", p.Topic, want)
		}
	}
}
