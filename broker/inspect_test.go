package broker_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/broker/packet"
)

// TestClients checks the clients snapshot against a client whose send
// window is full: connection fields, window, in flight, queue and its age,
// subscriptions, then the same session offline.
func TestClients(t *testing.T) {
	clk := brokertest.NewFakeClock()
	srv, addr := brokertest.RunServer(t, broker.Options{Clock: clk})

	cp := &packet.Connect{Version: packet.V5, ClientID: []byte("a"), CleanStart: true, KeepAlive: 30,
		UsernameFlag: true, Username: []byte("alice")}
	cp.Props.Set(packet.PropReceiveMaximum)
	cp.Props.ReceiveMaximum = 2
	cp.Props.Set(packet.PropSessionExpiry)
	cp.Props.SessionExpiry = 600
	a, _ := brokertest.Connect(t, addr, cp)
	a.Subscribe(&packet.Subscribe{Subs: []packet.Subscription{{Filter: []byte("t/#"), QoS: 1}}})

	w, _ := brokertest.Connect(t, addr, &packet.Connect{Version: packet.V5, ClientID: []byte("w"), CleanStart: true})
	w.Subscribe(&packet.Subscribe{Subs: []packet.Subscription{
		{Filter: []byte("$share/g/q/+"), QoS: 1},
		{Filter: []byte("other"), QoS: 0},
	}})

	p, _ := brokertest.Connect(t, addr, &packet.Connect{Version: packet.V311, ClientID: []byte("p"), CleanStart: true})
	for i := 1; i <= 5; i++ {
		p.Publish(&packet.Publish{QoS: 1, PacketID: uint16(i), Topic: []byte("t/x"), Payload: []byte(fmt.Sprint(i))})
		p.Expect(packet.PUBACK, nil)
	}
	// a acknowledges nothing: two in flight (its window), three queued.
	brokertest.Eventually(t, 5*time.Second, "a's window full", func() bool {
		cs, _, _ := srv.Client("a")
		return cs.InFlight == 2 && cs.Queued == 3
	})
	clk.Advance(3 * time.Second)

	all := srv.Clients()
	if len(all) != 3 || all[0].ClientID != "a" || all[1].ClientID != "p" || all[2].ClientID != "w" {
		t.Fatalf("Clients = %+v", all)
	}
	got := all[0]
	start := clk.Now().Add(-3 * time.Second) // a connected before the clock moved
	want := broker.ClientStats{
		ConnectedAt: start,
		ClientID:    "a", Connected: true, Username: "alice", RemoteAddr: a.Conn.LocalAddr().String(),
		Version: packet.V5, KeepAlive: 30 * time.Second, ReceiveMaximum: 2, ExpiryInterval: 600,
		Subscriptions: 1, InFlight: 2, Queued: 3, OldestQueued: 3 * time.Second,
		PendingBytes: got.PendingBytes, // however much the writer has not written yet
	}
	if got != want {
		t.Fatalf("a:\n got %+v\nwant %+v", got, want)
	}
	if pc := all[1]; pc.Version != packet.V311 || pc.ReceiveMaximum != 65535 || pc.Subscriptions != 0 || pc.InFlight != 0 {
		t.Fatalf("p: %+v", pc)
	}

	_, subs, ok := srv.Client("w")
	if !ok || len(subs) != 2 {
		t.Fatalf("w subscriptions %+v", subs)
	}
	if s := subs[0]; s.Filter != "$share/g/q/+" || s.Group != "g" || s.QoS != 1 {
		t.Fatalf("shared subscription %+v", s)
	}
	if s := subs[1]; s.Filter != "other" || s.Group != "" || s.QoS != 0 {
		t.Fatalf("ordinary subscription %+v", s)
	}
	if _, _, ok := srv.Client("nobody"); ok {
		t.Fatal("Client found a session that does not exist")
	}

	// Offline: the session stays with its messages; the connection fields go.
	a.Conn.Close()
	brokertest.Eventually(t, 5*time.Second, "a offline", func() bool {
		cs, _, _ := srv.Client("a")
		return !cs.Connected
	})
	cs, _, _ := srv.Client("a")
	if cs.RemoteAddr != "" || cs.ReceiveMaximum != 0 || cs.Disconnects != 1 || !cs.DisconnectedAt.Equal(clk.Now()) ||
		cs.InFlight != 2 || cs.Queued != 3 || cs.Version != packet.V5 {
		t.Fatalf("a offline: %+v", cs)
	}
}
