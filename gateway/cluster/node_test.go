package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/broker/packet"
	"github.com/linemq/linemq/gateway/cluster"
	"github.com/linemq/linemq/gateway/cluster/internal/etcdtest"
	"github.com/linemq/linemq/gateway/cluster/registry"
	"github.com/linemq/linemq/storage/bolt"
)

var shared *etcdtest.Etcd

func TestMain(m *testing.M) {
	etcdtest.MainShared(m, func(e *etcdtest.Etcd) { shared = e })
}

// memTransport carries messages between brokers of one process as the
// network would: a copy of each message, answers on another goroutine.
type memTransport struct {
	self  string
	net   *memNet
	mu    sync.Mutex
	peers map[string]bool // the nodes the registry says exist
	wg    *sync.WaitGroup
}

// memNet is every broker of the test, by node name.
type memNet struct {
	mu  sync.Mutex
	all map[string]*broker.Server
}

func (t *memTransport) peer(node string) *broker.Server {
	t.mu.Lock()
	known := t.peers[node]
	t.mu.Unlock()
	if !known {
		return nil
	}
	t.net.mu.Lock()
	defer t.net.mu.Unlock()
	return t.net.all[node]
}

func (t *memTransport) Forward(node string, m *broker.Message) {
	if p := t.peer(node); p != nil {
		t.wg.Add(1)
		go func() { defer t.wg.Done(); p.ForwardFrom(t.self, m.Clone()) }()
	}
}

func (t *memTransport) Deliver(to broker.RemoteMember, m *broker.Message, done func(error)) {
	p := t.peer(to.Node)
	if p == nil {
		done(errors.New("no such peer"))
		return
	}
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		p.DeliverFrom(t.self, to, m.Clone(), func(ok bool, err error) {
			switch {
			case err != nil:
				done(err)
			case ok:
				done(nil)
			default:
				done(broker.ErrNotHere)
			}
		})
	}()
}

func (t *memTransport) Available(node string) bool { return t.peer(node) != nil }

func (t *memTransport) Retain(node string, m *broker.Message) {
	if p := t.peer(node); p != nil {
		t.wg.Add(1)
		go func() { defer t.wg.Done(); p.RetainFrom(t.self, m.Clone()) }()
	}
}

func (t *memTransport) RetainedSnapshot(_ context.Context, node string) ([]*broker.Message, error) {
	p := t.peer(node)
	if p == nil {
		return nil, errors.New("no such peer")
	}
	var out []*broker.Message
	for _, m := range p.RetainedSnapshot() {
		out = append(out, m.Clone())
	}
	return out, nil
}

// HandOver goes through the session's binary form, as over the network.
func (t *memTransport) HandOver(_ context.Context, node, clientID string) (*broker.SessionState, error) {
	p := t.peer(node)
	if p == nil {
		return nil, errors.New("no such peer")
	}
	st, ok := p.HandOver(clientID, t.self)
	if !ok {
		return nil, nil
	}
	return broker.UnmarshalSessionState(st.AppendBinary(nil))
}

func (t *memTransport) SetPeer(node, addr string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if addr == "" {
		delete(t.peers, node)
	} else {
		t.peers[node] = true
	}
}

// gw is one gateway of the test cluster: a broker joined by the registry.
type gw struct {
	*brokertest.Server
	reg  *registry.Registry
	node *cluster.Node
	path string // the broker's bbolt file
}

// startNodes starts n gateways n1..nN sharing the test's etcd prefix.
func startNodes(t *testing.T, n int) []*gw {
	t.Helper()
	return startNodesWith(t, n, nil)
}

// startNodesWith starts n gateways as startNodes does, letting set change
// each node's registry options (its etcd client, its timings) first.
func startNodesWith(t *testing.T, n int, set func(i int, o *registry.Options)) []*gw {
	t.Helper()
	cli := shared.Client(t)
	prefix := etcdtest.Prefix(t)
	net := &memNet{all: map[string]*broker.Server{}}
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	var gws []*gw
	for i := 1; i <= n; i++ {
		name := fmt.Sprint("n", i)
		tr := &memTransport{self: name, net: net, peers: map[string]bool{}, wg: &wg}
		ro := registry.Options{Client: cli, Node: name, Prefix: prefix, Addr: "mem:" + name}
		if set != nil {
			set(i, &ro)
		}
		node, err := cluster.NewNode(cluster.NodeOptions{Registry: ro, Transport: tr})
		if err != nil {
			t.Fatal(err)
		}
		reg := node.Registry()
		path := filepath.Join(t.TempDir(), "linemq.db")
		s := brokertest.Start(t, broker.Options{Cluster: node}, func() (broker.Store, func() error) {
			st, err := bolt.Open(path, nil)
			if err != nil {
				t.Fatal(err)
			}
			return st, st.Close
		})
		net.mu.Lock()
		net.all[name] = s.Server
		net.mu.Unlock()
		if err := node.Bind(s.Server); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { reg.Close() })
		select {
		case <-reg.Ready():
		case <-time.After(15 * time.Second):
			t.Fatalf("%s: registry not ready", name)
		}
		ctx, cancel := context.WithCancel(context.Background())
		wills := make(chan struct{})
		go func() { defer close(wills); node.KeepWills(ctx) }()
		t.Cleanup(func() { cancel(); <-wills })
		gws = append(gws, &gw{Server: s, reg: reg, node: node, path: path})
	}
	return gws
}

