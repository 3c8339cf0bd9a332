package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/broker/packet"
)

// freeAddr returns a loopback host:port the OS has just handed out; etcd's
// member URLs must be known before it listens.
func freeAddr(t *testing.T) string { return freeAddrs(t, 1)[0] }

// freeAddrs returns n distinct loopback host:ports: all are held open
// until each is known, since a port closed at once may be handed out again
// by the next call (etcd then refuses a duplicate URL).
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	var out []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		out = append(out, l.Addr().String())
	}
	return out
}

// worker is a persistent share-group member reading in the background.
type worker struct {
	got     *crashTracker
	conn    *brokertest.Client
	done    chan struct{}
	n       atomic.Int64 // messages received on this connection
	present bool         // the CONNACK's Session Present
}

func startWorker(t *testing.T, addr, id string, clean bool, got *crashTracker) *worker {
	t.Helper()
	return startSubscriber(t, addr, id, "$share/g/cl/#", clean, got)
}

// startSubscriber connects id to addr with a persistent session (a clean
// one subscribing to filter at QoS 1) and counts the numbered payloads it
// receives in got, acknowledging each.
func startSubscriber(t *testing.T, addr, id, filter string, clean bool, got *crashTracker) *worker {
	t.Helper()
	var (
		c       *brokertest.Client
		present bool
		err     error
	)
	// Right after a fault a gateway may refuse a session it cannot get
	// from the node that holds it yet (0x88, try again): the client tries
	// again, as MQTT clients do, for a bounded time.
	brokertest.Until(20*time.Second, func() bool {
		c, present, err = dialMQTT(addr, id, clean)
		return err == nil || !strings.Contains(err.Error(), packet.ServerUnavailable.String())
	})
	if err != nil {
		t.Fatalf("%s: %v", id, err)
	}
	if clean {
		c.Write((&packet.Subscribe{PacketID: 1, Subs: []packet.Subscription{{Filter: []byte(filter), QoS: 1}}}).Append(nil, packet.V5))
	}
	return consume(c, present, got)
}

// consume counts in got the numbered payloads c receives, acknowledging
// each.
func consume(c *brokertest.Client, present bool, got *crashTracker) *worker {
	w := &worker{got: got, conn: c, done: make(chan struct{}), present: present}
	go func() {
		defer close(w.done)
		for {
			h, body, err := c.Read(time.Minute)
			if err != nil {
				return
			}
			if h.Type != packet.PUBLISH {
				continue
			}
			var p packet.Publish
			if p.Decode(packet.V5, h.Flags, body) != nil {
				return
			}
			if seq, err := strconv.ParseUint(string(p.Payload), 10, 64); err == nil {
				got.addCopy(seq, p.Dup)
				w.n.Add(1)
			}
			c.Write((&packet.Ack{Type: packet.PUBACK, PacketID: p.PacketID}).Append(nil, packet.V5))
		}
	}()
	return w
}

var readyRE = regexp.MustCompile(`msg=ready .*mqtt=(\S+)`)

// The fault tests run three real linemq processes, each hosting one of
// three etcd members, with a persistent QoS 1 member of one share group
// and a QoS 1 publisher on every node. Payloads are tagged with their
// publisher and sequence number. Whatever the fault, every message a
// publisher had acknowledged must reach a member; duplicates are counted
// and reported, not failed.

// TestClusterNodeKilled: node 3 is killed with SIGKILL mid-stream and
// restarted on its data directory; its member and publisher come back,
// and node 3 is routed to again.
func TestClusterNodeKilled(t *testing.T) { clusterFault(t, "kill") }

// TestClusterNodeStopped: node 3 is frozen (SIGSTOP) for 10 seconds, then
// resumed: a hung node is passed over, and what it held is delivered when
// it wakes.
func TestClusterNodeStopped(t *testing.T) { clusterFault(t, "stop") }

// TestClusterEtcdLeaderKilled: the node hosting the etcd leader is killed
// and restored; the two others elect a new leader and go on serving.
func TestClusterEtcdLeaderKilled(t *testing.T) { clusterFault(t, "leader") }

// TestClusterClientMoves: node 1's member drops its connection and
// resumes its session on node 2, finding there what was queued for it.
func TestClusterClientMoves(t *testing.T) { clusterFault(t, "move") }

// cluster3 is three linemq processes, each hosting an etcd member.
type cluster3 struct {
	t       *testing.T
	dir     string
	peers   [3]string
	clients [3]string // etcd client URLs
	ic      string
	ds      [3]*daemon
	addrs   [3]string // MQTT
	https   [3]string // the status pages, with -http-listen in extra
	extra   []string  // flags every node gets besides the cluster's
}

