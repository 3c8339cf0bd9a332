package broker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/broker/packet"
)

// alive reports whether the broker still serves c: a PINGREQ is answered
// (true) or the connection ends (false). Whatever the broker sent before
// (CONNACK, PUBLISH, DISCONNECT 0x8E) is skipped. A connection that neither
// answers nor closes within 5 s fails the test: that is a broken session.
func alive(t *testing.T, c *brokertest.Client) bool {
	t.Helper()
	c.Conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Conn.Write(packet.AppendPingreq(nil)); err != nil {
		return false
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		h, _, err := c.Read(time.Until(deadline))
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatal("a connection neither answers PINGREQ nor closes")
			}
			return false
		}
		if h.Type == packet.PINGRESP {
			return true
		}
	}
}

// TestTakeoverRaceOneConnectionPerID sends several CONNECTs with one client
// id at the same moment, at a client that holds 1,000 subscriptions, and
// asserts that exactly one connection survives [MQTT-3.1.4-3]: the others
// are closed, none is left open and deaf.
func TestTakeoverRaceOneConnectionPerID(t *testing.T) {
	for _, tc := range []struct {
		name  string
		v     packet.Version
		clean bool
	}{
		{"v311-clean", packet.V311, true},
		{"v5-resume", packet.V5, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, addr := brokertest.RunServer(t, broker.Options{})
			const rounds, racers = 15, 8
			subs := make([]packet.Subscription, 1000)
			for i := range subs {
				subs[i] = packet.Subscription{Filter: fmt.Appendf(nil, "race/%d/+", i), QoS: 1}
			}
			for round := range rounds {
				id := fmt.Sprintf("dup-%s-%d", tc.name, round)
				cp := &packet.Connect{Version: tc.v, ClientID: []byte(id), CleanStart: tc.clean, KeepAlive: 60}
				if tc.v >= packet.V5 {
					withExpiry(cp, 60)
				}
				holder, _ := brokertest.Connect(t, addr, cp)
				holder.Subscribe(&packet.Subscribe{PacketID: 1, Subs: subs})

				connects := srv.Stats().Connects
				clients := []*brokertest.Client{holder}
				var start, ready sync.WaitGroup
				start.Add(1)
				for range racers {
					c := brokertest.Dial(t, addr, tc.v)
					clients = append(clients, c)
					ready.Add(1)
					go func() {
						defer ready.Done()
						frame := (&packet.Connect{Version: tc.v, ProtocolName: []byte("MQTT"), ClientID: []byte(id),
							CleanStart: tc.clean, KeepAlive: 60, Props: cp.Props}).Append(nil)
						start.Wait()
						c.Conn.Write(frame)
					}()
				}
				start.Done()
				ready.Wait()
				// Every racer's CONNECT is accepted (each takes the session
				// over from the one before); then one connection is left.
				brokertest.Eventually(t, 10*time.Second, "every CONNECT handled, one connection left", func() bool {
					st := srv.Stats()
					return st.Connects == connects+racers && st.ClientsConnected == 1
				})
				open := 0
				for _, c := range clients {
					if alive(t, c) {
						open++
					}
				}
				if open != 1 {
					t.Fatalf("round %d: %d connections open for client id %q, want exactly 1", round, open, id)
				}
				for _, c := range clients {
					c.Conn.Close()
				}
				brokertest.Eventually(t, 10*time.Second, "round torn down", func() bool {
					return srv.Stats().ClientsConnected == 0
				})
			}
		})
	}
}

// pubAck publishes one QoS 1 message from a raw v5 client and returns the
// PUBACK's reason code.
func pubAck(t *testing.T, c *brokertest.Client, pid uint16, topic, payload string) packet.ReasonCode {
	t.Helper()
	c.Publish(&packet.Publish{Topic: []byte(topic), QoS: 1, PacketID: pid, Payload: []byte(payload)})
	var a packet.Ack
	c.Expect(packet.PUBACK, &a)
	if a.PacketID != pid {
		t.Fatalf("PUBACK for %d, want %d", a.PacketID, pid)
	}
	return a.Reason
}

// drainPayloads reads PUBLISHes, acknowledging QoS 1 ones, until none has
// come for 300 ms, and returns their payloads in order.
func drainPayloads(c *brokertest.Client) []string {
	var out []string
	for {
		h, body, err := c.Read(300 * time.Millisecond)
		if err != nil {
			return out
		}
		if h.Type != packet.PUBLISH {
			continue
		}
		var p packet.Publish
		if p.Decode(c.Version, h.Flags, body) != nil {
			return out
		}
		out = append(out, string(p.Payload))
		if p.QoS == 1 {
			c.Send((&packet.Ack{Type: packet.PUBACK, PacketID: p.PacketID}).Append(nil, c.Version))
		}
	}
}

