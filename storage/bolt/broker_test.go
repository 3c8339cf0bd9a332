package bolt_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/broker/packet"
	"github.com/linemq/linemq/storage/bolt"
)

// node is a broker on a bbolt file that a test can restart on the same
// file, as a restart of the daemon would.
type node struct {
	*brokertest.Server
	store *bolt.Store
}

func newNode(t *testing.T, opts broker.Options, bopts bolt.Options) *node {
	path := filepath.Join(t.TempDir(), "linemq.db")
	n := &node{}
	n.Server = brokertest.Start(t, opts, func() (broker.Store, func() error) {
		st, err := bolt.Open(path, &bopts)
		if err != nil {
			t.Fatal(err)
		}
		n.store = st
		return st, st.Close
	})
	return n
}

func (n *node) srv() *broker.Server { return n.Server.Server }

func v5(id string, clean bool, expiry uint32) *packet.Connect {
	c := &packet.Connect{Version: packet.V5, ClientID: []byte(id), CleanStart: clean}
	c.Props.Set(packet.PropSessionExpiry)
	c.Props.SessionExpiry = expiry
	return c
}

// TestRestoreEachStoredItem stops and restarts a broker on its file and
// checks every kind of state comes back: the session with its subscription
// options and identifier, queued messages in order, an unacknowledged QoS 1
// message resent with DUP and its packet id, a QoS 2 message past PUBREC
// resent as PUBREL, an inbound QoS 2 packet id still unreleased, and
// retained messages.
func TestRestoreEachStoredItem(t *testing.T) {
	n := newNode(t, broker.Options{}, bolt.Options{Sync: bolt.SyncBatch})
	sub, _ := brokertest.Connect(t, n.Addr, v5("sub", true, 3600))
	s := &packet.Subscribe{Subs: []packet.Subscription{{Filter: []byte("r/#"), QoS: 2, RetainAsPublished: true}}}
	s.Props.SubscriptionIDs = []uint32{77}
	sub.Subscribe(s)
	pub, _ := brokertest.Connect(t, n.Addr, v5("pub", true, 3600))
	send := func(topic string, qos byte, pid uint16, payload string, retain bool) {
		pub.Publish(&packet.Publish{Topic: []byte(topic), QoS: qos, PacketID: pid, Payload: []byte(payload), Retain: retain})
		if qos == 1 {
			pub.Expect(packet.PUBACK, nil)
		} else {
			pub.Expect(packet.PUBREC, nil)
		}
	}
	send("r/1", 1, 1, "in flight", false)
	send("r/2", 2, 2, "released", false)
	var p1, p2 packet.Publish
	sub.Expect(packet.PUBLISH, &p1)
	sub.Expect(packet.PUBLISH, &p2)
	sub.Send((&packet.Ack{Type: packet.PUBREC, PacketID: p2.PacketID}).Append(nil, packet.V5))
	sub.Expect(packet.PUBREL, nil)
	sub.Conn.Close()
	brokertest.Eventually(t, 5*time.Second, "sub offline", func() bool { return n.srv().Stats().ClientsConnected == 1 })
	for i := range 3 {
		send("r/q", 1, uint16(10+i), fmt.Sprint("queued-", i), false)
	}
	send("r/retained", 1, 20, "kept", true)
	// The publisher leaves a QoS 2 message unreleased.
	pub.Publish(&packet.Publish{Topic: []byte("x"), QoS: 2, PacketID: 99, Payload: []byte("once")})
	pub.Expect(packet.PUBREC, nil)

	n.Restart()

	sub, ca := brokertest.Connect(t, n.Addr, v5("sub", false, 3600))
	if !ca.SessionPresent {
		t.Fatal("session not restored")
	}
	var got packet.Publish
	sub.Expect(packet.PUBLISH, &got)
	if !got.Dup || got.PacketID != p1.PacketID || string(got.Payload) != "in flight" {
		t.Fatalf("in-flight QoS 1: %+v, want DUP resend of packet %d", got, p1.PacketID)
	}
	var rel packet.Ack
	sub.Expect(packet.PUBREL, &rel)
	if rel.PacketID != p2.PacketID {
		t.Fatalf("PUBREL for %d, want %d", rel.PacketID, p2.PacketID)
	}
	for i := range 3 {
		sub.Expect(packet.PUBLISH, &got)
		if string(got.Payload) != fmt.Sprint("queued-", i) || got.QoS != 1 ||
			len(got.Props.SubscriptionIDs) != 1 || got.Props.SubscriptionIDs[0] != 77 {
			t.Fatalf("queued message %d: %q qos %d ids %v", i, got.Payload, got.QoS, got.Props.SubscriptionIDs)
		}
	}
	// The retained message went to the live subscription with RETAIN kept
	// (Retain As Published survived the restart too).
	sub.Expect(packet.PUBLISH, &got)
	if string(got.Payload) != "kept" || !got.Retain {
		t.Fatalf("retained live delivery %q retain=%v", got.Payload, got.Retain)
	}
	// The unreleased inbound id: a resend is acknowledged, not delivered again.
	pub, _ = brokertest.Connect(t, n.Addr, v5("pub", false, 3600))
	watch, _ := brokertest.Connect(t, n.Addr, v5("watch", true, 0))
	watch.Subscribe(&packet.Subscribe{Subs: []packet.Subscription{{Filter: []byte("x"), QoS: 2}}})
	pub.Publish(&packet.Publish{Topic: []byte("x"), QoS: 2, PacketID: 99, Dup: true, Payload: []byte("once")})
	pub.Expect(packet.PUBREC, nil)
	watch.ExpectNothing(200 * time.Millisecond)
	pub.Send((&packet.Ack{Type: packet.PUBREL, PacketID: 99}).Append(nil, packet.V5))
	var comp packet.Ack
	pub.Expect(packet.PUBCOMP, &comp)
	if comp.Reason != packet.Success {
		t.Fatalf("PUBCOMP %v: the inbound id was not restored", comp.Reason)
	}
	// Retained for a new subscriber.
	late, _ := brokertest.Connect(t, n.Addr, v5("late", true, 0))
	late.Subscribe(&packet.Subscribe{Subs: []packet.Subscription{{Filter: []byte("r/retained")}}})
	late.Expect(packet.PUBLISH, &got)
	if string(got.Payload) != "kept" {
		t.Fatalf("retained after restart: %q", got.Payload)
	}
}