// readyAddrsRE reads both addresses of a ready line.
var readyAddrsRE = regexp.MustCompile(`msg=ready .*mqtt=(\S+)(?: http=(\S+))?`)

func startCluster3(t *testing.T, extra ...string) *cluster3 {
	c := newCluster3(t, extra...)
	for i := range 3 {
		c.ds[i] = start(t, c.args(i)...)
	}
	for i := range 3 {
		c.ready(i)
	}
	return c
}

// newCluster3 chooses the etcd members' addresses of a line of three;
// nothing runs yet.
func newCluster3(t *testing.T, extra ...string) *cluster3 {
	return newCluster3At(t, freeAddrs(t, 6), extra...)
}

// newCluster3At is newCluster3 on the six addresses given (peer and
// client of n1, n2, n3): a test that needs more addresses takes them all
// from one freeAddrs call, since a port one call closed may be handed
// out again by the next (an MQTT listener then found n1's etcd peer port
// taken).
func newCluster3At(t *testing.T, addrs []string, extra ...string) *cluster3 {
	c := &cluster3{t: t, dir: t.TempDir(), extra: extra}
	for i := range 3 {
		c.peers[i], c.clients[i] = "http://"+addrs[2*i], "http://"+addrs[2*i+1]
		if i > 0 {
			c.ic += ","
		}
		c.ic += fmt.Sprintf("n%d=%s", i+1, c.peers[i])
	}
	return c
}

// ready waits for node i's ready line and records its addresses.
func (c *cluster3) ready(i int) {
	m := c.ds[i].waitLine(c.t, readyAddrsRE, 60*time.Second)
	c.addrs[i], c.https[i] = m[1], m[2]
}

func (c *cluster3) args(i int) []string {
	args := []string{"-node-id", fmt.Sprint("n", i+1), "-data-dir", filepath.Join(c.dir, fmt.Sprint("n", i+1)),
		"-mqtt-listen", "127.0.0.1:0", "-http-listen", "", "-cluster-listen", "127.0.0.1:0",
		"-etcd-embed", "-etcd-peer-listen", c.peers[i], "-etcd-client-listen", c.clients[i], "-etcd-initial-cluster", c.ic}
	return append(args, c.extra...)
}

// restart starts node i again on its data directory, once it has exited.
func (c *cluster3) restart(i int) {
	<-c.ds[i].exited
	c.ds[i] = start(c.t, c.args(i)...)
	c.ready(i)
}

// leader returns the index of the node whose etcd member leads.
func (c *cluster3) leader() int {
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.clients[:], DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		c.t.Fatal(err)
	}
	defer cli.Close()
	leader := -1
	found := waitFor(30*time.Second, func() bool { // an election may be under way
		for i, ep := range c.clients {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			st, err := cli.Status(ctx, ep)
			cancel()
			if err == nil && st.Leader != 0 && st.Leader == st.Header.MemberId {
				leader = i
				return true
			}
		}
		return false
	})
	if !found {
		c.t.Fatal("no etcd leader")
	}
	return leader
}

// publisher sends tagged QoS 1 messages to one node, one at a time, until
// stopped or its node goes away, recording those acknowledged.
type publisher struct {
	tag     uint64 // payloads are tag*1e9 + seq
	conn    *brokertest.Client
	stop    chan struct{}
	done    chan struct{}
	mu      sync.Mutex
	acked   []uint64
	ackedAt []time.Time               // when each of acked was acknowledged
	refused map[packet.ReasonCode]int // PUBACKs with an error reason
	sentAt  []time.Time               // when each publish was sent, and when its PUBACK came
	ackAt   []time.Time
}

func startPublisher(t *testing.T, addr string, tag uint64) *publisher {
	t.Helper()
	return startPublisherTo(t, addr, tag, "cl/x")
}

// startPublisherTo is startPublisher on topic.
func startPublisherTo(t *testing.T, addr string, tag uint64, topic string) *publisher {
	t.Helper()
	c, _, err := dialMQTT(addr, fmt.Sprint("pub", tag), true)
	if err != nil {
		t.Fatalf("publisher %d: %v", tag, err)
	}
	p := &publisher{tag: tag, conn: c, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for seq := uint64(1); ; seq++ {
			select {
			case <-p.stop:
				return
			case <-time.After(2 * time.Millisecond): // a steady rate, not a flood
			}
			payload := strconv.FormatUint(tag*1e9+seq, 10)
			sent := time.Now()
			pub := packet.Publish{Topic: []byte(topic), QoS: 1, PacketID: uint16(seq%60000 + 1), Payload: []byte(payload)}
			if c.Write(pub.Append(nil, packet.V5)) != nil {
				return
			}
			// Long enough to outlast a frozen node: the publish is
			// acknowledged once it wakes, or never if its node died.
			h, body, err := c.Read(30 * time.Second)
			if err != nil || h.Type != packet.PUBACK {
				return
			}
			var a packet.Ack
			a.Decode(packet.V5, h.Type, body)
			p.mu.Lock()
			p.sentAt, p.ackAt = append(p.sentAt, sent), append(p.ackAt, time.Now())
			if a.Reason == packet.Success {
				p.acked, p.ackedAt = append(p.acked, tag*1e9+seq), append(p.ackedAt, time.Now())
			} else {
				if p.refused == nil {
					p.refused = map[packet.ReasonCode]int{}
				}
				p.refused[a.Reason]++
			}
			p.mu.Unlock()
		}
	}()
	return p
}

