package broker_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/broker/packet"
)

// memCluster joins brokers in one process the way the cluster's glue and
// transport join nodes: forwards and directed deliveries carry a copy of
// the message (as the wire would) and answer asynchronously. What the glue
// learns from the registry, the test tells the brokers directly.
type memCluster struct {
	self   string
	mu     *sync.Mutex // guards nodes, which grows while the first nodes already run, and unsubs
	nodes  map[string]*broker.Server
	unsubs map[string][]string // each node's Unsubscribed calls
	down   map[string]*atomic.Bool
	views  map[string]*atomic.Uint64 // each node's Cluster.View, set by the test
	wg     *sync.WaitGroup
}

// node returns the broker named name.
func (c *memCluster) node(name string) *broker.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[name]
}

type memNet struct {
	mu     sync.Mutex
	nodes  map[string]*broker.Server
	unsubs map[string][]string
	down   map[string]*atomic.Bool
	views  map[string]*atomic.Uint64
	wg     sync.WaitGroup
}

func (n *memNet) cluster(self string) *memCluster {
	return &memCluster{self: self, mu: &n.mu, nodes: n.nodes, unsubs: n.unsubs, down: n.down, views: n.views, wg: &n.wg}
}

// wire is the copy of m another node receives: what the transport encodes.
func wire(m *broker.Message) *broker.Message {
	c := m.Clone()
	c.SetView(m.View())
	return c
}

func (c *memCluster) View() uint64 { return c.views[c.self].Load() }

func (c *memCluster) Forward(node string, m *broker.Message) {
	if c.down[node].Load() {
		return
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.node(node).ForwardFrom(c.self, wire(m))
	}()
}

var errNodeDown = errors.New("node down")

func (c *memCluster) Deliver(to broker.RemoteMember, m *broker.Message, done func(error)) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		if c.down[to.Node].Load() {
			done(errNodeDown)
			return
		}
		c.node(to.Node).DeliverFrom(c.self, to, wire(m), func(ok bool, err error) {
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

func (c *memCluster) Available(node string) bool { return !c.down[node].Load() }

func (c *memCluster) Claim(context.Context, string, bool, *broker.Will) (string, error) {
	return "", nil
}
func (c *memCluster) Release(string)               {}
func (c *memCluster) TakeWill(string, string) bool { return true }
func (c *memCluster) DropWill(string, string)      {}

func (c *memCluster) Retain(m *broker.Message, skip []string) {
	c.mu.Lock()
	nodes := slices.Collect(maps.Keys(c.nodes))
	c.mu.Unlock()
	for _, node := range nodes {
		if node == c.self || c.down[node].Load() || slices.Contains(skip, node) {
			continue
		}
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			c.node(node).RetainFrom(c.self, m.Clone())
		}()
	}
}

func (c *memCluster) Subscribed(string, string, byte) broker.Registration { return nil }

func (c *memCluster) Unsubscribed(client, filter string) broker.Registration {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.unsubs[c.self] = append(c.unsubs[c.self], client+" "+filter)
	return nil
}

// unsubscribed returns what node has unregistered so far, as "client filter".
func (n *memNet) unsubscribed(node string) []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.unsubs[node])
}

// startCluster starts brokers named n1..nN joined by one memNet.
func startCluster(t *testing.T, n int) (*memNet, []*brokertest.Server) {
	return startClusterOpts(t, n, broker.Options{})
}

// startClusterOpts is startCluster with options for every broker.
func startClusterOpts(t *testing.T, n int, opts broker.Options) (*memNet, []*brokertest.Server) {
	net := &memNet{nodes: map[string]*broker.Server{}, unsubs: map[string][]string{}, down: map[string]*atomic.Bool{}, views: map[string]*atomic.Uint64{}}
	var servers []*brokertest.Server
	for i := 1; i <= n; i++ {
		name := fmt.Sprint("n", i)
		net.down[name] = new(atomic.Bool)
		net.views[name] = new(atomic.Uint64)
		o := opts
		o.Cluster = net.cluster(name)
		s := brokertest.Start(t, o, nil)
		net.mu.Lock()
		net.nodes[name] = s.Server
		net.mu.Unlock()
		servers = append(servers, s)
	}
	t.Cleanup(net.wg.Wait)
	return net, servers
}

