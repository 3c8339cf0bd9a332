package peer

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/broker/packet"
	"github.com/linemq/linemq/internal/certtest"
)

func TestForwardAndDeliverBothWays(t *testing.T) {
	a := startNode(t, "a", fast(Options{}))
	b := startNode(t, "b", fast(Options{}))
	connect(a, b)
	waitAvailable(t, a, "b", true)
	waitAvailable(t, b, "a", true)

	if !stats(t, a, "b").Dialer || stats(t, b, "a").Dialer {
		t.Fatal("the node whose name sorts first dials")
	}
	if s, r := stats(t, a, "b").Streams, stats(t, b, "a").Streams; s != 1 || r != 1 {
		t.Fatalf("streams: a %d, b %d; want one shared stream", s, r)
	}

	m := msg("line/3/temp", "21.5")
	m.Retain = true
	m.ContentType = []byte("text/plain")
	m.User = []packet.UserProperty{{Key: []byte("k"), Value: []byte("v")}}
	if err := a.Send("b", m); err != nil {
		t.Fatal(err)
	}
	got := recv(t, b.h.forwards)
	if got.from != "a" || got.m.Topic != m.Topic || !bytes.Equal(got.m.Payload, m.Payload) ||
		got.m.QoS != 1 || !got.m.Retain || string(got.m.ContentType) != "text/plain" ||
		len(got.m.User) != 1 || !got.m.Created.Equal(m.Created) {
		t.Fatalf("forward arrived as %+v from %s", got.m, got.from)
	}
	if err := b.Send("a", msg("back", "x")); err != nil {
		t.Fatal(err)
	}
	if got := recv(t, a.h.forwards); got.from != "b" || got.m.Topic != "back" {
		t.Fatalf("forward b->a arrived as %q from %s", got.m.Topic, got.from)
	}

	to := Target{Group: "workers", Filter: "line/+/temp", Client: "plc/7"}
	for _, pair := range [][2]*node{{a, b}, {b, a}} {
		from, dst := pair[0], pair[1]
		if err := outcome(t, deliver(from, context.Background(), dst.name, to, m), 5*time.Second); err != nil {
			t.Fatalf("%s->%s: %v", from.name, dst.name, err)
		}
		got := recv(t, dst.h.delivered)
		if got.from != from.name || got.to != to || got.m.Topic != m.Topic {
			t.Fatalf("%s->%s: delivered %+v to %+v", from.name, dst.name, got.m, got.to)
		}
	}
	if s := stats(t, a, "b"); s.Answers != 1 || s.RTT <= 0 || s.SentRecords == 0 || s.RecvBytes == 0 {
		t.Fatalf("a's figures for b: %+v", s)
	}
}