// TestExpiryAcrossRestart: a session's expiry keeps counting while the
// broker is down, and a message's expiry likewise.
func TestExpiryAcrossRestart(t *testing.T) {
	clock := brokertest.NewFakeClock()
	n := newNode(t, broker.Options{Clock: clock}, bolt.Options{})
	for _, id := range []string{"short", "long"} {
		exp := uint32(30)
		if id == "long" {
			exp = 3600
		}
		c, _ := brokertest.Connect(t, n.Addr, v5(id, true, exp))
		c.Subscribe(&packet.Subscribe{Subs: []packet.Subscription{{Filter: []byte("e"), QoS: 1}}})
		c.Conn.Close()
	}
	brokertest.Eventually(t, 5*time.Second, "offline", func() bool { return n.srv().Stats().ClientsConnected == 0 })
	pub, _ := brokertest.Connect(t, n.Addr, v5("pub", true, 0))
	p := &packet.Publish{Topic: []byte("e"), QoS: 1, PacketID: 1, Payload: []byte("stale")}
	p.Props.Set(packet.PropMessageExpiry)
	p.Props.MessageExpiry = 20
	pub.Publish(p)
	pub.Expect(packet.PUBACK, nil)
	p = &packet.Publish{Topic: []byte("e"), QoS: 1, PacketID: 2, Payload: []byte("fresh")}
	pub.Publish(p)
	pub.Expect(packet.PUBACK, nil)
	n.Stop()
	clock.Advance(time.Minute) // the broker is down for a minute
	n.Run()
	if s := n.srv().Stats().Sessions; s != 1 {
		t.Fatalf("%d sessions after restart, want 1 (the 30 s one expired while down)", s)
	}
	c, ca := brokertest.Connect(t, n.Addr, v5("long", false, 3600))
	if !ca.SessionPresent {
		t.Fatal("long session lost")
	}
	var got packet.Publish
	c.Expect(packet.PUBLISH, &got)
	if string(got.Payload) != "fresh" {
		t.Fatalf("got %q; the expired message should be gone", got.Payload)
	}
	c.ExpectNothing(100 * time.Millisecond)
}

