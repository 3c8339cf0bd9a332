package broker_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/broker/packet"
	"github.com/linemq/linemq/internal/mqtttest"
)

// waitMembers waits until the group has n members.
func waitMembers(t *testing.T, srv *broker.Server, name string, n int) {
	t.Helper()
	brokertest.Eventually(t, 5*time.Second, fmt.Sprintf("group %s with %d members", name, n), func() bool {
		for _, g := range srv.ShareGroups() {
			if g.Name == name && g.Members == n {
				return true
			}
		}
		return false
	})
}

func TestShareRoundRobinExactSequence(t *testing.T) {
	_, addr := brokertest.RunServer(t, broker.Options{})
	names := []string{"A", "B", "C", "D", "E"}
	workers := make([]*mqtttest.V5, len(names))
	for i, n := range names {
		workers[i], _ = mqtttest.DialV5(t, addr, &paho.Connect{ClientID: n, CleanStart: true}, nil)
		workers[i].Sub("$share/pool/line/+/temp", 1)
	}
	pub, _ := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: "pub", CleanStart: true}, nil)
	var got []string
	for i := range 10 {
		pub.Pub("line/1/temp", 1, false, fmt.Sprint(i))
		for j, w := range workers {
			select {
			case m := <-w.Msgs:
				if m.Topic != "line/1/temp" {
					t.Fatalf("topic %s", m.Topic)
				}
				got = append(got, names[j])
			default:
			}
		}
		// Each message must have reached exactly one worker before the next.
		brokertest.Eventually(t, 5*time.Second, "one delivery", func() bool {
			for j, w := range workers {
				select {
				case <-w.Msgs:
					got = append(got, names[j])
				default:
				}
			}
			return len(got) >= i+1
		})
	}
	if s := strings.Join(got, " "); s != "A B C D E A B C D E" {
		t.Fatalf("sequence %q, want A B C D E A B C D E", s)
	}
	for _, w := range workers {
		w.None(50 * time.Millisecond)
	}
}

func TestShareTwoMembersFourMessages(t *testing.T) {
	_, addr := brokertest.RunServer(t, broker.Options{})
	a, _ := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: "a", CleanStart: true}, nil)
	b, _ := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: "b", CleanStart: true}, nil)
	a.Sub("$share/g/t", 1)
	b.Sub("$share/g/t", 1)
	pub, _ := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: "p", CleanStart: true}, nil)
	for i := range 4 {
		pub.Pub("t", 1, false, fmt.Sprint(i))
	}
	for _, w := range []*mqtttest.V5{a, b} {
		w.Next()
		w.Next()
		w.None(50 * time.Millisecond)
	}
}

func TestShareFilterSyntax(t *testing.T) {
	_, addr := brokertest.RunServer(t, broker.Options{})
	c, _ := brokertest.Connect(t, addr, rawV5("c", true))
	sa := c.Subscribe(&packet.Subscribe{Subs: []packet.Subscription{
		{Filter: []byte("$share/workers"), QoS: 1},
		{Filter: []byte("$share//sensors/#"), QoS: 1},
		{Filter: []byte("$share/a+b/x"), QoS: 1},
		{Filter: []byte("$share/g/"), QoS: 1},
		{Filter: []byte("$share/consumer1//finance"), QoS: 1},
		{Filter: []byte("$share/a#/x"), QoS: 1},
	}})
	want := "[143 143 143 143 1 143]"
	if codes(sa.Reasons) != want {
		t.Fatalf("SUBACK %v, want %s", sa.Reasons, want)
	}
	// $share/consumer1//finance matches /finance.
	pub, _ := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: "p", CleanStart: true}, nil)
	pub.Pub("/finance", 1, false, "$")
	var p packet.Publish
	c.Expect(packet.PUBLISH, &p)
	if string(p.Topic) != "/finance" {
		t.Fatalf("got %s", p.Topic)
	}
	// 3.1.1 clients get 0x80 for the invalid ones.
	v3, _ := brokertest.Connect(t, addr, &packet.Connect{Version: packet.V311, ClientID: []byte("v3"), CleanStart: true})
	sa = v3.Subscribe(&packet.Subscribe{Subs: []packet.Subscription{
		{Filter: []byte("$share/workers")}, {Filter: []byte("$share/w/ok/#"), QoS: 1},
	}})
	if codes(sa.Reasons) != "[128 1]" {
		t.Fatalf("3.1.1 SUBACK %v, want [128 1]", sa.Reasons)
	}
}