// logMissing names the first of p's acknowledged messages that got has not
// seen, with when each was acknowledged relative to the fault at at.
func (p *publisher) logMissing(t *testing.T, got *crashTracker, at time.Time) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	var lines []string
	for i, s := range p.acked {
		if !got.has(s) && len(lines) < 20 {
			lines = append(lines, fmt.Sprintf("%d (acknowledged %+.1f ms)", s%1e9, float64(p.ackedAt[i].Sub(at))/float64(time.Millisecond)))
		}
	}
	if len(lines) > 0 {
		t.Logf("publisher %d: missing %s", p.tag, strings.Join(lines, ", "))
	}
}

// count returns how many publishes were acknowledged so far.
func (p *publisher) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.acked)
}

// flow waits until the publishers have had n more publishes acknowledged
// between them: the traffic before, during and after a fault is counted in
// messages, not in seconds, so that a slow machine sees as much of it.
func flow[P interface{ count() int }](t *testing.T, pubs []P, n int) {
	t.Helper()
	total := func() int {
		s := 0
		for _, p := range pubs {
			s += p.count()
		}
		return s
	}
	start := total()
	if !waitFor(time.Minute, func() bool { return total()-start >= n }) {
		t.Fatalf("%d of %d more publishes acknowledged within a minute", total()-start, n)
	}
}

// finish stops p and returns what was acknowledged.
func (p *publisher) finish() []uint64 {
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	<-p.done
	p.conn.Conn.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.acked
}