// TestBootBeforeTheClockIsSet: a gateway without a real-time clock
// restarts with its clock at 1970, before NTP answers, on a store written
// in 2026. Nothing expires at once, and nothing is kept for ever: each
// session and message runs the rest of its interval from the start, as
// though no time had passed while it was down.
func TestBootBeforeTheClockIsSet(t *testing.T) {
	clock := brokertest.NewFakeClock()
	n := newNode(t, broker.Options{Clock: clock}, bolt.Options{})
	for _, c := range []struct {
		id  string
		exp uint32
	}{{"short", 60}, {"long", 3600}} {
		cl, _ := brokertest.Connect(t, n.Addr, v5(c.id, true, c.exp))
		cl.Subscribe(&packet.Subscribe{Subs: []packet.Subscription{{Filter: []byte("e"), QoS: 1}}})
		cl.Conn.Close()
	}
	brokertest.Eventually(t, 5*time.Second, "offline", func() bool { return n.srv().Stats().ClientsConnected == 0 })
	pub, _ := brokertest.Connect(t, n.Addr, v5("pub", true, 0))
	p := &packet.Publish{Topic: []byte("e"), QoS: 1, PacketID: 1, Payload: []byte("two minutes")}
	p.Props.Set(packet.PropMessageExpiry)
	p.Props.MessageExpiry = 120
	pub.Publish(p)
	pub.Expect(packet.PUBACK, nil)
	pub.Publish(&packet.Publish{Topic: []byte("e"), QoS: 1, PacketID: 2, Payload: []byte("for ever")})
	pub.Expect(packet.PUBACK, nil)
	n.Stop()

	clock.Set(time.Unix(42, 0)) // the next boot, before NTP
	n.Run()
	has := func(id string) bool { _, _, ok := n.srv().Client(id); return ok }
	if !has("short") || !has("long") {
		t.Fatalf("after a boot at 1970: short %v, long %v; the stored sessions expired at once", has("short"), has("long"))
	}
	clock.Advance(59 * time.Second)
	if !has("short") {
		t.Fatal("the 60 s session expired within 59 s of the boot")
	}
	clock.Advance(2 * time.Second)
	brokertest.Eventually(t, 5*time.Second, "the 60 s session expired 60 s after the boot", func() bool { return !has("short") })
	if !has("long") {
		t.Fatal("the hour-long session expired after a minute")
	}
	clock.Advance(time.Minute) // the message's two minutes are up
	c, ca := brokertest.Connect(t, n.Addr, v5("long", false, 3600))
	if !ca.SessionPresent {
		t.Fatal("long session lost")
	}
	var got packet.Publish
	c.Expect(packet.PUBLISH, &got)
	if string(got.Payload) != "for ever" {
		t.Fatalf("got %q; the two-minute message should have expired", got.Payload)
	}
	c.ExpectNothing(100 * time.Millisecond)
}

// TestFullDisk turns a store that cannot grow into refused publishes
// (PUBACK 0x97 for v5, a disconnect for 3.1.1) and recovers once there is
// room again, losing nothing it acknowledged.
func TestFullDisk(t *testing.T) {
	n := newNode(t, broker.Options{}, bolt.Options{Sync: bolt.SyncAlways, MaxSize: 256 << 10})
	sub, _ := brokertest.Connect(t, n.Addr, v5("sub", true, 3600))
	sub.Subscribe(&packet.Subscribe{Subs: []packet.Subscription{{Filter: []byte("big"), QoS: 1}}})
	sub.Conn.Close()
	brokertest.Eventually(t, 5*time.Second, "offline", func() bool { return n.srv().Stats().ClientsConnected == 0 })
	pub, _ := brokertest.Connect(t, n.Addr, v5("pub", true, 0))
	payload := make([]byte, 16<<10)
	var acked []uint16
	refused := false
	for i := 1; i <= 40 && !refused; i++ {
		pub.Publish(&packet.Publish{Topic: []byte("big"), QoS: 1, PacketID: uint16(i), Payload: payload})
		var a packet.Ack
		pub.Expect(packet.PUBACK, &a)
		switch a.Reason {
		case packet.Success:
			acked = append(acked, uint16(i))
		case packet.QuotaExceeded:
			refused = true
		default:
			t.Fatalf("PUBACK %v", a.Reason)
		}
	}
	if !refused || len(acked) == 0 {
		t.Fatalf("%d acknowledged, refused=%v: the store never filled up", len(acked), refused)
	}
	// 3.1.1 has no negative PUBACK: the publisher is disconnected.
	v3, _ := brokertest.Connect(t, n.Addr, &packet.Connect{Version: packet.V311, ClientID: []byte("v3"), CleanStart: true})
	v3.Publish(&packet.Publish{Topic: []byte("big"), QoS: 1, PacketID: 1, Payload: payload})
	v3.ExpectClosed()

	// Room returns: the subscriber drains its queue, which frees pages.
	sub, _ = brokertest.Connect(t, n.Addr, v5("sub", false, 3600))
	var got packet.Publish
	received := 0
	for {
		h, body, err := sub.Read(time.Second)
		if err != nil {
			break
		}
		if h.Type == packet.PUBLISH {
			got.Decode(packet.V5, h.Flags, body)
			received++
			sub.Send((&packet.Ack{Type: packet.PUBACK, PacketID: got.PacketID}).Append(nil, packet.V5))
		}
	}
	if received < len(acked) {
		t.Fatalf("%d of %d acknowledged messages delivered", received, len(acked))
	}
	brokertest.Eventually(t, 10*time.Second, "publishes accepted again", func() bool {
		pub.Publish(&packet.Publish{Topic: []byte("big"), QoS: 1, PacketID: 100, Payload: []byte("small")})
		var a packet.Ack
		pub.Expect(packet.PUBACK, &a)
		return a.Reason == packet.Success
	})
}