// expectPayloads reads PUBLISHes (acknowledging QoS 1) and fails unless
// their payloads are want, in order, with nothing after.
func expectPayloads(t *testing.T, c *brokertest.Client, want ...string) {
	t.Helper()
	var got []string
	for range want {
		var p packet.Publish
		c.Expect(packet.PUBLISH, &p)
		got = append(got, string(p.Payload))
		if p.QoS == 1 {
			c.Send((&packet.Ack{Type: packet.PUBACK, PacketID: p.PacketID}).Append(nil, c.Version))
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("delivered %v, want %v", got, want)
	}
	c.ExpectNothing(100 * time.Millisecond)
}

// TestOverflowNeverAcksAndDrops is issue 9's loss case: with the default
// overload policy a full queue, plain or shared, online or offline, refuses
// the new message (v5 PUBACK 0x97) instead of acknowledging it and dropping
// it or another acknowledged one, and never answers 0x10 No matching
// subscribers to a publish that matched.
func TestOverflowNeverAcksAndDrops(t *testing.T) {
	for _, filter := range []string{"of/t", "$share/g/of/t"} {
		t.Run(filter, func(t *testing.T) {
			srv, addr := brokertest.RunServer(t, broker.Options{MaxQueuedMessages: 3})
			sub, _ := brokertest.Connect(t, addr, withExpiry(rawV5("member", true), 300))
			sub.Subscribe(&packet.Subscribe{Subs: []packet.Subscription{{Filter: []byte(filter), QoS: 1}}})
			sub.Conn.Close()
			brokertest.Eventually(t, 5*time.Second, "member offline", func() bool { return srv.Stats().ClientsConnected == 0 })

			pub, _ := brokertest.Connect(t, addr, rawV5("pub", true))
			var rcs []packet.ReasonCode
			for i := range 6 {
				rcs = append(rcs, pubAck(t, pub, uint16(i+1), "of/t", fmt.Sprint(i)))
			}
			want := []packet.ReasonCode{0, 0, 0, packet.QuotaExceeded, packet.QuotaExceeded, packet.QuotaExceeded}
			if fmt.Sprint(rcs) != fmt.Sprint(want) {
				t.Fatalf("PUBACK reasons %v, want %v", rcs, want)
			}
			st := srv.Stats()
			if st.DroppedQueueFull != 0 {
				t.Errorf("DroppedQueueFull %d, want 0", st.DroppedQueueFull)
			}
			if filter == "of/t" && st.RefusedQueueFull != 3 {
				t.Errorf("RefusedQueueFull %d, want 3", st.RefusedQueueFull)
			}
			sub, _ = brokertest.Connect(t, addr, withExpiry(rawV5("member", false), 300))
			expectPayloads(t, sub, "0", "1", "2")

			// Drained: accepted again.
			if rc := pubAck(t, pub, 7, "of/t", "6"); rc != packet.Success {
				t.Fatalf("after draining: PUBACK %v, want success", rc)
			}
			expectPayloads(t, sub, "6")
		})
	}
}

// TestOverflowOtherClientsUnaffected: one subscriber's full queue refuses
// only what it cannot take; another subscriber of the same topic gets every
// message, and a group with a live member is not refused.
func TestOverflowOtherClientsUnaffected(t *testing.T) {
	srv, addr := brokertest.RunServer(t, broker.Options{MaxQueuedMessages: 2})
	off, _ := brokertest.Connect(t, addr, withExpiry(rawV5("offline", true), 300))
	off.Subscribe(&packet.Subscribe{Subs: []packet.Subscription{{Filter: []byte("x/#"), QoS: 1}}})
	off.Conn.Close()
	brokertest.Eventually(t, 5*time.Second, "offline", func() bool { return srv.Stats().ClientsConnected == 0 })
	live := windowSub(t, addr, "live", "x/#", 100, 0)
	pub, _ := brokertest.Connect(t, addr, rawV5("pub", true))
	var refused int
	const n = 20
	for i := range n {
		if pubAck(t, pub, uint16(i+1), "x/y", fmt.Sprint(i)) == packet.QuotaExceeded {
			refused++
		}
	}
	if refused != n-2 {
		t.Fatalf("%d refused, want %d (the offline queue holds 2)", refused, n-2)
	}
	want := make([]string, n)
	for i := range want {
		want[i] = fmt.Sprint(i)
	}
	expectPayloads(t, live, want...)
}

// TestRetainedFloodReachesNewSubscriber: a new subscriber of 20,000
// retained messages gets every one of them, at QoS 0 under a small
// pending-bytes bound and at QoS 1 under a small window, instead of the
// first megabyte or so (issue 9, item 3).
func TestRetainedFloodReachesNewSubscriber(t *testing.T) {
	const n = 20000
	srv, addr := brokertest.RunServer(t, broker.Options{MaxPendingBytes: 64 << 10, MaxQueuedMessages: 100})
	pub, _ := brokertest.Connect(t, addr, rawV5("retainer", true))
	payload := make([]byte, 100)
	var buf []byte
	for i := range n {
		buf = (&packet.Publish{Topic: fmt.Appendf(nil, "dev/%d", i), Retain: true, Payload: payload}).Append(buf, packet.V5)
		if len(buf) > 32<<10 || i == n-1 {
			pub.Send(buf)
			buf = buf[:0]
		}
	}
	brokertest.Eventually(t, 10*time.Second, "all retained", func() bool { return srv.Stats().Retained == n })

	for _, qos := range []byte{0, 1} {
		t.Run(fmt.Sprintf("qos%d", qos), func(t *testing.T) {
			cp := rawV5(fmt.Sprintf("reader-%d", qos), true)
			cp.Props.Set(packet.PropReceiveMaximum)
			cp.Props.ReceiveMaximum = 10
			sub, _ := brokertest.Connect(t, addr, cp)
			sub.Send((&packet.Subscribe{PacketID: 1, Subs: []packet.Subscription{{Filter: []byte("dev/#"), QoS: qos}}}).Append(nil, packet.V5))
			seen := make(map[string]bool, n)
			gotSuback := false
			for len(seen) < n {
				h, body, err := sub.Read(10 * time.Second)
				if err != nil {
					t.Fatalf("after %d retained messages: %v", len(seen), err)
				}
				switch h.Type {
				case packet.SUBACK:
					gotSuback = true
				case packet.PUBLISH:
					if !gotSuback {
						t.Fatal("a retained message before the SUBACK")
					}
					var p packet.Publish
					if err := p.Decode(packet.V5, h.Flags, body); err != nil {
						t.Fatal(err)
					}
					if !p.Retain {
						t.Fatalf("%s without RETAIN", p.Topic)
					}
					seen[string(p.Topic)] = true
					if p.QoS == 1 {
						sub.Send((&packet.Ack{Type: packet.PUBACK, PacketID: p.PacketID}).Append(nil, packet.V5))
					}
				}
			}
			sub.ExpectNothing(100 * time.Millisecond)
			if st := srv.Stats(); st.DroppedQoS0+st.DroppedQueueFull+st.RefusedQueueFull != 0 {
				t.Fatalf("drops: %+v", st)
			}
		})
	}
}

// TestDeepFiltersRefused: deep or long filters and topics are refused with
// the documented codes, cheaply, and other clients carry on.
func TestDeepFiltersRefused(t *testing.T) {
	srv, addr := brokertest.RunServer(t, broker.Options{})
	pair := newRobustPair(t, addr, "deep", packet.V5, 60)
	deep := bytes.Repeat([]byte("/"), 65000) // 65,001 empty levels
	var subs []packet.Subscription
	for range 15 {
		subs = append(subs, packet.Subscription{Filter: deep})
	}
	for _, v := range []packet.Version{packet.V5, packet.V311} {
		c, _ := brokertest.Connect(t, addr, &packet.Connect{Version: v, ClientID: []byte("deep-" + fmt.Sprint(v)), CleanStart: true})
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		before := ms.HeapInuse
		ack := c.Subscribe(&packet.Subscribe{PacketID: 1, Subs: append(subs, packet.Subscription{Filter: []byte("ok/#")})})
		want := packet.TopicFilterInvalid
		if v == packet.V311 {
			want = 0x80
		}
		for i, rc := range ack.Reasons[:15] {
			if rc != want {
				t.Fatalf("%v: filter %d: %#x, want %#x", v, i, byte(rc), byte(want))
			}
		}
		if ack.Reasons[15] != 0 {
			t.Fatalf("%v: the valid filter got %#x", v, byte(ack.Reasons[15]))
		}
		runtime.GC()
		runtime.ReadMemStats(&ms)
		if grew := int64(ms.HeapInuse) - int64(before); grew > 8<<20 {
			t.Errorf("%v: refusing deep filters grew the heap by %d MiB", v, grew>>20)
		}
		// A PUBLISH to a topic over the bound ends the connection: 0x90.
		c.Publish(&packet.Publish{Topic: bytes.Repeat([]byte("a/"), 200)[:399]})
		c.ExpectDisconnect(packet.TopicNameInvalid)
	}
	pair.check(t)
	// The deep clients' clean sessions ended with their connections.
	brokertest.Eventually(t, 5*time.Second, "only the pair's subscription left", func() bool {
		return srv.Stats().Subscriptions == 1
	})
}

// failStore is a Store whose writes succeed and whose Sync fails while
// failing is set: a disk that is full or gone, as seen by the broker.
type failStore struct{ failing atomic.Bool }

func (*failStore) Load(context.Context) (*broker.Snapshot, error) { return &broker.Snapshot{}, nil }
func (*failStore) SaveSession(*broker.SessionRecord) error        { return nil }
func (*failStore) DeleteSession(string) error                     { return nil }
func (*failStore) SaveMessage(string, *broker.MessageRecord) error {
	return nil
}
func (*failStore) DeleteMessage(string, uint64) error                       { return nil }
func (*failStore) SetInbound(string, uint16, bool) error                    { return nil }
func (*failStore) SaveRetained(*broker.Message) error                       { return nil }
func (*failStore) SaveSubscription(string, broker.SubscriptionRecord) error { return nil }
func (*failStore) DeleteSubscription(string, string) error                  { return nil }
func (f *failStore) Sync(context.Context) error {
	if f.failing.Load() {
		return errors.New("disk gone")
	}
	return nil
}

// TestFailingStoreRefusesEveryAck: nothing is acknowledged before what it
// promises is durable. With the Store's sync failing, every acknowledgement
// path answers with its documented refusal and the failure is counted.
func TestFailingStoreRefusesEveryAck(t *testing.T) {
	st := &failStore{}
	srv, addr := brokertest.RunServer(t, broker.Options{Store: st})
	// A persistent subscriber makes publishes to "p/#" need the Store.
	holder, _ := brokertest.Connect(t, addr, withExpiry(rawV5("holder", true), 300))
	holder.Subscribe(&packet.Subscribe{Subs: []packet.Subscription{{Filter: []byte("p/#"), QoS: 2}}})
	c, _ := brokertest.Connect(t, addr, withExpiry(rawV5("client", true), 300))
	st.failing.Store(true)
	errs0 := srv.Stats().StoreErrors

	if rc := pubAck(t, c, 1, "p/1", "x"); rc != packet.QuotaExceeded {
		t.Errorf("PUBACK %v, want 0x97", rc)
	}
	c.Publish(&packet.Publish{Topic: []byte("p/2"), QoS: 2, PacketID: 2, Payload: []byte("x")})
	var rec packet.Ack
	c.Expect(packet.PUBREC, &rec)
	if rec.Reason != packet.QuotaExceeded {
		t.Errorf("PUBREC %v, want 0x97", rec.Reason)
	}
	c.Publish(&packet.Publish{Topic: []byte("r/1"), QoS: 1, PacketID: 3, Retain: true, Payload: []byte("cfg")})
	var ra packet.Ack
	c.Expect(packet.PUBACK, &ra)
	if ra.Reason != packet.QuotaExceeded {
		t.Errorf("retained PUBACK %v, want 0x97", ra.Reason)
	}
	subs := srv.Stats().Subscriptions
	if ack := c.Subscribe(&packet.Subscribe{PacketID: 4, Subs: []packet.Subscription{{Filter: []byte("s/1"), QoS: 1}}}); codes(ack.Reasons) != codes([]packet.ReasonCode{packet.QuotaExceeded}) {
		t.Errorf("SUBACK %v, want [0x97]", ack.Reasons)
	}
	if n := srv.Stats().Subscriptions; n != subs {
		t.Errorf("a refused SUBSCRIBE left %d subscriptions, want %d", n, subs)
	}
	c.Send((&packet.Unsubscribe{PacketID: 5, Filters: [][]byte{[]byte("p/#")}}).Append(nil, packet.V5))
	var ua packet.Unsuback
	c.Expect(packet.UNSUBACK, &ua)
	if codes(ua.Reasons) != codes([]packet.ReasonCode{packet.NoSubscriptionExisted}) {
		t.Errorf("UNSUBACK %v", ua.Reasons)
	}
	holder.Send((&packet.Unsubscribe{PacketID: 6, Filters: [][]byte{[]byte("p/#")}}).Append(nil, packet.V5))
	// The holder was sent the publishes above (in memory they were routed;
	// the publisher was told 0x97 and may send them again).
	for {
		h, body, err := holder.Read(5 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if h.Type == packet.UNSUBACK {
			ua.Decode(packet.V5, body)
			break
		}
	}
	if codes(ua.Reasons) != codes([]packet.ReasonCode{packet.UnspecifiedError}) {
		t.Errorf("UNSUBACK with the Store failing: %v, want [0x80]", ua.Reasons)
	}
	// PUBACK, PUBREC, retained, SUBACK, the holder's UNSUBACK: each
	// waited for a sync that failed, and each failure is counted. A
	// clean-clone run under load once counted 6 (the extra sync not
	// pinned down; 30 runs alone counted 5 each), so the figure checked
	// is a floor.
	if n := srv.Stats().StoreErrors - errs0; n < 5 {
		t.Errorf("StoreErrors grew by %d, want at least one per refused acknowledgement (5)", n)
	}

	// A 3.1.1 client has no negative acknowledgement: it is disconnected.
	v3, _ := brokertest.Connect(t, addr, &packet.Connect{Version: packet.V311, ClientID: []byte("v3"), CleanStart: false})
	v3.Send((&packet.Subscribe{PacketID: 1, Subs: []packet.Subscription{{Filter: []byte("v3/x"), QoS: 1}}}).Append(nil, packet.V311))
	v3.ExpectClosed()

	// Back to normal.
	st.failing.Store(false)
	c2, _ := brokertest.Connect(t, addr, withExpiry(rawV5("client", false), 300))
	if ack := c2.Subscribe(&packet.Subscribe{PacketID: 7, Subs: []packet.Subscription{{Filter: []byte("s/1"), QoS: 1}}}); ack.Reasons[0] != 1 {
		t.Errorf("SUBACK after recovery %v", ack.Reasons)
	}
}

// TestLingeringCloseDeliversReason: a client that keeps writing after the
// broker disconnects it, as a client library sending its next packets
// before reading does, can still write for a moment and then read the
// DISCONNECT with its reason code, rather than losing both to a TCP reset
// (issue 8, item 5; Paho's test_flow_control2 failed this way).
func TestLingeringCloseDeliversReason(t *testing.T) {
	_, addr := brokertest.RunServer(t, broker.Options{ReceiveMaximum: 2})
	for round := range 5 {
		c, _ := brokertest.Connect(t, addr, rawV5(fmt.Sprint("eager-", round), true))
		var burst []byte
		for i := range 3 {
			burst = (&packet.Publish{Topic: []byte("t"), QoS: 1, PacketID: uint16(i + 1)}).Append(burst, packet.V5)
		}
		c.Send(burst)
		// The client goes on writing for 100 ms before it reads anything.
		// (The pauses pace the client; nothing waits on them.)
		ping := packet.AppendPingreq(nil)
		for i := range 50 {
			c.Conn.SetWriteDeadline(time.Now().Add(time.Second))
			if _, err := c.Conn.Write(ping); err != nil {
				t.Fatalf("round %d: write %d failed before the client read anything: %v", round, i, err)
			}
			time.Sleep(2 * time.Millisecond)
		}
		var got packet.ReasonCode
		for got == 0 {
			h, body, err := c.Read(5 * time.Second)
			if err != nil {
				t.Fatalf("round %d: connection ended by %v before a DISCONNECT was read", round, err)
			}
			if h.Type == packet.DISCONNECT {
				var d packet.Disconnect
				d.Decode(packet.V5, body)
				got = d.Reason
			}
		}
		if got != packet.ReceiveMaximumExceeded {
			t.Fatalf("round %d: DISCONNECT %v, want 0x93", round, got)
		}
		c.ExpectClosed()
	}
}

// TestPartialPacketsTimeOut: clients that send all but the last byte of a
// large PUBLISH, with keep alive off, are disconnected after the partial
// packet timeout and their read buffers are released (issue 9, item 8).
func TestPartialPacketsTimeOut(t *testing.T) {
	srv, addr := brokertest.RunServer(t, broker.Options{PartialPacketTimeout: 500 * time.Millisecond})
	pair := newRobustPair(t, addr, "partial", packet.V5, 60)
	base := robustSnapshot()
	const n = 50
	frame := (&packet.Publish{Topic: []byte("big"), Payload: make([]byte, 999_999)}).Append(nil, packet.V5)
	var clients []*brokertest.Client
	for i := range n {
		c, _ := brokertest.Connect(t, addr, &packet.Connect{Version: packet.V5, ClientID: fmt.Appendf(nil, "partial-%d", i), CleanStart: true})
		c.Send(frame[:len(frame)-1])
		clients = append(clients, c)
	}
	for i, c := range clients {
		if rc := c.ExpectDisconnect(packet.ImplementationSpecificError); rc != packet.ImplementationSpecificError {
			t.Fatalf("client %d: %v", i, rc)
		}
	}
	pair.check(t)
	for _, c := range clients {
		c.Conn.Close()
	}
	// Counted as gone once the lingering close is over.
	brokertest.Eventually(t, 10*time.Second, "only the pair connected", func() bool { return srv.Stats().ClientsConnected == 2 })
	robustWaitSettled(t, base, 4, 16<<20, 15*time.Second)
}

// TestV311PublisherPausedBehindStuckGroup: a 3.1.1 publisher (no Receive
// Maximum to be held to) flooding a share group whose only member is stuck
// is no longer read from once ReceiveMaximum of its publishes wait for
// acknowledgement, instead of queueing without bound behind the member
// (issue 9, item 7); once the member drains, everything arrives.
func TestV311PublisherPausedBehindStuckGroup(t *testing.T) {
	const n, rm = 2000, 100
	srv, addr := brokertest.RunServer(t, broker.Options{ReceiveMaximum: rm, MaxQueuedMessages: 100})
	member := windowSub(t, addr, "stuck", "$share/g/s/#", 1, 0)
	pub, _ := brokertest.Connect(t, addr, &packet.Connect{Version: packet.V311, ClientID: []byte("flooder"), CleanStart: true})
	payload := make([]byte, 1024)
	go func() {
		var buf []byte
		for i := 1; i <= n; i++ {
			buf = (&packet.Publish{Topic: []byte("s/x"), QoS: 1, PacketID: uint16(i), Payload: payload}).Append(buf, packet.V311)
			if i%64 == 0 || i == n {
				pub.Conn.SetWriteDeadline(time.Now().Add(30 * time.Second))
				if _, err := pub.Conn.Write(buf); err != nil {
					return
				}
				buf = buf[:0]
			}
		}
	}()
	// Once ReceiveMaximum acknowledgements are held, the read that held the
	// last of them is the last one until the member drains.
	brokertest.Eventually(t, 10*time.Second, "acknowledgements held", func() bool { return srv.Stats().AcksHeld >= rm })
	var first packet.Publish
	member.Expect(packet.PUBLISH, &first)
	in := srv.Stats().MessagesIn
	member.ExpectNothing(300 * time.Millisecond) // the window of 1 is full
	if again := srv.Stats().MessagesIn; again != in || in > 4*rm {
		t.Fatalf("the broker read %d then %d publishes from a publisher held at %d: not paused", in, again, rm)
	}
	t.Logf("publisher paused after %d of %d publishes", in, n)

	// The member catches up: every publish arrives, and every one is acknowledged.
	seen := map[uint16]bool{}
	p := first
	for {
		member.Send((&packet.Ack{Type: packet.PUBACK, PacketID: p.PacketID}).Append(nil, packet.V5))
		seen[p.PacketID] = true
		if srv.Stats().MessagesIn == n && len(seen) == n {
			break
		}
		member.Expect(packet.PUBLISH, &p)
	}
	acks := 0
	for acks < n {
		h, _, err := pub.Read(10 * time.Second)
		if err != nil {
			t.Fatalf("after %d PUBACKs: %v", acks, err)
		}
		if h.Type == packet.PUBACK {
			acks++
		}
	}
}

// TestStuckReadersBounded: readers that stop reading hold at most
// MaxPendingBytes each, and all of them together MaxPendingBytesTotal,
// whatever they subscribed to (issue 9, item 6).
func TestStuckReadersBounded(t *testing.T) {
	const perConn, total = 128 << 10, 1 << 20
	srv, addr := brokertest.RunServer(t, broker.Options{MaxPendingBytes: perConn, MaxPendingBytesTotal: total, MaxQueuedMessages: 50})
	pair := newRobustPair(t, addr, "stuck", packet.V5, 60)
	base := robustSnapshot()
	var readers []*brokertest.Client
	for i := range 20 {
		c, _ := brokertest.Connect(t, addr, &packet.Connect{Version: packet.V311, ClientID: fmt.Appendf(nil, "stuck-%d", i), CleanStart: true, KeepAlive: 60})
		// Tiny receive buffer, so that what the broker holds is its own.
		c.Conn.(*net.TCPConn).SetReadBuffer(4096)
		c.Subscribe(&packet.Subscribe{Subs: []packet.Subscription{{Filter: []byte("flood/#"), QoS: byte(i % 2)}}})
		readers = append(readers, c)
	}
	pub, _ := brokertest.Connect(t, addr, rawV5("flooder", true))
	payload := make([]byte, 1024)
	var buf []byte
	const msgs = 5000
	for i := 1; i <= msgs; i++ {
		buf = (&packet.Publish{Topic: []byte("flood/x"), Payload: payload}).Append(buf, packet.V5)
		if i%64 == 0 || i == msgs {
			pub.Send(buf)
			buf = buf[:0]
		}
	}
	brokertest.Eventually(t, 30*time.Second, "the flood taken in", func() bool { return srv.Stats().MessagesIn >= msgs })
	pair.check(t)
	st := srv.Stats()
	if st.PendingBytes > total+64<<10 {
		t.Errorf("%d bytes pending, want at most MaxPendingBytesTotal %d (+ one write)", st.PendingBytes, total)
	}
	held := robustSnapshot()
	t.Logf("20 stuck readers: pending %d B, heap %v -> %v, QoS 0 dropped %d", st.PendingBytes, base, held, st.DroppedQoS0)
	if held.heapInuse > base.heapInuse+16<<20 {
		t.Errorf("stuck readers hold %d MiB of heap", (held.heapInuse-base.heapInuse)>>20)
	}
	for _, c := range readers {
		c.Conn.Close()
	}
	brokertest.Eventually(t, 10*time.Second, "pending released", func() bool { return srv.Stats().PendingBytes == 0 })
}

// logSink collects log records for assertions.
type logSink struct {
	mu   sync.Mutex
	recs []string
}

func (l *logSink) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = append(l.recs, string(p))
	return len(p), nil
}

func (l *logSink) count(sub string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range l.recs {
		if strings.Contains(r, sub) {
			n++
		}
	}
	return n
}

// TestConnectionLogs: connects, disconnects (with their cause and address)
// and refusals are logged at info, at most connLogRate a second.
func TestConnectionLogs(t *testing.T) {
	sink := &logSink{}
	log := slog.New(slog.NewTextHandler(sink, &slog.HandlerOptions{Level: slog.LevelInfo}))
	_, addr := brokertest.RunServer(t, broker.Options{Logger: log, MaxClientIDLength: 8})
	c, _ := brokertest.Connect(t, addr, rawV5("logged", true))
	c.Conn.Close()
	brokertest.Eventually(t, 5*time.Second, "disconnect logged", func() bool {
		return sink.count(`msg="client disconnected" client=logged addr=127.0.0.1:`) == 1 &&
			sink.count("cause=\"connection closed by the client without DISCONNECT\"") == 1
	})
	if sink.count(`msg="client connected" client=logged addr=127.0.0.1:`) != 1 {
		t.Fatalf("no connect record: %q", sink.recs)
	}
	brokertest.Connect(t, addr, rawV5("too-long-an-id", true))
	brokertest.Eventually(t, 5*time.Second, "refusal logged", func() bool {
		return sink.count(`msg="connection refused"`) == 1
	})
	// A storm is rate-limited, and what was left out is counted.
	start := time.Now()
	for i := range 200 {
		c, _ := brokertest.Connect(t, addr, rawV5(fmt.Sprint("s", i), true))
		c.Conn.Close()
	}
	took := time.Since(start)
	// At most 20 a second, plus the window that was open.
	if n, limit := sink.count(`msg="client connected"`), 20*(int(took/time.Second)+2); n > limit {
		t.Fatalf("%d connect records for 200 connects in %v, want at most %d", n, took, limit)
	}
	brokertest.Eventually(t, 5*time.Second, "suppressed count logged", func() bool {
		brokertest.Connect(t, addr, rawV5("late", true))
		return sink.count("connection records suppressed") > 0
	})
}

// TestBackpressureCeiling: a publisher that reconnects gets a fresh window
// each time, so share-group backpressure alone would let a stuck member's
// queue grow without bound; it stops at twice MaxQueuedMessages, and
// further messages are refused (v5 0x97).
func TestBackpressureCeiling(t *testing.T) {
	const limit = 20
	srv, addr := brokertest.RunServer(t, broker.Options{MaxQueuedMessages: limit, ReceiveMaximum: 10})
	windowSub(t, addr, "stuck", "$share/g/c/#", 1, 0)
	refused := 0
	for range 10 {
		pub, _ := brokertest.Connect(t, addr, rawV5("pub", true))
		for i := range 10 {
			pub.Publish(&packet.Publish{Topic: []byte("c/x"), QoS: 1, PacketID: uint16(i + 1), Payload: []byte("x")})
		}
		// Collect what is answered; held acknowledgements never come.
		for {
			h, body, err := pub.Read(200 * time.Millisecond)
			if err != nil {
				break
			}
			var a packet.Ack
			if h.Type == packet.PUBACK && a.Decode(packet.V5, h.Type, body) == nil && a.Reason == packet.QuotaExceeded {
				refused++
			}
		}
		pub.Conn.Close()
	}
	if q := srv.Stats().Queued; q > 2*limit {
		t.Fatalf("%d queued for a stuck member, want at most %d", q, 2*limit)
	}
	if refused == 0 {
		t.Fatal("nothing refused past the ceiling")
	}
}

// TestOverflowConcurrentPublishers: many publishers at once into a full
// offline share group and a full offline subscriber: every message
// acknowledged with success is delivered when the clients return, every
// other one was refused with 0x97, none got 0x10.
func TestOverflowConcurrentPublishers(t *testing.T) {
	const limit, pubs, each = 50, 10, 20
	srv, addr := brokertest.RunServer(t, broker.Options{MaxQueuedMessages: limit})
	for _, f := range []struct{ id, filter string }{{"member", "$share/g/cc/#"}, {"plain", "cc/#"}} {
		c, _ := brokertest.Connect(t, addr, withExpiry(rawV5(f.id, true), 300))
		c.Subscribe(&packet.Subscribe{Subs: []packet.Subscription{{Filter: []byte(f.filter), QoS: 1}}})
		c.Conn.Close()
	}
	brokertest.Eventually(t, 5*time.Second, "offline", func() bool { return srv.Stats().ClientsConnected == 0 })
	var mu sync.Mutex
	acked := map[string]bool{}
	var wg sync.WaitGroup
	for p := range pubs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := brokertest.Dial(t, addr, packet.V5)
			c.Conn.Write((&packet.Connect{Version: packet.V5, ProtocolName: []byte("MQTT"), ClientID: fmt.Appendf(nil, "p%d", p), CleanStart: true}).Append(nil))
			if h, _, err := c.Read(5 * time.Second); err != nil || h.Type != packet.CONNACK {
				t.Errorf("publisher %d: no CONNACK: %v", p, err)
				return
			}
			for i := range each {
				payload := fmt.Sprintf("%d-%d", p, i)
				c.Conn.Write((&packet.Publish{Topic: []byte("cc/x"), QoS: 1, PacketID: uint16(i + 1), Payload: []byte(payload)}).Append(nil, packet.V5))
				h, body, err := c.Read(5 * time.Second)
				if err != nil || h.Type != packet.PUBACK {
					t.Errorf("publisher %d: %v %v", p, h.Type, err)
					return
				}
				var a packet.Ack
				a.Decode(packet.V5, h.Type, body)
				switch a.Reason {
				case packet.Success:
					mu.Lock()
					acked[payload] = true
					mu.Unlock()
				case packet.QuotaExceeded:
				default:
					t.Errorf("publisher %d: PUBACK %v", p, a.Reason)
				}
			}
		}()
	}
	wg.Wait()
	// Both the member and the plain subscriber hold at most limit; a
	// message is acknowledged only when both took it.
	if len(acked) > limit || len(acked) == 0 {
		t.Fatalf("%d acknowledged, want 1..%d", len(acked), limit)
	}
	for _, id := range []string{"member", "plain"} {
		c, _ := brokertest.Connect(t, addr, withExpiry(rawV5(id, false), 300))
		got := map[string]bool{}
		for _, p := range drainPayloads(c) {
			got[p] = true
		}
		for m := range acked {
			if !got[m] {
				t.Errorf("%s: acknowledged message %s never delivered", id, m)
			}
		}
	}
}

