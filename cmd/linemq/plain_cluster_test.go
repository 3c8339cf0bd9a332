package main

import (
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/linemq/linemq/broker/packet"
)

// Issue 27's recipes: an ordinary persistent QoS 1 subscriber (a
// historian) on node 2, a QoS 1 publisher on node 1 sending 600 numbered
// messages 10 ms apart; at the 200th node 2 is frozen (or killed), at the
// 400th it is resumed (or restarted on its data). Every message node 1
// acknowledged must reach the historian, in order, any second copy with
// DUP. Before the outbox, 146 (frozen) and 263 (killed) were acknowledged
// and never delivered.

func TestClusterPlainSubscriberNodeStopped(t *testing.T) { plainSubscriberFault(t, "stop") }

func TestClusterPlainSubscriberNodeKilled(t *testing.T) { plainSubscriberFault(t, "kill") }

func plainSubscriberFault(t *testing.T, fault string) {
	if testing.Short() {
		t.Skip("processes and an etcd quorum")
	}
	c := startCluster3(t, "-http-listen", "127.0.0.1:0")
	got := &crashTracker{seen: map[uint64]int{}}
	hist := startSubscriber(t, c.addrs[1], "historian", "plain/t", true, got)
	pub, _, err := dialMQTT(c.addrs[0], "pub", true)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Conn.Close()
	var pid uint16
	publish := func(payload uint64) (packet.ReasonCode, bool) {
		pid++
		pub.Write((&packet.Publish{Topic: []byte("plain/t"), QoS: 1, PacketID: pid, Payload: []byte(strconv.FormatUint(payload, 10))}).Append(nil, packet.V5))
		h, body, err := pub.Read(10 * time.Second)
		if err != nil || h.Type != packet.PUBACK {
			return 0, false
		}
		var a packet.Ack
		a.Decode(packet.V5, h.Type, body)
		return a.Reason, true
	}
	// Node 1 forwards to node 2 (probes are not counted).
	probe := uint64(9e12)
	if !waitFor(30*time.Second, func() bool {
		probe++
		publish(probe)
		return hist.n.Load() > 0
	}) {
		t.Fatal("node 1 never forwarded to the historian on node 2")
	}

	var acked []uint64
	var faultAt, backAt time.Time
	for seq := uint64(1); seq <= 600; seq++ {
		switch seq {
		case 200:
			faultAt = time.Now()
			if fault == "stop" {
				c.ds[1].cmd.Process.Signal(syscall.SIGSTOP)
			} else {
				c.ds[1].cmd.Process.Kill()
			}
		case 400:
			backAt = time.Now()
			// Node 1 shows what it keeps for node 2, on the page and in
			// the metrics.
			var panel struct {
				Forwards []struct {
					Node   string `json:"node"`
					Queued int    `json:"queued"`
				} `json:"forwards"`
			}
			getJSON(t, "http://"+c.https[0]+"/api/v1/cluster", &panel)
			if len(panel.Forwards) != 1 || panel.Forwards[0].Node != "n2" || panel.Forwards[0].Queued == 0 {
				t.Errorf("node 1's /api/v1/cluster forwards = %+v, want messages kept for n2", panel.Forwards)
			}
			if m := getText(t, "http://"+c.https[0]+"/metrics"); !strings.Contains(m, `linemq_cluster_forward_queued{peer="n2"}`) {
				t.Errorf("node 1's /metrics has no linemq_cluster_forward_queued for n2")
			}
			if fault == "stop" {
				c.ds[1].cmd.Process.Signal(syscall.SIGCONT)
			} else {
				c.restart(1)
				hist = startSubscriber(t, c.addrs[1], "historian", "plain/t", false, got)
				if !hist.present {
					t.Fatal("the historian's session did not survive node 2's restart")
				}
			}
		}
		rc, ok := publish(seq)
		if !ok {
			t.Fatalf("no PUBACK for message %d", seq)
		}
		if rc == packet.Success {
			acked = append(acked, seq)
		}
		time.Sleep(10 * time.Millisecond) // the recipe's pace
	}
	t.Logf("%d of 600 acknowledged; node 2 %s for %v (messages 200 to 399)", len(acked), map[string]string{"stop": "frozen", "kill": "down"}[fault], backAt.Sub(faultAt).Round(time.Millisecond))
	if !waitFor(30*time.Second, func() bool { m, _ := got.missing(acked); return m == 0 }) {
		m, _ := got.missing(acked)
		t.Fatalf("%d of %d acknowledged messages never reached the historian", m, len(acked))
	}
	if n, which := got.plainDuplicates(9e12); n > 0 {
		t.Errorf("%d messages received twice without DUP: %v", n, which)
	}
	got.mu.Lock()
	var last uint64
	outOfOrder := 0
	for _, s := range got.order {
		if s >= 9e12 {
			continue
		}
		if s < last {
			outOfOrder++
		}
		last = max(last, s)
	}
	got.mu.Unlock()
	if outOfOrder > 0 {
		t.Errorf("%d messages without DUP arrived after a later one", outOfOrder)
	}
	_, dups := got.missing(acked)
	t.Logf("all %d acknowledged messages reached the historian; %d second copies, all with DUP", len(acked), dups)
	hist.conn.Conn.Close()
}
