package broker_test

// Robustness tests: clients that never finish CONNECT, go silent, stop
// reading, open and drop connections by the thousand, or send garbage. In
// every case the broker must keep serving well-behaved clients, close the bad
// connections within bounded time, and give back the goroutines and memory
// they used once they are gone.
//
// Helpers here are prefixed "robust" so they do not collide with other test
// files of package broker_test.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/broker/packet"
)

// ---------------------------------------------------------------------------
// Helpers

// robustSnap is a goroutine count and a post-GC heap size.
type robustSnap struct {
	goroutines int
	heapInuse  uint64
}

func robustSnapshot() robustSnap {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return robustSnap{goroutines: runtime.NumGoroutine(), heapInuse: ms.HeapInuse}
}

func (s robustSnap) String() string {
	return fmt.Sprintf("%d goroutines, HeapInuse %.1f MiB", s.goroutines, float64(s.heapInuse)/(1<<20))
}

// robustWaitSettled polls until the goroutine count is within gMargin of
// base and the heap within heapMargin of it. On failure it logs the goroutine
// stacks, which name what leaked.
func robustWaitSettled(t *testing.T, base robustSnap, gMargin int, heapMargin uint64, timeout time.Duration) robustSnap {
	t.Helper()
	var last robustSnap
	ok := false
	defer func() {
		if !ok {
			buf := make([]byte, 1<<20)
			n := runtime.Stack(buf, true)
			t.Logf("baseline %v, last %v; goroutines:\n%s", base, last, buf[:n])
		}
	}()
	brokertest.Eventually(t, timeout, fmt.Sprintf("goroutines within %d and heap within %d MiB of baseline (%v)",
		gMargin, heapMargin>>20, base), func() bool {
		last = robustSnapshot()
		return last.goroutines <= base.goroutines+gMargin && last.heapInuse <= base.heapInuse+heapMargin
	})
	ok = true
	t.Logf("settled: baseline %v, now %v", base, last)
	return last
}

// robustEvents records disconnections, to tell when and why the broker
// dropped a given client.
type robustEvents struct {
	mu   sync.Mutex
	disc map[string]robustDisc
}

type robustDisc struct {
	reason packet.ReasonCode
	err    error
	at     time.Time
}

func newRobustEvents() *robustEvents { return &robustEvents{disc: make(map[string]robustDisc)} }

func (e *robustEvents) ClientConnected(broker.ClientInfo, bool) {}

func (e *robustEvents) ClientDisconnected(c broker.ClientInfo, reason packet.ReasonCode, err error) {
	e.mu.Lock()
	e.disc[c.ClientID] = robustDisc{reason: reason, err: err, at: time.Now()}
	e.mu.Unlock()
}

func (e *robustEvents) get(id string) (robustDisc, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	d, ok := e.disc[id]
	return d, ok
}

// robustPair is a well-behaved publisher and subscriber used to check that the
// broker keeps serving while something else misbehaves.
type robustPair struct {
	pub, sub *brokertest.Client
	topic    string
	n        int
}

func newRobustPair(t *testing.T, addr, name string, v packet.Version, keepAlive uint16) *robustPair {
	t.Helper()
	p := &robustPair{topic: "robust/probe/" + name}
	p.sub, _ = robustConnectOK(t, addr, &packet.Connect{Version: v, ClientID: []byte(name + "-sub"), CleanStart: true, KeepAlive: keepAlive})
	sa := p.sub.Subscribe(&packet.Subscribe{Subs: []packet.Subscription{{Filter: []byte(p.topic), QoS: 0}}})
	if len(sa.Reasons) != 1 || sa.Reasons[0] != packet.GrantedQoS0 {
		t.Fatalf("probe SUBACK %v", sa.Reasons)
	}
	p.pub, _ = robustConnectOK(t, addr, &packet.Connect{Version: v, ClientID: []byte(name + "-pub"), CleanStart: true, KeepAlive: keepAlive})
	return p
}

// check publishes one QoS 1 message and expects its PUBACK and its delivery.
func (p *robustPair) check(t *testing.T) {
	t.Helper()
	p.n++
	payload := []byte("probe-" + strconv.Itoa(p.n))
	pid := uint16(p.n%60000 + 1)
	p.pub.Publish(&packet.Publish{Topic: []byte(p.topic), QoS: 1, PacketID: pid, Payload: payload})
	var ack packet.Ack
	p.pub.Expect(packet.PUBACK, &ack)
	if ack.PacketID != pid || ack.Reason != packet.Success {
		t.Fatalf("probe PUBACK %+v, want id %d success", ack, pid)
	}
	var got packet.Publish
	p.sub.Expect(packet.PUBLISH, &got)
	if string(got.Topic) != p.topic || !bytes.Equal(got.Payload, payload) {
		t.Fatalf("probe got %q %q, want %q %q", got.Topic, got.Payload, p.topic, payload)
	}
}

func (p *robustPair) close() {
	p.pub.Conn.Close()
	p.sub.Conn.Close()
}

// robustConnectOK connects and fails unless the CONNACK accepts.
func robustConnectOK(t *testing.T, addr string, c *packet.Connect) (*brokertest.Client, *packet.Connack) {
	t.Helper()
	cl, ack := brokertest.Connect(t, addr, c)
	if ack.Reason != packet.Success {
		t.Fatalf("CONNACK %#x (%v) for %q", byte(ack.Reason), ack.Reason, c.ClientID)
	}
	return cl, ack
}

// robustExpectOpen fails unless c stays open and silent for d: the read must
// end by its deadline, not by EOF or a packet.
func robustExpectOpen(t *testing.T, c *brokertest.Client, d time.Duration, what string) {
	t.Helper()
	h, body, err := c.Read(d)
	var ne net.Error
	switch {
	case err == nil:
		t.Fatalf("%s: unexpected %v (% x)", what, h.Type, body)
	case errors.As(err, &ne) && ne.Timeout():
		// Still open.
	default:
		t.Fatalf("%s: connection ended after less than %v: %v", what, d, err)
	}
}