// TestRetainedConcurrentSubscribers: several new subscribers at once each
// receive every retained message.
func TestRetainedConcurrentSubscribers(t *testing.T) {
	const n, subs = 5000, 8
	srv, addr := brokertest.RunServer(t, broker.Options{MaxPendingBytes: 32 << 10, MaxQueuedMessages: 50})
	pub, _ := brokertest.Connect(t, addr, rawV5("retainer", true))
	var buf []byte
	for i := range n {
		buf = (&packet.Publish{Topic: fmt.Appendf(nil, "r/%d", i), Retain: true, Payload: make([]byte, 64)}).Append(buf, packet.V5)
	}
	pub.Send(buf)
	brokertest.Eventually(t, 10*time.Second, "all retained", func() bool { return srv.Stats().Retained == n })
	var wg sync.WaitGroup
	for s := range subs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := brokertest.Dial(t, addr, packet.V5)
			cp := &packet.Connect{Version: packet.V5, ProtocolName: []byte("MQTT"), ClientID: fmt.Appendf(nil, "rs%d", s), CleanStart: true}
			cp.Props.Set(packet.PropReceiveMaximum)
			cp.Props.ReceiveMaximum = 5
			c.Conn.Write(cp.Append(nil))
			c.Conn.Write((&packet.Subscribe{PacketID: 1, Subs: []packet.Subscription{{Filter: []byte("r/#"), QoS: byte(s % 2)}}}).Append(nil, packet.V5))
			seen := map[string]bool{}
			for len(seen) < n {
				h, body, err := c.Read(10 * time.Second)
				if err != nil {
					t.Errorf("subscriber %d: after %d: %v", s, len(seen), err)
					return
				}
				if h.Type != packet.PUBLISH {
					continue
				}
				var p packet.Publish
				p.Decode(packet.V5, h.Flags, body)
				seen[string(p.Topic)] = true
				if p.QoS == 1 {
					c.Conn.Write((&packet.Ack{Type: packet.PUBACK, PacketID: p.PacketID}).Append(nil, packet.V5))
				}
			}
		}()
	}
	wg.Wait()
}