// TestWillsAtShutdown: a graceful shutdown publishes the wills of the
// clients it disconnects (including one still waiting out its delay), and
// a persistent subscriber offline at the time finds them after the restart,
// once each.
func TestWillsAtShutdown(t *testing.T) {
	n := newNode(t, broker.Options{}, bolt.Options{})
	w, _ := brokertest.Connect(t, n.Addr, v5("watcher", true, 3600))
	w.Subscribe(&packet.Subscribe{Subs: []packet.Subscription{{Filter: []byte("will/#"), QoS: 1}}})
	w.Conn.Close()
	withWill := func(id string, delay uint32) *packet.Connect {
		c := v5(id, true, 3600)
		c.WillFlag, c.WillQoS, c.WillTopic, c.WillPayload = true, 1, []byte("will/"+id), []byte("gone")
		if delay > 0 {
			c.WillProps.Set(packet.PropWillDelay)
			c.WillProps.WillDelay = delay
		}
		return c
	}
	brokertest.Connect(t, n.Addr, withWill("connected", 0))
	waiting, _ := brokertest.Connect(t, n.Addr, withWill("waiting", 600))
	waiting.Conn.Close() // its will waits 600 s, until the shutdown
	brokertest.Eventually(t, 5*time.Second, "one client left", func() bool { return n.srv().Stats().ClientsConnected == 1 })

	n.Restart()

	w, _ = brokertest.Connect(t, n.Addr, v5("watcher", false, 3600))
	got := map[string]int{}
	for {
		h, body, err := w.Read(500 * time.Millisecond)
		if err != nil {
			break
		}
		if h.Type == packet.PUBLISH {
			var p packet.Publish
			p.Decode(packet.V5, h.Flags, body)
			got[string(p.Topic)]++
			w.Send((&packet.Ack{Type: packet.PUBACK, PacketID: p.PacketID}).Append(nil, packet.V5))
		}
	}
	if got["will/connected"] != 1 || got["will/waiting"] != 1 || len(got) != 2 {
		t.Fatalf("wills after restart: %v, want each of will/connected and will/waiting once", got)
	}
}

// TestSubscriptionsAcrossRestart: the subscriptions of a persistent
// session, each saved by its own SUBSCRIBE and removed by UNSUBSCRIBE,
// route what is published after a restart, with their options. From
// schema 3 on, SaveSession no longer stores subscriptions: this runs once
// broker.Store has SaveSubscription, which the broker then calls.
func TestSubscriptionsAcrossRestart(t *testing.T) {
	if _, ok := reflect.TypeFor[broker.Store]().MethodByName("SaveSubscription"); !ok {
		t.Skip("broker.Store has no SaveSubscription yet: the broker stores subscriptions through SaveSession, which bolt ignores from schema 3 on")
	}
	n := newNode(t, broker.Options{}, bolt.Options{})
	sub, _ := brokertest.Connect(t, n.Addr, v5("sub", true, 3600))
	s := &packet.Subscribe{Subs: []packet.Subscription{{Filter: []byte("a/+"), QoS: 1}}}
	s.Props.SubscriptionIDs = []uint32{5}
	sub.Subscribe(s)
	sub.Subscribe(&packet.Subscribe{PacketID: 2, Subs: []packet.Subscription{{Filter: []byte("b/#"), QoS: 1}}})
	sub.Subscribe(&packet.Subscribe{PacketID: 3, Subs: []packet.Subscription{{Filter: []byte("c"), QoS: 1}}})
	sub.Send((&packet.Unsubscribe{PacketID: 4, Filters: [][]byte{[]byte("b/#")}}).Append(nil, packet.V5))
	sub.Expect(packet.UNSUBACK, nil)
	sub.Conn.Close()
	brokertest.Eventually(t, 5*time.Second, "sub offline", func() bool { return n.srv().Stats().ClientsConnected == 0 })

	n.Restart()

	sub, ca := brokertest.Connect(t, n.Addr, v5("sub", false, 3600))
	if !ca.SessionPresent {
		t.Fatal("session not restored")
	}
	pub, _ := brokertest.Connect(t, n.Addr, v5("pub", true, 0))
	for i, topic := range []string{"b/x", "a/1", "c"} {
		pub.Publish(&packet.Publish{Topic: []byte(topic), QoS: 1, PacketID: uint16(i + 1), Payload: []byte(topic)})
		pub.Expect(packet.PUBACK, nil)
	}
	var got packet.Publish
	sub.Expect(packet.PUBLISH, &got)
	if string(got.Topic) != "a/1" || len(got.Props.SubscriptionIDs) != 1 || got.Props.SubscriptionIDs[0] != 5 {
		t.Fatalf("first delivery after restart: %q ids %v; want a/1 with subscription id 5 (b/# was unsubscribed)", got.Topic, got.Props.SubscriptionIDs)
	}
	sub.Send((&packet.Ack{Type: packet.PUBACK, PacketID: got.PacketID}).Append(nil, packet.V5))
	sub.Expect(packet.PUBLISH, &got)
	if string(got.Topic) != "c" {
		t.Fatalf("second delivery after restart: %q", got.Topic)
	}
}