func clusterFault(t *testing.T, fault string) {
	if testing.Short() {
		t.Skip("processes and an etcd quorum")
	}
	c, got, workers := startShareLine(t)

	var pubs []*publisher
	for i := range 3 {
		pubs = append(pubs, startPublisher(t, c.addrs[i], uint64(i+1)))
	}
	flow(t, pubs, 300) // traffic before the fault (about 2 s)
	victim := 2
	at := time.Now()
	switch fault {
	case "kill":
		c.ds[victim].cmd.Process.Kill()
	case "stop":
		c.ds[victim].cmd.Process.Signal(syscall.SIGSTOP)
	case "leader":
		victim = c.leader()
		t.Logf("the etcd leader is on node %d", victim+1)
		at = time.Now()
		c.ds[victim].cmd.Process.Kill()
	case "move":
		victim = 0
		workers[0].conn.Conn.Close() // the member drops off node 1 ...
		<-workers[0].done
	}
	flow(t, pubs, 300) // traffic during the fault, from the publishers left (about 2 s)
	var rejoined int64
	switch fault {
	case "kill", "leader":
		c.restart(victim)
		rejoined = workers[victim].n.Load()
		workers[victim] = startWorker(t, c.addrs[victim], fmt.Sprint("w", victim+1), false, got)
		pubs = append(pubs, startPublisher(t, c.addrs[victim], uint64(len(pubs)+1)))
	case "stop":
		if d := 10*time.Second - time.Since(at); d > 0 {
			time.Sleep(d) // node 3 stays frozen for its 10 seconds
		}
		c.ds[victim].cmd.Process.Signal(syscall.SIGCONT)
	case "move":
		// ... and resumes its session on node 2.
		w, present := resumeWorker(t, c.addrs[1], "w1", got)
		if !present {
			t.Fatal("w1's session was not present on node 2")
		}
		workers[0] = w
	}
	flow(t, pubs, 400) // traffic after the fault (about 2 s)
	// Frozen past its lease, node 3 finds its member's session adopted by
	// the member's replica and closes the connection (0x8E) once it has
	// woken and learnt so. That may be after the traffic above: when node
	// 3 wakes just as its lease ends, the holder of one session's replica
	// may adopt it while the holder of another finds node 3 back and
	// leaves it (the publisher on node 3 then goes on). A member whose
	// connection ends resumes its session, as any MQTT client reconnects,
	// while the test waits for the messages.
	resumeEnded := func() {
		for i, w := range workers {
			select {
			case <-w.done:
			default:
				continue
			}
			nw, present := resumeWorker(t, c.addrs[i], fmt.Sprint("w", i+1), got)
			t.Logf("w%d's connection ended after %d messages; resumed %.1f s after the fault with Session Present %v", i+1, w.n.Load(), time.Since(at).Seconds(), present)
			if !present {
				t.Errorf("w%d resumed its adopted session with Session Present 0", i+1)
			}
			workers[i] = nw
		}
	}
	resumeEnded()
	var acked []uint64
	for i, p := range pubs {
		a := p.finish()
		t.Logf("publisher %d: %d acknowledged", i+1, len(a))
		acked = append(acked, a...)
	}
	p1 := pubs[0]
	var before []time.Duration
	var sentAt, ackAt []time.Time
	for i := range p1.sentAt {
		if p1.ackAt[i].Before(at) {
			before = append(before, p1.ackAt[i].Sub(p1.sentAt[i]))
		} else {
			sentAt, ackAt = append(sentAt, p1.sentAt[i]), append(ackAt, p1.ackAt[i])
		}
	}
	logPassOver(t, fmt.Sprintf("%s of node %d", fault, victim+1), at, before, sentAt, ackAt)

	if !waitFor(time.Minute, func() bool { resumeEnded(); m, _ := got.missing(acked); return m == 0 }) {
		missing, _ := got.missing(acked)
		for _, p := range pubs {
			p.logMissing(t, got, at)
		}
		t.Logf("deliveries per member on their current connections: %d %d %d", workers[0].n.Load(), workers[1].n.Load(), workers[2].n.Load())
		t.Fatalf("%d acknowledged messages never reached a member (of %d acknowledged)", missing, len(acked))
	}
	_, dups := got.missing(acked)
	t.Logf("%s (node %d): %d messages acknowledged by %d publishers, all delivered, %d duplicates; deliveries per member %d %d %d",
		fault, victim+1, len(acked), len(pubs), dups, workers[0].n.Load(), workers[1].n.Load(), workers[2].n.Load())
	if fault == "kill" || fault == "leader" {
		// The node that came back is routed to again: its member received
		// messages published after its return (a member's count restarts
		// with its new connection).
		if workers[victim].n.Load() == 0 {
			t.Errorf("node %d's member received nothing after the node rejoined (had %d before)", victim+1, rejoined)
		}
	}
	if len(acked) < 100 {
		t.Errorf("only %d publishes acknowledged", len(acked))
	}
	// Every duplicate says so: a message picked again after a delivery
	// that may have arrived is sent with DUP, and a node coming back
	// does not deliver what was picked again elsewhere (issue 21).
	// (The routing probes publish each payload three times: not counted.)
	if n, which := got.plainDuplicates(9e12); n > 0 {
		t.Errorf("%d messages delivered more than once without DUP (publisher*1e9+seq): %v", n, which[:min(len(which), 10)])
	}
}

// waitFor polls cond until it holds (true) or d passes (false).
func waitFor(d time.Duration, cond func() bool) bool { return brokertest.Until(d, cond) }

// resumeWorker reconnects a worker to its persistent session at addr.
func resumeWorker(t *testing.T, addr, id string, got *crashTracker) (*worker, bool) {
	t.Helper()
	w := startWorker(t, addr, id, false, got)
	return w, w.present
}

// logPassOver logs how long the group took to pass over node 3's member
// after the fault at: the time from the fault to the PUBACK of the third
// publish after it (one publisher, three members: by then every member's
// turn has come once, node 3's member's included), the longest wait of a
// single publish after the fault against the median before it, and how
// many publishes waited more than 100 ms and when the last of them was
// acknowledged (from then on publishing ran as before the fault). Logged,
// not asserted: docs/cluster.md ("Figures") quotes them.
func logPassOver(t *testing.T, fault string, at time.Time, before []time.Duration, sentAt, ackAt []time.Time) {
	t.Helper()
	if len(ackAt) < 3 || len(before) == 0 {
		return
	}
	before = slices.Clone(before)
	slices.Sort(before)
	var longest time.Duration
	slow, lastSlow := 0, time.Duration(0)
	for i := range ackAt {
		w := ackAt[i].Sub(sentAt[i])
		longest = max(longest, w)
		if w > 100*time.Millisecond {
			slow++
			lastSlow = ackAt[i].Sub(at)
		}
	}
	ms := func(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }
	t.Logf("pass-over after %s: fault to the 3rd PUBACK after it %s; longest wait of a publish %s (median before the fault %s); %d publishes waited > 100 ms, the last acknowledged %s after the fault",
		fault, ms(ackAt[2].Sub(at)), ms(longest), ms(before[len(before)/2]), slow, ms(lastSlow))
}