// TestAcksKeepPublishOrder: an acknowledgement held by a congested share
// group holds the acknowledgements of later publishes too, whatever their
// topic: PUBACKs leave in the order of the PUBLISHes [MQTT-4.6.0-2].
func TestAcksKeepPublishOrder(t *testing.T) {
	srv, addr := brokertest.RunServer(t, broker.Options{MaxQueuedMessages: 4})
	member := windowSub(t, addr, "slow", "$share/g/held/#", 1, 0)
	pub, _ := brokertest.Connect(t, addr, rawV5("pub", true))
	var buf []byte
	for i := 1; i <= 16; i++ {
		topic := "held/x"
		if i%2 == 0 {
			topic = "free/x" // nobody subscribed: 0x10 at once, were it not for the order
		}
		buf = (&packet.Publish{Topic: []byte(topic), QoS: 1, PacketID: uint16(i), Payload: []byte("x")}).Append(buf, packet.V5)
	}
	pub.Send(buf)
	brokertest.Eventually(t, 5*time.Second, "an acknowledgement held", func() bool { return srv.Stats().AcksHeld > 0 })
	var got []uint16
	for {
		h, body, err := pub.Read(300 * time.Millisecond)
		if err != nil {
			break
		}
		var a packet.Ack
		a.Decode(packet.V5, h.Type, body)
		got = append(got, a.PacketID)
	}
	if len(got) >= 16 {
		t.Fatalf("every PUBACK sent while the group is congested: %v", got)
	}
	// The member drains: the rest follow, in order.
	drainPayloads(member)
	for len(got) < 16 {
		var a packet.Ack
		pub.Expect(packet.PUBACK, &a)
		got = append(got, a.PacketID)
	}
	for i, pid := range got {
		if pid != uint16(i+1) {
			t.Fatalf("PUBACKs in the order %v, want 1..16", got)
		}
	}
}