// subscribe connects id to g and subscribes it to filter (QoS 1, a window
// of 1000, which the tests' publishers never fill: a member with a full
// window is passed over, which would blur the shares); the SUBACK comes
// once the registry has the subscription.
func subscribe(t *testing.T, g *gw, id, filter string) *brokertest.Client {
	t.Helper()
	cp := &packet.Connect{Version: packet.V5, ClientID: []byte(id), CleanStart: true}
	cp.Props.Set(packet.PropReceiveMaximum)
	cp.Props.ReceiveMaximum = 1000
	c, _ := brokertest.Connect(t, g.Addr, cp)
	c.Subscribe(&packet.Subscribe{Subs: []packet.Subscription{{Filter: []byte(filter), QoS: 1}}})
	return c
}

// members waits until g's broker sees n members in group "g".
func members(t *testing.T, g *gw, n int) {
	t.Helper()
	brokertest.Eventually(t, 15*time.Second, fmt.Sprintf("%d members", n), func() bool {
		for _, gs := range g.ShareGroups() {
			if gs.Name == "g" && gs.Members == n {
				return true
			}
		}
		return false
	})
}

func publish(t *testing.T, c *brokertest.Client, pid uint16, topic, payload string) packet.ReasonCode {
	t.Helper()
	c.Publish(&packet.Publish{Topic: []byte(topic), QoS: 1, PacketID: pid, Payload: []byte(payload)})
	var a packet.Ack
	c.Expect(packet.PUBACK, &a)
	return a.Reason
}

func next(c *brokertest.Client, d time.Duration) string {
	h, body, err := c.Read(d)
	if err != nil || h.Type != packet.PUBLISH {
		return ""
	}
	var p packet.Publish
	p.Decode(packet.V5, h.Flags, body)
	c.Send((&packet.Ack{Type: packet.PUBACK, PacketID: p.PacketID}).Append(nil, packet.V5))
	return string(p.Payload)
}

// TestSeedExampleOverEtcd is seed 000's worked example with membership
// travelling through etcd: A, B, C on node 1, D on node 2, E on node 3;
// ten QoS 1 publishes to node 1 arrive A B C D E A B C D E.
func TestSeedExampleOverEtcd(t *testing.T) {
	gws := startNodes(t, 3)
	clients := map[string]*brokertest.Client{}
	for _, m := range []struct {
		id   string
		node int
	}{{"A", 0}, {"B", 0}, {"C", 0}, {"D", 1}, {"E", 2}} {
		clients[m.id] = subscribe(t, gws[m.node], m.id, "$share/g/line/#")
	}
	members(t, gws[0], 5)
	seedSequence(t, gws[0], clients)
}

// TestOrdinaryAndGroupNoDuplicate: node 2 holds an ordinary subscriber and
// a member for the same topic; publishes on node 1 reach the subscriber
// once each and the group once each, routes and members learnt from etcd.
func TestOrdinaryAndGroupNoDuplicate(t *testing.T) {
	gws := startNodes(t, 2)
	plain := subscribe(t, gws[1], "plain", "t/#")
	d := subscribe(t, gws[1], "D", "$share/g/t/#")
	a := subscribe(t, gws[0], "A", "$share/g/t/#")
	members(t, gws[0], 2)
	brokertest.Eventually(t, 15*time.Second, "node 2's route on node 1", func() bool {
		return len(gws[0].reg.RouteNodes("t/#")) == 1
	})
	pub, _ := brokertest.Connect(t, gws[0].Addr, &packet.Connect{Version: packet.V5, ClientID: []byte("pub"), CleanStart: true})
	const n = 20
	for i := range n {
		publish(t, pub, uint16(i+1), "t/x", fmt.Sprint(i))
	}
	count := func(c *brokertest.Client) int {
		k := 0
		for next(c, 300*time.Millisecond) != "" {
			k++
		}
		return k
	}
	if k := count(plain); k != n {
		t.Errorf("ordinary subscriber got %d, want %d", k, n)
	}
	if ka, kd := count(a), count(d); ka+kd != n {
		t.Errorf("group got %d + %d, want %d", ka, kd, n)
	}
}