// TestClusterRestartedNodeSettlesQueue is issue 21's first recipe: a
// restarted node that lets go of a session another node owns now must hand
// the share-group messages queued there to the group once it can reach the
// others, not drop them. Members stA on node 1 and stB on node 3; stB goes
// offline and 20 publishes on node 1 are acknowledged, half of them queued
// for stB on node 3; node 3 is killed; stB resumes on node 1 once node 3's
// lease has expired (Session Present 0) and subscribes again; node 3 is
// restarted on its data. Every acknowledged message must reach stA or stB.
func TestClusterRestartedNodeSettlesQueue(t *testing.T) {
	if testing.Short() {
		t.Skip("processes and an etcd quorum")
	}
	c := startCluster3(t)
	got := &crashTracker{seen: map[uint64]int{}}
	stA := startWorker(t, c.addrs[0], "stA", true, got)
	stB := startWorker(t, c.addrs[2], "stB", true, got)
	pub, _, err := dialMQTT(c.addrs[0], "pub", true)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Conn.Close()
	var pid uint16
	publish := func(payload uint64) packet.ReasonCode {
		pid++
		pub.Write((&packet.Publish{Topic: []byte("cl/x"), QoS: 1, PacketID: pid, Payload: []byte(strconv.FormatUint(payload, 10))}).Append(nil, packet.V5))
		h, body, err := pub.Read(10 * time.Second)
		if err != nil || h.Type != packet.PUBACK {
			t.Fatalf("no PUBACK: %v", err)
		}
		var a packet.Ack
		a.Decode(packet.V5, h.Type, body)
		return a.Reason
	}
	// Node 1 routes to both members (probes are not counted as acknowledged).
	probe := uint64(9e12)
	if !waitFor(30*time.Second, func() bool {
		probe++
		publish(probe)
		return stA.n.Load() > 0 && stB.n.Load() > 0
	}) {
		t.Fatal("node 1 never routed to the member on node 3")
	}
	stB.conn.Conn.Close() // offline; its session (expiry 3600) stays on node 3
	<-stB.done
	var acked []uint64
	for seq := uint64(1); seq <= 20; seq++ {
		if rc := publish(seq); rc == packet.Success {
			acked = append(acked, seq)
		}
	}
	if len(acked) != 20 {
		t.Fatalf("%d of 20 publishes acknowledged", len(acked))
	}
	queued := 20 - int(stA.n.Load()-int64(countBelow(got, 9e12+1, probe+1)))
	t.Logf("acknowledged 20; stA has received %d of them, so about %d are queued for stB on node 3", 20-queued, queued)

	c.ds[2].cmd.Process.Kill()
	// stB resumes on node 1 once node 3's lease has gone (0x88 until then).
	var resumed *worker
	if !waitFor(30*time.Second, func() bool {
		probe, _, err := dialMQTT(c.addrs[0], "stB", false)
		if err != nil {
			time.Sleep(200 * time.Millisecond)
			return false
		}
		probe.Conn.Close()
		return true
	}) {
		t.Fatal("stB could not resume on node 1")
	}
	resumed = startWorker(t, c.addrs[0], "stB", true, got)
	defer resumed.conn.Conn.Close()
	c.restart(2)
	if !waitFor(30*time.Second, func() bool { m, _ := got.missing(acked); return m == 0 }) {
		m, _ := got.missing(acked)
		t.Fatalf("%d of 20 acknowledged messages never delivered to any member", m)
	}
	_, dups := got.missing(acked)
	t.Logf("all 20 acknowledged messages delivered; %d duplicates", dups)
}

// countBelow counts the distinct payloads in [lo, hi) that t has seen.
func countBelow(t *crashTracker, lo, hi uint64) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for s := range t.seen {
		if s >= lo && s < hi {
			n++
		}
	}
	return n
}