// member connects a raw v5 client to addr with a Receive Maximum window and
// subscribes it to $share/g/<filter> at QoS 1.
func member(t *testing.T, addr, id, filter string) *brokertest.Client {
	return windowSub(t, addr, id, "$share/g/"+filter, 100, 0)
}

// nextPayload reads the next PUBLISH of c, acknowledges it, and returns its
// payload, or "" when none arrives within d.
func nextPayload(c *brokertest.Client, d time.Duration) string {
	h, body, err := c.Read(d)
	if err != nil || h.Type != packet.PUBLISH {
		return ""
	}
	var p packet.Publish
	p.Decode(packet.V5, h.Flags, body)
	if p.QoS > 0 {
		c.Send((&packet.Ack{Type: packet.PUBACK, PacketID: p.PacketID}).Append(nil, packet.V5))
	}
	return string(p.Payload)
}

// TestClusterSeedExample is seed 000's worked example: members A, B and C
// on node 1, D on node 2 and E on node 3; ten QoS 1 publishes to node 1 go
// A B C D E A B C D E (local members first, then the remote ones in the
// registry's order), every one acknowledged only once it was accepted.
func TestClusterSeedExample(t *testing.T) {
	_, s := startCluster(t, 3)
	clients := map[string]*brokertest.Client{}
	for _, m := range []struct{ id, node string }{{"A", "n1"}, {"B", "n1"}, {"C", "n1"}, {"D", "n2"}, {"E", "n3"}} {
		i := int(m.node[1] - '1')
		clients[m.id] = member(t, s[i].Addr, m.id, "line/#")
	}
	// What the registry would tell node 1, in its order (create revision).
	s[0].SetRemoteMember(broker.RemoteMember{Node: "n2", Group: "g", Filter: "line/#", ClientID: "D", QoS: 1}, true)
	s[0].SetRemoteMember(broker.RemoteMember{Node: "n3", Group: "g", Filter: "line/#", ClientID: "E", QoS: 1}, true)

	pub, _ := brokertest.Connect(t, s[0].Addr, rawV5("pub", true))
	var got []string
	for i := range 10 {
		if rc := pubAck(t, pub, uint16(i+1), "line/1", fmt.Sprint(i)); rc != packet.Success {
			t.Fatalf("publish %d: %v", i, rc)
		}
		// The PUBACK came once a member accepted the message: find which.
		deadline := time.Now().Add(5 * time.Second)
	find:
		for time.Now().Before(deadline) {
			for _, id := range []string{"A", "B", "C", "D", "E"} {
				if nextPayload(clients[id], 5*time.Millisecond) != "" {
					got = append(got, id)
					break find
				}
			}
		}
	}
	if fmt.Sprint(got) != "[A B C D E A B C D E]" {
		t.Fatalf("deliveries %v, want A B C D E A B C D E", got)
	}
	if st := s[0].Stats(); st.ClusterDelivers != 4 {
		t.Errorf("%d directed deliveries, want 4", st.ClusterDelivers)
	}
}

// TestClusterNoDuplicate: node 2 holds an ordinary subscriber and a member
// of a group for the same topic; N publishes on node 1 reach the
// subscriber N times (one forward per message) and the group N times in
// all (one pick per message, by node 1), never more.
func TestClusterNoDuplicate(t *testing.T) {
	_, s := startCluster(t, 2)
	plain := windowSub(t, s[1].Addr, "plain", "t/#", 100, 0)
	d := member(t, s[1].Addr, "D", "t/#")
	a := member(t, s[0].Addr, "A", "t/#")
	s[0].SetRemoteRoute("n2", "t/#", true)
	s[0].SetRemoteMember(broker.RemoteMember{Node: "n2", Group: "g", Filter: "t/#", ClientID: "D", QoS: 1}, true)
	pub, _ := brokertest.Connect(t, s[0].Addr, rawV5("pub", true))
	const n = 20
	for i := range n {
		pubAck(t, pub, uint16(i+1), "t/x", fmt.Sprint(i))
	}
	count := func(c *brokertest.Client) int { return len(drainPayloads(c)) }
	if k := count(plain); k != n {
		t.Errorf("ordinary subscriber on node 2 got %d, want %d", k, n)
	}
	ka, kd := count(a), count(d)
	if ka+kd != n || ka != n/2 {
		t.Errorf("group got %d (A) + %d (D), want %d in all, half each", ka, kd, n)
	}
	if st := s[0].Stats(); st.ClusterForwards != n {
		t.Errorf("%d forwards, want one per message (%d)", st.ClusterForwards, n)
	}
}