// TestFanOutRestoredShared: messages queued to many offline sessions are
// stored once and, after a restart, held once in memory: every session's
// copy is the same Message (issue 9, item 5). Each session then receives
// its whole backlog.
func TestFanOutRestoredShared(t *testing.T) {
	const sessions, msgs, size = 100, 100, 4096
	n := newNode(t, broker.Options{MaxQueuedMessages: msgs}, bolt.Options{Sync: bolt.SyncBatch})
	for i := range sessions {
		c, _ := brokertest.Connect(t, n.Addr, v5(fmt.Sprint("s", i), true, 3600))
		c.Subscribe(&packet.Subscribe{Subs: []packet.Subscription{{Filter: []byte("fan/#"), QoS: 1}}})
		c.Conn.Close()
	}
	brokertest.Eventually(t, 5*time.Second, "offline", func() bool { return n.srv().Stats().ClientsConnected == 0 })
	pub, _ := brokertest.Connect(t, n.Addr, v5("pub", true, 0))
	payload := make([]byte, size)
	for i := range msgs {
		pub.Publish(&packet.Publish{Topic: []byte("fan/x"), QoS: 1, PacketID: uint16(i + 1), Payload: payload})
		pub.Expect(packet.PUBACK, nil)
	}
	pub.Conn.Close()
	n.Stop()
	fi, err := os.Stat(n.store.Path())
	if err != nil {
		t.Fatal(err)
	}
	// 100 x 100 x 4 KiB would be 40 MiB stored per session; once, 400 KiB.
	if fi.Size() > 8<<20 {
		t.Errorf("database is %d MiB for %d KiB of unique payload", fi.Size()>>20, msgs*size>>10)
	}

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	n.Run()
	runtime.GC()
	runtime.ReadMemStats(&after)
	grew := int64(after.HeapInuse) - int64(before.HeapInuse)
	t.Logf("file %d KiB; heap after restore +%d KiB for %d queued deliveries of %d shared messages", fi.Size()>>10, grew>>10, sessions*msgs, msgs)
	if grew > 16<<20 { // one copy per session would be 40 MiB
		t.Errorf("restore grew the heap by %d MiB: the backlog is not shared", grew>>20)
	}
	if q := n.srv().Stats().Queued; q != sessions*msgs {
		t.Fatalf("%d queued after restart, want %d", q, sessions*msgs)
	}
	for _, i := range []int{0, sessions / 2, sessions - 1} {
		c, _ := brokertest.Connect(t, n.Addr, v5(fmt.Sprint("s", i), false, 3600))
		for range msgs {
			var p packet.Publish
			c.Expect(packet.PUBLISH, &p)
			c.Send((&packet.Ack{Type: packet.PUBACK, PacketID: p.PacketID}).Append(nil, packet.V5))
		}
		c.ExpectNothing(100 * time.Millisecond)
	}
}

// TestManySubscriptionsWriteWhatChanged: each SUBSCRIBE of a persistent
// session writes its own subscription, not the whole set again (issue 9,
// item 10): 5,000 SUBSCRIBEs on one session cost about the same bytes each.
func TestManySubscriptionsWriteWhatChanged(t *testing.T) {
	const subs = 5000
	// Above the default MaxSubscriptionsPerClient (1000) and
	// MaxSubscriptionBytesPerClient (2,172 such filters): this is about
	// what each SUBSCRIBE writes, not the limits.
	n := newNode(t, broker.Options{MaxSubscriptionsPerClient: subs, MaxSubscriptionBytesPerClient: -1}, bolt.Options{Sync: bolt.SyncBatch})
	c, _ := brokertest.Connect(t, n.Addr, v5("many", true, 3600))
	var buf []byte
	written := func() uint64 { return n.store.Stats().BytesWritten }
	var firstHalf uint64
	for i := range subs {
		buf = (&packet.Subscribe{PacketID: uint16(i%60000 + 1), Subs: []packet.Subscription{{Filter: fmt.Appendf(nil, "plant/line/%d/+", i), QoS: 1}}}).Append(buf, packet.V5)
		if len(buf) > 16<<10 || i == subs-1 || i == subs/2-1 {
			c.Send(buf)
			buf = buf[:0]
		}
		if i == subs/2-1 {
			for range subs / 2 {
				c.Expect(packet.SUBACK, nil)
			}
			firstHalf = written()
		}
	}
	for range subs - subs/2 {
		c.Expect(packet.SUBACK, nil)
	}
	secondHalf := written() - firstHalf
	t.Logf("%d subscriptions: %d bytes written for the first half, %d for the second", subs, firstHalf, secondHalf)
	// Rewriting the whole set each time would make the second half cost
	// about three times the first.
	if secondHalf > 2*firstHalf {
		t.Errorf("the second half of the SUBSCRIBEs wrote %d bytes, the first %d: writes grow with the set", secondHalf, firstHalf)
	}
	c.Conn.Close()
	n.Restart()
	if s := n.srv().Stats().Subscriptions; s != subs {
		t.Fatalf("%d subscriptions after restart, want %d", s, subs)
	}
}