// TestClusterLineStopsTogether: a whole line told to stop at once (a
// cabinet switched off by its breaker with a UPS, systemctl stop on every
// gateway) stops within the documented 5 s on every gateway, the last one
// included, although its etcd quorum goes away under it.
func TestClusterLineStopsTogether(t *testing.T) {
	if testing.Short() {
		t.Skip("processes and an etcd quorum")
	}
	c := startCluster3(t)
	var clients []*brokertest.Client
	for i := range 3 {
		w, _, err := dialMQTT(c.addrs[i], fmt.Sprint("w", i+1), false)
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, w)
	}
	defer func() {
		for _, w := range clients {
			w.Conn.Close()
		}
	}()
	at := time.Now()
	for i := range 3 {
		c.ds[i].cmd.Process.Signal(syscall.SIGTERM)
	}
	var took [3]time.Duration
	for i := range 3 {
		select {
		case <-c.ds[i].exited:
			took[i] = time.Since(at)
		case <-time.After(30 * time.Second):
			t.Fatalf("node %d still running 30 s after SIGTERM", i+1)
		}
	}
	t.Logf("stopped after %v, %v and %v", took[0].Round(time.Millisecond), took[1].Round(time.Millisecond), took[2].Round(time.Millisecond))
	for i, d := range took {
		if d > 5*time.Second {
			t.Errorf("node %d took %v to stop (the bound is 5 s)", i+1, d.Round(time.Millisecond))
		}
	}
}

// TestClusterConnectBeforeReady: a gateway whose line is not there yet
// (the first of three started, no etcd quorum) accepts TCP on its MQTT
// port; a CONNECT then is answered, 0x88 Server unavailable within the
// claim bound, never left waiting in the backlog for as long as the start
// takes.
func TestClusterConnectBeforeReady(t *testing.T) {
	if testing.Short() {
		t.Skip("processes and an etcd member")
	}
	c := &cluster3{t: t, dir: t.TempDir()}
	addrs := freeAddrs(t, 7)
	for i := range 3 {
		c.peers[i], c.clients[i] = "http://"+addrs[2*i], "http://"+addrs[2*i+1]
		if i > 0 {
			c.ic += ","
		}
		c.ic += fmt.Sprintf("n%d=%s", i+1, c.peers[i])
	}
	mqttAddr := addrs[6]
	args := c.args(0)
	args[slices.Index(args, "-mqtt-listen")+1] = mqttAddr
	d := start(t, args...)
	d.waitLine(t, regexp.MustCompile(`waiting for the cluster registry`), 30*time.Second)
	at := time.Now()
	var nc net.Conn
	if !waitFor(10*time.Second, func() bool {
		var err error
		nc, err = net.DialTimeout("tcp", mqttAddr, time.Second)
		return err == nil
	}) {
		t.Fatal("the MQTT port does not accept TCP while the gateway starts")
	}
	defer nc.Close()
	cl := &brokertest.Client{Conn: nc, Version: packet.V5}
	cp := packet.Connect{ProtocolName: []byte("MQTT"), Version: packet.V5, ClientID: []byte("early"), CleanStart: true}
	if _, err := nc.Write(cp.Append(nil)); err != nil {
		t.Fatal(err)
	}
	h, body, err := cl.Read(5 * time.Second)
	if err != nil || h.Type != packet.CONNACK {
		t.Fatalf("no CONNACK within 5 s of a CONNECT before ready: %v", err)
	}
	var ca packet.Connack
	if err := ca.Decode(packet.V5, body); err != nil || ca.Reason != packet.ServerUnavailable {
		t.Fatalf("CONNACK %v (%v), want 0x88 Server unavailable", ca.Reason, err)
	}
	t.Logf("CONNACK 0x88 %v after the CONNECT", time.Since(at).Round(time.Millisecond))
}