// TestClusterRepick: a directed delivery that fails (the member is not on
// its node any more, or the node is down) passes the turn on within the
// same pass; the publisher is acknowledged only once a member took the
// message, and nothing acknowledged is lost.
func TestClusterRepick(t *testing.T) {
	net, s := startCluster(t, 3)
	a := member(t, s[0].Addr, "A", "r/#")
	e := member(t, s[2].Addr, "E", "r/#")
	// D is in node 1's copy but gone from node 2 ("not here"); node 3 is
	// up for now.
	s[0].SetRemoteMember(broker.RemoteMember{Node: "n2", Group: "g", Filter: "r/#", ClientID: "D", QoS: 1}, true)
	s[0].SetRemoteMember(broker.RemoteMember{Node: "n3", Group: "g", Filter: "r/#", ClientID: "E", QoS: 1}, true)
	pub, _ := brokertest.Connect(t, s[0].Addr, rawV5("pub", true))
	const n = 30
	for i := range n {
		if i == n/2 {
			net.down["n3"].Store(true) // E's node goes: its turns pass to A
		}
		if rc := pubAck(t, pub, uint16(i+1), "r/x", fmt.Sprint(i)); rc != packet.Success {
			t.Fatalf("publish %d: %v", i, rc)
		}
	}
	seen := map[string]int{}
	for _, c := range []*brokertest.Client{a, e} {
		for _, p := range drainPayloads(c) {
			seen[p]++
		}
	}
	for i := range n {
		if seen[fmt.Sprint(i)] != 1 {
			t.Fatalf("message %d delivered %d times (all: %v)", i, seen[fmt.Sprint(i)], seen)
		}
	}
	if st := s[0].Stats(); st.ClusterRepicks == 0 {
		t.Error("no repick counted")
	}
	if st := s[1].Stats(); st.ClusterNotHere == 0 {
		t.Error("node 2 never answered not here")
	}
}

// TestClusterNoTaker: when every member is remote and none
// can take the message (all nodes down), the publisher gets 0x97, not a
// success for a message nobody has.
func TestClusterNoTaker(t *testing.T) {
	net, s := startCluster(t, 2)
	member(t, s[1].Addr, "D", "z/#")
	s[0].SetRemoteMember(broker.RemoteMember{Node: "n2", Group: "g", Filter: "z/#", ClientID: "D", QoS: 1}, true)
	pub, _ := brokertest.Connect(t, s[0].Addr, rawV5("pub", true))
	if rc := pubAck(t, pub, 1, "z/x", "ok"); rc != packet.Success {
		t.Fatalf("with node 2 up: %v", rc)
	}
	net.down["n2"].Store(true)
	if rc := pubAck(t, pub, 2, "z/x", "lost"); rc != packet.QuotaExceeded {
		t.Fatalf("with every member unreachable: %v, want 0x97", rc)
	}
	s[0].SetRemoteMember(broker.RemoteMember{Node: "n2", Group: "g", Filter: "z/#", ClientID: "D"}, false)
	if rc := pubAck(t, pub, 3, "z/x", "none"); rc != packet.NoMatchingSubscribers {
		t.Fatalf("after the member left: %v, want 0x10", rc)
	}
}

// retainedAt reads the retained message of topic on s through a fresh
// subscriber: its payload, or "" when there is none.
func retainedAt(t *testing.T, s *brokertest.Server, topic string) string {
	t.Helper()
	c, _ := brokertest.Connect(t, s.Addr, &packet.Connect{Version: packet.V5, ClientID: []byte("peek"), CleanStart: true})
	defer c.Conn.Close()
	c.Subscribe(&packet.Subscribe{Subs: []packet.Subscription{{Filter: []byte(topic), QoS: 0}}})
	return nextPayload(c, 100*time.Millisecond)
}

