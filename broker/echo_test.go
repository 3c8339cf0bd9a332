package broker_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/broker/packet"
)

// holdStore is a Store whose Sync waits while a hold is in place: a slow
// disk the test controls.
type holdStore struct {
	failStore
	hold atomic.Pointer[chan struct{}]
}

func (h *holdStore) Sync(ctx context.Context) error {
	if ch := h.hold.Load(); ch != nil {
		<-*ch
	}
	return nil
}

// block holds every Sync from now until the returned function is called
// (at the latest when the test ends, so that the server can stop).
func (h *holdStore) block(t *testing.T) (release func()) {
	ch := make(chan struct{})
	h.hold.Store(&ch)
	release = sync.OnceFunc(func() { h.hold.Store(nil); close(ch) })
	t.Cleanup(release)
	return release
}

// TestOwnMessageAfterItsAck: a client subscribed to what it publishes gets
// its acknowledgement before its message, even when the acknowledgement
// waits for the Store; other publishers' messages do not wait for it, and
// its own keep their order.
func TestOwnMessageAfterItsAck(t *testing.T) {
	t.Run("no store", func(t *testing.T) {
		_, addr := brokertest.RunServer(t, broker.Options{})
		c, _ := brokertest.Connect(t, addr, rawV5("self", true))
		c.Subscribe(&packet.Subscribe{Subs: []packet.Subscription{{Filter: []byte("e/#"), QoS: 1}}})
		for i := range 20 {
			pid := uint16(i + 1)
			c.Publish(&packet.Publish{Topic: []byte("e/1"), QoS: 1, PacketID: pid, Payload: []byte("x")})
			var ack packet.Ack
			c.Expect(packet.PUBACK, &ack)
			if ack.PacketID != pid {
				t.Fatalf("PUBACK %d, want %d", ack.PacketID, pid)
			}
			var p packet.Publish
			c.Expect(packet.PUBLISH, &p)
			c.Send((&packet.Ack{Type: packet.PUBACK, PacketID: p.PacketID}).Append(nil, packet.V5))
		}
	})

	t.Run("ack waits for the store", func(t *testing.T) {
		st := &holdStore{}
		_, addr := brokertest.RunServer(t, broker.Options{Store: st})
		// A persistent session: its copy is written to the Store, so the
		// PUBACK waits for a sync.
		self, _ := brokertest.Connect(t, addr, withExpiry(rawV5("self", true), 300))
		self.Subscribe(&packet.Subscribe{Subs: []packet.Subscription{{Filter: []byte("e/#"), QoS: 1}}})
		other, _ := brokertest.Connect(t, addr, rawV5("other", true))

		release := st.block(t)
		self.Publish(&packet.Publish{Topic: []byte("e/own"), QoS: 1, PacketID: 7, Payload: []byte("1")})
		self.Publish(&packet.Publish{Topic: []byte("e/own"), QoS: 0, Payload: []byte("2")})
		other.Publish(&packet.Publish{Topic: []byte("e/other"), QoS: 0, Payload: []byte("o")})
		// The other client's message is not held behind self's acknowledgement.
		var p packet.Publish
		self.Expect(packet.PUBLISH, &p)
		if string(p.Topic) != "e/other" {
			t.Fatalf("first packet is PUBLISH %q, want the other client's e/other while self's own waits", p.Topic)
		}
		release()
		var ack packet.Ack
		self.Expect(packet.PUBACK, &ack)
		if ack.PacketID != 7 || ack.Reason.IsError() {
			t.Fatalf("PUBACK %d %v, want 7 success", ack.PacketID, ack.Reason)
		}
		for _, want := range []string{"1", "2"} {
			var own packet.Publish
			self.Expect(packet.PUBLISH, &own)
			if string(own.Payload) != want {
				t.Fatalf("own message %q, want %q (in publish order)", own.Payload, want)
			}
			if own.QoS == 1 {
				self.Send((&packet.Ack{Type: packet.PUBACK, PacketID: own.PacketID}).Append(nil, packet.V5))
			}
		}
		self.ExpectNothing(50 * time.Millisecond)
	})
}