// TestClusterMissingGateway: a gateway killed and never brought back is
// told, not forgotten: 60 s later (its lease long expired) every other
// gateway still lists it as missing, by name, in /api/v1/cluster and
// /metrics, the cluster health check names it (/readyz's body too, while
// the gateway itself stays ready: it serves), and the etcd panel lists
// every member with the quorum margin in words.
func TestClusterMissingGateway(t *testing.T) {
	if testing.Short() {
		t.Skip("processes and an etcd quorum; a minute")
	}
	c := startCluster3(t, "-http-listen", "127.0.0.1:0")
	killed := time.Now()
	c.ds[1].cmd.Process.Kill()
	time.Sleep(time.Until(killed.Add(60 * time.Second))) // the figure is "still there a minute later"
	for _, i := range []int{0, 2} {
		base := "http://" + c.https[i]
		var panel struct {
			Nodes []struct {
				Name         string     `json:"name"`
				Missing      bool       `json:"missing"`
				MissingSince *time.Time `json:"missing_since"`
			} `json:"nodes"`
			Etcd struct {
				Margin    string `json:"margin"`
				Endpoints []struct {
					Member string `json:"member"`
					Up     bool   `json:"up"`
				} `json:"endpoints"`
			} `json:"etcd"`
		}
		getJSON(t, base+"/api/v1/cluster", &panel)
		found := false
		for _, n := range panel.Nodes {
			if n.Name == "n2" {
				found = n.Missing && n.MissingSince != nil
				if found {
					t.Logf("node %d: n2 missing since %v (killed at %v)", i+1, n.MissingSince.Round(time.Millisecond), killed.UTC().Round(time.Millisecond))
				}
			}
		}
		if !found {
			t.Errorf("node %d: /api/v1/cluster does not list n2 as missing 60 s after its kill: %+v", i+1, panel.Nodes)
		}
		if !strings.Contains(panel.Etcd.Margin, "2 of 3 up") || len(panel.Etcd.Endpoints) != 3 {
			t.Errorf("node %d: etcd margin %q with %d members listed, want 2 of 3 up and all 3 listed", i+1, panel.Etcd.Margin, len(panel.Etcd.Endpoints))
		}
		ready := getText(t, base+"/readyz")
		if !strings.Contains(ready, "cluster: degraded: n2 missing since") {
			t.Errorf("node %d: /readyz does not name the missing gateway:\n%s", i+1, ready)
		}
		metrics := getText(t, base+"/metrics")
		if !strings.Contains(metrics, `linemq_cluster_nodes{state="missing"} 1`) {
			t.Errorf("node %d: /metrics has no linemq_cluster_nodes{state=\"missing\"} 1", i+1)
		}
	}

	// Taken out of the line on purpose: its etcd member removed, then
	// `linemq cluster forget`; the others stop listing it.
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{c.clients[0]}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ml, err := cli.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ml.Members {
		if m.Name == "n2" {
			if _, err := cli.MemberRemove(ctx, m.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
	var out, errOut strings.Builder
	if rc := run([]string{"cluster", "forget", "-etcd-endpoints", c.clients[0], "n2"}, &out, &errOut); rc != 0 {
		t.Fatalf("linemq cluster forget n2: exit %d: %s", rc, errOut.String())
	}
	t.Log(strings.TrimSpace(out.String()))
	for _, i := range []int{0, 2} {
		if !waitFor(15*time.Second, func() bool {
			return !strings.Contains(getText(t, "http://"+c.https[i]+"/api/v1/cluster"), `"name":"n2"`)
		}) {
			t.Errorf("node %d still lists n2 after it was forgotten", i+1)
		}
		// The health check is polled every second.
		var ready string
		if !waitFor(5*time.Second, func() bool {
			ready = getText(t, "http://"+c.https[i]+"/readyz")
			return !strings.Contains(ready, "n2")
		}) {
			t.Errorf("node %d: /readyz still names n2: %q", i+1, ready)
		}
	}
	if rc := run([]string{"cluster", "forget", "-etcd-endpoints", c.clients[0], "n2"}, &out, &errOut); rc != 1 {
		t.Errorf("forgetting n2 twice: exit %d, want 1 (not in the line)", rc)
	}
}

// getJSON decodes the JSON at url into v.
func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(getText(t, url)), v); err != nil {
		t.Fatalf("%s: %v", url, err)
	}
}

// getText returns the body at url, whatever its status.
func getText(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("%s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s: %v", url, err)
	}
	return string(b)
}

// startShareLine starts three nodes with a persistent member of
// $share/g/cl/# on each, and returns once every node routes to all three.
func startShareLine(t *testing.T) (*cluster3, *crashTracker, [3]*worker) {
	t.Helper()
	c := startCluster3(t)
	got := &crashTracker{seen: map[uint64]int{}}
	var workers [3]*worker
	for i := range 3 {
		workers[i] = startWorker(t, c.addrs[i], fmt.Sprint("w", i+1), true, got)
	}
	routedEverywhere(t, c, workers)
	return c, got, workers
}

// routedEverywhere waits until every node routes to all three members:
// probes from each node reach every worker.
func routedEverywhere(t *testing.T, c *cluster3, workers [3]*worker) {
	t.Helper()
	for i := range 3 {
		probe, _, err := dialMQTT(c.addrs[i], fmt.Sprint("probe", i), true)
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for n := uint64(1); ; n++ {
			before := [3]int64{workers[0].n.Load(), workers[1].n.Load(), workers[2].n.Load()}
			for range 3 {
				probe.Write((&packet.Publish{Topic: []byte("cl/x"), QoS: 1, PacketID: 1, Payload: []byte(strconv.FormatUint(9e12+n, 10))}).Append(nil, packet.V5))
				probe.Read(5 * time.Second)
			}
			if waitFor(2*time.Second, func() bool {
				return workers[0].n.Load() > before[0] && workers[1].n.Load() > before[1] && workers[2].n.Load() > before[2]
			}) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %d never routed to every member", i+1)
			}
		}
		probe.Conn.Close()
	}
}