func robustVersionName(v packet.Version) string {
	if v == packet.V311 {
		return "v3.1.1"
	}
	return fmt.Sprintf("v%d", v)
}

// robustPing sends PINGREQ and expects PINGRESP.
func robustPing(t *testing.T, c *brokertest.Client, what string) {
	t.Helper()
	c.Send(packet.AppendPingreq(nil))
	h, body, err := c.Read(5 * time.Second)
	if err != nil {
		t.Fatalf("%s: PINGREQ: %v", what, err)
	}
	if h.Type != packet.PINGRESP {
		t.Fatalf("%s: PINGREQ answered with %v (% x)", what, h.Type, body)
	}
}

// robustReadClosed reads nc until it ends, returning the bytes read before
// the end and the error that ended it.
func robustReadClosed(nc net.Conn, deadline time.Time) ([]byte, error) {
	nc.SetReadDeadline(deadline)
	var got []byte
	buf := make([]byte, 512)
	for {
		n, err := nc.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			return got, err
		}
	}
}

// ---------------------------------------------------------------------------
// a. Connections that never send CONNECT

func TestRobustConnectNeverArrives(t *testing.T) {
	const connectTimeout = 300 * time.Millisecond
	srv, addr := brokertest.RunServer(t, broker.Options{ConnectTimeout: connectTimeout})
	pair := newRobustPair(t, addr, "cna", packet.V5, 30)
	pair.check(t)
	base := robustSnapshot()

	connect := (&packet.Connect{Version: packet.V5, ClientID: []byte("never-finishes"), CleanStart: true, KeepAlive: 30}).Append(nil)
	type bad struct {
		name string
		send []byte
		drip bool // send one byte every 40 ms instead of all at once
	}
	var bads []bad
	for i := range 20 {
		bads = append(bads, bad{name: "silent-" + strconv.Itoa(i)})
	}
	bads = append(bads,
		bad{name: "half CONNECT", send: connect[:len(connect)/2]},
		bad{name: "CONNECT fixed header only", send: connect[:2]},
		bad{name: "one byte", send: connect[:1]},
		// A CONNECT trickling in must not extend the deadline: bytes
		// arriving are not a CONNECT arriving.
		bad{name: "CONNECT one byte at a time", send: connect, drip: true},
	)
	type result struct {
		name    string
		elapsed time.Duration
		got     []byte
		err     error
	}
	results := make(chan result, len(bads))
	for _, b := range bads {
		nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		defer nc.Close()
		ended := make(chan struct{})
		if b.drip {
			go func() {
				for i := range b.send {
					select {
					case <-ended:
						return
					case <-time.After(40 * time.Millisecond):
					}
					if _, err := nc.Write(b.send[i : i+1]); err != nil {
						return
					}
				}
			}()
		} else if len(b.send) > 0 {
			if _, err := nc.Write(b.send); err != nil {
				t.Fatalf("%s: write: %v", b.name, err)
			}
		}
		start := time.Now()
		go func() {
			got, err := robustReadClosed(nc, start.Add(10*time.Second))
			close(ended)
			results <- result{b.name, time.Since(start), got, err}
		}()
	}

	// Keep the normal clients busy while the broker times the others out.
	deadline := time.After(15 * time.Second)
	for n := 0; n < len(bads); {
		pair.check(t)
		select {
		case r := <-results:
			n++
			if len(r.got) != 0 {
				t.Errorf("%s: broker sent % x before closing", r.name, r.got)
			}
			if !errors.Is(r.err, io.EOF) {
				t.Errorf("%s: read ended with %v after %v, want EOF (the broker closing it)", r.name, r.err, r.elapsed)
			}
			if r.elapsed < connectTimeout*2/3 || r.elapsed > connectTimeout+3*time.Second {
				t.Errorf("%s: closed after %v, want about %v", r.name, r.elapsed, connectTimeout)
			}
		case <-deadline:
			t.Fatalf("only %d of %d CONNECT-less connections were closed", n, len(bads))
		default:
		}
	}
	pair.check(t)
	if st := srv.Stats(); st.ClientsConnected != 2 || st.Sessions != 2 {
		t.Errorf("after the timeouts: ClientsConnected %d Sessions %d, want 2 and 2", st.ClientsConnected, st.Sessions)
	}
	robustWaitSettled(t, base, 2, 4<<20, 10*time.Second)

	// ConnectTimeout bounds the wait for CONNECT only. A client that
	// asked for keep alive 0 (which turns the keep alive mechanism off)
	// must not be dropped once it is connected, however long it is quiet.
	t.Run("KeepAliveZeroOutlivesConnectTimeout", func(t *testing.T) {
		for _, v := range []packet.Version{packet.V5, packet.V311} {
			t.Run(robustVersionName(v), func(t *testing.T) {
				id := fmt.Sprintf("ka0-v%d", v)
				c, _ := robustConnectOK(t, addr, &packet.Connect{Version: v, ClientID: []byte(id), CleanStart: true, KeepAlive: 0})
				robustExpectOpen(t, c, 4*connectTimeout, robustVersionName(v)+" client with keep alive 0, quiet for 4x ConnectTimeout")
				robustPing(t, c, id)
				c.Conn.Close()
			})
		}
	})
}

// ---------------------------------------------------------------------------
// b. Half-open connections: keep alive