func TestShareCopiesPerGroupAndPlain(t *testing.T) {
	srv, addr := brokertest.RunServer(t, broker.Options{})
	// g1 has two members; g2 one; "both" holds a plain and a g1 subscription;
	// "other" has g1 with another filter, which is another group.
	both, _ := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: "both", CleanStart: true}, nil)
	both.Sub("$share/g1/plant/#", 1)
	both.Sub("plant/#", 1)
	m2, _ := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: "m2", CleanStart: true}, nil)
	m2.Sub("$share/g1/plant/#", 1)
	g2, _ := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: "g2", CleanStart: true}, nil)
	g2.Sub("$share/g2/plant/#", 1)
	other, _ := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: "other", CleanStart: true}, nil)
	other.Sub("$share/g1/plant/+/x", 1)
	if n := len(srv.ShareGroups()); n != 3 {
		t.Fatalf("%d groups, want 3 (g1 twice with two filters, g2)", n)
	}
	pub, _ := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: "p", CleanStart: true}, nil)
	pub.Pub("plant/1/x", 1, false, "m")
	// both: plain copy + its g1 turn (it joined first) = 2 copies.
	both.Next()
	both.Next()
	both.None(50 * time.Millisecond)
	m2.None(50 * time.Millisecond)
	g2.Next()
	other.Next()
}

func TestShareQoSDowngradeAndNoRetained(t *testing.T) {
	_, addr := brokertest.RunServer(t, broker.Options{})
	pub, _ := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: "p", CleanStart: true}, nil)
	pub.Pub("r/t", 1, true, "retained")
	w, _ := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: "w", CleanStart: true}, nil)
	w.Sub("$share/g/r/#", 0)
	w.None(100 * time.Millisecond) // never retained to a shared subscription
	pub.Pub("r/t", 2, false, "live")
	if m := w.Next(); m.QoS != 0 || string(m.Payload) != "live" {
		t.Fatalf("got qos %d %q, want QoS 0 live", m.QoS, m.Payload)
	}
}

func TestShareBackpressureSkipsFullMember(t *testing.T) {
	srv, addr := brokertest.RunServer(t, broker.Options{})
	wedged := windowSub(t, addr, "wedged", "$share/g/job", 3, 0)
	fast, _ := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: "fast", CleanStart: true}, nil)
	fast.Sub("$share/g/job", 1)
	pub, _ := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: "p", CleanStart: true}, nil)
	const n = 100
	for i := range n {
		pub.Pub("job", 1, false, fmt.Sprint(i))
	}
	seen := map[string]bool{}
	for range 3 {
		var p packet.Publish
		wedged.Expect(packet.PUBLISH, &p)
		seen[string(p.Payload)] = true
	}
	wedged.ExpectNothing(100 * time.Millisecond)
	for range n - 3 {
		m := fast.Next()
		if seen[string(m.Payload)] {
			t.Fatalf("duplicate %s", m.Payload)
		}
		seen[string(m.Payload)] = true
	}
	if len(seen) != n {
		t.Fatalf("%d distinct messages, want %d", len(seen), n)
	}
	var wedgedStats broker.MemberStats
	for _, g := range srv.ShareGroups() {
		for _, m := range g.MemberStats {
			if m.ClientID == "wedged" {
				wedgedStats = m
			}
		}
	}
	if wedgedStats.InFlight != 3 || wedgedStats.Queued != 0 {
		t.Fatalf("wedged member stats %+v, want 3 in flight and nothing queued", wedgedStats)
	}
}