// hostileOutcome is what the broker answered to one hostile sequence, as
// "DISCONNECT 0x81", "CONNACK 0x97", "SUBACK 0x97", "closed" (a close with
// no reason code, as for 3.1.1) or "ok" (everything answered as asked).
type hostileTally struct {
	mu         sync.Mutex
	byKind     map[string]int // sequences per kind
	byOutcome  map[string]int // answers per outcome
	unexpected map[string]int // "kind: outcome" not in the kind's allowed set
	conns      atomic.Int64   // connections opened
	closes     atomic.Int64   // connections the broker ended
	longEnded  atomic.Int64   // of them, long-lived connections
}

func (h *hostileTally) add(kind, outcome string, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.byKind[kind]++
	h.byOutcome[outcome]++
	if !ok {
		h.unexpected[kind+": "+outcome]++
	}
}

// hostileKind is one kind of abusive sequence. Fatal kinds run on a fresh
// connection, which the client half-closes after its bytes so that the
// broker always reaches the end of them; the others run on a long-lived
// connection and must leave it usable.
type hostileKind struct {
	name  string
	fatal bool
	// bytes returns what the client sends (after its CONNECT, unless
	// raw), for a client of version v; seq numbers it.
	bytes func(rng *rand.Rand, v packet.Version, seq int) []byte
	raw   bool // no CONNECT first
	// allowed are the outcomes that are right for this kind.
	allowed []string
}