func TestRobustHalfOpen(t *testing.T) {
	ev := newRobustEvents()
	srv, addr := brokertest.RunServer(t, broker.Options{Events: ev})
	pair := newRobustPair(t, addr, "half", packet.V5, 30)
	pair.check(t)
	watcher, _ := robustConnectOK(t, addr, &packet.Connect{ClientID: []byte("half-watcher"), CleanStart: true, KeepAlive: 30})
	watcher.Subscribe(&packet.Subscribe{Subs: []packet.Subscription{{Filter: []byte("robust/will/+"), QoS: 1}}})
	base := robustSnapshot()

	for _, v := range []packet.Version{packet.V5, packet.V311} {
		t.Run(robustVersionName(v), func(t *testing.T) {
			id := fmt.Sprintf("halfopen-v%d", v)
			willTopic := fmt.Sprintf("robust/will/v%d", v)
			c, _ := robustConnectOK(t, addr, &packet.Connect{
				Version: v, ClientID: []byte(id), CleanStart: true, KeepAlive: 1,
				WillFlag: true, WillQoS: 1, WillTopic: []byte(willTopic), WillPayload: []byte("lost"),
			})
			silentFrom := time.Now()
			// From here on the client neither reads nor writes: to the
			// broker it is indistinguishable from a peer that vanished.

			// The broker must notice after one and a half keep alive
			// periods [MQTT-3.1.2-22] and publish the will; meanwhile it
			// keeps serving the others.
			pair.check(t)
			var will packet.Publish
			watcher.Expect(packet.PUBLISH, &will)
			willAfter := time.Since(silentFrom)
			if string(will.Topic) != willTopic || string(will.Payload) != "lost" {
				t.Fatalf("will %q %q, want %q lost", will.Topic, will.Payload, willTopic)
			}
			if will.QoS == 1 {
				watcher.Send((&packet.Ack{Type: packet.PUBACK, PacketID: will.PacketID}).Append(nil, watcher.Version))
			}
			if willAfter < 1300*time.Millisecond || willAfter > 4*time.Second {
				t.Errorf("keep alive 1 s: connection ended after %v, want about 1.5 s", willAfter)
			}
			// The event comes after the will: the session is detached first.
			var d robustDisc
			brokertest.Eventually(t, 5*time.Second, "disconnection event for "+id, func() bool {
				var ok bool
				d, ok = ev.get(id)
				return ok
			})
			if d.reason != packet.KeepAliveTimeout {
				t.Errorf("disconnection reason %#x (%v), want 0x8D keep alive timeout (cause %v)", byte(d.reason), d.reason, d.err)
			}
			// Now look at what the silent client was sent: v5 gets
			// DISCONNECT 0x8D before the close [MQTT-4.13.2-1], 3.1.1
			// just the close.
			c.ExpectDisconnect(packet.KeepAliveTimeout)
			pair.check(t)
		})
	}

	// A half-open client that was subscribed to a busy topic: its TCP
	// window is full and the broker's writer is blocked on it (the default
	// WriteTimeout is 30 s). The keep alive must still end it at about
	// 1.5 s, and its writer must not outlive it.
	t.Run("FullWindow", func(t *testing.T) {
		c, _ := robustConnectOK(t, addr, &packet.Connect{ClientID: []byte("halfopen-full"), CleanStart: true, KeepAlive: 1})
		if tc, ok := c.Conn.(*net.TCPConn); ok {
			tc.SetReadBuffer(8 << 10)
		}
		c.Subscribe(&packet.Subscribe{Subs: []packet.Subscription{{Filter: []byte("robust/busy"), QoS: 0}}})
		silentFrom := time.Now()
		flooder, _ := robustConnectOK(t, addr, &packet.Connect{ClientID: []byte("halfopen-flooder"), CleanStart: true, KeepAlive: 30})
		var sent atomic.Int64
		stop := make(chan struct{})
		floodErr := make(chan error, 1)
		go func() {
			floodErr <- robustFlood(flooder.Conn, flooder.Version, "robust/busy", 1_000_000, 1<<10, stop, &sent)
		}()
		var d robustDisc
		brokertest.Eventually(t, 10*time.Second, "the half-open client with a full window to be dropped", func() bool {
			var ok bool
			d, ok = ev.get("halfopen-full")
			return ok
		})
		close(stop)
		if err := <-floodErr; err != nil {
			t.Fatalf("flood: %v", err)
		}
		after := d.at.Sub(silentFrom)
		t.Logf("dropped after %v (%d messages flooded): reason %v, cause %v", after, sent.Load(), d.reason, d.err)
		if after < 1300*time.Millisecond || after > 6*time.Second {
			t.Errorf("keep alive 1 s with a blocked writer: dropped after %v, want 1.5 s plus at most the 2 s flush grace", after)
		}
		if d.reason != packet.KeepAliveTimeout {
			t.Errorf("disconnection reason %#x (%v), want 0x8D keep alive timeout (cause %v)", byte(d.reason), d.reason, d.err)
		}
		flooder.Conn.Close()
		c.Conn.Close()
		pair.check(t)
	})

	// Traffic resets the timer: a client pinging every 500 ms with keep
	// alive 1 s stays connected well past 1.5 s.
	t.Run("PingingClientStays", func(t *testing.T) {
		c, _ := robustConnectOK(t, addr, &packet.Connect{ClientID: []byte("pinger"), CleanStart: true, KeepAlive: 1})
		end := time.Now().Add(3 * time.Second)
		for time.Now().Before(end) {
			robustExpectOpen(t, c, 500*time.Millisecond, "pinging client")
			robustPing(t, c, "pinging client")
		}
		c.Conn.Close()
	})

	pair.check(t)
	// The last client's teardown runs on its own goroutine: wait for it.
	brokertest.Eventually(t, 5*time.Second, "only the probe pair and the watcher connected", func() bool {
		return srv.Stats().ClientsConnected == 3
	})
	robustWaitSettled(t, base, 2, 4<<20, 10*time.Second)
}

// ---------------------------------------------------------------------------
// c. Slow readers

// robustFlood writes n QoS 0 PUBLISHes of size bytes to topic on nc, in
// batches, until n are written, stop is closed or a write fails.
func robustFlood(nc net.Conn, v packet.Version, topic string, n, size int, stop <-chan struct{}, sent *atomic.Int64) error {
	const batch = 64
	payload := bytes.Repeat([]byte{'x'}, size)
	var buf []byte
	for range batch {
		buf = (&packet.Publish{Topic: []byte(topic), Payload: payload}).Append(buf, v)
	}
	for done := 0; done < n; done += batch {
		select {
		case <-stop:
			return nil
		default:
		}
		nc.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if _, err := nc.Write(buf); err != nil {
			return err
		}
		sent.Add(batch)
	}
	return nil
}