// TestClusterRetained: a retained message published on one node is kept
// by every node, a clear too; two writes of a topic settle on the later
// everywhere, whatever order they arrive in; a node that was away catches
// up from a snapshot, clears included, and its older copy brings nothing
// back.
func TestClusterRetained(t *testing.T) {
	net, nodes := startCluster(t, 3)
	pub, _ := brokertest.Connect(t, nodes[0].Addr, &packet.Connect{Version: packet.V5, ClientID: []byte("pub"), CleanStart: true})
	retain := func(c *brokertest.Client, topic, payload string) {
		t.Helper()
		c.Publish(&packet.Publish{Topic: []byte(topic), QoS: 1, PacketID: 1, Retain: true, Payload: []byte(payload)})
		c.Expect(packet.PUBACK, nil)
	}
	everywhere := func(topic, want string) {
		t.Helper()
		for i, n := range nodes {
			brokertest.Eventually(t, 5*time.Second, fmt.Sprintf("node %d holds %s=%q", i+1, topic, want), func() bool {
				return retainedAt(t, n, topic) == want
			})
		}
	}
	retain(pub, "cfg/a", "v1")
	everywhere("cfg/a", "v1")
	pub2, _ := brokertest.Connect(t, nodes[1].Addr, &packet.Connect{Version: packet.V5, ClientID: []byte("pub2"), CleanStart: true})
	retain(pub2, "cfg/a", "")
	everywhere("cfg/a", "")

	// Two writes of one topic arriving in either order: the later wins.
	older := broker.NewMessage("cfg/b", []byte("old"), 0, true)
	newer := broker.NewMessage("cfg/b", []byte("new"), 0, true)
	newer.Created = older.Created.Add(time.Millisecond)
	nodes[0].RetainFrom("n9", newer.Clone())
	nodes[0].RetainFrom("n9", older.Clone())
	nodes[1].RetainFrom("n9", older.Clone())
	nodes[1].RetainFrom("n9", newer.Clone())
	if a, b := retainedAt(t, nodes[0], "cfg/b"), retainedAt(t, nodes[1], "cfg/b"); a != "new" || b != "new" {
		t.Fatalf("after both writes: node 1 %q, node 2 %q; want new on both", a, b)
	}
	if st := nodes[0].Stats(); st.RetainedStale != 1 {
		t.Errorf("node 1 counted %d stale writes, want 1", st.RetainedStale)
	}

	// Node 3 is away while cfg/c is set and then cleared, and cfg/d set.
	retain(pub, "cfg/c", "before")
	everywhere("cfg/c", "before")
	net.down["n3"].Store(true)
	retain(pub, "cfg/c", "")
	retain(pub, "cfg/d", "while away")
	net.wg.Wait()
	if got := retainedAt(t, nodes[2], "cfg/c"); got != "before" {
		t.Fatalf("node 3 was away but has cfg/c=%q", got)
	}
	net.down["n3"].Store(false)
	// Back: each side merges the other's snapshot.
	wire := func(ms []*broker.Message) []*broker.Message {
		for i := range ms {
			ms[i] = ms[i].Clone()
		}
		return ms
	}
	if n := nodes[2].MergeRetained(wire(nodes[0].RetainedSnapshot())); n != 3 {
		t.Errorf("node 3 took %d from node 1's snapshot, want 3 (cfg/b, the clear of cfg/c, cfg/d)", n)
	}
	if n := nodes[0].MergeRetained(wire(nodes[2].RetainedSnapshot())); n != 0 {
		t.Errorf("node 1 took %d from node 3's snapshot, want 0", n)
	}
	everywhere("cfg/c", "")
	everywhere("cfg/d", "while away")
}

// TestClusterSysTopicsStayLocal: a node's $SYS messages reach its own
// subscribers only, never another node's.
func TestClusterSysTopicsStayLocal(t *testing.T) {
	_, nodes := startCluster(t, 2)
	var subs []*brokertest.Client
	for i, n := range nodes {
		c, _ := brokertest.Connect(t, n.Addr, &packet.Connect{Version: packet.V5, ClientID: []byte(fmt.Sprint("sys", i)), CleanStart: true})
		c.Subscribe(&packet.Subscribe{Subs: []packet.Subscription{{Filter: []byte("$SYS/#"), QoS: 0}}})
		subs = append(subs, c)
	}
	for i, n := range nodes {
		n.SetRemoteRoute(fmt.Sprint("n", 2-i), "$SYS/#", true) // as the registry would tell it
	}
	nodes[0].Publish(broker.NewMessage("$SYS/broker/uptime", []byte("n1"), 0, false))
	if got := nextPayload(subs[0], 5*time.Second); got != "n1" {
		t.Fatalf("node 1's subscriber got %q", got)
	}
	subs[1].ExpectNothing(200 * time.Millisecond)
}

