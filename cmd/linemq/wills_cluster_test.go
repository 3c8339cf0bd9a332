package main

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/broker/packet"
)

// willWatcher is a clean QoS 1 subscriber to will/# that records when each
// will topic arrives.
type willWatcher struct {
	conn *brokertest.Client
	mu   sync.Mutex
	got  map[string][]time.Time
}

func watchWills(t *testing.T, addr string) *willWatcher {
	t.Helper()
	c, _, err := dialMQTT(addr, "will-watcher", true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Conn.Close() })
	c.Write((&packet.Subscribe{PacketID: 1, Subs: []packet.Subscription{{Filter: []byte("will/#"), QoS: 1}}}).Append(nil, packet.V5))
	w := &willWatcher{conn: c, got: map[string][]time.Time{}}
	go func() {
		for {
			h, body, err := c.Read(5 * time.Minute)
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
			w.mu.Lock()
			w.got[string(p.Topic)] = append(w.got[string(p.Topic)], time.Now())
			w.mu.Unlock()
			if p.QoS > 0 {
				c.Write((&packet.Ack{Type: packet.PUBACK, PacketID: p.PacketID}).Append(nil, packet.V5))
			}
		}
	}()
	return w
}

func (w *willWatcher) arrivals(topic string) []time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.got[topic])
}

func (w *willWatcher) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, a := range w.got {
		n += len(a)
	}
	return n
}

// dialWithWill connects id to addr with a QoS 1 will on will/<id>, the
// given Will Delay Interval and session expiry.
func dialWithWill(addr, id string, delay, expiry uint32) (*brokertest.Client, error) {
	cp := &packet.Connect{ClientID: []byte(id), CleanStart: true,
		WillFlag: true, WillQoS: 1, WillTopic: []byte("will/" + id), WillPayload: []byte("dead")}
	if expiry > 0 {
		cp.Props.Set(packet.PropSessionExpiry)
		cp.Props.SessionExpiry = expiry
	}
	if delay > 0 {
		cp.WillProps.Set(packet.PropWillDelay)
		cp.WillProps.WillDelay = delay
	}
	c, _, err := dialConnect(addr, cp)
	return c, err
}

// TestClusterWillsOfADeadGateway: 50 clients with QoS 1 wills on one
// gateway (most without a delay, some with 3 s, some with 14 s, longer than
// the 10 s lease), a subscriber to their will topics on another; the
// gateway is killed with SIGKILL and so cannot publish them. The line
// must: every will once, none before its delay, those due before the
// lease expired within the lease plus 1 s of the kill and the others
// within 1 s of their delay; a client that resumes its session elsewhere
// within its delay has its will cancelled; the gateway restarted on its
// data publishes none again.
func TestClusterWillsOfADeadGateway(t *testing.T) {
	if testing.Short() {
		t.Skip("processes and an etcd quorum")
	}
	c := startCluster3(t)
	// The victim must not lead etcd: a new leader renews every lease, and
	// the wills would wait out the election too (measured apart below).
	victim := 1
	if c.leader() == victim {
		victim = 2
	}
	watcher := (victim + 1) % 3
	w := watchWills(t, c.addrs[watcher])

	const n = 50
	delays := map[string]uint32{}
	var conns []*brokertest.Client
	for i := range n {
		id := fmt.Sprintf("edge%02d", i)
		var delay, expiry uint32
		switch {
		case i%10 == 1:
			delay, expiry = 14, 3600
		case i%5 == 0:
			delay, expiry = 3, 3600
		case i%2 == 0:
			expiry = 3600 // persistent, no delay
		}
		cc, err := dialWithWill(c.addrs[victim], id, delay, expiry)
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		conns = append(conns, cc)
		delays[id] = delay
	}
	// One more, with a long delay, that comes back elsewhere in time.
	back, err := dialWithWill(c.addrs[victim], "edge-back", 25, 3600)
	if err != nil {
		t.Fatal(err)
	}
	conns = append(conns, back)
	defer func() {
		for _, cc := range conns {
			cc.Conn.Close()
		}
	}()
	// The watcher's subscription is routed to the victim (its SUBACK waited
	// for the registry); a will published there now would arrive. None is.

	killed := time.Now()
	c.ds[victim].cmd.Process.Kill()
	<-c.ds[victim].exited

	// edge-back resumes on the watcher's node once the lease is gone
	// (0x88 until then), well within its 25 s delay.
	var resumedAt time.Time
	if !waitFor(30*time.Second, func() bool {
		cc, _, err := dialMQTT(c.addrs[watcher], "edge-back", false)
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			return false
		}
		resumedAt = time.Now()
		conns = append(conns, cc)
		return true
	}) {
		t.Fatal("edge-back could not resume on another gateway")
	}
	t.Logf("edge-back resumed elsewhere %.1f s after the kill", resumedAt.Sub(killed).Seconds())

	const lease = 10 * time.Second
	if !waitFor(40*time.Second, func() bool { return w.count() >= n }) {
		t.Fatalf("%d of %d wills published within 40 s of the kill", w.count(), n)
	}
	var worst, worstDelayed time.Duration
	for id, delay := range delays {
		at := w.arrivals("will/" + id)
		if len(at) != 1 {
			t.Errorf("%s: will published %d times", id, len(at))
			continue
		}
		after := at[0].Sub(killed)
		want := time.Duration(delay) * time.Second
		if after < want {
			t.Errorf("%s: will published %.2f s after the kill, before its %d s delay", id, after.Seconds(), delay)
		}
		bound := max(lease, want) + time.Second
		if after > bound {
			t.Errorf("%s: will published %.2f s after the kill, later than %.0f s", id, after.Seconds(), bound.Seconds())
		}
		if delay > 10 {
			worstDelayed = max(worstDelayed, after-want)
		} else {
			worst = max(worst, after)
		}
	}
	t.Logf("all %d wills published once; latest undelayed/short-delay one %.2f s after the kill; delayed past the lease: at most %.2f s after their delay",
		n, worst.Seconds(), worstDelayed.Seconds())

	// Past edge-back's delay: its will stays cancelled.
	waitUntil := killed.Add(27 * time.Second)
	time.Sleep(time.Until(waitUntil)) // a fixed point in time: the delay under test
	if got := w.arrivals("will/edge-back"); len(got) != 0 {
		t.Errorf("edge-back resumed within its delay, yet its will was published %d times", len(got))
	}

	// The gateway comes back on its data: its restored sessions' wills
	// were the line's to publish, and were.
	c.restart(victim)
	before := w.count()
	time.Sleep(16 * time.Second) // longer than every delay: what would come, would have
	if extra := w.count() - before; extra != 0 {
		var again []string
		w.mu.Lock()
		for topic, at := range w.got {
			if len(at) > 1 || strings.HasSuffix(topic, "edge-back") {
				again = append(again, topic)
			}
		}
		w.mu.Unlock()
		t.Fatalf("the restarted gateway published %d wills again: %v", extra, again)
	}
	t.Logf("restarted gateway: no will published again in 16 s")
}