// TestClusterMemberLeaves is issue 21's fourth recipe at process level:
// while a member on node 2 unsubscribes, publishers on nodes 1 and 3 go on;
// other members exist and no queue is full, so no publish may be refused
// (0x97 means full queues).
func TestClusterMemberLeaves(t *testing.T) {
	if testing.Short() {
		t.Skip("processes and an etcd quorum")
	}
	c, got, workers := startShareLine(t)
	pubs := []*publisher{startPublisher(t, c.addrs[0], 1), startPublisher(t, c.addrs[2], 3)}
	flow(t, pubs, 100) // traffic before the member leaves
	workers[1].conn.Write((&packet.Unsubscribe{PacketID: 2, Filters: [][]byte{[]byte("$share/g/cl/#")}}).Append(nil, packet.V5))
	flow(t, pubs, 300) // traffic while and after it leaves
	refused := map[packet.ReasonCode]int{}
	var acked []uint64
	for _, p := range pubs {
		acked = append(acked, p.finish()...)
		for rc, n := range p.refused {
			refused[rc] += n
		}
	}
	if !waitFor(30*time.Second, func() bool { m, _ := got.missing(acked); return m == 0 }) {
		m, _ := got.missing(acked)
		t.Errorf("%d acknowledged messages never delivered", m)
	}
	t.Logf("%d acknowledged, refused %v; deliveries per member %d %d %d", len(acked), refused, workers[0].n.Load(), workers[1].n.Load(), workers[2].n.Load())
	if len(refused) > 0 {
		t.Errorf("publishes refused while a member left and two others were there: %v", refused)
	}
}

// TestClusterRestartedNodeKeepsNoMovedMember is the loss of fault-suite
// seed 1: a node killed and restarted at once on its data restores an
// offline member's session, while the records its previous run held in
// etcd (the session's ownership among them) go with that run's lease. The
// member then resumes on another node. The restarted node must own what it
// restored (so that the session is handed over from it) or give it up when
// another node takes the client; it must never stay a member of the group
// for a client served elsewhere, taking its turn of messages that are
// acknowledged and never delivered.
func TestClusterRestartedNodeKeepsNoMovedMember(t *testing.T) {
	if testing.Short() {
		t.Skip("processes and an etcd quorum")
	}
	c := startCluster3(t)
	got := &crashTracker{seen: map[uint64]int{}}
	stA := startWorker(t, c.addrs[0], "stA", true, got)
	defer stA.conn.Conn.Close()
	stB := startWorker(t, c.addrs[2], "stB", true, got)
	routed := func(w *worker) bool {
		p := startPublisher(t, c.addrs[0], 9000)
		defer p.finish()
		before := w.n.Load()
		return waitFor(20*time.Second, func() bool { return w.n.Load() > before })
	}
	if !routed(stB) {
		t.Fatal("node 1 never routed to the member on node 3")
	}
	stB.conn.Conn.Close() // offline; its session (expiry 3600) stays on node 3
	<-stB.done

	c.ds[2].cmd.Process.Kill()
	c.restart(2) // within its lease: the new run revokes the old one's records

	// stB resumes on node 1, handed over from node 3 (Session Present 1).
	var resumed *worker
	if !waitFor(30*time.Second, func() bool {
		c, present, err := dialMQTT(c.addrs[0], "stB", false)
		if err != nil {
			time.Sleep(200 * time.Millisecond)
			return false
		}
		c.Conn.Close()
		if !present {
			t.Errorf("stB resumed on node 1 with Session Present 0: node 3 did not hand its session over")
		}
		return true
	}) {
		t.Fatal("stB could not resume on node 1")
	}
	resumed = startWorker(t, c.addrs[0], "stB", false, got)
	defer resumed.conn.Conn.Close()
	if t.Failed() {
		resumed.conn.Write((&packet.Subscribe{PacketID: 1, Subs: []packet.Subscription{{Filter: []byte("$share/g/cl/#"), QoS: 1}}}).Append(nil, packet.V5))
	}

	pubs := []*publisher{startPublisher(t, c.addrs[0], 1), startPublisher(t, c.addrs[1], 2)}
	if !waitFor(30*time.Second, func() bool { return pubs[0].count()+pubs[1].count() >= 400 }) {
		t.Fatal("the publishers stalled")
	}
	var acked []uint64
	for _, p := range pubs {
		acked = append(acked, p.finish()...)
	}
	if !waitFor(30*time.Second, func() bool { m, _ := got.missing(acked); return m == 0 }) {
		m, _ := got.missing(acked)
		t.Fatalf("%d of %d acknowledged messages never delivered to any member", m, len(acked))
	}
	_, dups := got.missing(acked)
	t.Logf("all %d acknowledged messages delivered; %d duplicates", len(acked), dups)
}