// farNode stands for another node of a cluster, as the cluster's glue and
// transport present it to the broker: it records what the broker hands to
// its ordinary subscribers, and can be down.
type farNode struct {
	mu     sync.Mutex
	up     bool
	silent bool     // available, but its answers are errors (frozen: a timeout)
	fading bool     // available once more, then down (dying as a message arrives)
	got    []string // payloads, with "+dup" for a redelivery
}

func (f *farNode) Forward(string, *broker.Message) {}
func (f *farNode) Deliver(_ broker.RemoteMember, m *broker.Message, done func(error)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.up || f.silent {
		done(errors.New("node down"))
		return
	}
	p := string(m.Payload)
	if m.Redelivery() {
		p += "+dup"
	}
	f.got = append(f.got, p)
	done(nil)
}
func (f *farNode) Available(string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	up := f.up
	if f.fading {
		f.up, f.fading = false, false
	}
	return up
}
func (f *farNode) Subscribed(string, string, byte) broker.Registration { return nil }
func (f *farNode) Unsubscribed(string, string) broker.Registration     { return nil }
func (f *farNode) Claim(context.Context, string, bool, *broker.Will) (string, error) {
	return "", nil
}
func (f *farNode) TakeWill(string, string) bool     { return true }
func (f *farNode) DropWill(string, string)          {}
func (f *farNode) Release(string)                   {}
func (f *farNode) Retain(*broker.Message, []string) {}
func (f *farNode) View() uint64                     { return 0 }
func (f *farNode) set(up bool)                      { f.mu.Lock(); f.up = up; f.mu.Unlock() }
func (f *farNode) received() []string               { f.mu.Lock(); defer f.mu.Unlock(); return slices.Clone(f.got) }

// TestForwardsAcrossRestart: QoS 1 messages for another node's ordinary
// subscribers, acknowledged while that node is down, are on disk when the
// publisher's node restarts, and reach the other node once it is back, in
// order and with DUP (it may have had them); once handed over they are
// not kept, and a further restart sends nothing again.
func TestForwardsAcrossRestart(t *testing.T) {
	far := &farNode{}
	n := newNode(t, broker.Options{Cluster: far}, bolt.Options{Sync: bolt.SyncBatch})
	n.srv().SetRemoteRoute("n2", "plain/#", true)
	pub, _ := brokertest.Connect(t, n.Addr, v5("pub", true, 0))
	for i := range 5 {
		pub.Publish(&packet.Publish{Topic: []byte("plain/t"), QoS: 1, PacketID: uint16(i + 1), Payload: fmt.Append(nil, i)})
		var a packet.Ack
		pub.Expect(packet.PUBACK, &a)
		if a.Reason != packet.Success {
			t.Fatalf("publish %d: %v", i, a.Reason)
		}
	}
	if q := n.srv().ForwardQueues(); len(q) != 1 || q[0].Node != "n2" || q[0].Queued != 5 {
		t.Fatalf("forward queues %+v, want 5 kept for n2", q)
	}
	n.Restart()
	n.srv().SetRemoteRoute("n2", "plain/#", true)
	far.set(true)
	brokertest.Eventually(t, 5*time.Second, "n2 has the 5 messages", func() bool { return len(far.received()) == 5 })
	if got, want := far.received(), []string{"0+dup", "1+dup", "2+dup", "3+dup", "4+dup"}; !slices.Equal(got, want) {
		t.Fatalf("n2 received %v, want %v", got, want)
	}
	brokertest.Eventually(t, 5*time.Second, "nothing kept", func() bool {
		q := n.srv().ForwardQueues()
		return len(q) == 1 && q[0].Queued == 0 && q[0].Handed == 5
	})
	n.Restart()
	for _, q := range n.srv().ForwardQueues() {
		if q.Queued != 0 {
			t.Fatalf("after a second restart %d messages are kept for %s: handed messages stayed on disk", q.Queued, q.Node)
		}
	}
}