// robustAwait reads c until a PUBLISH of topic with payload arrives,
// acknowledging QoS 1 deliveries and counting the others it skips.
func robustAwait(t *testing.T, c *brokertest.Client, topic string, payload []byte, timeout time.Duration) (skipped int) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var p packet.Publish
	for {
		left := time.Until(deadline)
		if left <= 0 {
			t.Fatalf("no %s %q within %v (skipped %d other messages)", topic, payload, timeout, skipped)
		}
		h, body, err := c.Read(left)
		if err != nil {
			t.Fatalf("waiting for %s %q: %v (skipped %d other messages)", topic, payload, err, skipped)
		}
		if h.Type != packet.PUBLISH {
			t.Fatalf("waiting for %s %q: got %v", topic, payload, h.Type)
		}
		if err := p.Decode(c.Version, h.Flags, body); err != nil {
			t.Fatalf("decoding PUBLISH: %v", err)
		}
		if p.QoS == 1 {
			c.Send((&packet.Ack{Type: packet.PUBACK, PacketID: p.PacketID}).Append(nil, c.Version))
		}
		if string(p.Topic) == topic && bytes.Equal(p.Payload, payload) {
			return skipped
		}
		skipped++
	}
}

func TestRobustSlowReader(t *testing.T) {
	const (
		maxPending = 256 << 10
		msgs       = 50_000
		msgSize    = 1 << 10
	)

	t.Run("PendingBytesBounded", func(t *testing.T) {
		srv, addr := brokertest.RunServer(t, broker.Options{MaxPendingBytes: maxPending})
		good, _ := robustConnectOK(t, addr, &packet.Connect{ClientID: []byte("good"), CleanStart: true, KeepAlive: 60})
		good.Subscribe(&packet.Subscribe{Subs: []packet.Subscription{
			{Filter: []byte("flood/t"), QoS: 0}, {Filter: []byte("ctl/+"), QoS: 1}}})
		ctl, _ := robustConnectOK(t, addr, &packet.Connect{ClientID: []byte("ctl"), CleanStart: true, KeepAlive: 60})
		base := robustSnapshot()

		slow, _ := robustConnectOK(t, addr, &packet.Connect{ClientID: []byte("slow"), CleanStart: true, KeepAlive: 60})
		slow.Subscribe(&packet.Subscribe{Subs: []packet.Subscription{{Filter: []byte("flood/t"), QoS: 0}}})
		// From here on "slow" never reads.
		pub, _ := robustConnectOK(t, addr, &packet.Connect{ClientID: []byte("flooder"), CleanStart: true, KeepAlive: 60})

		var sent atomic.Int64
		floodErr := make(chan error, 1)
		start := time.Now()
		go func() { floodErr <- robustFlood(pub.Conn, pub.Version, "flood/t", msgs, msgSize, nil, &sent) }()

		// While the flood runs, control messages on another topic reach
		// the good subscriber promptly, and the heap stays bounded.
		var maxHeap uint64
		var worst time.Duration
		probes, skipped := 0, 0
		var ferr error
		flooding := true
		for flooding || probes < 5 {
			select {
			case ferr = <-floodErr:
				flooding = false
			default:
			}
			probes++
			payload := []byte("ctl-" + strconv.Itoa(probes))
			t0 := time.Now()
			ctl.Publish(&packet.Publish{Topic: []byte("ctl/x"), QoS: 1, PacketID: uint16(probes), Payload: payload})
			ctl.Expect(packet.PUBACK, nil)
			skipped += robustAwait(t, good, "ctl/x", payload, 10*time.Second)
			worst = max(worst, time.Since(t0))
			if probes%8 == 0 {
				maxHeap = max(maxHeap, robustSnapshot().heapInuse)
			}
			if time.Since(start) > 45*time.Second {
				t.Fatalf("flood not finished after 45 s (%d of %d sent)", sent.Load(), msgs)
			}
		}
		if ferr != nil {
			t.Fatalf("flood: %v", ferr)
		}
		maxHeap = max(maxHeap, robustSnapshot().heapInuse)
		st := srv.Stats()
		t.Logf("flooded %d x %d B in %v; %d control round trips, worst %v; good subscriber skipped %d flood messages; DroppedQoS0 %d; max heap %.1f MiB (baseline %.1f MiB)",
			sent.Load(), msgSize, time.Since(start), probes, worst, skipped, st.DroppedQoS0, float64(maxHeap)/(1<<20), float64(base.heapInuse)/(1<<20))
		if skipped == 0 {
			t.Errorf("the good subscriber received no flood messages")
		}
		if st.DroppedQoS0 == 0 {
			t.Errorf("Stats().DroppedQoS0 = 0: nothing was dropped for a subscriber that never reads")
		}
		// 50 MB went through; what is held for the slow client must be
		// bounded by MaxPendingBytes (twice, counting the buffer its
		// writer holds), not by the flood.
		if bound := base.heapInuse + 24<<20; maxHeap > bound {
			t.Errorf("heap reached %.1f MiB during the flood, want at most %.1f MiB", float64(maxHeap)/(1<<20), float64(bound)/(1<<20))
		}
		if st.ClientsConnected != 4 {
			t.Errorf("ClientsConnected %d, want 4", st.ClientsConnected)
		}

		// Closing the slow client (with megabytes unread) and the
		// flooder gives everything back.
		slow.Conn.Close()
		pub.Conn.Close()
		brokertest.Eventually(t, 10*time.Second, "slow client and flooder gone", func() bool {
			return srv.Stats().ClientsConnected == 2
		})
		// Drain what the good subscriber still has coming, then check it
		// still works.
		ctl.Publish(&packet.Publish{Topic: []byte("ctl/x"), QoS: 1, PacketID: 60000, Payload: []byte("after")})
		ctl.Expect(packet.PUBACK, nil)
		robustAwait(t, good, "ctl/x", []byte("after"), 20*time.Second)
		robustWaitSettled(t, base, 2, 8<<20, 15*time.Second)
	})

	t.Run("WriteTimeout", func(t *testing.T) {
		const writeTimeout = time.Second
		ev := newRobustEvents()
		srv, addr := brokertest.RunServer(t, broker.Options{MaxPendingBytes: maxPending, WriteTimeout: writeTimeout, Events: ev})
		pair := newRobustPair(t, addr, "wt", packet.V5, 60)
		pair.check(t)
		base := robustSnapshot()

		slow := brokertest.Dial(t, addr, packet.V5)
		// A small receive buffer so that the TCP window fills quickly.
		if tc, ok := slow.Conn.(*net.TCPConn); ok {
			tc.SetReadBuffer(8 << 10)
		}
		slow.Send((&packet.Connect{Version: packet.V5, ProtocolName: []byte("MQTT"), ClientID: []byte("stuck"), CleanStart: true, KeepAlive: 60}).Append(nil))
		slow.Expect(packet.CONNACK, nil)
		slow.Subscribe(&packet.Subscribe{Subs: []packet.Subscription{{Filter: []byte("flood/t"), QoS: 0}}})
		pub, _ := robustConnectOK(t, addr, &packet.Connect{ClientID: []byte("flooder"), CleanStart: true, KeepAlive: 60})

		var sent atomic.Int64
		stop := make(chan struct{})
		floodErr := make(chan error, 1)
		start := time.Now()
		go func() { floodErr <- robustFlood(pub.Conn, pub.Version, "flood/t", 1_000_000, msgSize, stop, &sent) }()
		defer func() {
			select {
			case <-stop:
			default:
				close(stop)
			}
		}()
		var d robustDisc
		for {
			var ok bool
			if d, ok = ev.get("stuck"); ok {
				break
			}
			select {
			case err := <-floodErr:
				t.Fatalf("flood ended (%v) after %d messages and %v, and the stuck client is still connected", err, sent.Load(), time.Since(start))
			default:
			}
			if time.Since(start) > 30*time.Second {
				t.Fatalf("client not reading was not disconnected within 30 s (%d messages sent; WriteTimeout %v)", sent.Load(), writeTimeout)
			}
			pair.check(t)
		}
		close(stop)
		if err := <-floodErr; err != nil {
			t.Fatalf("flood: %v", err)
		}
		t.Logf("stuck client disconnected after %v and %d messages: reason %v, cause %v", d.at.Sub(start), sent.Load(), d.reason, d.err)
		if d.at.Sub(start) < writeTimeout {
			t.Errorf("disconnected after %v, before WriteTimeout %v could have passed", d.at.Sub(start), writeTimeout)
		}
		pair.check(t)
		if st := srv.Stats(); st.ClientsConnected != 3 {
			t.Errorf("ClientsConnected %d, want 3 (pair and flooder)", st.ClientsConnected)
		}
		pub.Conn.Close()
		slow.Conn.Close()
		robustWaitSettled(t, base, 2, 8<<20, 15*time.Second)
	})

	// Options.MaxPendingBytes promises that "a client that stops reading
	// holds at most this much memory". That must hold for a QoS 1
	// subscriber too: a 3.1.1 client has no Receive Maximum to offer, so
	// its send window is 65,535 messages, and nothing but the pending limit
	// (and MaxQueuedMessages behind it) can bound what the broker encodes
	// for it while it is stuck.
	t.Run("QoS1SubscriberNeverReads", func(t *testing.T) {
		srv, addr := brokertest.RunServer(t, broker.Options{MaxPendingBytes: maxPending})
		pair := newRobustPair(t, addr, "q1", packet.V5, 60)
		pair.check(t)
		base := robustSnapshot()

		slow, _ := robustConnectOK(t, addr, &packet.Connect{Version: packet.V311, ClientID: []byte("stuck-q1"), CleanStart: true, KeepAlive: 60})
		slow.Subscribe(&packet.Subscribe{Subs: []packet.Subscription{{Filter: []byte("flood/q1"), QoS: 1}}})
		pub, _ := robustConnectOK(t, addr, &packet.Connect{Version: packet.V311, ClientID: []byte("flooder-q1"), CleanStart: true, KeepAlive: 60})

		// 50,000 QoS 1 PUBLISHes of 1 KiB; their PUBACKs (200 KB) wait in
		// the publisher's socket buffer.
		payload := bytes.Repeat([]byte{'q'}, msgSize)
		in0 := srv.Stats().MessagesIn
		start := time.Now()
		var buf []byte
		for i := 1; i <= msgs; i++ {
			buf = (&packet.Publish{Topic: []byte("flood/q1"), QoS: 1, PacketID: uint16(i), Payload: payload}).Append(buf, packet.V311)
			if i%64 == 0 || i == msgs {
				pub.Send(buf)
				buf = buf[:0]
			}
			if i%5000 == 0 {
				pair.check(t)
			}
		}
		brokertest.Eventually(t, 30*time.Second, "the broker to take in the whole flood", func() bool {
			return srv.Stats().MessagesIn-in0 >= msgs
		})
		pair.check(t)
		held := robustSnapshot()
		st := srv.Stats()
		t.Logf("%d QoS 1 messages in %v; with the subscriber stuck: %v (baseline %v); DroppedQueueFull %d",
			msgs, time.Since(start), held, base, st.DroppedQueueFull)
		if bound := base.heapInuse + 24<<20; held.heapInuse > bound {
			t.Errorf("a QoS 1 subscriber that stopped reading holds %.1f MiB of heap (%d x %d B published), want at most %.1f MiB: MaxPendingBytes (%d) does not bound QoS 1 deliveries",
				float64(held.heapInuse-base.heapInuse)/(1<<20), msgs, msgSize, float64(bound-base.heapInuse)/(1<<20), maxPending)
		}

		slow.Conn.Close()
		pub.Conn.Close()
		brokertest.Eventually(t, 10*time.Second, "stuck subscriber and flooder gone", func() bool {
			st := srv.Stats()
			return st.ClientsConnected == 2 && st.Sessions == 2
		})
		pair.check(t)
		robustWaitSettled(t, base, 2, 8<<20, 15*time.Second)
	})
}

