package broker_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/broker/packet"
)

// gatedCatchUp is a cluster whose catch-up with the line (CatchUp) ends
// when the test says.
type gatedCatchUp struct {
	*memCluster
	calls chan struct{}
	gate  chan struct{}
}

func (g *gatedCatchUp) CatchUp(ctx context.Context) error {
	g.calls <- struct{}{}
	select {
	case <-g.gate:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestStalledNodeHoldsDeliveries: a node that finds it did not run for a
// while (stopped with SIGSTOP past its lease, in the fault suite's seeds
// 25 and 29) writes nothing to its clients until it has caught up with the
// line, and a publish it reads meanwhile (one that may have waited in its
// socket, its publisher since gone elsewhere) goes out with DUP. Before
// and after, messages go as usual.
func TestStalledNodeHoldsDeliveries(t *testing.T) {
	net, _ := startCluster(t, 0)
	cl := &gatedCatchUp{memCluster: net.cluster("n1"), calls: make(chan struct{}, 1), gate: make(chan struct{})}
	net.down["n1"] = new(atomic.Bool)
	net.views["n1"] = new(atomic.Uint64)
	s := brokertest.Start(t, broker.Options{Cluster: cl}, nil)
	sub := windowSub(t, s.Addr, "sub", "t/#", 10, 0)
	pub, _ := brokertest.Connect(t, s.Addr, rawV5("pub", true))
	read := func(want string, dup bool) {
		t.Helper()
		var p packet.Publish
		h := sub.Expect(packet.PUBLISH, &p)
		if string(p.Payload) != want || (h.Flags&0x08 != 0) != dup {
			t.Fatalf("got %q (DUP %v), want %q (DUP %v)", p.Payload, h.Flags&0x08 != 0, want, dup)
		}
		sub.Send((&packet.Ack{Type: packet.PUBACK, PacketID: p.PacketID}).Append(nil, packet.V5))
	}
	if rc := pubAck(t, pub, 1, "t/1", "before"); rc != packet.Success {
		t.Fatal(rc)
	}
	read("before", false)

	s.StallNow()
	select {
	case <-cl.calls:
	case <-time.After(5 * time.Second):
		t.Fatal("the node never noticed its stall")
	}
	if rc := pubAck(t, pub, 2, "t/1", "during"); rc != packet.Success {
		t.Fatal(rc)
	}
	sub.ExpectNothing(300 * time.Millisecond)
	close(cl.gate)
	read("during", true)
	if n := s.Stats().Stalls; n != 1 {
		t.Errorf("Stalls = %d, want 1", n)
	}

	if rc := pubAck(t, pub, 3, "t/1", "after"); rc != packet.Success {
		t.Fatal(rc)
	}
	read("after", false)
}
