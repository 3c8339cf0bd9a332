package broker_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/broker/packet"
)

// subThenPub sends sub's SUBSCRIBE and, without waiting, pub's PUBLISH of
// topic at QoS 1, the writes a few microseconds apart, as Paho's
// interoperability suite does. It returns how many PUBLISH packets sub
// received (its SUBACK and pub's PUBACK are read too), reading on for a
// while after the first so that a second copy would be counted.
func subThenPub(t *testing.T, sub, pub *brokertest.Client, pid uint16, filter, topic string) int {
	t.Helper()
	s := &packet.Subscribe{PacketID: pid, Subs: []packet.Subscription{{Filter: []byte(filter), QoS: 2}}}
	sb := s.Append(nil, packet.V5)
	pb := (&packet.Publish{Topic: []byte(topic), QoS: 1, PacketID: pid, Payload: []byte("m")}).Append(nil, packet.V5)
	sub.Send(sb)
	pub.Send(pb)
	pub.Expect(packet.PUBACK, nil)
	got, subacked := 0, false
	for {
		wait := 5 * time.Second
		switch {
		case subacked && got == 0:
			wait = 100 * time.Millisecond // the message, if it comes, is on its way already
		case subacked:
			wait = 30 * time.Millisecond // a duplicate would follow the first copy closely
		}
		h, body, err := sub.Read(wait)
		if err != nil {
			if !subacked {
				t.Fatalf("no SUBACK: %v", err)
			}
			break
		}
		switch h.Type {
		case packet.SUBACK:
			subacked = true
		case packet.PUBLISH:
			got++
			var p packet.Publish
			if err := p.Decode(packet.V5, h.Flags, body); err != nil {
				t.Fatal(err)
			}
			if p.QoS == 1 {
				sub.Send((&packet.Ack{Type: packet.PUBACK, PacketID: p.PacketID}).Append(nil, packet.V5))
			} else if p.QoS == 2 {
				sub.Send((&packet.Ack{Type: packet.PUBREC, PacketID: p.PacketID}).Append(nil, packet.V5))
				sub.Expect(packet.PUBREL, nil)
				sub.Send((&packet.Ack{Type: packet.PUBCOMP, PacketID: p.PacketID}).Append(nil, packet.V5))
			}
		default:
			t.Fatalf("unexpected %v", h.Type)
		}
	}
	return got
}

// idle lets the broker's threads go to sleep, the state in which packets of
// two connections arriving together used to be handled last first. It is
// not a wait for a condition: the test's outcome must not depend on it.
func idle() { time.Sleep(3 * time.Millisecond) }

// TestSubscribeThenPublishElsewhere: a SUBSCRIBE on one connection followed
// within microseconds by a PUBLISH on another reaches the new subscriber
// every time (arrival order, arrival.go), without giving a subscription any
// message that arrived before its SUBSCRIBE, and without duplicates.
func TestSubscribeThenPublishElsewhere(t *testing.T) {
	if !kernelRxTimestamps(t) {
		t.Skip("no kernel receive timestamps here (qemu-user refuses SO_TIMESTAMPNS): arrival order is off, as documented")
	}
	srv, addr := brokertest.RunServer(t, broker.Options{})
	sub, _ := brokertest.Connect(t, addr, rawV5("sub", true))
	pub, _ := brokertest.Connect(t, addr, rawV5("pub", true))
	const rounds = 50

	t.Run("published just after", func(t *testing.T) {
		missed := 0
		for i := range rounds {
			idle()
			topic := fmt.Sprintf("race/%d", i)
			if subThenPub(t, sub, pub, uint16(i+1), topic, topic) != 1 {
				missed++
			}
		}
		if missed > 0 {
			t.Errorf("the new subscriber missed %d of %d messages published just after its SUBSCRIBE (GOMAXPROCS %d)", missed, rounds, runtime.GOMAXPROCS(0))
		}
		t.Logf("messages delivered by looking back: %d of %d", srv.Stats().LookedBack, rounds)
	})

	t.Run("published before", func(t *testing.T) {
		// Acknowledged before the SUBSCRIBE was sent: it is not the new
		// subscription's, though it is still in the ring.
		for i := range 10 {
			topic := fmt.Sprintf("before/%d", i)
			pub.Publish(&packet.Publish{Topic: []byte(topic), QoS: 1, PacketID: uint16(100 + i), Payload: []byte("old")})
			pub.Expect(packet.PUBACK, nil)
			sub.Subscribe(&packet.Subscribe{PacketID: uint16(100 + i), Subs: []packet.Subscription{{Filter: []byte(topic), QoS: 1}}})
		}
		sub.ExpectNothing(100 * time.Millisecond)
	})

	t.Run("no duplicates", func(t *testing.T) {
		// sub already has "dup/#": a message routed through it is not
		// delivered again through a new overlapping subscription, even at
		// QoS 2.
		sub.Subscribe(&packet.Subscribe{PacketID: 200, Subs: []packet.Subscription{{Filter: []byte("dup/#"), QoS: 2}}})
		for i := range 20 {
			idle()
			topic := fmt.Sprintf("dup/%d", i)
			if n := subThenPub(t, sub, pub, uint16(300+i), topic, topic); n != 1 {
				t.Fatalf("round %d: %d copies, want 1", i, n)
			}
		}
	})
}