// ---------------------------------------------------------------------------
// d. Connection floods

func TestRobustConnectionFlood(t *testing.T) {
	const (
		total   = 10_000
		workers = 50
	)
	srv, addr := brokertest.RunServer(t, broker.Options{})
	pair := newRobustPair(t, addr, "flood", packet.V311, 30)
	pair.check(t)
	base := robustSnapshot()

	connack := []byte{0x20, 0x02, 0x00, 0x00}
	one := func(i int) error {
		nc, err := net.DialTimeout("tcp", addr, 10*time.Second)
		if err != nil {
			return fmt.Errorf("dial %d: %w", i, err)
		}
		defer nc.Close()
		tc := nc.(*net.TCPConn)
		if i%2 == 0 {
			tc.SetLinger(0) // close with RST: as abrupt as it gets
		}
		id := "flood-" + strconv.Itoa(i)
		if i%10 == 3 {
			id = "flood-dup-" + strconv.Itoa(i%7) // concurrent takeovers of a few ids
		}
		c := (&packet.Connect{Version: packet.V311, ClientID: []byte(id), CleanStart: true, KeepAlive: 30}).Append(nil)
		nc.SetDeadline(time.Now().Add(10 * time.Second))
		switch i % 10 {
		case 0:
			return nil // connect and close without a byte
		case 1:
			_, err := nc.Write(c[:len(c)/2]) // half a CONNECT, then gone
			return err
		}
		if _, err := nc.Write(c); err != nil {
			return fmt.Errorf("%s: write: %w", id, err)
		}
		got := make([]byte, 4)
		if _, err := io.ReadFull(nc, got); err != nil {
			if i%10 == 3 {
				return nil // taken over by a namesake before CONNACK was read: fine
			}
			return fmt.Errorf("%s: CONNACK: %w", id, err)
		}
		if !bytes.Equal(got, connack) {
			return fmt.Errorf("%s: CONNACK % x, want % x", id, got, connack)
		}
		return nil
	}

	jobs := make(chan int)
	errs := make(chan error, total)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				if err := one(i); err != nil {
					errs <- err
				}
			}
		}()
	}
	start := time.Now()
	var fed atomic.Int64
	go func() {
		defer close(jobs)
		for i := range total {
			jobs <- i
			fed.Add(1)
		}
	}()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()

	probes := 0
	for flooding := true; flooding; {
		select {
		case <-done:
			flooding = false
		default:
			pair.check(t)
			probes++
			if time.Since(start) > 50*time.Second {
				t.Fatalf("flood not finished after 50 s (%d of %d started)", fed.Load(), total)
			}
		}
	}
	close(errs)
	var n int
	for err := range errs {
		if n++; n <= 10 {
			t.Error(err)
		}
	}
	if n > 10 {
		t.Errorf("... and %d more errors", n-10)
	}
	t.Logf("%d connections in %v, %d probe round trips meanwhile", total, time.Since(start), probes)

	pair.check(t)
	brokertest.Eventually(t, 15*time.Second, "only the probe pair left connected", func() bool {
		st := srv.Stats()
		return st.ClientsConnected == 2 && st.Sessions == 2
	})
	robustWaitSettled(t, base, 2, 8<<20, 20*time.Second)
	pair.check(t)
	pair.close()
	brokertest.Eventually(t, 10*time.Second, "no clients and no sessions left", func() bool {
		st := srv.Stats()
		return st.ClientsConnected == 0 && st.Sessions == 0 && st.Subscriptions == 0
	})
	if st := srv.Stats(); st.Connects < uint64(total*8/10) {
		t.Errorf("Stats().Connects %d, want at least %d", st.Connects, total*8/10)
	}
}

