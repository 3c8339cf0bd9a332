package gateway

import (
	"context"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/broker/packet"
	"github.com/linemq/linemq/gateway/config"
)

// This file measures membership propagation through the whole of a
// three-gateway cluster: three gateways in this process, each hosting one
// of three etcd members with the embedded member's real settings (fsync,
// 250 ms heartbeat), their gRPC streams between them, clients over
// loopback TCP. docs/cluster.md ("Figures") quotes what it reports.

// startTrio starts gateways n1, n2 and n3 of one cluster, as three linemq
// processes started with -etcd-embed and one -etcd-initial-cluster would
// be, and waits until every node's stream to every other is up.
func startTrio(tb testing.TB) [3]*Gateway {
	tb.Helper()
	freeURL := func() string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		defer l.Close()
		return "http://" + l.Addr().String()
	}
	var peers, clients [3]string
	ic := ""
	for i := range 3 {
		peers[i], clients[i] = freeURL(), freeURL()
		if i > 0 {
			ic += ","
		}
		ic += fmt.Sprintf("n%d=%s", i+1, peers[i])
	}
	var gws [3]*Gateway
	var errs [3]error
	ctx, cancel := context.WithTimeout(tb.Context(), time.Minute) // bounds the start only
	defer cancel()
	var wg sync.WaitGroup
	for i := range 3 {
		cfg := config.Default()
		cfg.NodeID = fmt.Sprint("n", i+1)
		cfg.DataDir = filepath.Join(tb.TempDir(), cfg.NodeID)
		cfg.MQTT.Listen = new("127.0.0.1:0")
		cfg.HTTP.Listen = new("")
		cfg.Cluster.Listen = "127.0.0.1:0"
		cfg.Cluster.Etcd = config.Etcd{Embed: true, PeerListen: peers[i], ClientListen: clients[i], InitialCluster: ic}
		// Started together: each waits for an etcd quorum to be ready.
		wg.Go(func() { gws[i], errs[i] = Start(ctx, Options{Config: cfg}) })
	}
	wg.Wait()
	tb.Cleanup(func() {
		// One at a time, the etcd leader first: it hands leadership to a
		// member still running (closed together, the leader stops after
		// its followers and waits 10 s for a transfer to one already
		// gone). The last one waits 5 s for a quorum to revoke its lease.
		rest := slices.DeleteFunc(slices.Clone(gws[:]), func(g *Gateway) bool { return g == nil })
		for len(rest) > 0 {
			i := max(0, slices.IndexFunc(rest, func(g *Gateway) bool { return g.cluster.LeadsEtcd() == (len(rest) == 3) }))
			rest[i].Close()
			rest = slices.Delete(rest, i, i+1)
		}
	})
	for i := range gws {
		if errs[i] != nil {
			tb.Fatalf("n%d: %v", i+1, errs[i])
		}
	}
	brokertest.Eventually(tb, 30*time.Second, "every node's streams to the others up", func() bool {
		for i, g := range gws {
			for j := range 3 {
				if j != i && !g.cluster.Hooks().Available(fmt.Sprint("n", j+1)) {
					return false
				}
			}
		}
		return true
	})
	return gws
}

// propagation is what measurePropagation found.
type propagation struct {
	suback  []time.Duration // SUBSCRIBE to SUBACK on the member's node
	routed  []time.Duration // SUBACK to the member receiving the first publish made on another node
	publish int             // publishes made in all (every one but n found no member yet)
}

// measurePropagation makes n fresh share-group members, each the only
// member of a group of its own, the i-th on node i%3. From the moment its
// SUBACK arrives, a publisher on node (i+1)%3 publishes (QoS 1, a
// millisecond apart) to the group's topic until one is routed to it; that
// node answers "no matching subscribers" (0x10) until its registry copy
// has the member. It records SUBACK to the member's receipt of that
// publish: how long after its SUBACK a member is routable from another
// node, end to end.
func measurePropagation(tb testing.TB, gws [3]*Gateway, n int) propagation {
	tb.Helper()
	var members, pubs [3]*brokertest.Client
	for i, g := range gws {
		cp := &packet.Connect{ClientID: fmt.Appendf(nil, "prop-m%d", i+1), CleanStart: true}
		members[i], _ = brokertest.Connect(tb, g.MQTTAddr().String(), cp)
		pubs[i], _ = brokertest.Connect(tb, g.MQTTAddr().String(), &packet.Connect{ClientID: fmt.Appendf(nil, "prop-p%d", i+1), CleanStart: true})
	}
	var p propagation
	var pid uint16
	for i := range n {
		m, pub := members[i%3], pubs[(i+1)%3]
		topic := "prop/" + strconv.Itoa(i)
		t0 := time.Now()
		sa := m.Subscribe(&packet.Subscribe{Subs: []packet.Subscription{{Filter: []byte("$share/p" + strconv.Itoa(i) + "/" + topic), QoS: 1}}})
		subacked := time.Now()
		if len(sa.Reasons) != 1 || sa.Reasons[0] != packet.GrantedQoS1 {
			tb.Fatalf("subscribe %d: SUBACK %v", i, sa.Reasons)
		}
		// The publisher runs beside the member's read, so the receipt is
		// timed when it happens.
		stop := make(chan struct{})
		done := make(chan error, 1)
		go func() {
			for {
				pid = pid%65535 + 1
				p.publish++
				pub.Conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
				if _, err := pub.Conn.Write((&packet.Publish{Topic: []byte(topic), QoS: 1, PacketID: pid, Payload: []byte("x")}).Append(nil, packet.V5)); err != nil {
					done <- err
					return
				}
				h, body, err := pub.Read(5 * time.Second)
				if err != nil || h.Type != packet.PUBACK {
					done <- fmt.Errorf("no PUBACK: %v %v", h.Type, err)
					return
				}
				var a packet.Ack
				a.Decode(packet.V5, h.Type, body)
				switch a.Reason {
				case packet.Success:
					done <- nil
					return
				case packet.NoMatchingSubscribers:
				default:
					done <- fmt.Errorf("PUBACK %v", a.Reason)
					return
				}
				select {
				case <-stop:
					done <- nil
					return
				case <-time.After(time.Millisecond):
				}
			}
		}()
		h, body, err := m.Read(10 * time.Second)
		got := time.Now()
		close(stop)
		if perr := <-done; perr != nil {
			tb.Fatalf("member %d: publisher on n%d: %v", i, (i+1)%3+1, perr)
		}
		if err != nil || h.Type != packet.PUBLISH {
			tb.Fatalf("member %d on n%d: no delivery within 10 s of its SUBACK: %v %v", i, i%3+1, h.Type, err)
		}
		var pp packet.Publish
		if err := pp.Decode(packet.V5, h.Flags, body); err != nil || string(pp.Topic) != topic {
			tb.Fatalf("member %d: got %q (%v), want a publish on %s", i, pp.Topic, err, topic)
		}
		m.Send((&packet.Ack{Type: packet.PUBACK, PacketID: pp.PacketID}).Append(nil, packet.V5))
		p.suback = append(p.suback, subacked.Sub(t0))
		p.routed = append(p.routed, got.Sub(subacked))
	}
	return p
}