// TestDropSettlesWhatArrivedMeanwhile: a session handed over from another
// node is adopted here before the claim is written; while the claim waits
// (etcd slow), its subscriptions take their turn of the group's messages,
// all of them while the one connected member's node is unreachable. When
// the claim fails the adopted copy is dropped: the messages it was handed
// stay with the node that handed them over, but those it took here
// meanwhile, acknowledged to their publishers, must reach another member.
// (Fault-suite seed 1 lost two such messages.)
func TestDropSettlesWhatArrivedMeanwhile(t *testing.T) {
	net, s := startCluster(t, 2)
	w := member(t, s[1].Addr, "w", "t/#")
	s[0].SetRemoteMember(broker.RemoteMember{Node: "n2", Group: "g", Filter: "t/#", ClientID: "w", QoS: 1}, true)
	st := &broker.SessionState{
		Session: broker.SessionRecord{ClientID: "moved", Version: packet.V5, ExpiryInterval: 300,
			Subscriptions: []broker.SubscriptionRecord{{Filter: "$share/g/t/#", QoS: 1}}},
		Messages: []*broker.MessageRecord{{Seq: 7, Message: broker.NewMessage("t/handed", []byte("handed"), 1, false), QoS: 1,
			GroupName: "g", GroupFilter: "t/#"}},
	}
	if err := s[0].Adopt(st); err != nil {
		t.Fatal(err)
	}
	net.down["n2"].Store(true)
	pub, _ := brokertest.Connect(t, s[0].Addr, rawV5("pub", true))
	for i := 1; i <= 10; i++ {
		if rc := pubAck(t, pub, uint16(i), "t/x", fmt.Sprint(i)); rc != packet.Success {
			t.Fatalf("publish %d: %v", i, rc)
		}
	}
	s[0].Drop("moved", "") // the claim failed
	net.down["n2"].Store(false)
	got := map[string]bool{}
	for {
		p := nextPayload(w, 2*time.Second)
		if p == "" {
			break
		}
		got[p] = true
	}
	for i := 1; i <= 10; i++ {
		if !got[fmt.Sprint(i)] {
			t.Errorf("message %d, acknowledged, never reached w (got %v)", i, slices.Sorted(maps.Keys(got)))
		}
	}
	if got["handed"] {
		t.Errorf("the message handed over was given to w too: the node that handed it over still has it")
	}
}

// TestOutboxReroutesWhatFoundNoSubscriber: messages kept for node 2's
// ordinary subscriber while node 2 is away reach that subscriber on node 3,
// or on node 1 itself, when it moved there meanwhile: node 2, back,
// answers that nothing matches there, and node 1 routes them again to the
// subscriptions that match now, with DUP.
func TestOutboxReroutesWhatFoundNoSubscriber(t *testing.T) {
	for _, to := range []int{2, 0} {
		t.Run(fmt.Sprint("to node ", to+1), func(t *testing.T) { outboxReroutes(t, to) })
	}
}