func TestThreeNodes(t *testing.T) {
	nodes := []*node{
		startNode(t, "gw1", fast(Options{})),
		startNode(t, "gw2", fast(Options{})),
		startNode(t, "gw3", fast(Options{})),
	}
	connect(nodes...)
	for _, n := range nodes {
		for _, p := range nodes {
			if n != p {
				waitAvailable(t, n, p.name, true)
			}
		}
	}
	const each = 200
	var outcomes []<-chan error
	for _, n := range nodes {
		for _, p := range nodes {
			if n == p {
				continue
			}
			for i := range each {
				if err := n.Send(p.name, msg("f/"+n.name, fmt.Sprint(i))); err != nil {
					t.Fatal(err)
				}
				to := Target{Group: "g", Filter: "d/#", Client: fmt.Sprintf("%s-%d", n.name, i)}
				outcomes = append(outcomes, deliver(n, context.Background(), p.name, to, msg("d/"+n.name, "")))
			}
		}
	}
	for _, ch := range outcomes {
		if err := outcome(t, ch, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range nodes {
		from := map[string]int{}
		for range 2 * each {
			r := recv(t, n.h.forwards)
			from[r.from]++
			if r.m.Topic != "f/"+r.from {
				t.Fatalf("%s got %s from %s", n.name, r.m.Topic, r.from)
			}
		}
		for range 2 * each {
			r := recv(t, n.h.delivered)
			if !strings.HasPrefix(r.to.Client, r.from+"-") {
				t.Fatalf("%s got a delivery for %s from %s", n.name, r.to.Client, r.from)
			}
		}
		if len(from) != 2 || from[nodes[0].name]+from[nodes[1].name]+from[nodes[2].name] != 2*each {
			t.Fatalf("%s got forwards %v", n.name, from)
		}
	}
}

// Records are forwarded in the order they were sent.
func TestOrderPreserved(t *testing.T) {
	a := startNode(t, "a", fast(Options{}))
	b := startNode(t, "b", fast(Options{}))
	connect(a, b)
	waitAvailable(t, a, "b", true)
	const n = 2000
	for i := range n {
		for {
			err := a.Send("b", msg("seq", fmt.Sprint(i)))
			if err == nil {
				break
			}
			if !errors.Is(err, ErrQueueFull) {
				t.Fatal(err)
			}
			time.Sleep(time.Millisecond)
		}
	}
	for i := range n {
		if r := recv(t, b.h.forwards); string(r.m.Payload) != fmt.Sprint(i) {
			t.Fatalf("record %d arrived as %s", i, r.m.Payload)
		}
	}
}

// Whatever queues while the writer is busy goes out in one frame.
func TestBatching(t *testing.T) {
	g := newGated(nil)
	o := fast(Options{Transport: g})
	o.PingInterval = time.Hour // no pings in the count
	a := startNode(t, "a", o)
	b := startNode(t, "b", Options{PingInterval: time.Hour})
	t.Cleanup(g.release)
	connect(a, b)
	waitAvailable(t, a, "b", true)
	waitAvailable(t, b, "a", true)
	before := stats(t, b, "a")

	const n = 1000
	g.hold()
	if err := a.Send("b", msg("batch", "first")); err != nil {
		t.Fatal(err)
	}
	<-g.entered // the writer holds the first record, waiting at the gate
	for i := 1; i < n; i++ {
		if err := a.Send("b", msg("batch", fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	if q := stats(t, a, "b").Queued; q != n-1 {
		t.Fatalf("queued %d, want %d", q, n-1)
	}
	g.release()
	brokertest.Eventually(t, 5*time.Second, "all records arrive", func() bool { return b.h.count.Load() == n })
	after := stats(t, b, "a")
	frames, records := after.RecvFrames-before.RecvFrames, after.RecvRecords-before.RecvRecords
	t.Logf("%d records in %d frames", records, frames)
	if records != n || frames != 2 {
		t.Fatalf("%d records in %d frames, want %d in 2", records, frames, n)
	}

	// A batch larger than a frame is split.
	big := bytes.Repeat([]byte("x"), 1024)
	before = after
	g.hold()
	if err := a.Send("b", broker.NewMessage("big", big, 0, false)); err != nil {
		t.Fatal(err)
	}
	<-g.entered
	for i := 1; i < 2000; i++ {
		if err := a.Send("b", broker.NewMessage("big", big, 0, false)); err != nil {
			t.Fatal(err)
		}
	}
	g.release()
	brokertest.Eventually(t, 5*time.Second, "all big records arrive", func() bool { return b.h.count.Load() == n+2000 })
	after = stats(t, b, "a")
	frames = after.RecvFrames - before.RecvFrames
	bytesIn := after.RecvBytes - before.RecvBytes
	t.Logf("2000 records of 1 KiB in %d frames (%d bytes)", frames, bytesIn)
	if min := 1 + bytesIn/frameTarget; frames < min || frames > min+2 {
		t.Fatalf("%d frames for %d bytes, want about %d", frames, bytesIn, min)
	}
}

func TestAnswers(t *testing.T) {
	a := startNode(t, "a", fast(Options{}))
	b := startNode(t, "b", fast(Options{}))
	later := make(chan Reply, 1)
	b.h.deliver = func(_ string, to Target, _ *broker.Message, r Reply) {
		switch to.Client {
		case "here":
			r.Done(true, nil)
		case "gone":
			r.Done(false, nil)
		case "broken":
			r.Done(true, errors.New("disk full")) // err wins over accepted
		case "later":
			later <- r // answered from another goroutine
		}
	}
	connect(a, b)
	waitAvailable(t, a, "b", true)

	do := func(client string) <-chan error {
		return deliver(a, context.Background(), "b", Target{Group: "g", Filter: "t", Client: client}, msg("t", ""))
	}
	if err := outcome(t, do("here"), 5*time.Second); err != nil {
		t.Fatalf("here: %v", err)
	}
	if err := outcome(t, do("gone"), 5*time.Second); !errors.Is(err, ErrNotHere) {
		t.Fatalf("gone: %v, want ErrNotHere", err)
	}
	var re *RemoteError
	if err := outcome(t, do("broken"), 5*time.Second); !errors.As(err, &re) || re.Node != "b" || re.Msg != "disk full" {
		t.Fatalf("broken: %v, want b's RemoteError", err)
	}
	ch := do("later")
	r := <-later
	go r.Done(true, nil)
	if err := outcome(t, ch, 5*time.Second); err != nil {
		t.Fatalf("later: %v", err)
	}
	if s := stats(t, a, "b"); s.Answers != 4 || s.Timeouts != 0 || s.InFlight != 0 {
		t.Fatalf("a's figures for b: %+v", s)
	}
}

// A receiver that never answers: ErrTimeout within the bound; enough of
// them in a row open the breaker; pings still answered close it again.
func TestDeliverTimeout(t *testing.T) {
	o := fast(Options{})
	a := startNode(t, "a", o)
	b := startNode(t, "b", fast(Options{}))
	var mu sync.Mutex
	var held []Reply
	b.h.deliver = func(_ string, _ Target, _ *broker.Message, r Reply) {
		mu.Lock()
		held = append(held, r)
		mu.Unlock()
	}
	connect(a, b)
	waitAvailable(t, a, "b", true)

	to := Target{Group: "g", Filter: "t", Client: "mute"}
	start := time.Now()
	err := outcome(t, deliver(a, context.Background(), "b", to, msg("t", "")), 5*time.Second)
	took := time.Since(start)
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("got %v, want ErrTimeout", err)
	}
	t.Logf("ErrTimeout after %v (DeliverTimeout %v)", took, o.DeliverTimeout)
	if took < o.DeliverTimeout || took > o.DeliverTimeout+200*time.Millisecond {
		t.Fatalf("ErrTimeout after %v, want %v to %v", took, o.DeliverTimeout, o.DeliverTimeout+200*time.Millisecond)
	}
	if !a.Available("b") {
		t.Fatal("one timeout opened the breaker; the threshold is 3")
	}

	// Two more in a row open it.
	var chs []<-chan error
	for range 2 {
		chs = append(chs, deliver(a, context.Background(), "b", to, msg("t", "")))
	}
	for _, ch := range chs {
		if err := outcome(t, ch, 5*time.Second); !errors.Is(err, ErrTimeout) {
			t.Fatalf("got %v, want ErrTimeout", err)
		}
	}
	if a.Available("b") {
		t.Fatal("three timeouts in a row left the peer available")
	}
	if err := a.Send("b", msg("t", "")); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Send with the breaker open: %v, want ErrUnavailable", err)
	}
	// b still answers pings: the half-open probe closes the breaker.
	waitAvailable(t, a, "b", true)
	s := stats(t, a, "b")
	if s.Timeouts != 3 || s.Opens != 1 || s.Probes != 1 || s.Breaker != BreakerClosed {
		t.Fatalf("a's figures for b: %+v", s)
	}

	// An answer after the timeout is counted as late (a duplicate when
	// it accepted).
	mu.Lock()
	held[0].Done(true, nil)
	mu.Unlock()
	brokertest.Eventually(t, 5*time.Second, "the late answer is counted", func() bool {
		s := stats(t, a, "b")
		return s.Late == 1 && s.LateAccepted == 1
	})
}

// Killing a peer's server completes every pending delivery with ErrBroken
// at once and opens the breaker; the peer returning on the same address
// is probed with a ping and traffic resumes.
func TestKilledPeerAndReturn(t *testing.T) {
	for _, tc := range []struct{ survivor, victim string }{
		{"a", "b"}, // the victim accepts: its server closing breaks the stream
		{"b", "a"}, // the victim dials: its whole Mesh goes
	} {
		t.Run("kill "+tc.victim, func(t *testing.T) {
			s := startNode(t, tc.survivor, fast(Options{}))
			v := startNode(t, tc.victim, fast(Options{}))
			v.h.deliver = func(string, Target, *broker.Message, Reply) {} // never answers
			connect(s, v)
			waitAvailable(t, s, v.name, true)

			var pend []<-chan error
			for i := range 5 {
				to := Target{Group: "g", Filter: "t", Client: fmt.Sprint(i)}
				pend = append(pend, deliver(s, context.Background(), v.name, to, msg("t", "")))
			}
			brokertest.Eventually(t, 5*time.Second, "the victim has them", func() bool { return v.h.count.Load() == 5 })

			killed := time.Now()
			if tc.victim == "b" {
				v.tr.Close() // close listener and connections, nothing else
			} else {
				v.Close()
			}
			for _, ch := range pend {
				if err := outcome(t, ch, time.Second); !errors.Is(err, ErrBroken) {
					t.Fatalf("pending completed with %v, want ErrBroken", err)
				}
			}
			took := time.Since(killed)
			t.Logf("pending completed with ErrBroken %v after the kill", took)
			if took > 500*time.Millisecond {
				t.Fatalf("ErrBroken %v after the kill; want at once", took)
			}
			if s.Available(v.name) {
				t.Fatal("a killed peer is still available")
			}
			st := stats(t, s, v.name)
			if st.Breaker != BreakerOpen || st.Broken != 5 {
				t.Fatalf("after the kill: %+v", st)
			}
			err := s.Deliver(context.Background(), v.name, Target{}, msg("t", ""), func(error) { t.Error("done called for a refused delivery") })
			if !errors.Is(err, ErrUnavailable) {
				t.Fatalf("Deliver to a killed peer: %v, want ErrUnavailable at once", err)
			}

			// The peer returns where it was.
			v.Close()
			back := startNode(t, tc.victim, fast(Options{}), v.addr)
			connect(s, back)
			returned := time.Now()
			// Until the probe closes the breaker every Deliver is refused
			// at once; the first one queued is answered.
			for {
				ch := deliver(s, context.Background(), v.name, Target{Client: "x"}, msg("t", "again"))
				err := outcome(t, ch, 5*time.Second)
				if err == nil {
					break
				}
				if !errors.Is(err, ErrUnavailable) {
					t.Fatalf("while the peer returns: %v", err)
				}
				if time.Since(returned) > 10*time.Second {
					t.Fatal("the peer did not become available again")
				}
				time.Sleep(5 * time.Millisecond)
			}
			t.Logf("traffic resumed %v after the peer returned", time.Since(returned))
			st = stats(t, s, v.name)
			if st.Breaker != BreakerClosed || st.Opens < 1 || st.Probes < 1 || st.Streams < 2 {
				t.Fatalf("after the return: %+v", st)
			}
			if r := recv(t, back.h.delivered); string(r.m.Payload) != "again" {
				t.Fatalf("the returned peer got %q first", r.m.Payload)
			}
		})
	}
}

// A silently hung peer (a proxy that stops moving bytes, as SIGSTOP
// would) is passed over within PingInterval + PingTimeout, by both ends,
// with the default timings; pending deliveries fail with it (ErrTimeout),
// not at their own deadline; when it resumes,
// the same stream carries traffic again.
func TestHungPeer(t *testing.T) {
	a := startNode(t, "a", Options{})
	b := startNode(t, "b", Options{})
	b.h.deliver = func(string, Target, *broker.Message, Reply) {} // never answers
	p := newProxy(t, b.addr)
	a.SetPeers(map[string]string{"a": a.addr, "b": p.addr()})
	b.SetPeers(map[string]string{"a": a.addr, "b": b.addr})
	waitAvailable(t, a, "b", true)
	waitAvailable(t, b, "a", true)

	bound := DefaultPingInterval + DefaultPingTimeout
	p.pause()
	hung := time.Now()
	pend := deliver(a, context.Background(), "b", Target{Client: "x"}, msg("t", ""))
	var wg sync.WaitGroup
	for _, n := range []*node{a, b} {
		other := map[string]string{"a": "b", "b": "a"}[n.name]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n.Available(other) {
				if time.Since(hung) > 3*bound {
					t.Errorf("%s still sees %s available %v after the hang", n.name, other, time.Since(hung))
					return
				}
				time.Sleep(5 * time.Millisecond)
			}
			took := time.Since(hung)
			t.Logf("%s passes %s over %v after the hang (bound %v)", n.name, other, took, bound)
			if took > bound+500*time.Millisecond {
				t.Errorf("%s passed %s over after %v, want within %v", n.name, other, took, bound)
			}
		}()
	}
	wg.Wait()
	err := outcome(t, pend, 2*DefaultDeliverTimeout)
	if took := time.Since(hung); !errors.Is(err, ErrTimeout) || took > bound+500*time.Millisecond {
		t.Fatalf("pending delivery: %v after %v, want ErrTimeout within %v", err, took, bound)
	}

	p.unpause()
	resumed := time.Now()
	waitAvailable(t, a, "b", true)
	waitAvailable(t, b, "a", true)
	t.Logf("available again %v after the peer resumed", time.Since(resumed))
	st := stats(t, a, "b")
	if st.Streams != 1 || st.PingTimeouts == 0 || st.Probes == 0 {
		t.Fatalf("a's figures for b: %+v", st)
	}
	if err := a.Send("b", msg("after", "")); err != nil {
		t.Fatal(err)
	}
	if r := recv(t, b.h.forwards); r.m.Topic != "after" {
		t.Fatalf("got %s", r.m.Topic)
	}
}

// A handler that blocks the reader makes its node look hung to the peer.
func TestBlockedHandler(t *testing.T) {
	a := startNode(t, "a", fast(Options{}))
	b := startNode(t, "b", fast(Options{}))
	unblock := make(chan struct{})
	b.h.forward = func(_ string, m *broker.Message) {
		if m.Topic == "block" {
			<-unblock
		}
	}
	connect(a, b)
	waitAvailable(t, a, "b", true)
	if err := a.Send("b", msg("block", "")); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	waitAvailable(t, a, "b", false)
	o := fast(Options{})
	if took := time.Since(start); took > o.PingInterval+o.PingTimeout+500*time.Millisecond {
		t.Fatalf("passed over after %v, want within %v", took, o.PingInterval+o.PingTimeout)
	}
	close(unblock)
	waitAvailable(t, a, "b", true)
}

func TestMutualTLS(t *testing.T) {
	ca := certtest.NewCA(t, "line-ca")
	other := certtest.NewCA(t, "other-ca")

	t.Run("ok", func(t *testing.T) {
		a := startNode(t, "a", fast(Options{TLS: ca.Issue(t, "a")}))
		b := startNode(t, "b", fast(Options{TLS: ca.Issue(t, "b")}))
		connect(a, b)
		waitAvailable(t, a, "b", true)
		waitAvailable(t, b, "a", true)
		if err := outcome(t, deliver(a, context.Background(), "b", Target{Client: "c"}, msg("t", "")), 5*time.Second); err != nil {
			t.Fatal(err)
		}
		if err := outcome(t, deliver(b, context.Background(), "a", Target{Client: "c"}, msg("t", "")), 5*time.Second); err != nil {
			t.Fatal(err)
		}
	})

	refused := func(t *testing.T, dialer, acceptor *node, why, problem string) {
		t.Helper()
		brokertest.Eventually(t, 10*time.Second, "dials fail", func() bool { return stats(t, dialer, acceptor.name).DialErrors >= 2 })
		if dialer.Available(acceptor.name) || acceptor.Available(dialer.name) {
			t.Fatal("a refused peer is available")
		}
		s := stats(t, dialer, acceptor.name)
		if s.Streams != 0 {
			t.Fatalf("%d streams established", s.Streams)
		}
		if !strings.Contains(s.LastError, why) {
			t.Fatalf("refused because %q, want %q", s.LastError, why)
		}
		t.Logf("problem: %s", s.Problem)
		if s.Problem != problem {
			t.Fatalf("problem %q, want %q", s.Problem, problem)
		}
	}
	t.Run("unknown CA", func(t *testing.T) {
		a := startNode(t, "a", fast(Options{TLS: ca.Issue(t, "a")}))
		b := startNode(t, "b", fast(Options{TLS: other.Issue(t, "b")}))
		connect(a, b)
		refused(t, a, b, "certificate signed by unknown authority", "its certificate is not trusted (signed by an unknown authority)")
	})
	t.Run("acceptor's certificate names another node", func(t *testing.T) {
		a := startNode(t, "a", fast(Options{TLS: ca.Issue(t, "a")}))
		c := startNode(t, "c", fast(Options{TLS: ca.Issue(t, "b")}))
		connect(a, c)
		refused(t, a, c, "certificate is valid for b, not c", "its certificate does not name c")
	})
	t.Run("dialer's certificate names another node", func(t *testing.T) {
		a := startNode(t, "a", fast(Options{TLS: ca.Issue(t, "z")}))
		m := startNode(t, "m", fast(Options{TLS: ca.Issue(t, "m")}))
		connect(a, m)
		refused(t, a, m, "certificate is valid for z, not a", "it does not accept this node's certificate (it must name this node)")
	})
	t.Run("plain dialer", func(t *testing.T) {
		a := startNode(t, "a", fast(Options{}))
		b := startNode(t, "b", fast(Options{TLS: ca.Issue(t, "b")}))
		connect(a, b)
		refused(t, a, b, "dial b", "it hung up during the handshake (TLS configured on one of the two nodes only?)")
	})
}

func TestPeersComeAndGo(t *testing.T) {
	a := startNode(t, "a", fast(Options{}))
	b := startNode(t, "b", fast(Options{}))
	b.h.deliver = func(string, Target, *broker.Message, Reply) {}

	// b does not know a yet: a's dials are refused.
	a.SetPeers(map[string]string{"b": b.addr})
	brokertest.Eventually(t, 5*time.Second, "a's dial is refused", func() bool { return stats(t, a, "b").DialErrors > 0 })
	if s := stats(t, a, "b"); a.Available("b") || !strings.Contains(s.LastError, "node a is not a peer of b") {
		t.Fatalf("before b accepts a: %+v", s)
	}
	if err := a.Send("nobody", msg("t", "")); !errors.Is(err, ErrUnknownPeer) {
		t.Fatalf("Send to an unknown node: %v", err)
	}
	b.SetPeers(map[string]string{"a": a.addr, "b": b.addr})
	waitAvailable(t, a, "b", true)

	pend := deliver(a, context.Background(), "b", Target{Client: "x"}, msg("t", ""))
	brokertest.Eventually(t, 5*time.Second, "b has it", func() bool { return b.h.count.Load() == 1 })
	a.SetPeers(map[string]string{})
	if err := outcome(t, pend, time.Second); !errors.Is(err, ErrBroken) {
		t.Fatalf("pending to a removed peer: %v, want ErrBroken", err)
	}
	if a.Available("b") || a.Send("b", msg("t", "")) != ErrUnknownPeer {
		t.Fatal("a removed peer is still usable")
	}
	waitAvailable(t, b, "a", false) // a's side closed the stream

	a.SetPeers(map[string]string{"b": b.addr})
	waitAvailable(t, a, "b", true)
	waitAvailable(t, b, "a", true)
}

// A node registered anew at another address: the stream to the old one
// ends and the new one is dialled at once. SetPeer handles one node.
func TestAddressChange(t *testing.T) {
	a := startNode(t, "a", fast(Options{}))
	old := startNode(t, "b", fast(Options{}))
	a.SetPeer("b", old.addr)
	a.SetPeer("a", a.addr) // its own entry is ignored
	old.SetPeer("a", a.addr)
	waitAvailable(t, a, "b", true)

	moved := startNode(t, "b", fast(Options{}))
	moved.SetPeer("a", a.addr)
	a.SetPeer("b", moved.addr)
	waitAvailable(t, old, "a", false)
	waitAvailable(t, a, "b", true)
	if err := outcome(t, deliver(a, context.Background(), "b", Target{Client: "c"}, msg("t", "moved")), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if r := recv(t, moved.h.delivered); string(r.m.Payload) != "moved" {
		t.Fatalf("got %q", r.m.Payload)
	}
	if s := stats(t, a, "b"); s.Addr != moved.addr || s.Streams != 2 || len(a.Stats()) != 1 {
		t.Fatalf("a's figures for b: %+v", s)
	}

	a.SetPeer("b", "")
	if a.Available("b") || len(a.Stats()) != 0 {
		t.Fatal("SetPeer with no address left the peer")
	}
}

func TestClusterMismatch(t *testing.T) {
	a := startNode(t, "a", fast(Options{Cluster: "line-1"}))
	b := startNode(t, "b", fast(Options{Cluster: "line-2"}))
	connect(a, b)
	brokertest.Eventually(t, 5*time.Second, "a's dial is refused", func() bool { return stats(t, a, "b").DialErrors >= 2 })
	if s := stats(t, a, "b"); a.Available("b") || s.Streams != 0 || !strings.Contains(s.LastError, `of cluster "line-1"`) {
		t.Fatalf("two clusters: %+v", s)
	}
}

func TestQueueFull(t *testing.T) {
	g := newGated(nil)
	o := fast(Options{Transport: g, MaxQueued: 8, MaxInFlight: 4})
	o.PingInterval = time.Hour
	a := startNode(t, "a", o)
	b := startNode(t, "b", Options{PingInterval: time.Hour})
	var mu sync.Mutex
	var held []Reply
	b.h.deliver = func(_ string, _ Target, _ *broker.Message, r Reply) {
		mu.Lock()
		held = append(held, r)
		mu.Unlock()
	}
	t.Cleanup(g.release)
	connect(a, b)
	waitAvailable(t, a, "b", true)

	g.hold()
	if err := a.Send("b", msg("t", "")); err != nil {
		t.Fatal(err)
	}
	<-g.entered
	for i := range 8 {
		if err := a.Send("b", msg("t", "")); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	if err := a.Send("b", msg("t", "")); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("send beyond MaxQueued: %v, want ErrQueueFull", err)
	}
	g.release()
	brokertest.Eventually(t, 5*time.Second, "the queue drains", func() bool { return b.h.count.Load() == 9 })

	var chs []<-chan error
	for range 4 {
		chs = append(chs, deliver(a, context.Background(), "b", Target{Client: "x"}, msg("t", "")))
	}
	if err := a.Deliver(context.Background(), "b", Target{}, msg("t", ""), func(error) {}); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("deliver beyond MaxInFlight: %v, want ErrQueueFull", err)
	}
	brokertest.Eventually(t, 5*time.Second, "b holds four", func() bool { mu.Lock(); defer mu.Unlock(); return len(held) == 4 })
	mu.Lock()
	for _, r := range held {
		r.Done(true, nil)
	}
	mu.Unlock()
	for _, ch := range chs {
		if err := outcome(t, ch, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if s := stats(t, a, "b"); s.Rejected != 2 || s.InFlight != 0 {
		t.Fatalf("a's figures for b: %+v", s)
	}
}

func TestContext(t *testing.T) {
	a := startNode(t, "a", fast(Options{}))
	b := startNode(t, "b", fast(Options{}))
	b.h.deliver = func(string, Target, *broker.Message, Reply) {}
	connect(a, b)
	waitAvailable(t, a, "b", true)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := a.Deliver(ctx, "b", Target{}, msg("t", ""), func(error) { t.Error("done called") }); !errors.Is(err, context.Canceled) {
		t.Fatalf("Deliver with an ended context: %v", err)
	}

	ctx, cancel = context.WithCancel(context.Background())
	ch := deliver(a, ctx, "b", Target{}, msg("t", ""))
	brokertest.Eventually(t, 5*time.Second, "b has it", func() bool { return b.h.count.Load() == 1 })
	cancel()
	if err := outcome(t, ch, time.Second); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled delivery: %v", err)
	}

	ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := outcome(t, deliver(a, ctx, "b", Target{}, msg("t", "")), time.Second); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("delivery past its context's deadline: %v", err)
	}
	if s := stats(t, a, "b"); s.InFlight != 0 || s.Timeouts != 0 || !a.Available("b") {
		t.Fatalf("a's figures for b: %+v", s)
	}
}

func TestClose(t *testing.T) {
	a := startNode(t, "a", fast(Options{}))
	b := startNode(t, "b", fast(Options{}))
	b.h.deliver = func(string, Target, *broker.Message, Reply) {}
	connect(a, b)
	waitAvailable(t, a, "b", true)
	ch := deliver(a, context.Background(), "b", Target{}, msg("t", ""))
	brokertest.Eventually(t, 5*time.Second, "b has it", func() bool { return b.h.count.Load() == 1 })
	a.Close()
	if err := outcome(t, ch, time.Second); !errors.Is(err, ErrClosed) {
		t.Fatalf("pending at Close: %v, want ErrClosed", err)
	}
	if err := a.Send("b", msg("t", "")); !errors.Is(err, ErrUnknownPeer) {
		t.Fatalf("Send after Close: %v", err)
	}
	a.Close()
	waitAvailable(t, b, "a", false)
}

func TestOptions(t *testing.T) {
	for _, o := range []Options{
		{},
		{Node: "a"},
		{Node: "a", Handler: newHandler(), TLS: ca(t), Transport: NewGRPC(GRPCOptions{})},
		{Node: "a", Handler: newHandler(), PingTimeout: -1},
	} {
		if _, err := New(o); err == nil {
			t.Errorf("New(%+v) accepted", o)
		}
	}
}

func ca(t *testing.T) *tls.Config { return certtest.NewCA(t, "x").Issue(t, "a") }