// pct is the q-th percentile of s (nearest rank).
func pct(s []time.Duration, q float64) time.Duration {
	s = slices.Clone(s)
	slices.Sort(s)
	return s[max(0, int(math.Ceil(float64(len(s))*q/100))-1)]
}

// lagFigures is the registry lag (gateway/cluster/registry's lag tracker:
// a node's own write, from sending it to etcd until its own watch delivers
// it) over the three nodes: the mean and the largest.
func lagFigures(gws [3]*Gateway) (mean, largest time.Duration, n uint64) {
	var sum time.Duration
	for _, g := range gws {
		st := g.cluster.Stats().Registry
		sum += st.LagSum
		n += st.LagCount
		largest = max(largest, st.LagMax)
	}
	return sum / time.Duration(max(n, 1)), largest, n
}

// TestMembershipPropagation makes 100 fresh share-group members (1,000 with
// LINEMQ_PROPAGATION=1000, the figure docs/cluster.md quotes; run it
// without -race) and checks that each is routed a publish made on another
// node. It logs the figures and asserts nothing about time:
// BenchmarkMembershipPropagation reports them too.
func TestMembershipPropagation(t *testing.T) {
	if testing.Short() {
		t.Skip("three gateways with an etcd quorum")
	}
	n := 100
	if s := os.Getenv("LINEMQ_PROPAGATION"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n < 1 {
			t.Fatalf("LINEMQ_PROPAGATION=%q: want a count", s)
		}
	}
	gws := startTrio(t)
	p := measurePropagation(t, gws, n)
	lagMean, lagMax, lagN := lagFigures(gws)
	t.Logf("%d members: SUBACK to first routed delivery from another node p50 %v p99 %v max %v; SUBSCRIBE to SUBACK p50 %v p99 %v; %d publishes",
		n, pct(p.routed, 50).Round(10*time.Microsecond), pct(p.routed, 99).Round(10*time.Microsecond), pct(p.routed, 100).Round(10*time.Microsecond),
		pct(p.suback, 50).Round(10*time.Microsecond), pct(p.suback, 99).Round(10*time.Microsecond), p.publish)
	t.Logf("registry lag (own writes, sent to seen by own watch) over %d writes: mean %v, max %v", lagN, lagMean.Round(10*time.Microsecond), lagMax.Round(10*time.Microsecond))
}

// BenchmarkMembershipPropagation reports membership propagation as
// metrics: run it with -benchtime 1000x for the figure over 1,000
// subscribes, one member per iteration.
//
//	go test -run '^$' -bench MembershipPropagation -benchtime 1000x ./gateway
func BenchmarkMembershipPropagation(b *testing.B) {
	gws := startTrio(b)
	b.ResetTimer()
	p := measurePropagation(b, gws, b.N)
	b.StopTimer()
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(pct(p.routed, 50)), "p50-ms")
	b.ReportMetric(ms(pct(p.routed, 99)), "p99-ms")
	b.ReportMetric(ms(pct(p.routed, 100)), "max-ms")
	b.ReportMetric(ms(pct(p.suback, 50)), "suback-p50-ms")
	b.ReportMetric(ms(pct(p.suback, 99)), "suback-p99-ms")
	lagMean, lagMax, _ := lagFigures(gws)
	b.ReportMetric(ms(lagMean), "lag-mean-ms")
	b.ReportMetric(ms(lagMax), "lag-max-ms")
	b.ReportMetric(0, "ns/op")
}