func outboxReroutes(t *testing.T, to int) {
	net, s := startCluster(t, 3)
	s[0].SetRemoteRoute("n2", "plain/#", true)
	net.down["n2"].Store(true)
	pub, _ := brokertest.Connect(t, s[0].Addr, rawV5("pub", true))
	for i := range 5 {
		if rc := pubAck(t, pub, uint16(i+1), "plain/t", fmt.Sprint(i)); rc != packet.Success {
			t.Fatalf("publish %d: %v", i, rc)
		}
	}
	// The subscriber is elsewhere now; node 2 comes back without it.
	h := windowSub(t, s[to].Addr, "historian", "plain/#", 100, 3600)
	if to != 0 {
		s[0].SetRemoteRoute(fmt.Sprint("n", to+1), "plain/#", true)
	}
	net.down["n2"].Store(false)
	var got []string
	brokertest.Eventually(t, 5*time.Second, "the historian has the 5 messages", func() bool {
		h, body, err := h.Read(100 * time.Millisecond)
		if err == nil && h.Type == packet.PUBLISH {
			var p packet.Publish
			p.Decode(packet.V5, h.Flags, body)
			if !p.Dup {
				t.Errorf("message %s routed again without DUP", p.Payload)
			}
			got = append(got, string(p.Payload))
		}
		return len(got) == 5
	})
	// The in-memory transport answers and delivers in no order (the
	// mesh keeps it: the process tests check it).
	if slices.Sort(got); fmt.Sprint(got) != "[0 1 2 3 4]" {
		t.Errorf("the historian got %v, want 0 to 4", got)
	}
	q := s[0].ForwardQueues()
	if i := slices.IndexFunc(q, func(f broker.ForwardQueueStats) bool { return f.Node == "n2" }); i < 0 || q[i].Rerouted != 5 || q[i].Queued != 0 {
		t.Errorf("forward queues %+v, want 5 routed again from n2's", q)
	}
}

// TestForwardRefusedByAFullQueueIsSentAgain: a subscriber on node 2 whose
// queue is full while its client is away (backpressure, the default) makes
// node 2 refuse a forward rather than drop it: node 1's outbox sends it
// again until the client is back and its queue drains, so every
// acknowledged message arrives (fault-suite seed 5 lost 469 when a
// restarted gateway's queues filled with what the others had kept for it).
func TestForwardRefusedByAFullQueueIsSentAgain(t *testing.T) {
	s := awayHistorian(t)
	s[0].SetRemoteRoute("n2", "plain/#", true)
	pub, _ := brokertest.Connect(t, s[0].Addr, rawV5("pub", true))
	for i := range 12 {
		if rc := pubAck(t, pub, uint16(i+1), "plain/t", fmt.Sprint(i)); rc != packet.Success {
			t.Fatalf("publish %d: %v", i, rc)
		}
	}
	back, _ := brokertest.Connect(t, s[1].Addr, withExpiry(rawV5("historian", false), 3600))
	got := map[string]bool{}
	brokertest.Eventually(t, 10*time.Second, "the historian has all 12", func() bool {
		for _, p := range drainPayloads(back) {
			got[p] = true
		}
		return len(got) == 12
	})
}

// TestRerouteThatFindsNoSubscriberWaits: node 2 answers that its
// subscriber is not there any more (the session was handed to node 3), but
// node 1 has not learnt node 3's route yet. The messages node 1 routes
// again match nothing anywhere for that moment; they are kept and routed
// again until node 3's route is known, not dropped (before, they were
// dropped without a word: acknowledged, delivered to nobody).
func TestRerouteThatFindsNoSubscriberWaits(t *testing.T) {
	net, s := startCluster(t, 3)
	s[0].SetRemoteRoute("n2", "plain/#", true)
	net.down["n2"].Store(true)
	publishPlain(t, s[0].Addr, 5)
	h := windowSub(t, s[2].Addr, "historian", "plain/#", 100, 3600)
	s[0].SetRemoteRoute("n2", "plain/#", false) // n2's route went with the session
	net.down["n2"].Store(false)                 // back, without the subscriber
	brokertest.Eventually(t, 5*time.Second, "node 1 to keep the 5 that matched nothing", func() bool {
		return s[0].Unrouted().Waiting == 5
	})
	if got := drainPayloads(h); len(got) != 0 {
		t.Fatalf("the historian got %v before its route was known", got)
	}
	s[0].SetRemoteRoute("n3", "plain/#", true)
	collectDup(t, h, "the historian", 5)
	brokertest.Eventually(t, 5*time.Second, "the list to be empty", func() bool {
		u := s[0].Unrouted()
		return u.Waiting == 0 && u.Kept == 5 && u.Routed == 5 && u.Dropped == 0
	})
}