// ---------------------------------------------------------------------------
// e. Malformed input

// robustConnect returns the CONNECT bytes of a clean, keep-alive-30 client.
func robustConnect(v packet.Version, id string, mod func(*packet.Connect)) []byte {
	c := &packet.Connect{Version: v, ProtocolName: []byte("MQTT"), ClientID: []byte(id), CleanStart: true, KeepAlive: 30}
	if mod != nil {
		mod(c)
	}
	return c.Append(nil)
}

func TestRobustMalformedInputs(t *testing.T) {
	const maxPacket = 1024
	ev := newRobustEvents()
	_, addr := brokertest.RunServer(t, broker.Options{MaxPacketSize: maxPacket, Events: ev})
	pair := newRobustPair(t, addr, "malformed", packet.V5, 30)
	pair.check(t)
	base := robustSnapshot()

	pub := func(p packet.Publish) func(packet.Version) []byte {
		return func(v packet.Version) []byte { return p.Append(nil, v) }
	}
	raw := func(b ...byte) func(packet.Version) []byte {
		return func(packet.Version) []byte { return b }
	}
	type tcase struct {
		name string
		// preConnack: the bytes are the first thing the client sends;
		// otherwise they follow an accepted CONNECT.
		preConnack bool
		// only restricts the case to one version (0: both).
		only  packet.Version
		bytes func(v packet.Version) []byte
		// rc is what a v5 client is told: DISCONNECT rc after CONNACK,
		// CONNACK rc before it. 0 before CONNACK: the broker cannot know
		// the version yet and just closes.
		rc packet.ReasonCode
		// reply, when set, is the exact reply expected from both
		// versions before the close (instead of rc).
		reply []byte
	}
	cases := []tcase{
		// Framing.
		{name: "remaining length longer than four bytes", bytes: raw(0x30, 0xFF, 0xFF, 0xFF, 0xFF, 0x01), rc: packet.MalformedPacket},
		{name: "remaining length not minimally encoded", bytes: raw(0xC0, 0x80, 0x00), rc: packet.MalformedPacket},
		{name: "reserved packet type 0", bytes: raw(0x00, 0x00), rc: packet.MalformedPacket},
		{name: "reserved flags on PINGREQ", bytes: raw(0xC1, 0x00), rc: packet.MalformedPacket},
		{name: "reserved flags on SUBSCRIBE", bytes: func(v packet.Version) []byte {
			b := (&packet.Subscribe{PacketID: 1, Subs: []packet.Subscription{{Filter: []byte("a")}}}).Append(nil, v)
			b[0] = 0x80
			return b
		}, rc: packet.MalformedPacket},
		{name: "reserved flags on PUBREL", bytes: raw(0x60, 0x02, 0x00, 0x01), rc: packet.MalformedPacket},
		{name: "PINGREQ with a body", bytes: raw(0xC0, 0x01, 0x00), rc: packet.MalformedPacket},
		{name: "packet larger than MaxPacketSize", bytes: raw(0x30, 0xD0, 0x0F, 0x00, 0x01, 'a'), rc: packet.PacketTooLarge},

		// PUBLISH.
		{name: "PUBLISH QoS 3", bytes: pub(packet.Publish{QoS: 3, PacketID: 1, Topic: []byte("a")}), rc: packet.MalformedPacket},
		{name: "PUBLISH DUP on QoS 0", bytes: pub(packet.Publish{Dup: true, Topic: []byte("a")}), rc: packet.MalformedPacket},
		{name: "PUBLISH packet id 0", bytes: pub(packet.Publish{QoS: 1, Topic: []byte("a")}), rc: packet.MalformedPacket},
		{name: "PUBLISH invalid UTF-8 topic", bytes: pub(packet.Publish{Topic: []byte("a/\xff\xfe")}), rc: packet.MalformedPacket},
		{name: "PUBLISH topic with U+0000", bytes: pub(packet.Publish{Topic: []byte("a\x00b")}), rc: packet.MalformedPacket},
		{name: "PUBLISH wildcard in topic", bytes: pub(packet.Publish{Topic: []byte("a/+")}), rc: packet.TopicNameInvalid},
		{name: "PUBLISH topic alias 0", only: packet.V5, bytes: func(v packet.Version) []byte {
			p := packet.Publish{Topic: []byte("a")}
			p.Props.Set(packet.PropTopicAlias)
			return p.Append(nil, v)
		}, rc: packet.ProtocolError},
		{name: "PUBLISH topic alias above maximum", only: packet.V5, bytes: func(v packet.Version) []byte {
			p := packet.Publish{Topic: []byte("a")}
			p.Props.Set(packet.PropTopicAlias)
			p.Props.TopicAlias = 60000
			return p.Append(nil, v)
		}, rc: packet.TopicAliasInvalid},

		// SUBSCRIBE.
		{name: "SUBSCRIBE with no filters", bytes: func(v packet.Version) []byte {
			return (&packet.Subscribe{PacketID: 1}).Append(nil, v)
		}, rc: packet.ProtocolError},
		{name: "SUBSCRIBE invalid UTF-8 filter", bytes: func(v packet.Version) []byte {
			return (&packet.Subscribe{PacketID: 1, Subs: []packet.Subscription{{Filter: []byte("a/\xc0")}}}).Append(nil, v)
		}, rc: packet.MalformedPacket},
		{name: "SUBSCRIBE reserved option bits (3.1.1)", only: packet.V311, bytes: func(v packet.Version) []byte {
			b := (&packet.Subscribe{PacketID: 1, Subs: []packet.Subscription{{Filter: []byte("a")}}}).Append(nil, v)
			b[len(b)-1] |= 0x04
			return b
		}},

		// Packets a client must not send now.
		{name: "second CONNECT", bytes: func(v packet.Version) []byte { return robustConnect(v, "again", nil) }, rc: packet.ProtocolError},
		{name: "CONNACK from a client", bytes: func(v packet.Version) []byte {
			return (&packet.Connack{}).Append(nil, v)
		}, rc: packet.ProtocolError},
		{name: "AUTH without an authentication method in CONNECT", bytes: raw(0xF0, 0x00), rc: packet.ProtocolError},
		{name: "DISCONNECT setting session expiry after CONNECT set 0", only: packet.V5, bytes: func(v packet.Version) []byte {
			d := packet.Disconnect{}
			d.Props.Set(packet.PropSessionExpiry)
			d.Props.SessionExpiry = 60
			return d.Append(nil, v)
		}, rc: packet.ProtocolError},

		// Before CONNACK.
		{name: "CONNECT with protocol name MQTX", preConnack: true, bytes: func(v packet.Version) []byte {
			return robustConnect(v, "bad-name", func(c *packet.Connect) { c.ProtocolName = []byte("MQTX") })
		}, rc: packet.ProtocolError},
		{name: "CONNECT reserved flag", preConnack: true, bytes: func(v packet.Version) []byte {
			b := robustConnect(v, "reserved", nil)
			b[9] |= 0x01 // fixed header 2, name 6, level 1: the flags byte
			return b
		}, rc: packet.MalformedPacket},
		{name: "CONNECT invalid UTF-8 client id", preConnack: true, bytes: func(v packet.Version) []byte {
			return robustConnect(v, "\xff\xfe", nil)
		}, rc: packet.MalformedPacket},
		{name: "CONNECT truncated", preConnack: true, bytes: func(v packet.Version) []byte {
			b := robustConnect(v, "short", nil)
			b[1] -= 3 // the length still frames the packet, but the client id is cut short
			return b[:len(b)-3]
		}, rc: packet.MalformedPacket},
		{name: "CONNECT larger than MaxPacketSize", preConnack: true, bytes: raw(0x10, 0xD0, 0x0F, 0x00, 0x04, 'M', 'Q', 'T', 'T', 5)},
		{name: "first packet PINGREQ", preConnack: true, bytes: raw(0xC0, 0x00)},
		{name: "first packet reserved type 0", preConnack: true, bytes: raw(0x00, 0x00)},
		{name: "CONNECT protocol level 6", preConnack: true, bytes: func(v packet.Version) []byte {
			return robustConnect(packet.Version(6), "level6", nil)
		}, reply: []byte{0x20, 0x02, 0x00, 0x01}},
	}

	n := 0
	for _, v := range []packet.Version{packet.V5, packet.V311} {
		for _, tc := range cases {
			if tc.only != 0 && tc.only != v {
				continue
			}
			n++
			t.Run(robustVersionName(v)+"/"+tc.name, func(t *testing.T) {
				var c *brokertest.Client
				if tc.preConnack {
					c = brokertest.Dial(t, addr, v)
				} else {
					c, _ = robustConnectOK(t, addr, &packet.Connect{Version: v, ClientID: []byte(fmt.Sprintf("bad-%d", n)), CleanStart: true, KeepAlive: 30})
				}
				defer c.Conn.Close()
				c.Send(tc.bytes(v))
				switch {
				case tc.reply != nil:
					c.Conn.SetReadDeadline(time.Now().Add(5 * time.Second))
					got := make([]byte, len(tc.reply))
					if _, err := io.ReadFull(c.Conn, got); err != nil {
						t.Fatalf("reading the reply: %v", err)
					}
					if !bytes.Equal(got, tc.reply) {
						t.Fatalf("reply % x, want % x", got, tc.reply)
					}
					c.ExpectClosed()
				case v < packet.V5:
					c.ExpectClosed() // 3.1.1: no packet, just the close
				case tc.preConnack && tc.rc != 0:
					var ack packet.Connack
					c.Expect(packet.CONNACK, &ack)
					if ack.Reason != tc.rc || ack.SessionPresent {
						t.Fatalf("CONNACK reason %#x (%v) present %v, want %#x (%v)", byte(ack.Reason), ack.Reason, ack.SessionPresent, byte(tc.rc), tc.rc)
					}
					c.ExpectClosed()
				case tc.preConnack:
					c.ExpectClosed()
				default:
					c.ExpectDisconnect(tc.rc)
				}
				pair.check(t)
			})
		}
	}

	// The control case: a well-formed DISCONNECT is not an error. Nothing
	// answers it (a DISCONNECT back would report an error that did not
	// happen); the broker closes and reports a normal disconnection.
	t.Run("v5/normal DISCONNECT gets no reply", func(t *testing.T) {
		c, _ := robustConnectOK(t, addr, &packet.Connect{ClientID: []byte("polite"), CleanStart: true, KeepAlive: 30})
		c.Send((&packet.Disconnect{}).Append(nil, packet.V5))
		c.ExpectClosed()
		var d robustDisc
		brokertest.Eventually(t, 5*time.Second, "disconnection event for polite", func() bool {
			var ok bool
			d, ok = ev.get("polite")
			return ok
		})
		if d.reason != packet.NormalDisconnection {
			t.Errorf("Events.ClientDisconnected reason %#x (%v), want 0x00 normal disconnection", byte(d.reason), d.reason)
		}
	})

	pair.check(t)
	robustWaitSettled(t, base, 2, 4<<20, 10*time.Second)
}

