package broker_test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/broker/packet"
)

// filterShapes are the ways one client can shape its filters to cost the
// most, each within the default bounds of a filter (128 levels, 4096
// bytes): deep and distinct, long, or many and short.
var filterShapes = []struct {
	name   string
	filter func(client, i int) string
}{
	{"deep", func(c, i int) string {
		lv := make([]string, broker.DefaultMaxTopicLevels)
		for j := range lv {
			lv[j] = fmt.Sprintf("%d-%d-%d", c, i, j)
		}
		return strings.Join(lv, "/")
	}},
	{"long", func(c, i int) string {
		return fmt.Sprintf("%d/%d/", c, i) + strings.Repeat("x", 4000)
	}},
	{"short", func(c, i int) string { return fmt.Sprintf("s/%d/%d", c, i) }},
}

// TestSubscriptionMemoryBound: however a client shapes its filters, at
// the default bounds its subscriptions cost at most 4 MB of heap; the
// filters beyond its share are refused with 0x97 Quota exceeded.
func TestSubscriptionMemoryBound(t *testing.T) {
	const clients = 3
	for _, shape := range filterShapes {
		t.Run(shape.name, func(t *testing.T) {
			srv, addr := brokertest.RunServer(t, broker.Options{})
			heap := func() uint64 {
				var ms runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&ms)
				return ms.HeapInuse
			}
			before := heap()
			granted, refused := 0, 0
			for c := range clients {
				cl, _ := brokertest.Connect(t, addr, &packet.Connect{Version: packet.V5, ClientID: []byte(fmt.Sprint("mem-", c)), CleanStart: true})
				for batch := 0; batch < broker.DefaultMaxSubscriptionsPerClient; batch += 50 {
					var subs []packet.Subscription
					for i := batch; i < batch+50; i++ {
						subs = append(subs, packet.Subscription{Filter: []byte(shape.filter(c, i)), QoS: 1})
					}
					ack := cl.Subscribe(&packet.Subscribe{PacketID: uint16(batch/50 + 1), Subs: subs})
					for _, rc := range ack.Reasons {
						switch rc {
						case packet.GrantedQoS1:
							granted++
						case packet.QuotaExceeded:
							refused++
						default:
							t.Fatalf("SUBACK %#x", byte(rc))
						}
					}
				}
			}
			per := (int64(heap()) - int64(before)) / clients
			t.Logf("%s filters: %d granted, %d refused (0x97) for %d clients; heap %.2f MB a client", shape.name, granted, refused, clients, float64(per)/1e6)
			if per > 4e6 {
				t.Errorf("%s filters cost %.1f MB of heap a client; the bound is 4 MB", shape.name, float64(per)/1e6)
			}
			if got := srv.Stats().Subscriptions; got != granted {
				t.Errorf("%d subscriptions, %d granted", got, granted)
			}
			if got := srv.LimitStats().RefusedSubscriptionBytes; got != uint64(refused) {
				t.Errorf("RefusedSubscriptionBytes %d, %d refused", got, refused)
			}
		})
	}
}

// TestSubscriptionBytesFreed: what a client unsubscribes is its to use
// again, and a 3.1.1 client is refused with 0x80.
func TestSubscriptionBytesFreed(t *testing.T) {
	_, addr := brokertest.RunServer(t, broker.Options{MaxSubscriptionBytesPerClient: 200_000})
	deep := func(i int) []byte { return []byte(filterShapes[0].filter(9, i)) } // about 47 KB each
	c, _ := brokertest.Connect(t, addr, &packet.Connect{Version: packet.V311, ClientID: []byte("freed"), CleanStart: true})
	var subs []packet.Subscription
	for i := range 5 {
		subs = append(subs, packet.Subscription{Filter: deep(i), QoS: 1})
	}
	ack := c.Subscribe(&packet.Subscribe{PacketID: 1, Subs: subs})
	want := []packet.ReasonCode{1, 1, 1, 1, 0x80}
	for i, rc := range ack.Reasons {
		if rc != want[i] {
			t.Fatalf("SUBACK %v, want %v", ack.Reasons, want)
		}
	}
	// The same filter again costs nothing more.
	if ack := c.Subscribe(&packet.Subscribe{PacketID: 2, Subs: subs[:1]}); ack.Reasons[0] != 1 {
		t.Fatalf("subscribing again: %#x", byte(ack.Reasons[0]))
	}
	c.Send((&packet.Unsubscribe{PacketID: 3, Filters: [][]byte{deep(0)}}).Append(nil, packet.V311))
	c.Expect(packet.UNSUBACK, nil)
	if ack := c.Subscribe(&packet.Subscribe{PacketID: 4, Subs: subs[4:]}); ack.Reasons[0] != 1 {
		t.Fatalf("after an UNSUBSCRIBE freed room: %#x", byte(ack.Reasons[0]))
	}
}