// TestSpreadPublishesFairShares: publishes spread over every node give
// every member its fifth, within 2 %, over 10,000 messages, node 1's three
// members together three fifths: each node picks with its own cursor over
// the same candidates (seed 000).
func TestSpreadPublishesFairShares(t *testing.T) {
	gws := startNodes(t, 3)
	ids := []string{"A", "B", "C", "D", "E"}
	where := []int{0, 0, 0, 1, 2}
	clients := make([]*brokertest.Client, len(ids))
	for i, id := range ids {
		clients[i] = subscribe(t, gws[where[i]], id, "$share/g/s/#")
	}
	for _, g := range gws {
		members(t, g, 5)
	}
	counts := make([]int, len(ids))
	var mu sync.Mutex
	var readers sync.WaitGroup
	stop := make(chan struct{})
	for i, c := range clients {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for {
				if next(c, 100*time.Millisecond) != "" {
					mu.Lock()
					counts[i]++
					mu.Unlock()
					continue
				}
				select {
				case <-stop:
					return
				default:
				}
			}
		}()
	}
	const total = 10000
	var pubs sync.WaitGroup
	for n, g := range gws {
		pubs.Add(1)
		go func() {
			defer pubs.Done()
			c := brokertest.Dial(t, g.Addr, packet.V5)
			c.Conn.Write((&packet.Connect{Version: packet.V5, ProtocolName: []byte("MQTT"), ClientID: fmt.Appendf(nil, "pub%d", n), CleanStart: true}).Append(nil))
			c.Read(5 * time.Second) // CONNACK
			share := total / len(gws)
			if n == 0 {
				share += total % len(gws)
			}
			acked := 0
			sent := 0
			for acked < share {
				// At most 50 unacknowledged: a publisher's window.
				var buf []byte
				for sent < share && sent-acked < 50 {
					sent++
					buf = (&packet.Publish{Topic: []byte("s/x"), QoS: 1, PacketID: uint16(sent%60000 + 1), Payload: []byte("m")}).Append(buf, packet.V5)
				}
				if len(buf) > 0 {
					c.Conn.Write(buf)
				}
				h, _, err := c.Read(10 * time.Second)
				if err != nil {
					t.Errorf("publisher %d: %v after %d acks", n, err, acked)
					return
				}
				if h.Type == packet.PUBACK {
					acked++
				}
			}
		}()
	}
	pubs.Wait()
	brokertest.Eventually(t, 30*time.Second, "every message delivered", func() bool {
		mu.Lock()
		defer mu.Unlock()
		sum := 0
		for _, k := range counts {
			sum += k
		}
		return sum == total
	})
	close(stop)
	readers.Wait()
	t.Logf("shares over %d messages: A %d, B %d, C %d, D %d, E %d", total, counts[0], counts[1], counts[2], counts[3], counts[4])
	for i, k := range counts {
		if d := float64(k) - total/5.0; d > total/5.0*0.02 || d < -total/5.0*0.02 {
			t.Errorf("%s got %d, want %d within 2%%", ids[i], k, total/5)
		}
	}
}

// TestSessionOwnership: a client connecting to another node takes its
// session over there: the old node disconnects it with 0x8E, and two nodes
// never serve one client. Resuming a persistent session whose state is on
// another node is refused with 0x88 rather than started empty.
func TestSessionOwnership(t *testing.T) {
	gws := startNodes(t, 2)
	first, ack := brokertest.Connect(t, gws[0].Addr, persistent("mover", true, 10))
	if ack.Reason != packet.Success {
		t.Fatalf("first CONNECT: %v", ack.Reason)
	}
	brokertest.Eventually(t, 15*time.Second, "node 2 sees node 1 own the session", func() bool {
		o, ok := gws[1].reg.SessionOwner("mover")
		return ok && o.Node == "n1"
	})
	// With clean start the client moves and its old session ends.
	second, ack := brokertest.Connect(t, gws[1].Addr, persistent("mover", true, 10))
	if ack.Reason != packet.Success || ack.SessionPresent {
		t.Fatalf("clean CONNECT on node 2: %v present %v", ack.Reason, ack.SessionPresent)
	}
	first.ExpectDisconnect(packet.SessionTakenOver)
	brokertest.Eventually(t, 15*time.Second, "node 1 has no session of mover", func() bool {
		st := gws[0].Stats()
		return st.ClientsConnected == 0 && st.Sessions == 0
	})
	brokertest.Eventually(t, 15*time.Second, "node 1 sees node 2 own the session", func() bool {
		o, ok := gws[0].reg.SessionOwner("mover")
		return ok && o.Node == "n2"
	})
	second.Send(packet.AppendPingreq(nil))
	second.Expect(packet.PINGRESP, nil)
}

