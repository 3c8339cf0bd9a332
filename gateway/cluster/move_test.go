package cluster_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/broker/packet"
)

// TestOrdinarySubscriberMovesWithoutAGap moves a persistent QoS 1 ordinary
// subscriber back and forth between two nodes of three while publishers on
// all three publish to it without pause: every acknowledged message
// reaches it, any second copy with DUP. Before the old node carried what
// arrived for the subscriber during the move to the new one (broker/
// redirect.go), the messages published in the milliseconds between the
// old node letting the session go and the other nodes seeing the new
// node's routes were acknowledged and never delivered.
func TestOrdinarySubscriberMovesWithoutAGap(t *testing.T) {
	gws, meshes := startGRPCNodes(t, 3)
	brokertest.Eventually(t, 15*time.Second, "every stream up", func() bool {
		for i, m := range meshes {
			for j := range meshes {
				if i != j && !m.Hooks().Available(fmt.Sprint("n", j+1)) {
					return false
				}
			}
		}
		return true
	})

	var mu sync.Mutex
	copies := map[string]int{}    // payload -> copies received
	plain := map[string]int{}     // payload -> copies received without DUP
	var order []string            // the copies without DUP, as they arrived
	seen := map[string][]string{} // payload -> the connections that got it, for the report
	var readers sync.WaitGroup
	// read takes c's deliveries, acknowledging each, until its connection
	// closes (the session moved on).
	read := func(c *brokertest.Client, conn string) {
		defer readers.Done()
		for {
			h, body, err := c.Read(30 * time.Second)
			if err != nil {
				return
			}
			if h.Type != packet.PUBLISH {
				continue
			}
			var p packet.Publish
			if err := p.Decode(packet.V5, h.Flags, body); err != nil {
				return
			}
			mu.Lock()
			copies[string(p.Payload)]++
			seen[string(p.Payload)] = append(seen[string(p.Payload)], fmt.Sprintf("%s (DUP %v, packet id %d)", conn, p.Dup, p.PacketID))
			if !p.Dup {
				plain[string(p.Payload)]++
				order = append(order, string(p.Payload))
			}
			mu.Unlock()
			c.Conn.Write((&packet.Ack{Type: packet.PUBACK, PacketID: p.PacketID}).Append(nil, packet.V5))
		}
	}
	// A subscriber of the same topics on every node, as a line's other
	// consumers would be: each node then gets the messages for its own,
	// the new node included, so the moving session can meet a message
	// both in the state handed over and on its way to the new node.
	var others sync.WaitGroup
	var bystanders []*brokertest.Client
	for i, g := range gws {
		b := subscribe(t, g, fmt.Sprint("bystander", i), "plain/#")
		bystanders = append(bystanders, b)
		others.Add(1)
		go func() {
			defer others.Done()
			for {
				h, body, err := b.Read(30 * time.Second)
				if err != nil {
					return
				}
				var p packet.Publish
				if h.Type == packet.PUBLISH && p.Decode(packet.V5, h.Flags, body) == nil {
					b.Conn.Write((&packet.Ack{Type: packet.PUBACK, PacketID: p.PacketID}).Append(nil, packet.V5))
				}
			}
		}()
	}
	sub, _ := brokertest.Connect(t, gws[1].Addr, persistent("hist", true, 1000))
	sub.Subscribe(&packet.Subscribe{Subs: []packet.Subscription{{Filter: []byte("plain/#"), QoS: 1}}})
	for i, g := range gws {
		for j := range gws {
			if i != j {
				brokertest.Eventually(t, 15*time.Second, "the routes known", func() bool { return len(g.reg.Routes(fmt.Sprint("n", j+1))) == 1 })
			}
		}
	}
	readers.Add(1)
	go read(sub, "connection 0 on n2")
	last := sub

	// One publisher per node, each waiting for its PUBACK before the next.
	stop := make(chan struct{})
	var pubs sync.WaitGroup
	acked := make([][]string, len(gws))
	for i, g := range gws {
		pub, _ := brokertest.Connect(t, g.Addr, &packet.Connect{Version: packet.V5, ClientID: []byte(fmt.Sprint("pub", i)), CleanStart: true})
		pubs.Add(1)
		go func() {
			defer pubs.Done()
			for seq := 1; ; seq++ {
				select {
				case <-stop:
					return
				default:
				}
				payload := fmt.Sprintf("p%d/%d", i, seq)
				pid := uint16(seq%60000 + 1)
				p := &packet.Publish{Topic: []byte("plain/x"), QoS: 1, PacketID: pid, Payload: []byte(payload)}
				if _, err := pub.Conn.Write(p.Append(nil, packet.V5)); err != nil {
					return
				}
				h, body, err := pub.Read(10 * time.Second)
				if err != nil || h.Type != packet.PUBACK {
					return
				}
				var a packet.Ack
				if a.Decode(packet.V5, packet.PUBACK, body) == nil && a.Reason == packet.Success {
					acked[i] = append(acked[i], payload)
				}
			}
		}()
	}

	const moves = 8
	at := []int{2, 1} // the nodes the subscriber moves to, in turn
	for k := range moves {
		time.Sleep(150 * time.Millisecond) // let messages flow between moves: the load, not a wait for a condition
		g := gws[at[k%2]]
		moved, ack := brokertest.Connect(t, g.Addr, persistent("hist", false, 1000))
		if ack.Reason != packet.Success || !ack.SessionPresent {
			t.Fatalf("move %d to n%d: %v, session present %v", k+1, at[k%2]+1, ack.Reason, ack.SessionPresent)
		}
		// The old connection is read to its end before the new one:
		// what arrives then is in the order it was delivered.
		readers.Wait()
		readers.Add(1)
		go read(moved, fmt.Sprintf("connection %d on n%d", k+1, at[k%2]+1))
		last = moved
	}
	time.Sleep(150 * time.Millisecond)
	close(stop)
	pubs.Wait()

	var want []string
	for _, a := range acked {
		want = append(want, a...)
	}
	missing := func() []string {
		mu.Lock()
		defer mu.Unlock()
		var out []string
		for _, p := range want {
			if copies[p] == 0 {
				out = append(out, p)
			}
		}
		return out
	}
	if !brokertest.Until(20*time.Second, func() bool { return len(missing()) == 0 }) {
		m := missing()
		t.Fatalf("%d of %d acknowledged messages never reached the subscriber across %d moves (first: %v)", len(m), len(want), moves, m[:min(len(m), 10)])
	}
	last.Conn.Close()
	readers.Wait()
	for _, b := range bystanders {
		b.Conn.Close()
	}
	others.Wait()
	for p, n := range plain {
		if n > 1 {
			t.Errorf("%s delivered %d times without DUP: %v", p, n, seen[p])
		}
	}
	high := map[int]int{}
	for _, p := range order {
		var pub, seq int
		fmt.Sscanf(p, "p%d/%d", &pub, &seq)
		if seq < high[pub] {
			t.Errorf("%s arrived after p%d/%d without DUP", p, pub, high[pub])
		}
		high[pub] = max(high[pub], seq)
	}
	dups := 0
	for _, n := range copies {
		dups += n - 1
	}
	t.Logf("%d acknowledged messages from 3 publishers across %d moves, all delivered; %d second copies", len(want), moves, dups)
}
