package chaos

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/gateway/sparkplug"
	"github.com/linemq/linemq/internal/mqtttest"
)

// spPayload encodes a Sparkplug B payload with seq (when >= 0) and a bdSeq
// metric (when >= 0).
func spPayload(seq, bdSeq int) []byte {
	p := sparkplug.Payload{Timestamp: uint64(time.Now().UnixMilli()), HasTimestamp: true,
		Seq: uint64(max(seq, 0)), HasSeq: seq >= 0, BdSeq: uint64(max(bdSeq, 0)), HasBdSeq: bdSeq >= 0}
	return p.Append(nil)
}

// TestSparkplugLine: a line of three linemq processes, each hosting an
// etcd member. An edge node moves between n1 and n2 100 times (each
// connection taking the session over from the last, on the other
// gateway); a host on n3 never sees a session's NDEATH after the next
// session's NBIRTH, nor a DBIRTH before its NBIRTH. A subscriber on n3
// that comes after the births gets both certificates, NBIRTH first; every
// node's API shows the edge node online with the same counters. n1 is
// SIGKILLed with the edge node on it: n2 and n3 still serve both
// certificates at once, and the line publishes its NDEATH will, which
// every remaining node counts.
func TestSparkplugLine(t *testing.T) {
	bin := suiteBinary(t, "three linemq processes")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	topo, err := NewLoopback()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if keep := os.Getenv("LINEMQ_CHAOS_DIR"); keep != "" {
		dir = filepath.Join(keep, "sparkplug-line") // the processes' data and logs, kept
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	c := &cluster{bin: bin, dir: dir, topo: topo}
	defer c.stop()
	if err := c.startAll(ctx); err != nil {
		t.Fatal(err)
	}
	if why := c.settled(ctx, 60*time.Second, false); why != "" {
		t.Fatalf("the line did not settle: %s", why)
	}

	host, _ := mqtttest.DialV5(t, c.mqttAddr(2), &paho.Connect{ClientID: "scada", CleanStart: true}, nil)
	host.Sub("spBv1.0/G/#", 1)
	// The route every node registers for the others' Sparkplug traffic
	// is in place once n1's and n2's publishes reach n3's host.
	brokertest.Eventually(t, 20*time.Second, "n3's host reached from n1 and n2", func() bool {
		for _, i := range []int{0, 1} {
			p, _ := mqtttest.DialV5(t, c.mqttAddr(i), &paho.Connect{ClientID: fmt.Sprint("probe", i), CleanStart: true}, nil)
			p.Pub("spBv1.0/G/NDATA/probe", 1, false, string(spPayload(0, -1)))
			p.Disconnect(&paho.Disconnect{})
		}
		got := 0
		for {
			select {
			case <-host.Msgs:
				got++
				continue
			case <-time.After(300 * time.Millisecond):
			}
			return got >= 2
		}
	})

	const rounds = 100
	var msgs []*paho.Publish
	var edge *mqtttest.V5
	for i := range rounds {
		node := i % 2
		edge, _ = mqtttest.DialV5(t, c.mqttAddr(node), &paho.Connect{ClientID: "edge-E", CleanStart: true, KeepAlive: 30,
			WillMessage: &paho.WillMessage{Topic: "spBv1.0/G/NDEATH/E", QoS: 1, Payload: spPayload(-1, i)}}, nil)
		edge.Pub("spBv1.0/G/NBIRTH/E", 0, false, string(spPayload(0, i)))
		edge.Pub("spBv1.0/G/DBIRTH/E/D", 0, false, string(spPayload(1, -1)))
		for n := 0; n < 2; {
			select {
			case m := <-host.Msgs:
				msgs = append(msgs, m)
				if !strings.Contains(m.Topic, "/NDEATH/") {
					n++
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("round %d: the births did not reach n3", i)
			}
		}
	}
	// The last session (on n2, round 99) is the edge node's: move it to n1
	// for the kill.
	edge, _ = mqtttest.DialV5(t, c.mqttAddr(0), &paho.Connect{ClientID: "edge-E", CleanStart: true, KeepAlive: 30,
		WillMessage: &paho.WillMessage{Topic: "spBv1.0/G/NDEATH/E", QoS: 1, Payload: spPayload(-1, rounds)}}, nil)
	edge.Pub("spBv1.0/G/NBIRTH/E", 0, false, string(spPayload(0, rounds)))
	edge.Pub("spBv1.0/G/DBIRTH/E/D", 0, false, string(spPayload(1, -1)))
	for n := 0; n < 2; {
		m := host.Next()
		msgs = append(msgs, m)
		if !strings.Contains(m.Topic, "/NDEATH/") {
			n++
		}
	}
	births, deaths := 0, 0
	current, born := -1, false
	for i, m := range msgs {
		p, err := sparkplug.Decode(m.Payload, true)
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		switch tp, _ := sparkplug.ParseTopic(m.Topic); tp.Kind {
		case sparkplug.NBIRTH:
			current, born = int(p.BdSeq), true
			births++
		case sparkplug.NDEATH:
			if int(p.BdSeq) < current {
				t.Errorf("message %d: NDEATH of session %d after the NBIRTH of session %d", i, p.BdSeq, current)
			}
			born = false
			deaths++
		case sparkplug.DBIRTH:
			if !born {
				t.Errorf("message %d: DBIRTH of session %d after its NDEATH", i, current)
			}
		}
	}
	t.Logf("%d sessions across n1 and n2: %d births and %d NDEATHs reached n3's host in order", rounds+1, births, deaths)

	type edgeJSON struct {
		Online    bool   `json:"online"`
		Gateway   string `json:"gateway"`
		Births    uint64 `json:"births"`
		BdSeq     int64  `json:"bdseq"`
		WillBdSeq int64  `json:"will_bdseq"`
		Mismatch  bool   `json:"bdseq_mismatch"`
	}
	type spJSON struct {
		EdgeNodes []struct {
			EdgeNode string `json:"edge_node"`
			edgeJSON
		} `json:"edge_nodes"`
	}
	edgeOn := func(i int) (edgeJSON, error) {
		var s spJSON
		c.mu.Lock()
		u := "http://" + c.https[i] + "/api/v1/sparkplug"
		c.mu.Unlock()
		if err := getJSON(ctx, u, &s); err != nil {
			return edgeJSON{}, err
		}
		for _, n := range s.EdgeNodes {
			if n.EdgeNode == "E" {
				return n.edgeJSON, nil
			}
		}
		return edgeJSON{}, fmt.Errorf("no edge node E on n%d", i+1)
	}
	// The will's bdSeq is known where the edge node connected; the other
	// gateways learn it over the mesh.
	brokertest.Eventually(t, 10*time.Second, "every node's API shows E online on n1, born 101 times, its will's bdSeq the birth's", func() bool {
		for i := range 3 {
			e, err := edgeOn(i)
			if err != nil || !e.Online || e.Gateway != "n1" || e.Births != rounds+1 || e.BdSeq != rounds || e.WillBdSeq != rounds || e.Mismatch {
				return false
			}
		}
		return true
	})

	certsOn := func(i int) {
		t.Helper()
		// Right after a gateway dies, a CONNECT may be refused (0x88)
		// while etcd elects a new leader: the client tries again.
		var s *mqtttest.V5
		brokertest.Eventually(t, 20*time.Second, fmt.Sprintf("a connection to n%d", i+1), func() bool {
			nc, err := net.DialTimeout("tcp", c.mqttAddr(i), 2*time.Second)
			if err != nil {
				return false
			}
			var ca *paho.Connack
			s, ca = mqtttest.ConnectV5(t, nc, &paho.Connect{ClientID: fmt.Sprint("certs", i), CleanStart: true}, mqtttest.Options{})
			return ca.ReasonCode == 0
		})
		s.Sub("$sparkplug/certificates/#", 1)
		a, b := s.Next(), s.Next()
		if a.Topic != "$sparkplug/certificates/spBv1.0/G/NBIRTH/E" || b.Topic != "$sparkplug/certificates/spBv1.0/G/DBIRTH/E/D" {
			t.Errorf("n%d: certificates %s, %s", i+1, a.Topic, b.Topic)
		}
		if p, err := sparkplug.Decode(a.Payload, true); err != nil || p.BdSeq != rounds {
			t.Errorf("n%d: the NBIRTH certificate is session %d's (%v), want %d's", i+1, p.BdSeq, err, rounds)
		}
		s.Disconnect(&paho.Disconnect{})
	}
	certsOn(2)

	c.kill(0)
	killed := time.Now()
	certsOn(1)
	certsOn(2)
	t.Logf("n1 killed: both certificates served by n2 and n3 %v after", time.Since(killed).Round(time.Millisecond))
	deadline := time.After(60 * time.Second) // the lease, then the wills' sweep
	for {
		var m *paho.Publish
		select {
		case m = <-host.Msgs:
		case <-deadline:
			t.Fatal("the line did not publish E's NDEATH within 60 s of n1's death")
		}
		if m.Topic == "spBv1.0/G/NDEATH/E" {
			if p, _ := sparkplug.Decode(m.Payload, true); p.BdSeq != rounds {
				t.Errorf("NDEATH of session %d, want %d", p.BdSeq, rounds)
			}
			break
		}
	}
	t.Logf("the line published E's NDEATH %v after n1 was killed", time.Since(killed).Round(time.Millisecond))
	brokertest.Eventually(t, 10*time.Second, "n2 and n3 show E offline", func() bool {
		for _, i := range []int{1, 2} {
			if e, err := edgeOn(i); err != nil || e.Online {
				return false
			}
		}
		return true
	})
}