// persistent is a v5 CONNECT for id with a session that lasts five minutes
// and a receive window of recvMax.
func persistent(id string, clean bool, recvMax uint16) *packet.Connect {
	c := &packet.Connect{Version: packet.V5, ClientID: []byte(id), CleanStart: clean}
	c.Props.Set(packet.PropSessionExpiry)
	c.Props.SessionExpiry = 300
	c.Props.Set(packet.PropReceiveMaximum)
	c.Props.ReceiveMaximum = recvMax
	return c
}

// TestSessionHandOver: a client resuming its session on another node
// finds it there whole: the message in flight (resent with DUP), the
// messages queued behind it in order, and its ordinary and shared
// subscriptions, now routed to the new node. The old node keeps nothing.
func TestSessionHandOver(t *testing.T) {
	gws := startNodes(t, 3)
	mover, _ := brokertest.Connect(t, gws[0].Addr, persistent("mover", true, 1))
	mover.Subscribe(&packet.Subscribe{Subs: []packet.Subscription{
		{Filter: []byte("plain/#"), QoS: 1},
		{Filter: []byte("$share/g/line/#"), QoS: 1},
	}})
	// Published on node 1 itself, so the order they are queued in is the
	// order they were published in (the test transport does not keep the
	// order of forwards; the mesh does).
	pub, _ := brokertest.Connect(t, gws[0].Addr, &packet.Connect{Version: packet.V5, ClientID: []byte("pub"), CleanStart: true})
	for i := 1; i <= 5; i++ {
		if rc := publish(t, pub, uint16(i), "plain/x", fmt.Sprint(i)); rc != packet.Success {
			t.Fatalf("publish %d: %v", i, rc)
		}
	}
	// The window of one holds message 1 in flight (not acknowledged) and
	// queues 2..5 on node 1.
	h, body, err := mover.Read(5 * time.Second)
	if err != nil || h.Type != packet.PUBLISH {
		t.Fatalf("first delivery: %v %v", h.Type, err)
	}
	var p packet.Publish
	p.Decode(packet.V5, h.Flags, body)
	if string(p.Payload) != "1" {
		t.Fatalf("first delivery %q", p.Payload)
	}

	moved, ack := brokertest.Connect(t, gws[2].Addr, persistent("mover", false, 10))
	if ack.Reason != packet.Success || !ack.SessionPresent {
		t.Fatalf("resume on node 3: %v present %v", ack.Reason, ack.SessionPresent)
	}
	mover.ExpectDisconnect(packet.SessionTakenOver)
	var got []string
	for range 5 {
		h, body, err := moved.Read(5 * time.Second)
		if err != nil || h.Type != packet.PUBLISH {
			t.Fatalf("after %v: %v %v", got, h.Type, err)
		}
		var p packet.Publish
		p.Decode(packet.V5, h.Flags, body)
		if string(p.Payload) == "1" && !p.Dup {
			t.Errorf("message 1 resent without DUP")
		}
		got = append(got, string(p.Payload))
		moved.Send((&packet.Ack{Type: packet.PUBACK, PacketID: p.PacketID}).Append(nil, packet.V5))
	}
	if fmt.Sprint(got) != "[1 2 3 4 5]" {
		t.Fatalf("resumed deliveries %v, want [1 2 3 4 5]", got)
	}
	brokertest.Eventually(t, 15*time.Second, "node 1 let the session go", func() bool {
		_, _, on1 := gws[0].Client("mover")
		_, _, on3 := gws[2].Client("mover")
		return !on1 && on3
	})
	// Its subscriptions now live on node 3: publishes on nodes 1 and 2 find it.
	members(t, gws[0], 1)
	brokertest.Eventually(t, 15*time.Second, "node 1 routes plain/# to node 3", func() bool {
		return len(gws[0].reg.Routes("n3")) == 1
	})
	pub1, _ := brokertest.Connect(t, gws[0].Addr, &packet.Connect{Version: packet.V5, ClientID: []byte("pub1"), CleanStart: true})
	publish(t, pub1, 1, "plain/x", "6")
	publish(t, pub1, 2, "line/1", "7")
	// A forward and a directed delivery: the test transport may swap them.
	after := []string{next(moved, 5*time.Second), next(moved, 5*time.Second)}
	slices.Sort(after)
	if fmt.Sprint(after) != "[6 7]" {
		t.Fatalf("after the move: got %v, want 6 (plain/x) and 7 (line/1)", after)
	}
	if st := gws[0].Stats(); st.SessionsHandedOver != 1 {
		t.Errorf("node 1 handed over %d sessions", st.SessionsHandedOver)
	}
	if st := gws[2].Stats(); st.SessionsAdopted != 1 {
		t.Errorf("node 3 adopted %d sessions", st.SessionsAdopted)
	}

	// Node 1's store kept its records until it saw node 3's claim, and
	// none after.
	brokertest.Eventually(t, 15*time.Second, "node 1 sees node 3 own the session", func() bool {
		o, ok := gws[0].reg.SessionOwner("mover")
		return ok && o.Node == "n3"
	})
	gws[0].Stop()
	st, err := bolt.Open(gws[0].path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	snap, err := st.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range snap.Sessions {
		if _, forwards := broker.ForwardQueueOf(rec.ClientID); !forwards {
			t.Fatalf("node 1's store still holds the session of %q", rec.ClientID)
		}
	}
}

// TestSeedExampleOverGRPC is seed 000's example end to end on the real
// parts: membership through etcd, messages through gateway/peer's gRPC
// streams.
func TestSeedExampleOverGRPC(t *testing.T) {
	gws, meshes := startGRPCNodes(t, 3)
	clients := map[string]*brokertest.Client{}
	for _, m := range []struct {
		id   string
		node int
	}{{"A", 0}, {"B", 0}, {"C", 0}, {"D", 1}, {"E", 2}} {
		clients[m.id] = subscribe(t, gws[m.node], m.id, "$share/g/line/#")
	}
	members(t, gws[0], 5)
	brokertest.Eventually(t, 15*time.Second, "node 1's streams to nodes 2 and 3 up", func() bool {
		return meshes[0].Hooks().Available("n2") && meshes[0].Hooks().Available("n3")
	})
	seedSequence(t, gws[0], clients)
}

// startGRPCNodes starts n gateways whose messages travel on gateway/peer's
// gRPC streams.
func startGRPCNodes(t *testing.T, n int) ([]*gw, []*cluster.Cluster) {
	t.Helper()
	cli := shared.Client(t)
	prefix := etcdtest.Prefix(t)
	var gws []*gw
	var meshes []*cluster.Cluster
	for i := 1; i <= n; i++ {
		g, mesh := startGRPCNode(t, cli, prefix, fmt.Sprint("n", i))
		gws, meshes = append(gws, g), append(meshes, mesh)
	}
	return gws, meshes
}

// startGRPCNode starts one gateway of a gRPC cluster, syncing its retained
// messages as the gateway does.
func startGRPCNode(t *testing.T, cli *clientv3.Client, prefix, name string) (*gw, *cluster.Cluster) {
	t.Helper()
	c, err := cluster.Start(context.Background(), cluster.Options{
		Node: name, Name: "test", Listen: "127.0.0.1:0",
		Etcd: cluster.EtcdOptions{Client: cli, Prefix: prefix},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	s := brokertest.Start(t, broker.Options{Cluster: c.Hooks()}, nil)
	if err := c.Bind(s.Server); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.Ready():
	case <-time.After(15 * time.Second):
		t.Fatalf("%s: not ready", name)
	}
	return &gw{Server: s, reg: c.Registry()}, c
}

// retainedAt reads topic's retained message on g through a fresh
// subscriber: its payload, or "" when there is none.
func retainedAt(t *testing.T, g *gw, topic string) string {
	t.Helper()
	c, _ := brokertest.Connect(t, g.Addr, &packet.Connect{Version: packet.V5, ClientID: []byte("peek"), CleanStart: true})
	defer c.Conn.Close()
	c.Subscribe(&packet.Subscribe{Subs: []packet.Subscription{{Filter: []byte(topic), QoS: 1}}})
	return next(c, 100*time.Millisecond)
}

// TestRetainedAcrossNodes: a retained message published on one node is
// kept by every node, over the real mesh; a node that joins later pulls it
// with the others' snapshot; a clear reaches every node too.
func TestRetainedAcrossNodes(t *testing.T) {
	cli := shared.Client(t)
	prefix := etcdtest.Prefix(t)
	n1, _ := startGRPCNode(t, cli, prefix, "n1")
	n2, m2 := startGRPCNode(t, cli, prefix, "n2")
	brokertest.Eventually(t, 15*time.Second, "node 2's stream to node 1 up", func() bool { return m2.Hooks().Available("n1") })
	pub, _ := brokertest.Connect(t, n1.Addr, &packet.Connect{Version: packet.V5, ClientID: []byte("pub"), CleanStart: true})
	pub.Publish(&packet.Publish{Topic: []byte("line/1/recipe"), QoS: 1, PacketID: 1, Retain: true, Payload: []byte("r42")})
	pub.Expect(packet.PUBACK, nil)
	brokertest.Eventually(t, 15*time.Second, "node 2 keeps the retained message", func() bool {
		return retainedAt(t, n2, "line/1/recipe") == "r42"
	})

	n3, _ := startGRPCNode(t, cli, prefix, "n3")
	brokertest.Eventually(t, 15*time.Second, "node 3, joining later, has it from a snapshot", func() bool {
		return retainedAt(t, n3, "line/1/recipe") == "r42"
	})

	pub.Publish(&packet.Publish{Topic: []byte("line/1/recipe"), QoS: 1, PacketID: 2, Retain: true, Payload: []byte{}})
	pub.Expect(packet.PUBACK, nil)
	for i, g := range []*gw{n2, n3} {
		brokertest.Eventually(t, 15*time.Second, fmt.Sprintf("node %d cleared it", i+2), func() bool {
			return retainedAt(t, g, "line/1/recipe") == ""
		})
	}
	if st := n3.Stats(); st.RetainedFromPeers < 2 {
		t.Errorf("node 3 took %d retained writes from its peers, want 2 (the snapshot's and the clear)", st.RetainedFromPeers)
	}
}

// TestSessionHandOverOverGRPC moves a session with queued messages between
// two nodes over the real mesh; and refuses (0x88) to resume a session
// whose node cannot be reached, rather than start it empty.
func TestSessionHandOverOverGRPC(t *testing.T) {
	gws, meshes := startGRPCNodes(t, 3)
	mover, _ := brokertest.Connect(t, gws[0].Addr, persistent("mover", true, 10))
	mover.Subscribe(&packet.Subscribe{Subs: []packet.Subscription{{Filter: []byte("plain/#"), QoS: 1}}})
	mover.Send((&packet.Disconnect{}).Append(nil, packet.V5))
	mover.ExpectClosed()
	pub, _ := brokertest.Connect(t, gws[0].Addr, &packet.Connect{Version: packet.V5, ClientID: []byte("pub"), CleanStart: true})
	for i := 1; i <= 3; i++ {
		publish(t, pub, uint16(i), "plain/x", fmt.Sprint(i))
	}
	brokertest.Eventually(t, 15*time.Second, "node 2's stream to node 1 up", func() bool { return meshes[1].Hooks().Available("n1") })
	moved, ack := brokertest.Connect(t, gws[1].Addr, persistent("mover", false, 10))
	if ack.Reason != packet.Success || !ack.SessionPresent {
		t.Fatalf("resume on node 2: %v present %v", ack.Reason, ack.SessionPresent)
	}
	for _, want := range []string{"1", "2", "3"} {
		if got := next(moved, 5*time.Second); got != want {
			t.Fatalf("got %q, want %q", got, want)
		}
	}
	moved.Send((&packet.Disconnect{}).Append(nil, packet.V5))
	moved.ExpectClosed()

	// Node 2 holds it now; with node 2's mesh gone, node 3 cannot get it.
	brokertest.Eventually(t, 15*time.Second, "node 3 sees node 2 own the session", func() bool {
		o, ok := gws[2].reg.SessionOwner("mover")
		return ok && o.Node == "n2"
	})
	meshes[1].CloseMesh()
	_, ack = brokertest.Connect(t, gws[2].Addr, persistent("mover", false, 10))
	if ack.Reason != packet.ServerUnavailable {
		t.Fatalf("resume while the owner is unreachable: CONNACK %v, want 0x88", ack.Reason)
	}
	if n := gws[1].Stats().Sessions; n != 1 {
		t.Fatalf("node 2 holds %d sessions, want its 1", n)
	}
}

// seedSequence publishes ten QoS 1 messages to g and checks that they went
// to A B C D E A B C D E: seed 000's sequence.
func seedSequence(t *testing.T, g *gw, clients map[string]*brokertest.Client) {
	t.Helper()
	pub, _ := brokertest.Connect(t, g.Addr, &packet.Connect{Version: packet.V5, ClientID: []byte("pub"), CleanStart: true})
	var got []string
	for i := range 10 {
		if rc := publish(t, pub, uint16(i+1), "line/1", fmt.Sprint(i)); rc != packet.Success {
			t.Fatalf("publish %d: %v", i, rc)
		}
		// The PUBACK came once a member accepted the message: find which.
		deadline := time.Now().Add(5 * time.Second)
	find:
		for time.Now().Before(deadline) {
			for _, id := range []string{"A", "B", "C", "D", "E"} {
				if next(clients[id], 5*time.Millisecond) != "" {
					got = append(got, id)
					break find
				}
			}
		}
	}
	if fmt.Sprint(got) != "[A B C D E A B C D E]" {
		t.Fatalf("deliveries %v, want A B C D E A B C D E", got)
	}
}

// startCuttableLine starts three nodes with a 2 s lease, node 3 reaching
// etcd through a proxy the test can cut.
func startCuttableLine(t *testing.T) ([]*gw, *etcdtest.Proxy) {
	t.Helper()
	cli3, proxy := shared.ProxiedClient(t)
	gws := startNodesWith(t, 3, func(i int, o *registry.Options) {
		o.TTL = 2 * time.Second
		o.WatchCheck, o.WatchTimeout, o.RequestTimeout = 100*time.Millisecond, time.Second, time.Second
		if i == 3 {
			o.Client = cli3
		}
	})
	return gws, proxy
}

// TestSessionLostWhileCutOff is issue 21's second recipe: a node cut off
// from etcd for longer than its lease keeps its client connected; the same
// client id then connects to another node. Once the cut-off node is back
// in step it must close its connection (0x8E): its copy replays the
// deletion of its own record and then the other node's claim, which names
// no predecessor, so "the claim took it from me" is not how it learns.
func TestSessionLostWhileCutOff(t *testing.T) {
	gws, proxy := startCuttableLine(t)
	on3, _ := brokertest.Connect(t, gws[2].Addr, &packet.Connect{Version: packet.V5, ClientID: []byte("dual"), CleanStart: true})
	brokertest.Eventually(t, 10*time.Second, "node 3 owns dual", func() bool {
		o, ok := gws[0].reg.SessionOwner("dual")
		return ok && o.Node == "n3"
	})
	proxy.Cut()
	brokertest.Eventually(t, 20*time.Second, "node 3's lease expired", func() bool {
		_, ok := gws[0].reg.SessionOwner("dual")
		return !ok
	})
	on1, _ := brokertest.Connect(t, gws[0].Addr, &packet.Connect{Version: packet.V5, ClientID: []byte("dual"), CleanStart: true})
	defer on1.Conn.Close()
	healed := time.Now()
	proxy.Resume()
	on3.ExpectDisconnect(packet.SessionTakenOver)
	t.Logf("node 3 closed its connection %v after the heal", time.Since(healed).Round(time.Millisecond))
	on1.ExpectNothing(500 * time.Millisecond)
}

// TestWillsOfACutOffNode: a node cut off from etcd for longer than its
// lease is dead to the line, which publishes its client's will (the
// client, connected to it, cannot reach the rest of the line). When the
// node is back, it closes that client's connection (0x98) without
// publishing the will a second time: the client connects again and gives
// the line a will again, where a Sparkplug edge node would otherwise never
// send its birth after the death the others saw.
func TestWillsOfACutOffNode(t *testing.T) {
	gws, proxy := startCuttableLine(t)
	watcher := subscribe(t, gws[0], "watcher", "will/#")
	defer watcher.Conn.Close()
	cp := &packet.Connect{Version: packet.V5, ClientID: []byte("edge"), CleanStart: true,
		WillFlag: true, WillQoS: 1, WillTopic: []byte("will/edge"), WillPayload: []byte("NDEATH")}
	cp.Props.Set(packet.PropSessionExpiry)
	cp.Props.SessionExpiry = 3600
	edge, _ := brokertest.Connect(t, gws[2].Addr, cp)
	defer edge.Conn.Close()

	proxy.Cut()
	if got := next(watcher, 15*time.Second); got != "NDEATH" {
		t.Fatalf("the will of node 3's client: %q, want NDEATH", got)
	}
	healed := time.Now()
	proxy.Resume()
	edge.ExpectDisconnect(packet.AdministrativeAction)
	t.Logf("node 3 closed its client %v after the heal", time.Since(healed).Round(time.Millisecond))
	if got := next(watcher, time.Second); got != "" {
		t.Fatalf("the will published a second time: %q", got)
	}
	// The client comes back, with its will held by the line again, and
	// its session (expiry 3600) was kept.
	cp.CleanStart = false
	again, ack := brokertest.Connect(t, gws[2].Addr, cp)
	defer again.Conn.Close()
	if !ack.SessionPresent {
		t.Error("the session did not survive the close")
	}
	brokertest.Eventually(t, 10*time.Second, "the line holds the will again", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, ok, _ := gws[0].reg.Will(ctx, "edge")
		return ok
	})
}

// TestMemberLeavesMidStream is issue 21's fourth recipe: while a member on
// one node unsubscribes, a publisher on another node keeps publishing at
// QoS 1. Other members exist and no queue is full, so every publish must
// be acknowledged 0x00: a "not here" answer re-picks within the pass, and
// 0x97 keeps its documented meaning (full queues).
func TestMemberLeavesMidStream(t *testing.T) {
	gws, _ := startGRPCNodes(t, 3)
	var readers sync.WaitGroup
	var got sync.Map
	var conns []*brokertest.Client
	defer func() {
		for _, c := range conns {
			c.Conn.Close()
		}
		readers.Wait()
	}()
	for i, id := range []string{"w1", "w2", "w3"} {
		c := subscribe(t, gws[i], id, "$share/g/t/#")
		conns = append(conns, c)
		readers.Go(func() {
			for {
				h, body, err := c.Read(5 * time.Second)
				if err != nil || h.Type != packet.PUBLISH {
					return
				}
				var p packet.Publish
				if p.Decode(packet.V5, h.Flags, body) == nil {
					got.Store(string(p.Payload), id)
					// Not Send: its failure (the test closing the
					// connection as it ends) would fail the test.
					c.Conn.Write((&packet.Ack{Type: packet.PUBACK, PacketID: p.PacketID}).Append(nil, packet.V5))
				}
			}
		})
	}
	for _, g := range gws {
		members(t, g, 3)
	}
	pub, _ := brokertest.Connect(t, gws[0].Addr, &packet.Connect{Version: packet.V5, ClientID: []byte("pub"), CleanStart: true})
	refused := 0
	for round := range 5 {
		w2 := subscribe(t, gws[1], fmt.Sprint("leaver", round), "$share/g/t/#")
		for _, g := range gws {
			members(t, g, 4)
		}
		for n := range 60 {
			if n == 20 {
				w2.Send((&packet.Unsubscribe{PacketID: 7, Filters: [][]byte{[]byte("$share/g/t/#")}}).Append(nil, packet.V5))
			}
			pub.Publish(&packet.Publish{Topic: []byte("t/x"), QoS: 1, PacketID: uint16(n + 1), Payload: fmt.Appendf(nil, "%d-%d", round, n)})
			var a packet.Ack
			pub.Expect(packet.PUBACK, &a)
			if a.Reason != packet.Success {
				refused++
			}
		}
		w2.Conn.Close()
		for _, g := range gws {
			members(t, g, 3)
		}
	}
	if refused > 0 {
		t.Errorf("%d of 300 publishes refused while a member left, with two members always there", refused)
	}
}

// TestUnclaimedSessionGivenUp is the state that lost acknowledged messages
// in the fault suite (seed 1): a node holds a persistent member's session
// that no claim of its current run covers (a restarted node that took its
// previous run's record for its own, the record going with that run's
// lease), and the client resumes on another node, which finds no record
// and claims the client afresh. The node holding the old copy must give it
// up when it sees that claim: left a member of the group, it would take
// the client's turn of messages, acknowledged and never delivered.
func TestUnclaimedSessionGivenUp(t *testing.T) {
	gws := startNodes(t, 3)
	stB, _ := brokertest.Connect(t, gws[2].Addr, persistent("stB", true, 100))
	stB.Subscribe(&packet.Subscribe{Subs: []packet.Subscription{{Filter: []byte("$share/g/t/#"), QoS: 1}}})
	stA := subscribe(t, gws[0], "stA", "$share/g/t/#")
	for _, g := range gws {
		members(t, g, 2)
	}
	stB.Conn.Close() // offline; its session stays on node 3
	brokertest.Eventually(t, 10*time.Second, "node 3 keeps stB offline", func() bool {
		return gws[2].Stats().ClientsConnected == 0 && gws[2].Stats().Sessions == 1
	})

	// Node 3's record of stB goes (with a lease, here released) and node 3
	// holds the session without a claim of its own.
	if err := gws[2].reg.ReleaseSession(t.Context(), "stB"); err != nil {
		t.Fatal(err)
	}
	gws[2].node.ForgetClaims()
	brokertest.Eventually(t, 10*time.Second, "node 1 sees no owner of stB", func() bool {
		_, ok := gws[0].reg.SessionOwner("stB")
		return !ok
	})

	resumed, ack := brokertest.Connect(t, gws[0].Addr, persistent("stB", false, 100))
	if ack.Reason != packet.Success {
		t.Fatalf("resume on node 1: %v", ack.Reason)
	}
	if !ack.SessionPresent {
		resumed.Subscribe(&packet.Subscribe{Subs: []packet.Subscription{{Filter: []byte("$share/g/t/#"), QoS: 1}}})
	}
	brokertest.Eventually(t, 10*time.Second, "node 3 gives stB's session up", func() bool {
		return gws[2].Stats().Sessions == 0
	})
	for _, g := range gws {
		members(t, g, 2)
	}

	pub, _ := brokertest.Connect(t, gws[1].Addr, &packet.Connect{Version: packet.V5, ClientID: []byte("pub"), CleanStart: true})
	for i := 1; i <= 20; i++ {
		if rc := publish(t, pub, uint16(i), "t/x", fmt.Sprint(i)); rc != packet.Success {
			t.Fatalf("publish %d: %v", i, rc)
		}
	}
	got := map[string]bool{}
	for _, c := range []*brokertest.Client{stA, resumed} {
		for {
			p := next(c, 500*time.Millisecond)
			if p == "" {
				break
			}
			got[p] = true
		}
	}
	if len(got) != 20 {
		t.Fatalf("%d of 20 acknowledged messages reached stA or stB", len(got))
	}
}