// ---------------------------------------------------------------------------
// Accept errors

// robustFlakyListener fails its first accepts the way a listener does when
// the process is out of file descriptors, then accepts normally.
type robustFlakyListener struct {
	net.Listener
	fails atomic.Int32
	err   error
}

type robustTimeoutError struct{}

func (robustTimeoutError) Error() string   { return "i/o timeout" }
func (robustTimeoutError) Timeout() bool   { return true }
func (robustTimeoutError) Temporary() bool { return true }

func (l *robustFlakyListener) Accept() (net.Conn, error) {
	if l.fails.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Addr: l.Listener.Addr(), Err: l.err}
	}
	return l.Listener.Accept()
}

// The accept loop's own comment says it waits and retries when the process
// is out of file descriptors. EMFILE and ENFILE are what accept(2) then
// returns; a broker that stops serving its listener on them is down for
// good after one burst of connections.
func TestRobustAcceptErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"EMFILE", os.NewSyscallError("accept", syscall.EMFILE)},
		{"ENFILE", os.NewSyscallError("accept", syscall.ENFILE)},
		{"ENOBUFS", os.NewSyscallError("accept", syscall.ENOBUFS)},
		// The control case, which the accept loop does retry: shows
		// the harness itself lets Serve go on.
		{"timeout", robustTimeoutError{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, err := broker.New(broker.Options{})
			if err != nil {
				t.Fatal(err)
			}
			inner, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			l := &robustFlakyListener{Listener: inner, err: tc.err}
			l.fails.Store(3)
			var serveErr error
			served := make(chan struct{})
			var returned atomic.Bool
			go func() {
				serveErr = srv.Serve(l)
				returned.Store(true)
				close(served)
			}()
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				srv.Shutdown(ctx)
				inner.Close()
				select {
				case <-served:
				case <-time.After(5 * time.Second):
					t.Errorf("Serve did not return after Shutdown")
				}
			})
			brokertest.Eventually(t, 5*time.Second, "Serve to get past the failing accepts or give up", func() bool {
				return l.fails.Load() < 0 || returned.Load()
			})
			if returned.Load() {
				<-served
				t.Fatalf("Serve gave up on the listener after a transient accept error: %v", serveErr)
			}
			c, _ := robustConnectOK(t, inner.Addr().String(), &packet.Connect{ClientID: []byte("after-" + tc.name), CleanStart: true, KeepAlive: 30})
			robustPing(t, c, "client accepted after the accept errors")
		})
	}
}
