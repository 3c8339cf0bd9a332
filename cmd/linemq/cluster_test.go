package main

import (
	"fmt"
	"net"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/linemq/linemq/broker/packet"
)

// freeAddr returns a loopback host:port the OS has just handed out; etcd's
// member URLs must be known before it listens.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// worker is a persistent share-group member reading in the background.
type worker struct {
	got  *crashTracker
	conn *mqttConn
	done chan struct{}
}

func startWorker(t *testing.T, addr, id string, clean bool, got *crashTracker) *worker {
	t.Helper()
	c, _, err := dialMQTT(addr, id, clean)
	if err != nil {
		t.Fatalf("%s: %v", id, err)
	}
	if clean {
		c.write((&packet.Subscribe{PacketID: 1, Subs: []packet.Subscription{{Filter: []byte("$share/g/cl/#"), QoS: 1}}}).Append(nil, packet.V5))
	}
	w := &worker{got: got, conn: c, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			h, body, err := c.read(time.Minute)
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
				got.add(seq)
			}
			c.write((&packet.Ack{Type: packet.PUBACK, PacketID: p.PacketID}).Append(nil, packet.V5))
		}
	}()
	return w
}

var readyRE = regexp.MustCompile(`msg=ready .*mqtt=(\S+)`)

// TestClusterNodeKilled runs three real linemq processes, each hosting one
// of three etcd members, with a persistent QoS 1 worker of one share group
// on each. A publisher on node 1 sends 300 messages; node 3 is killed with
// SIGKILL a third of the way, and restarted on its data directory
// afterwards, its worker reconnecting. Every message the publisher had
// acknowledged must reach a worker (duplicates are counted, not failed):
// those node 3 had accepted come back from its disk; those sent after the
// kill went to the workers left.
func TestClusterNodeKilled(t *testing.T) { clusterFault(t, "kill") }

// TestClusterNodeStopped is the same with node 3 frozen (SIGSTOP) for 10
// seconds instead, then resumed (SIGCONT): a hung node is passed over, and
// what it held is delivered when it wakes.
func TestClusterNodeStopped(t *testing.T) { clusterFault(t, "stop") }

func clusterFault(t *testing.T, fault string) {
	if testing.Short() {
		t.Skip("processes and an etcd quorum")
	}
	dir := t.TempDir()
	var peers, clients [3]string
	var ic string
	for i := range 3 {
		peers[i], clients[i] = "http://"+freeAddr(t), "http://"+freeAddr(t)
		if i > 0 {
			ic += ","
		}
		ic += fmt.Sprintf("n%d=%s", i+1, peers[i])
	}
	args := func(i int) []string {
		return []string{"-node-id", fmt.Sprint("n", i+1), "-data-dir", filepath.Join(dir, fmt.Sprint("n", i+1)),
			"-mqtt-listen", "127.0.0.1:0", "-http-listen", "", "-cluster-listen", "127.0.0.1:0",
			"-etcd-embed", "-etcd-peer-listen", peers[i], "-etcd-client-listen", clients[i], "-etcd-initial-cluster", ic}
	}
	var ds [3]*daemon
	var addrs [3]string
	for i := range 3 {
		ds[i] = start(t, args(i)...)
	}
	for i := range 3 {
		addrs[i] = ds[i].waitLine(t, readyRE, 60*time.Second)[1]
	}

	got := &crashTracker{seen: map[uint64]int{}}
	var workers [3]*worker
	for i := range 3 {
		workers[i] = startWorker(t, addrs[i], fmt.Sprint("w", i+1), true, got)
	}
	pub, _, err := dialMQTT(addrs[0], "pub", true)
	if err != nil {
		t.Fatal(err)
	}
	// Wait until node 1 routes to all three: a message reaches w3.
	deadline := time.Now().Add(30 * time.Second)
	for probe := uint64(1_000_000); ; probe++ {
		pub.write((&packet.Publish{Topic: []byte("cl/x"), QoS: 1, PacketID: 1, Payload: []byte(strconv.FormatUint(probe, 10))}).Append(nil, packet.V5))
		pub.read(5 * time.Second)
		got.mu.Lock()
		distinct := len(got.seen)
		got.mu.Unlock()
		if distinct >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("node 1 never routed to every node")
		}
	}

	const n = 300
	var acked []uint64
	var mu sync.Mutex
	var stoppedAt time.Time
	// For the pass-over figures: when each publish was sent and when its
	// PUBACK came, from the fault on; and each wait before it.
	var waits []time.Duration
	var sentAt, ackAt []time.Time
	for seq := uint64(1); seq <= n; seq++ {
		switch {
		case seq == n/3 && fault == "kill":
			ds[2].cmd.Process.Kill() // SIGKILL node 3
			stoppedAt = time.Now()
		case seq == n/3 && fault == "stop":
			ds[2].cmd.Process.Signal(syscall.SIGSTOP)
			stoppedAt = time.Now()
		}
		sent := time.Now()
		pid := uint16(seq%60000 + 2)
		if err := pub.write((&packet.Publish{Topic: []byte("cl/x"), QoS: 1, PacketID: pid, Payload: []byte(strconv.FormatUint(seq, 10))}).Append(nil, packet.V5)); err != nil {
			t.Fatal(err)
		}
		h, body, err := pub.read(10 * time.Second)
		if err != nil || h.Type != packet.PUBACK {
			t.Fatalf("message %d: no PUBACK: %v", seq, err)
		}
		if seq < n/3 {
			waits = append(waits, time.Since(sent))
		} else {
			sentAt, ackAt = append(sentAt, sent), append(ackAt, time.Now())
		}
		var a packet.Ack
		a.Decode(packet.V5, h.Type, body)
		if a.Reason == packet.Success {
			mu.Lock()
			acked = append(acked, seq)
			mu.Unlock()
		}
	}
	logPassOver(t, fault, stoppedAt, waits, sentAt, ackAt)
	if fault == "kill" {
		<-ds[2].exited
		// Node 3 comes back on its data directory; its worker reconnects
		// to its persistent session.
		ds[2] = start(t, args(2)...)
		addrs[2] = ds[2].waitLine(t, readyRE, 60*time.Second)[1]
		workers[2] = startWorker(t, addrs[2], "w3", false, got)
	} else {
		t.Logf("publishing with node 3 frozen took %v", time.Since(stoppedAt).Round(time.Millisecond))
		if d := 10*time.Second - time.Since(stoppedAt); d > 0 {
			time.Sleep(d) // node 3 stays frozen for its 10 seconds
		}
		ds[2].cmd.Process.Signal(syscall.SIGCONT)
	}

	deadline = time.Now().Add(30 * time.Second)
	for {
		missing, dups := got.missing(acked)
		if missing == 0 {
			t.Logf("%s: %d of %d messages acknowledged, all delivered, %d duplicates; node 3 hit after %d", fault, len(acked), n, dups, n/3)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d acknowledged messages never reached a worker (of %d acknowledged)", missing, len(acked))
		}
		time.Sleep(50 * time.Millisecond) // polling the tracker, with a deadline
	}
	if len(acked) < n*9/10 {
		t.Errorf("only %d of %d publishes acknowledged", len(acked), n)
	}
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
	t.Logf("pass-over after %s of node 3: fault to the 3rd PUBACK after it %s; longest wait of a publish %s (median before the fault %s); %d publishes waited > 100 ms, the last acknowledged %s after the fault",
		fault, ms(ackAt[2].Sub(at)), ms(longest), ms(before[len(before)/2]), slow, ms(lastSlow))
}