// hostileKinds are the sequences of TestHostileRun. Reason codes are the
// ones docs/mqtt.md promises.
var hostileKinds = []hostileKind{
	{name: "garbage", fatal: true, raw: true, allowed: []string{"closed", "CONNACK 0x01", "CONNACK 0x81", "CONNACK 0x82", "CONNACK 0x95"},
		bytes: func(rng *rand.Rand, _ packet.Version, _ int) []byte {
			b := make([]byte, 1+rng.IntN(64))
			for i := range b {
				b[i] = byte(rng.Uint32())
			}
			return b
		}},
	{name: "garbage after CONNECT", fatal: true, allowed: []string{"closed", "DISCONNECT 0x81", "DISCONNECT 0x82", "DISCONNECT 0x95", "DISCONNECT 0x90", "DISCONNECT 0x94"},
		bytes: func(rng *rand.Rand, _ packet.Version, _ int) []byte {
			b := make([]byte, 1+rng.IntN(64))
			for i := range b {
				b[i] = byte(rng.Uint32())
			}
			return b
		}},
	{name: "truncated packet", fatal: true, allowed: []string{"closed"},
		bytes: func(rng *rand.Rand, v packet.Version, _ int) []byte {
			b := (&packet.Publish{Topic: []byte("h/trunc"), QoS: 1, PacketID: 1, Payload: make([]byte, 200)}).Append(nil, v)
			return b[:1+rng.IntN(len(b)-1)]
		}},
	{name: "bad remaining length", fatal: true, allowed: []string{"closed", "DISCONNECT 0x81"},
		bytes: func(*rand.Rand, packet.Version, int) []byte { return []byte{0x30, 0xFF, 0xFF, 0xFF, 0xFF, 0x01} }},
	{name: "oversized remaining length", fatal: true, allowed: []string{"closed", "DISCONNECT 0x95"},
		bytes: func(*rand.Rand, packet.Version, int) []byte { return []byte{0x30, 0xFF, 0xFF, 0xFF, 0x7F} }},
	{name: "invalid UTF-8 topic", fatal: true, allowed: []string{"closed", "DISCONNECT 0x81"},
		bytes: func(_ *rand.Rand, v packet.Version, _ int) []byte {
			return (&packet.Publish{Topic: []byte{'h', '/', 0xC3, 0x28}, Payload: []byte("x")}).Append(nil, v)
		}},
	{name: "wildcard topic name", fatal: true, allowed: []string{"closed", "DISCONNECT 0x90"},
		bytes: func(_ *rand.Rand, v packet.Version, _ int) []byte {
			return (&packet.Publish{Topic: []byte("h/+/x"), Payload: []byte("x")}).Append(nil, v)
		}},
	{name: "QoS 3", fatal: true, allowed: []string{"closed", "DISCONNECT 0x81"},
		bytes: func(_ *rand.Rand, v packet.Version, _ int) []byte {
			b := (&packet.Publish{Topic: []byte("h/q"), QoS: 1, PacketID: 1}).Append(nil, v)
			b[0] |= 0x06
			return b
		}},
	{name: "second CONNECT", fatal: true, allowed: []string{"closed", "DISCONNECT 0x82"},
		bytes: func(_ *rand.Rand, v packet.Version, seq int) []byte {
			return (&packet.Connect{Version: v, ProtocolName: []byte("MQTT"), ClientID: fmt.Appendf(nil, "again-%d", seq), CleanStart: true}).Append(nil)
		}},
	{name: "topic alias abuse", fatal: true, allowed: []string{"closed", "DISCONNECT 0x94", "DISCONNECT 0x82", "DISCONNECT 0x81"},
		bytes: func(rng *rand.Rand, v packet.Version, _ int) []byte {
			p := packet.Publish{Topic: []byte("h/alias"), Payload: []byte("x")}
			p.Props.Set(packet.PropTopicAlias)
			switch rng.IntN(3) {
			case 0:
				p.Props.TopicAlias = 0 // never valid [MQTT-3.3.2-8]
			case 1:
				p.Props.TopicAlias = 60000 // above the maximum
			default:
				p.Topic, p.Props.TopicAlias = nil, 7 // never mapped
			}
			return p.Append(nil, v)
		}},
	{name: "publish flood over the rate", fatal: true, allowed: []string{"closed", "DISCONNECT 0x96"},
		bytes: func(_ *rand.Rand, v packet.Version, _ int) []byte {
			var b []byte
			for range 2 * hostileBurst {
				b = (&packet.Publish{Topic: []byte("h/flood"), Payload: []byte("x")}).Append(b, v)
			}
			if v < packet.V5 {
				// 3.1.1 clients are paused, not refused: 20 over the
				// burst cost them 20 ms.
				return b[:len(b)*(hostileBurst+20)/(2*hostileBurst)]
			}
			return b
		}},
	{name: "takeover storm", fatal: true, allowed: []string{"closed", "DISCONNECT 0x8e"}, raw: true,
		bytes: func(_ *rand.Rand, v packet.Version, _ int) []byte {
			return (&packet.Connect{Version: v, ProtocolName: []byte("MQTT"), ClientID: []byte("hostile-storm"), CleanStart: true}).Append(nil)
		}},

	// On a long-lived connection.
	{name: "PUBREL for an unknown id", allowed: []string{"ok"},
		bytes: func(rng *rand.Rand, v packet.Version, _ int) []byte {
			return (&packet.Ack{Type: packet.PUBREL, PacketID: uint16(1 + rng.IntN(60000))}).Append(nil, v)
		}},
	{name: "QoS 2 packet id reuse", allowed: []string{"ok", overRate},
		bytes: func(rng *rand.Rand, v packet.Version, _ int) []byte {
			pid := uint16(1 + rng.IntN(60000))
			p := packet.Publish{Topic: []byte("h/q2"), QoS: 2, PacketID: pid, Payload: []byte("x")}
			b := p.Append(nil, v)
			p.Dup = true
			b = p.Append(b, v) // the same id again before PUBREL: a resend
			b = (&packet.Ack{Type: packet.PUBREL, PacketID: pid}).Append(b, v)
			return (&packet.Ack{Type: packet.PUBREL, PacketID: pid}).Append(b, v) // released twice
		}},
	{name: "QoS 1 packet id reuse", allowed: []string{"ok", overRate},
		bytes: func(_ *rand.Rand, v packet.Version, _ int) []byte {
			p := packet.Publish{Topic: []byte("h/q1"), QoS: 1, PacketID: 9, Payload: []byte("x")}
			return p.Append(p.Append(nil, v), v)
		}},
	{name: "subscription flood", allowed: []string{"ok"},
		bytes: func(rng *rand.Rand, v packet.Version, seq int) []byte {
			s := packet.Subscribe{PacketID: uint16(1 + seq%60000)}
			for i := range 20 {
				f := fmt.Appendf(nil, "hs/%d/%d", seq, i)
				switch rng.IntN(8) {
				case 0:
					f = []byte("hs/#/bad")
				case 1:
					f = bytes.Repeat([]byte("a/"), 200) // deeper than max_topic_levels
				}
				s.Subs = append(s.Subs, packet.Subscription{Filter: f, QoS: byte(rng.IntN(3))})
			}
			return s.Append(nil, v)
		}},
	{name: "unsubscribe unknown", allowed: []string{"ok"},
		bytes: func(_ *rand.Rand, v packet.Version, seq int) []byte {
			return (&packet.Unsubscribe{PacketID: uint16(1 + seq%60000), Filters: [][]byte{fmt.Appendf(nil, "hu/%d", seq)}}).Append(nil, v)
		}},
	{name: "retained flood", allowed: []string{"ok", overRate},
		bytes: func(rng *rand.Rand, v packet.Version, seq int) []byte {
			p := packet.Publish{Topic: fmt.Appendf(nil, "hr/%d", rng.IntN(4*hostileRetained)), QoS: 1, PacketID: uint16(1 + seq%60000), Retain: true, Payload: []byte("r")}
			if rng.IntN(4) == 0 {
				p.Payload = nil // clearing is always allowed
			}
			return p.Append(nil, v)
		}},
}