func TestShareStrictRotationQueuesToFullMember(t *testing.T) {
	_, addr := brokertest.RunServer(t, broker.Options{Shares: broker.ShareOptions{
		Groups: []broker.GroupPolicy{{Name: "strict", StrictRotation: true}},
	}})
	wedged := windowSub(t, addr, "wedged", "$share/strict/job", 1, 0)
	fast, _ := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: "fast", CleanStart: true}, nil)
	fast.Sub("$share/strict/job", 1)
	pub, _ := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: "p", CleanStart: true}, nil)
	for i := range 6 {
		pub.Pub("job", 1, false, fmt.Sprint(i))
	}
	for range 3 {
		fast.Next()
	}
	fast.None(100 * time.Millisecond)
	// The wedged member holds its three, one in flight and two queued.
	var p packet.Publish
	wedged.Expect(packet.PUBLISH, &p)
	for range 2 {
		wedged.Send((&packet.Ack{Type: packet.PUBACK, PacketID: p.PacketID}).Append(nil, packet.V5))
		wedged.Expect(packet.PUBLISH, &p)
	}
}

func TestShareRedispatchOnSessionEnd(t *testing.T) {
	srv, addr := brokertest.RunServer(t, broker.Options{})
	// The doomed member never acknowledges: with a window of 5 it holds 5
	// in flight, and the rest queue behind them once the other member is
	// full too.
	doomed := windowSub(t, addr, "doomed", "$share/g/seq", 5, 0)
	survivor, _ := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: "survivor", CleanStart: true}, nil)
	survivor.Sub("$share/g/seq", 1)
	pub, _ := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: "p", CleanStart: true}, nil)
	const n = 50
	for i := range n {
		pub.Pub("seq", 1, false, fmt.Sprint(i))
	}
	got := map[string]int{}
	for range 5 {
		var p packet.Publish
		doomed.Expect(packet.PUBLISH, &p)
	}
	for range n - 5 {
		got[string(survivor.Next().Payload)]++
	}
	// Kill the member's TCP connection: session expiry 0 ends its session,
	// and its five unacknowledged QoS 1 messages go to the survivor.
	doomed.Conn.Close()
	for range 5 {
		got[string(survivor.Next().Payload)]++
	}
	for i := range n {
		if got[fmt.Sprint(i)] == 0 {
			t.Fatalf("message %d lost", i)
		}
	}
	brokertest.Eventually(t, 5*time.Second, "redispatch counted", func() bool {
		gs := srv.ShareGroups()
		return len(gs) == 1 && gs[0].Redispatched == 5 && gs[0].Members == 1
	})
}

func TestShareQoS2StaysBound(t *testing.T) {
	srv, addr := brokertest.RunServer(t, broker.Options{})
	bound, _ := brokertest.Connect(t, addr, withExpiry(rawV5("bound", true), 0))
	bound.Subscribe(&packet.Subscribe{Subs: []packet.Subscription{{Filter: []byte("$share/g/x"), QoS: 2}}})
	other, _ := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: "other", CleanStart: true}, nil)
	other.Sub("$share/g/x", 2)
	pub, _ := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: "p", CleanStart: true}, nil)
	pub.Pub("x", 2, false, "q2")
	var p packet.Publish
	bound.Expect(packet.PUBLISH, &p)
	bound.Conn.Close()
	brokertest.Eventually(t, 5*time.Second, "member gone", func() bool {
		gs := srv.ShareGroups()
		return len(gs) == 1 && gs[0].Members == 1
	})
	other.None(200 * time.Millisecond) // [MQTT-4.8.2-5]
}