// TestForwardsUnansweredAreWritten: while the other node is available
// its messages wait in memory for its answer, the publisher's PUBACK with
// them; when the answer is an error (it froze, a timeout), they are
// written, and acknowledged once on disk, so that they survive a restart
// of this node and reach the other one, with DUP, when it answers again.
func TestForwardsUnansweredAreWritten(t *testing.T) {
	far := &farNode{up: true, silent: true}
	n := newNode(t, broker.Options{Cluster: far}, bolt.Options{Sync: bolt.SyncBatch})
	n.srv().SetRemoteRoute("n2", "plain/#", true)
	pub, _ := brokertest.Connect(t, n.Addr, v5("pub", true, 0))
	for i := range 3 {
		pub.Publish(&packet.Publish{Topic: []byte("plain/t"), QoS: 1, PacketID: uint16(i + 1), Payload: fmt.Append(nil, i)})
		var a packet.Ack
		pub.Expect(packet.PUBACK, &a)
		if a.Reason != packet.Success {
			t.Fatalf("publish %d: %v", i, a.Reason)
		}
	}
	n.Restart()
	n.srv().SetRemoteRoute("n2", "plain/#", true)
	far.mu.Lock()
	far.silent = false
	far.mu.Unlock()
	brokertest.Eventually(t, 5*time.Second, "n2 has the 3 messages", func() bool { return len(far.received()) == 3 })
	if got, want := far.received(), []string{"0+dup", "1+dup", "2+dup"}; !slices.Equal(got, want) {
		t.Fatalf("n2 received %v, want %v", got, want)
	}
}

// TestForwardsNodeGoneBeforeSending: the other node is available when a
// message arrives (its PUBACK then waits for the node's answer) and gone
// before the outbox sends it: the message is written and acknowledged at
// once, not when the node is back (fault-suite seed 9: a PUBACK held 6.8 s,
// the whole of a node's restart).
func TestForwardsNodeGoneBeforeSending(t *testing.T) {
	far := &farNode{up: true, fading: true}
	n := newNode(t, broker.Options{Cluster: far}, bolt.Options{Sync: bolt.SyncBatch})
	n.srv().SetRemoteRoute("n2", "plain/#", true)
	pub, _ := brokertest.Connect(t, n.Addr, v5("pub", true, 0))
	pub.Publish(&packet.Publish{Topic: []byte("plain/t"), QoS: 1, PacketID: 1, Payload: []byte("0")})
	var a packet.Ack
	pub.Expect(packet.PUBACK, &a) // before: no PUBACK while n2 is down
	if a.Reason != packet.Success {
		t.Fatalf("PUBACK %v", a.Reason)
	}
	if q := n.srv().ForwardQueues(); len(q) != 1 || q[0].Queued != 1 {
		t.Fatalf("forward queues %+v, want the message kept for n2", q)
	}
	far.set(true)
	brokertest.Eventually(t, 5*time.Second, "n2 has it", func() bool { return len(far.received()) == 1 })
}

// TestForwardsBounded: past cluster.forwards.max_bytes the oldest messages
// kept for a node that is away are dropped and counted; the newest reach
// it when it is back.
func TestForwardsBounded(t *testing.T) {
	far := &farNode{}
	n := newNode(t, broker.Options{Cluster: far, Forwards: broker.ForwardOptions{MaxBytes: 1000}}, bolt.Options{Sync: bolt.SyncBatch})
	n.srv().SetRemoteRoute("n2", "plain/#", true)
	pub, _ := brokertest.Connect(t, n.Addr, v5("pub", true, 0))
	payload := make([]byte, 193) // 200 bytes with the topic
	for i := range 10 {
		payload[0] = byte('0' + i)
		pub.Publish(&packet.Publish{Topic: []byte("plain/t"), QoS: 1, PacketID: uint16(i + 1), Payload: payload})
		pub.Expect(packet.PUBACK, nil)
	}
	q := n.srv().ForwardQueues()
	if len(q) != 1 || q[0].Queued != 5 || q[0].Dropped != 5 || q[0].Bytes != 1000 {
		t.Fatalf("forward queues %+v, want 5 kept (1000 bytes) and 5 dropped", q)
	}
	far.set(true)
	brokertest.Eventually(t, 5*time.Second, "n2 has the 5 newest", func() bool { return len(far.received()) == 5 })
	for i, p := range far.received() {
		if p[0] != byte('5'+i) {
			t.Fatalf("n2 received message %c as its %d-th, want %c", p[0], i, '5'+i)
		}
	}
}