// TestFailOverNamesTheAdoptedSessions: what node 1 kept for node 2, gone
// and failed over, goes to the sessions adopted from node 2 by name. Node
// 3, where the historian was adopted, also has a subscriber of its own of
// the same topics, which had the messages when they were published: it
// gets no second copy, and the messages cannot be taken there by it in
// the historian's stead (fault suite: after the historian moved on and the
// line was restarted, its node took them for its own subscriber alone).
// A session adopted on node 1 itself gets them straight.
func TestFailOverNamesTheAdoptedSessions(t *testing.T) {
	net, s := startCluster(t, 3)
	s[0].SetRemoteRoute("n2", "plain/#", true)
	net.down["n2"].Store(true)
	publishPlain(t, s[0].Addr, 5)
	h := windowSub(t, s[2].Addr, "historian", "plain/#", 100, 3600)
	other := windowSub(t, s[2].Addr, "other", "plain/#", 100, 3600)
	local := windowSub(t, s[0].Addr, "local", "plain/#", 100, 3600)
	s[0].SetRemoteRoute("n3", "plain/#", true)
	s[0].NodeFailedOver("n2", map[string]string{"historian": "n3", "local": "", "elsewhere": "n9"}, nil)

	collectDup(t, h, "the historian", 5)
	collectDup(t, local, "local", 5)
	if got := drainPayloads(other); len(got) != 0 {
		t.Errorf("node 3's own subscriber got %v: the copies were for the historian alone", got)
	}
}

// TestUnroutedDroppedAfterItsGrace: messages routed again that no
// subscription anywhere takes (their subscriber unsubscribed while they
// were on their way) are kept for the grace, then dropped and counted.
func TestUnroutedDroppedAfterItsGrace(t *testing.T) {
	clk := brokertest.NewFakeClock()
	net, s := startClusterOpts(t, 2, broker.Options{Clock: clk})
	s[0].SetRemoteRoute("n2", "plain/#", true)
	net.down["n2"].Store(true)
	publishPlain(t, s[0].Addr, 2)
	s[0].SetRemoteRoute("n2", "plain/#", false) // its subscriber left
	net.down["n2"].Store(false)
	brokertest.Eventually(t, 5*time.Second, "node 1 to keep the 2", func() bool { return s[0].Unrouted().Waiting == 2 })
	for range 10 {
		clk.Advance(2 * time.Second)
	}
	brokertest.Eventually(t, 5*time.Second, "the 2 dropped", func() bool {
		u := s[0].Unrouted()
		return u.Waiting == 0 && u.Dropped == 2 && u.Routed == 0
	})
	if st := s[0].Stats(); st.UnroutedDropped != 2 {
		t.Errorf("Stats().UnroutedDropped = %d, want 2", st.UnroutedDropped)
	}
}

// TestFailOverOfANodeBackKeepsItsNewRun: a fail-over that ends after its
// gateway came back with a new run (a blank card) leaves that run's routes
// and its outbox alone: what was kept for it and what is published later
// still reach its subscribers, while the session adopted from its earlier
// run gets its copies by name (fault suite: one message lost, published
// 10 ms after a fail-over ended 3 s after its gateway's return).
func TestFailOverOfANodeBackKeepsItsNewRun(t *testing.T) {
	net, s := startCluster(t, 3)
	s[0].SetRemoteRoute("n2", "plain/#", true)
	net.down["n2"].Store(true)
	pub := publishPlain(t, s[0].Addr, 3)
	h := windowSub(t, s[2].Addr, "historian", "plain/#", 100, 3600)
	s[0].SetRemoteRoute("n3", "plain/#", true)
	fresh := windowSub(t, s[1].Addr, "fresh", "plain/#", 100, 3600)
	s[0].NodeFailedOver("n2", map[string]string{"historian": "n3"}, []string{"plain/#"})
	net.down["n2"].Store(false)
	if rc := pubAck(t, pub, 4, "plain/t", "3"); rc != packet.Success {
		t.Fatalf("publish after the fail-over: %v", rc)
	}
	for _, c := range []struct {
		name string
		cl   *brokertest.Client
		want int
	}{{"historian", h, 4}, {"fresh", fresh, 4}} {
		got := map[string]bool{}
		brokertest.Eventually(t, 5*time.Second, c.name+" has its messages", func() bool {
			if p := nextPayload(c.cl, 100*time.Millisecond); p != "" {
				got[p] = true
			}
			return len(got) == c.want
		})
	}
}