func TestShareContracts(t *testing.T) {
	srv, addr := brokertest.RunServer(t, broker.Options{Shares: broker.ShareOptions{Groups: []broker.GroupPolicy{
		{Name: "hist-line3", AllowedClients: []string{"historian-*"}, MaxMembers: 1, MinMembers: 1},
		{Name: "workers", MinMembers: 2},
	}}})
	if gs := srv.ShareGroups(); len(gs) != 2 || !gs[0].Degraded || !gs[1].Degraded {
		t.Fatalf("declared empty groups should be reported degraded: %+v", gs)
	}
	intruder, _ := brokertest.Connect(t, addr, rawV5("report-prep", true))
	sa := intruder.Subscribe(&packet.Subscribe{Subs: []packet.Subscription{
		{Filter: []byte("$share/hist-line3/plant/+/telemetry"), QoS: 1},
		{Filter: []byte("$share/workers/plant/+/telemetry"), QoS: 1},
	}})
	if codes(sa.Reasons) != "[135 1]" {
		t.Fatalf("SUBACK %v, want [135 1] (not authorized, granted)", sa.Reasons)
	}
	h1, _ := brokertest.Connect(t, addr, rawV5("historian-1", true))
	if sa := h1.Subscribe(&packet.Subscribe{Subs: []packet.Subscription{{Filter: []byte("$share/hist-line3/plant/+/telemetry"), QoS: 1}}}); sa.Reasons[0] != 1 {
		t.Fatalf("allowed client refused: %v", sa.Reasons)
	}
	h2, _ := brokertest.Connect(t, addr, rawV5("historian-2", true))
	if sa := h2.Subscribe(&packet.Subscribe{Subs: []packet.Subscription{{Filter: []byte("$share/hist-line3/plant/+/telemetry"), QoS: 1}}}); sa.Reasons[0] != packet.QuotaExceeded {
		t.Fatalf("member beyond max_members: %v, want quota exceeded", sa.Reasons)
	}
	for _, g := range srv.ShareGroups() {
		switch g.Name {
		case "hist-line3":
			if g.Degraded || g.Members != 1 {
				t.Fatalf("hist-line3: %+v", g)
			}
		case "workers":
			if !g.Degraded || g.Members != 1 {
				t.Fatalf("workers with 1 of 2 members should be degraded: %+v", g)
			}
		}
	}
}

func TestShareHashStrategies(t *testing.T) {
	_, addr := brokertest.RunServer(t, broker.Options{Shares: broker.ShareOptions{Groups: []broker.GroupPolicy{
		{Name: "bytopic", Strategy: "hash_topic"},
		{Name: "bypub", Strategy: "hash_clientid"},
	}}})
	names := []string{"w0", "w1", "w2"}
	workers := make([]*mqtttest.V5, 3)
	for i, n := range names {
		workers[i], _ = mqtttest.DialV5(t, addr, &paho.Connect{ClientID: n, CleanStart: true}, nil)
		workers[i].Sub("$share/bytopic/dev/+", 1)
		workers[i].Sub("$share/bypub/pubs/#", 1)
	}
	owner := func() int {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			for i, w := range workers {
				select {
				case <-w.Msgs:
					return i
				default:
				}
			}
			time.Sleep(time.Millisecond)
		}
		t.Fatal("no worker received the message within 5s")
		return -1
	}
	pub, _ := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: "p", CleanStart: true}, nil)
	owners := map[string]int{}
	for round := range 3 {
		for d := range 12 {
			topic := fmt.Sprintf("dev/%d", d)
			pub.Pub(topic, 1, false, "")
			o := owner()
			if round == 0 {
				owners[topic] = o
			} else if owners[topic] != o {
				t.Fatalf("%s moved from %s to %s with stable membership", topic, names[owners[topic]], names[o])
			}
		}
	}
	if len(map[int]bool{owners["dev/0"]: true, owners["dev/1"]: true, owners["dev/2"]: true, owners["dev/3"]: true,
		owners["dev/4"]: true, owners["dev/5"]: true, owners["dev/6"]: true, owners["dev/7"]: true}) < 2 {
		t.Fatal("hash_topic sent every device to one worker")
	}
	// hash_clientid: every message of one publisher goes to one member.
	pubs := make([]*mqtttest.V5, 4)
	for i := range pubs {
		pubs[i], _ = mqtttest.DialV5(t, addr, &paho.Connect{ClientID: fmt.Sprint("device-", i), CleanStart: true}, nil)
	}
	for i, p := range pubs {
		first := -1
		for j := range 5 {
			p.Pub(fmt.Sprintf("pubs/%d/%d", i, j), 1, false, "")
			o := owner()
			if first < 0 {
				first = o
			} else if o != first {
				t.Fatalf("publisher %d's messages went to %s and %s", i, names[first], names[o])
			}
		}
	}
}