// overRate is the answer to a long-lived connection whose publishes went
// over MaxPublishRate: on a fast machine (or without -race) the sequences
// that publish come quickly enough to cross it, and the broker rightly ends
// the connection (docs/mqtt.md); the worker opens another.
const overRate = "DISCONNECT 0x96"

// Limits of TestHostileRun's broker, low enough for the run to hit them.
const (
	hostileRate      = 1000
	hostileBurst     = 100
	hostileRetained  = 100
	hostileSubsLimit = 50
)

// hostileAnswers reads what the broker sends until want answers to a
// long-lived connection's sequence arrived (PUBACK, PUBREC, PUBCOMP,
// SUBACK, UNSUBACK; PUBLISHes are skipped) or the connection ended, and
// returns the outcome. A PUBREC gets its PUBREL from the sequence itself.
func hostileAnswers(c *brokertest.Client, want int, codes map[string]int) (string, error) {
	for got := 0; got < want; {
		h, body, err := c.Read(10 * time.Second)
		if err != nil {
			return "closed", err
		}
		switch h.Type {
		case packet.PUBLISH:
			continue
		case packet.DISCONNECT:
			var d packet.Disconnect
			d.Decode(c.Version, body)
			return fmt.Sprintf("DISCONNECT %#02x", byte(d.Reason)), io.EOF
		case packet.SUBACK:
			var s packet.Suback
			s.Decode(c.Version, body)
			for _, rc := range s.Reasons {
				codes[fmt.Sprintf("SUBACK %#02x", byte(rc))]++
			}
		case packet.PUBACK, packet.PUBREC, packet.PUBCOMP, packet.UNSUBACK:
			if h.Type == packet.UNSUBACK {
				var u packet.Unsuback
				u.Decode(c.Version, body)
				for _, rc := range u.Reasons {
					codes[fmt.Sprintf("UNSUBACK %#02x", byte(rc))]++
				}
				break
			}
			var a packet.Ack
			a.Decode(c.Version, h.Type, body)
			codes[fmt.Sprintf("%v %#02x", h.Type, byte(a.Reason))]++
		default:
			return fmt.Sprintf("unexpected %v", h.Type), nil
		}
		got++
	}
	return "ok", nil
}

// hostileExpected is how many answers a long-lived connection's sequence
// gets.
var hostileExpected = map[string]int{
	"PUBREL for an unknown id": 1, // PUBCOMP 0x92 (3.1.1: PUBCOMP)
	"QoS 2 packet id reuse":    4, // PUBREC, PUBREC, PUBCOMP, PUBCOMP 0x92
	"QoS 1 packet id reuse":    2,
	"subscription flood":       1,
	"unsubscribe unknown":      1, // UNSUBACK 0x11
	"retained flood":           1, // PUBACK, 0x97 past the limits
}

// TestHostileRun is issue 13's hostile-client run: 100,000 malformed or
// abusive packet sequences (10,000 with -short) from concurrent clients
// against a running broker over loopback TCP, while a well-behaved pair
// keeps publishing and receiving. Every sequence must get an answer
// docs/mqtt.md promises for it; the broker must end alive, the pair's
// traffic intact, and the goroutines and heap back where they started.
func TestHostileRun(t *testing.T) {
	total := 100_000
	if testing.Short() {
		total = 10_000
	}
	const workers = 8
	srv, addr := brokertest.RunServer(t, broker.Options{
		MaxPublishRate: hostileRate, PublishBurst: hostileBurst,
		MaxRetainedMessages: hostileRetained, MaxSubscriptionsPerClient: hostileSubsLimit,
		PartialPacketTimeout: 2 * time.Second,
	})
	pair := newRobustPair(t, addr, "hostile", packet.V5, 60)
	pair.check(t)
	base := robustSnapshot()

	tally := &hostileTally{byKind: map[string]int{}, byOutcome: map[string]int{}, unexpected: map[string]int{}}
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 13))
			codes := map[string]int{}
			defer func() {
				tally.mu.Lock()
				for k, n := range codes {
					tally.byOutcome[k] += n
				}
				tally.mu.Unlock()
			}()
			var long *brokertest.Client // the long-lived connection
			defer func() {
				if long != nil {
					long.Conn.Close()
				}
			}()
			for {
				seq := int(next.Add(1))
				if seq > total {
					return
				}
				k := &hostileKinds[seq%len(hostileKinds)]
				v := packet.V5
				if rng.IntN(3) == 0 {
					v = packet.V311
				}
				if k.fatal {
					outcome := hostileFatal(addr, k, rng, v, seq, tally)
					tally.add(k.name, outcome, slices.Contains(k.allowed, outcome))
					continue
				}
				if long == nil {
					lv := packet.V5
					if w%2 == 1 {
						lv = packet.V311
					}
					nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
					if err != nil {
						t.Errorf("worker %d: %v", w, err)
						return
					}
					tally.conns.Add(1)
					long = &brokertest.Client{Conn: nc, Version: lv}
					nc.Write((&packet.Connect{Version: lv, ProtocolName: []byte("MQTT"), ClientID: fmt.Appendf(nil, "hostile-long-%d", w), CleanStart: true, KeepAlive: 60}).Append(nil))
					if h, _, err := long.Read(10 * time.Second); err != nil || h.Type != packet.CONNACK {
						t.Errorf("worker %d: no CONNACK: %v %v", w, h.Type, err)
						return
					}
				}
				long.Conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
				if _, err := long.Conn.Write(k.bytes(rng, long.Version, seq)); err != nil {
					tally.add(k.name, "write failed", false)
					long.Conn.Close()
					long = nil
					continue
				}
				outcome, err := hostileAnswers(long, hostileExpected[k.name], codes)
				tally.add(k.name, outcome, slices.Contains(k.allowed, outcome))
				if err != nil {
					tally.closes.Add(1)
					tally.longEnded.Add(1)
					long.Conn.Close()
					long = nil
				}
			}
		}()
	}
	// The pair keeps its traffic going meanwhile.
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	checks := 0
	for running := true; running; {
		select {
		case <-done:
			running = false
		case <-time.After(20 * time.Millisecond):
		}
		pair.check(t)
		checks++
	}
	took := time.Since(start)
	for range 10 {
		pair.check(t) // and after
	}

	tally.mu.Lock()
	t.Logf("%d sequences in %v over %d connections; the broker ended %d of them (%d long-lived ones); the pair exchanged %d messages meanwhile, all delivered",
		total, took.Round(time.Millisecond), tally.conns.Load(), tally.closes.Load(), tally.longEnded.Load(), checks+10)
	for _, k := range hostileKinds {
		t.Logf("  %-28s %d", k.name, tally.byKind[k.name])
	}
	outcomes := slices.Sorted(maps.Keys(tally.byOutcome))
	for _, o := range outcomes {
		t.Logf("  answer %-24s %d", o, tally.byOutcome[o])
	}
	for u, n := range tally.unexpected {
		t.Errorf("unexpected answer %s (%d times)", u, n)
	}
	tally.mu.Unlock()
	ls := srv.LimitStats()
	st := srv.Stats()
	t.Logf("limits: %+v", ls)
	t.Logf("broker: %d connected, %d sessions, %d retained, %d subscriptions, %d packets in", st.ClientsConnected, st.Sessions, st.Retained, st.Subscriptions, st.PacketsIn)
	if ls.RateDisconnects == 0 || ls.RatePauses == 0 || ls.RefusedRetained == 0 || ls.RefusedSubscriptions == 0 {
		t.Errorf("a limit was never reached: %+v", ls)
	}
	if st.Retained > hostileRetained {
		t.Errorf("%d retained messages kept, over the limit of %d", st.Retained, hostileRetained)
	}

	brokertest.Eventually(t, 15*time.Second, "only the pair connected", func() bool {
		st := srv.Stats()
		return st.ClientsConnected == 2 && st.Sessions == 2
	})
	after := robustWaitSettled(t, base, 4, 16<<20, 30*time.Second)
	t.Logf("goroutines %d -> %d, heap in use %.1f -> %.1f MiB", base.goroutines, after.goroutines,
		float64(base.heapInuse)/(1<<20), float64(after.heapInuse)/(1<<20))
}