// TestQueuedAtACrashGoesWithDUP: a message queued for a client that was
// connected when the process died may have been sent just before, its
// record's "sent" not yet committed: after the restart it goes with DUP.
// One queued for a client that was away goes without.
func TestQueuedAtACrashGoesWithDUP(t *testing.T) {
	path := filepath.Join(t.TempDir(), "linemq.db")
	st, err := bolt.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range []struct {
		id    string
		since time.Time // the record's Disconnected: zero while connected
	}{{"connected", time.Time{}}, {"away", time.Now().Add(-time.Minute)}} {
		if err := st.SaveSession(&broker.SessionRecord{ClientID: c.id, Version: packet.V5, ExpiryInterval: 300, Disconnected: c.since}); err != nil {
			t.Fatal(err)
		}
		if err := st.SaveSubscription(c.id, broker.SubscriptionRecord{Filter: "t/#", QoS: 1}); err != nil {
			t.Fatal(err)
		}
		m := broker.NewMessage("t/1", []byte(c.id), 1, false)
		if err := st.SaveMessage(c.id, &broker.MessageRecord{Seq: 1, MessageID: uint64(i + 1), Message: m, QoS: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	n := brokertest.Start(t, broker.Options{}, func() (broker.Store, func() error) {
		st, err := bolt.Open(path, nil)
		if err != nil {
			t.Fatal(err)
		}
		return st, st.Close
	})
	for _, c := range []struct {
		id  string
		dup bool
	}{{"connected", true}, {"away", false}} {
		cl, ack := brokertest.Connect(t, n.Addr, v5(c.id, false, 300))
		if !ack.SessionPresent {
			t.Fatalf("%s: session not restored", c.id)
		}
		var p packet.Publish
		cl.Expect(packet.PUBLISH, &p)
		if string(p.Payload) != c.id || p.Dup != c.dup {
			t.Errorf("%s: got %q with DUP %v, want DUP %v", c.id, p.Payload, p.Dup, c.dup)
		}
	}
}

// TestUncleanStopMarked: a file Close left says so at the next Open; one
// whose process died after writing (its image copied while it ran) does
// not, and a restart on it sends every queued message with DUP, the
// session's client away or not: the process may have sent them just
// before, the records of their sending (or of the client's connection) not
// yet committed.
func TestUncleanStopMarked(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "linemq.db")
	st, err := bolt.Open(path, &bolt.Options{Sync: bolt.SyncAlways})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SaveSession(&broker.SessionRecord{ClientID: "away", Version: packet.V5, ExpiryInterval: 300, Disconnected: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := st.SaveSubscription("away", broker.SubscriptionRecord{Filter: "t/#", QoS: 1}); err != nil {
		t.Fatal(err)
	}
	if err := st.SaveMessage("away", &broker.MessageRecord{Seq: 1, MessageID: 1, Message: broker.NewMessage("t/1", []byte("queued"), 1, false), QoS: 1}); err != nil {
		t.Fatal(err)
	}
	if err := st.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The file as a SIGKILL now would leave it: committed, never closed.
	image, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	crashed, restarted := filepath.Join(dir, "crashed.db"), filepath.Join(dir, "restarted.db")
	for _, p := range []string{crashed, restarted} {
		if err := os.WriteFile(p, image, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		path    string
		unclean bool
	}{{path, false}, {crashed, true}} {
		st, err := bolt.Open(c.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		snap, err := st.Load(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if snap.Unclean != c.unclean {
			t.Errorf("%s: Unclean %v, want %v", filepath.Base(c.path), snap.Unclean, c.unclean)
		}
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
	}

	n := brokertest.Start(t, broker.Options{}, func() (broker.Store, func() error) {
		st, err := bolt.Open(restarted, nil)
		if err != nil {
			t.Fatal(err)
		}
		return st, st.Close
	})
	cl, _ := brokertest.Connect(t, n.Addr, v5("away", false, 300))
	var p packet.Publish
	cl.Expect(packet.PUBLISH, &p)
	if string(p.Payload) != "queued" || !p.Dup {
		t.Errorf("after the crash: %q with DUP %v, want \"queued\" with DUP", p.Payload, p.Dup)
	}
}

// TestBatchCommitsWhenPublishersWait: with storage.sync: batch and an
// interval of an hour, a QoS 1 publish to a persistent subscriber is still
// acknowledged at once: the publisher waits for it and sends nothing more,
// so the broker asks the store to commit (broker.Committer) instead of
// waiting out the interval. And the message is on disk when it is.
func TestBatchCommitsWhenPublishersWait(t *testing.T) {
	n := newNode(t, broker.Options{}, bolt.Options{Sync: bolt.SyncBatch, BatchInterval: time.Hour})
	sub, _ := brokertest.Connect(t, n.Addr, v5("sub", true, 3600))
	sub.Subscribe(&packet.Subscribe{Subs: []packet.Subscription{{Filter: []byte("r/#"), QoS: 1}}})
	sub.Send((&packet.Disconnect{}).Append(nil, packet.V5))
	sub.ExpectClosed()
	pub, _ := brokertest.Connect(t, n.Addr, v5("pub", true, 0))
	for i := uint16(1); i <= 3; i++ {
		pub.Publish(&packet.Publish{Topic: []byte("r/1"), QoS: 1, PacketID: i, Payload: []byte("kept")})
		var ack packet.Ack
		pub.Expect(packet.PUBACK, &ack) // within the Expect bound, not the hour
		if ack.PacketID != i || ack.Reason != packet.Success {
			t.Fatalf("PUBACK %d: %+v", i, ack)
		}
	}
	// Committed before the last PUBACK (Load would commit first: the
	// store's own figures tell).
	if st := n.store.Stats(); st.Commits == 0 || st.PendingOps != 0 {
		t.Fatalf("store %+v: want the messages committed, nothing pending", st)
	}
	snap, err := n.store.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := len(snap.Messages["sub"]); got != 3 {
		t.Fatalf("stored %d messages for sub, want 3", got)
	}
}