func TestShareStickyAndRandom(t *testing.T) {
	_, addr := brokertest.RunServer(t, broker.Options{Shares: broker.ShareOptions{Groups: []broker.GroupPolicy{
		{Name: "standby", Strategy: "sticky"},
		{Name: "rnd", Strategy: "random"},
	}}})
	a, _ := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: "a", CleanStart: true}, nil)
	b, _ := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: "b", CleanStart: true}, nil)
	for _, w := range []*mqtttest.V5{a, b} {
		w.Sub("$share/standby/s", 1)
		w.Sub("$share/rnd/r", 0)
	}
	pub, _ := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: "p", CleanStart: true}, nil)
	for range 10 {
		pub.Pub("s", 1, false, "")
	}
	for range 10 {
		a.Next()
	}
	b.None(50 * time.Millisecond)
	// The sticky member leaves: the other takes over for good.
	a.Client.Disconnect(&paho.Disconnect{})
	for range 5 {
		pub.Pub("s", 1, false, "")
	}
	for range 5 {
		b.Next()
	}
	// Random: both get some of 200.
	c, _ := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: "c", CleanStart: true}, nil)
	c.Sub("$share/rnd/r", 0)
	for range 200 {
		pub.Pub("r", 1, false, "")
	}
	nb, nc := 0, 0
	brokertest.Eventually(t, 5*time.Second, "200 random deliveries", func() bool {
		for {
			select {
			case <-b.Msgs:
				nb++
			case <-c.Msgs:
				nc++
			default:
				return nb+nc == 200
			}
		}
	})
	if nb < 50 || nc < 50 {
		t.Fatalf("random split %d/%d of 200", nb, nc)
	}
}

func TestShareOverloadBackpressureHoldsAcks(t *testing.T) {
	srv, addr := brokertest.RunServer(t, broker.Options{MaxQueuedMessages: 10})
	slow := windowSub(t, addr, "slow", "$share/g/load", 1, 0)
	pub, _ := brokertest.Connect(t, addr, rawV5("pub", true))
	const n = 20 // the most backpressure queues for one member: twice MaxQueuedMessages
	for i := range n {
		pub.Publish(&packet.Publish{Topic: []byte("load"), QoS: 1, PacketID: uint16(i + 1), Payload: []byte(fmt.Sprint(i))})
	}
	acks := 0
	for {
		h, _, err := pub.Read(300 * time.Millisecond)
		if err != nil {
			break
		}
		if h.Type == packet.PUBACK {
			acks++
		}
	}
	if acks >= n || srv.Stats().AcksHeld == 0 {
		t.Fatalf("%d of %d PUBACKs sent, %d held: the publisher was not slowed down", acks, n, srv.Stats().AcksHeld)
	}
	// The worker catches up: every message arrives, in order, and every
	// held acknowledgement is released.
	for i := range n {
		var p packet.Publish
		slow.Expect(packet.PUBLISH, &p)
		if string(p.Payload) != fmt.Sprint(i) {
			t.Fatalf("message %d: got %q", i, p.Payload)
		}
		slow.Send((&packet.Ack{Type: packet.PUBACK, PacketID: p.PacketID}).Append(nil, packet.V5))
	}
	for acks < n {
		pub.Expect(packet.PUBACK, nil)
		acks++
	}
	if d := srv.Stats().DroppedQueueFull; d != 0 {
		t.Fatalf("%d messages dropped under backpressure", d)
	}
}