// hostileFatal runs one fatal sequence on a fresh connection: CONNECT
// (unless the kind is raw), the kind's bytes, a half-close; then it reads
// until the broker closes, and returns the outcome.
func hostileFatal(addr string, k *hostileKind, rng *rand.Rand, v packet.Version, seq int, tally *hostileTally) string {
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return "dial failed: " + err.Error()
	}
	defer nc.Close()
	tally.conns.Add(1)
	var b []byte
	if !k.raw {
		b = (&packet.Connect{Version: v, ProtocolName: []byte("MQTT"), ClientID: fmt.Appendf(nil, "hostile-%d", seq), CleanStart: true}).Append(nil)
	}
	b = append(b, k.bytes(rng, v, seq)...)
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := nc.Write(b); err != nil {
		return "write failed"
	}
	nc.(*net.TCPConn).CloseWrite()
	c := &brokertest.Client{Conn: nc, Version: v}
	outcome := "closed"
	for {
		h, body, err := c.Read(10 * time.Second)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return "not closed"
			}
			tally.closes.Add(1)
			return outcome
		}
		switch h.Type {
		case packet.CONNACK:
			var a packet.Connack
			if a.Decode(v, body) == nil && a.Reason != 0 {
				outcome = fmt.Sprintf("CONNACK %#02x", byte(a.Reason))
				if v < packet.V5 && len(body) == 2 {
					outcome = fmt.Sprintf("CONNACK %#02x", body[1])
				}
			}
		case packet.DISCONNECT:
			var d packet.Disconnect
			d.Decode(v, body)
			outcome = fmt.Sprintf("DISCONNECT %#02x", byte(d.Reason))
		}
	}
}

// TestDeniedPublishLoggedOnce: a client publishing where the ACL denies it
// is logged once per connection however often it retries, a 3.1.1 client
// included (it is never told), and every denial is counted.
func TestDeniedPublishLoggedOnce(t *testing.T) {
	sink := &logSink{}
	log := slog.New(slog.NewTextHandler(sink, &slog.HandlerOptions{Level: slog.LevelInfo}))
	srv, addr := brokertest.RunServer(t, broker.Options{Logger: log, Auth: denyAuth{}})
	for _, v := range []packet.Version{packet.V5, packet.V311} {
		c, _ := brokertest.Connect(t, addr, &packet.Connect{Version: v, ClientID: []byte(fmt.Sprint("plc-", v)), CleanStart: true,
			UsernameFlag: true, Username: []byte("op"), PasswordFlag: true, Password: []byte("secret")})
		for i := range 50 {
			c.Publish(&packet.Publish{Topic: []byte("forbidden"), QoS: 1, PacketID: uint16(i + 1), Payload: []byte("x")})
			var a packet.Ack
			c.Expect(packet.PUBACK, &a)
			if want := map[packet.Version]packet.ReasonCode{packet.V5: packet.NotAuthorized, packet.V311: packet.Success}[v]; a.Reason != want {
				t.Fatalf("v%d: PUBACK %v, want %v", v, a.Reason, want)
			}
		}
	}
	if n := sink.count(`msg="publish denied by the ACL`); n != 2 {
		t.Fatalf("%d denial records for 100 denied publishes on 2 connections, want 2", n)
	}
	if n := sink.count(`client=plc-4 `); n == 0 {
		t.Fatalf("the 3.1.1 client's denial was not logged: %q", sink.recs)
	}
	if got := srv.Stats().PublishesDenied; got != 100 {
		t.Fatalf("PublishesDenied %d, want 100", got)
	}
}

// TestWriteTimeoutLogged: a subscriber that stops reading is closed when a
// write to it blocks for WriteTimeout, and the log says so; not the
// "use of closed network connection" its reader then gets from the socket
// the writer closed.
func TestWriteTimeoutLogged(t *testing.T) {
	const writeTimeout = 500 * time.Millisecond
	sink := &logSink{}
	log := slog.New(slog.NewTextHandler(sink, &slog.HandlerOptions{Level: slog.LevelInfo}))
	_, addr := brokertest.RunServer(t, broker.Options{Logger: log, WriteTimeout: writeTimeout})

	stuck := brokertest.Dial(t, addr, packet.V5)
	if tc, ok := stuck.Conn.(*net.TCPConn); ok {
		tc.SetReadBuffer(8 << 10) // the window fills sooner
	}
	stuck.Send(rawV5("stuck", true).Append(nil))
	stuck.Expect(packet.CONNACK, nil)
	stuck.Subscribe(&packet.Subscribe{Subs: []packet.Subscription{{Filter: []byte("flood/t"), QoS: 0}}})
	pub, _ := brokertest.Connect(t, addr, rawV5("flooder", true))

	var sent atomic.Int64
	stop := make(chan struct{})
	flooded := make(chan error, 1)
	go func() { flooded <- robustFlood(pub.Conn, packet.V5, "flood/t", 1_000_000, 1<<10, stop, &sent) }()
	defer func() {
		close(stop)
		<-flooded
	}()
	brokertest.Eventually(t, 30*time.Second, "the stuck client's disconnect logged", func() bool {
		return sink.count(`msg="client disconnected" client=stuck`) == 1
	})
	sink.mu.Lock()
	recs := slices.Clone(sink.recs)
	sink.mu.Unlock()
	for _, r := range recs {
		if !strings.Contains(r, `client=stuck`) || !strings.Contains(r, `msg="client disconnected"`) {
			continue
		}
		if !strings.Contains(r, `cause="write timeout: a write blocked for 500ms: the client is not reading (mqtt.write_timeout)"`) {
			t.Errorf("the disconnect does not name the write timeout as its cause:\n%s", r)
		}
	}
}
