package broker_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/broker/packet"
)

// TestParkIdleConnections: idle clients are parked (no reader goroutine),
// and a parked client still receives messages, is woken by what it sends,
// is disconnected when its keep alive runs out, and does not hold up a
// shutdown.
func TestParkIdleConnections(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("connections are parked on Linux only")
	}
	srv, addr := brokertest.RunServer(t, broker.Options{IdleParkAfter: 50 * time.Millisecond})
	base := runtime.NumGoroutine()
	const n = 50
	clients := make([]*brokertest.Client, n)
	for i := range clients {
		clients[i], _ = brokertest.Connect(t, addr, rawV5("idle-"+string(rune('A'+i%26))+string(rune('a'+i/26)), true))
	}
	brokertest.Eventually(t, 5*time.Second, "all parked", func() bool { return srv.Stats().ClientsParked == n })
	if g := runtime.NumGoroutine(); g > base+5 {
		t.Fatalf("%d goroutines with %d parked clients (baseline %d): parked clients should have none", g, n, base)
	}

	// A parked subscriber receives: delivery does not need its reader.
	sub := clients[0]
	sub.Subscribe(&packet.Subscribe{Subs: []packet.Subscription{{Filter: []byte("wake"), QoS: 1}}})
	brokertest.Eventually(t, 5*time.Second, "parked again", func() bool { return srv.Stats().ClientsParked == n })
	clients[1].Publish(&packet.Publish{Topic: []byte("wake"), QoS: 1, PacketID: 1, Payload: []byte("x")})
	clients[1].Expect(packet.PUBACK, nil)
	var p packet.Publish
	sub.Expect(packet.PUBLISH, &p)

	// A parked client that sends is served at once.
	brokertest.Eventually(t, 5*time.Second, "parked again", func() bool { return srv.Stats().ClientsParked == n })
	clients[2].Send(packet.AppendPingreq(nil))
	clients[2].Expect(packet.PINGRESP, nil)

	// A parked client whose keep alive runs out is disconnected.
	cp := rawV5("sleepy", true)
	cp.KeepAlive = 1
	sleepy, _ := brokertest.Connect(t, addr, cp)
	brokertest.Eventually(t, 5*time.Second, "sleepy parked", func() bool { return srv.Stats().ClientsParked == n+1 })
	sleepy.ExpectDisconnect(packet.KeepAliveTimeout)

	// A client that closes while parked is cleaned up.
	clients[3].Conn.Close()
	brokertest.Eventually(t, 5*time.Second, "closed client gone", func() bool { return srv.Stats().ClientsConnected == n-1 })

	// Shutdown reaches parked clients.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown with parked clients: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("shutdown took %v", d)
	}
	clients[4].ExpectDisconnect(packet.ServerShuttingDown)
}