func TestShareOverloadDropOldest(t *testing.T) {
	srv, addr := brokertest.RunServer(t, broker.Options{MaxQueuedMessages: 10,
		Shares: broker.ShareOptions{Overload: broker.OverloadDropOldest}})
	slow := windowSub(t, addr, "slow", "$share/g/load", 1, 0)
	pub, _ := brokertest.Connect(t, addr, rawV5("pub", true))
	for i := range 30 {
		pub.Publish(&packet.Publish{Topic: []byte("load"), QoS: 1, PacketID: uint16(i + 1), Payload: []byte(fmt.Sprint(i))})
	}
	for range 30 {
		pub.Expect(packet.PUBACK, nil)
	}
	if d := srv.Stats().DroppedQueueFull; d != 19 {
		t.Fatalf("dropped %d, want 19 (30 less 1 in flight and 10 queued)", d)
	}
	var p packet.Publish
	slow.Expect(packet.PUBLISH, &p)
	if string(p.Payload) != "0" {
		t.Fatalf("first delivery %q", p.Payload)
	}
}

// TestShareRedispatchWhenMemberGoes covers the other ways a member leaves:
// an UNSUBSCRIBE of the group, a broken connection of a persistent member
// in a group with redispatch_on_disconnect, and the last member leaving
// (the group ends; what it still held is discarded and counted).
func TestShareRedispatchWhenMemberGoes(t *testing.T) {
	srv, addr := brokertest.RunServer(t, broker.Options{Shares: broker.ShareOptions{Groups: []broker.GroupPolicy{
		{Name: "eager", RedispatchOnDisconnect: true},
	}}})
	pub, _ := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: "p", CleanStart: true}, nil)
	drain := func(w *mqtttest.V5, n int) map[string]bool {
		got := map[string]bool{}
		for range n {
			got[string(w.Next().Payload)] = true
		}
		return got
	}

	// UNSUBSCRIBE: the member's two unacknowledged messages move.
	leaver := windowSub(t, addr, "leaver", "$share/plain/u", 2, 0)
	stay, _ := mqtttest.DialV5(t, addr, &paho.Connect{ClientID: "stay", CleanStart: true}, nil)
	stay.Sub("$share/plain/u", 1)
	for i := range 4 {
		pub.Pub("u", 1, false, fmt.Sprint(i))
	}
	for range 2 {
		leaver.Expect(packet.PUBLISH, nil)
	}
	got := drain(stay, 2)
	uns := &packet.Unsubscribe{PacketID: 9, Filters: [][]byte{[]byte("$share/plain/u")}}
	leaver.Send(uns.Append(nil, packet.V5))
	for k := range drain(stay, 2) {
		got[k] = true
	}
	if len(got) != 4 {
		t.Fatalf("after UNSUBSCRIBE the survivor has %v, want all 4", got)
	}

	// redispatch_on_disconnect: a persistent member whose connection breaks
	// hands its messages over at once, without waiting for its session to
	// expire, and stays a member.
	flaky := windowSub(t, addr, "flaky", "$share/eager/e", 2, 3600)
	stay.Sub("$share/eager/e", 1)
	for i := range 4 {
		pub.Pub("e", 1, false, fmt.Sprint(i))
	}
	for range 2 {
		flaky.Expect(packet.PUBLISH, nil)
	}
	got = drain(stay, 2)
	flaky.Conn.Close()
	for k := range drain(stay, 2) {
		got[k] = true
	}
	if len(got) != 4 {
		t.Fatalf("after the broken connection the survivor has %v, want all 4", got)
	}
	for _, g := range srv.ShareGroups() {
		if g.Name == "eager" && (g.Members != 2 || g.Redispatched != 2) {
			t.Fatalf("eager group %+v: want 2 members (the offline one stays) and 2 redispatched", g)
		}
	}

	// The last member leaves: the group ends and its messages are discarded.
	last := windowSub(t, addr, "last", "$share/lonely/l", 2, 0)
	for i := range 3 {
		pub.Pub("l", 1, false, fmt.Sprint(i))
	}
	for range 2 {
		last.Expect(packet.PUBLISH, nil)
	}
	last.Conn.Close()
	brokertest.Eventually(t, 5*time.Second, "group ended", func() bool {
		for _, g := range srv.ShareGroups() {
			if g.Name == "lonely" {
				return false
			}
		}
		return true
	})
	// Its two unacknowledged messages and the queued one are discarded.
	brokertest.Eventually(t, 5*time.Second, "discards counted", func() bool { return srv.Stats().GroupDiscarded == 3 })
}