// publishPlain publishes n QoS 1 messages "0".."n-1" to plain/t on addr,
// each acknowledged, and returns the publisher.
func publishPlain(t *testing.T, addr string, n int) *brokertest.Client {
	t.Helper()
	pub, _ := brokertest.Connect(t, addr, rawV5("pub", true))
	for i := range n {
		if rc := pubAck(t, pub, uint16(i+1), "plain/t", fmt.Sprint(i)); rc != packet.Success {
			t.Fatalf("publish %d: %v", i, rc)
		}
	}
	return pub
}

// collectDup reads cl's messages, acknowledging each, until it has want
// distinct payloads; every one must carry DUP (a copy routed again).
func collectDup(t *testing.T, cl *brokertest.Client, name string, want int) {
	t.Helper()
	got := map[string]bool{}
	brokertest.Eventually(t, 10*time.Second, fmt.Sprintf("%s to have %d messages", name, want), func() bool {
		hd, body, err := cl.Read(100 * time.Millisecond)
		if err == nil && hd.Type == packet.PUBLISH {
			var p packet.Publish
			p.Decode(packet.V5, hd.Flags, body)
			if !p.Dup {
				t.Errorf("%s: message %s routed again without DUP", name, p.Payload)
			}
			if p.QoS > 0 {
				cl.Send((&packet.Ack{Type: packet.PUBACK, PacketID: p.PacketID}).Append(nil, packet.V5))
			}
			got[string(p.Payload)] = true
		}
		return len(got) == want
	})
}

// TestForwardRefusedGoesAgainByName: node 2 has two subscribers of the
// topic, one away with a full queue. The refusal names it, so node 1
// sends each refused message again to it alone: the other subscriber gets
// every message once, no second copies, and the refused one gets all of
// them once it is back. Sent again for node 2's ordinary subscribers, the
// other took them a second time, and once the refusing session had moved
// on, took them in its stead (fault suite: 1,949 lost).
func TestForwardRefusedGoesAgainByName(t *testing.T) {
	s := awayHistorian(t)
	other := windowSub(t, s[1].Addr, "other", "plain/#", 100, 3600)
	s[0].SetRemoteRoute("n2", "plain/#", true)
	publishPlain(t, s[0].Addr, 12)
	brokertest.Eventually(t, 5*time.Second, "node 1 to name the refused ones", func() bool {
		for _, q := range s[0].ForwardQueues() {
			if q.Node == "n2" && q.Queued == 7 {
				return true
			}
		}
		return false
	})
	back, _ := brokertest.Connect(t, s[1].Addr, withExpiry(rawV5("historian", false), 3600))
	got := map[string]bool{}
	brokertest.Eventually(t, 10*time.Second, "the historian has all 12", func() bool {
		for _, p := range drainPayloads(back) {
			got[p] = true
		}
		return len(got) == 12
	})
	seen := map[string]int{}
	for _, p := range drainPayloads(other) {
		seen[p]++
	}
	for i := range 12 {
		if n := seen[fmt.Sprint(i)]; n != 1 {
			t.Errorf("the other subscriber got message %d %d times, want once", i, n)
		}
	}
}

// TestBacklogGoesWithDUP: what node 1 kept for node 2 while node 2 was
// away reaches node 2's subscriber with DUP: it can arrive after messages
// published later that took a direct way (their publisher moved to node 2
// meanwhile), and DUP says so.
func TestBacklogGoesWithDUP(t *testing.T) {
	net, s := startCluster(t, 2)
	h := windowSub(t, s[1].Addr, "historian", "plain/#", 100, 3600)
	s[0].SetRemoteRoute("n2", "plain/#", true)
	net.down["n2"].Store(true)
	publishPlain(t, s[0].Addr, 3)
	net.down["n2"].Store(false)
	collectDup(t, h, "the historian", 3)
}

// awayHistorian starts two nodes whose queues hold 5 messages, with a
// persistent subscriber of plain/# on node 2 whose client has gone away
// (its session, and its queue, stay).
func awayHistorian(t *testing.T) []*brokertest.Server {
	t.Helper()
	_, s := startClusterOpts(t, 2, broker.Options{MaxQueuedMessages: 5})
	h := windowSub(t, s[1].Addr, "historian", "plain/#", 100, 3600)
	h.Conn.Close()
	brokertest.Eventually(t, 5*time.Second, "historian offline", func() bool { return s[1].Stats().ClientsConnected == 0 })
	return s
}
