// Package storetest is the behavioural suite every broker.Store passes.
// An implementation's tests call Run with a function that opens a fresh,
// empty store:
//
//	func TestStore(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) broker.Store {
//			s, err := bolt.Open(filepath.Join(t.TempDir(), "linemq.db"), nil)
//			if err != nil {
//				t.Fatal(err)
//			}
//			t.Cleanup(func() { s.Close() })
//			return s
//		})
//	}
//
// The suite checks the contract written on broker.Store and its records:
// what is saved is loaded back equal, saves replace, deletes remove (a
// session with its messages and inbound ids), a retained message with an
// empty payload clears its topic, messages come back in Seq order, Sync
// succeeds after writes, and concurrent writers (run it with -race) lose
// nothing. It does not restart the store: durability across a restart is
// the implementation's own test.
package storetest

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/packet"
)

// Run runs the suite, each case on a store made by open.
func Run(t *testing.T, open func(t *testing.T) broker.Store) {
	cases := []struct {
		name string
		f    func(t *testing.T, s broker.Store)
	}{
		{"Empty", testEmpty},
		{"Session", testSession},
		{"SessionReplace", testSessionReplace},
		{"Messages", testMessages},
		{"MessageReplace", testMessageReplace},
		{"MessageOrder", testMessageOrder},
		{"Inbound", testInbound},
		{"DeleteSession", testDeleteSession},
		{"DeleteSessionThenReuse", testDeleteSessionThenReuse},
		{"Retained", testRetained},
		{"SaveDeleteCancel", testSaveDeleteCancel},
		{"Sync", testSync},
		{"ConcurrentWriters", testConcurrent},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.f(t, open(t)) })
	}
}

// Session returns a session record with every field set, for tests.
func Session(id string) *broker.SessionRecord {
	will := broker.NewMessage("wills/"+id, []byte("gone"), 1, true)
	will.ContentType = []byte("text/plain")
	return &broker.SessionRecord{
		ClientID:       id,
		Version:        packet.V5,
		ExpiryInterval: 3600,
		Disconnected:   time.Unix(1700000000, 123456789),
		Subscriptions: []broker.SubscriptionRecord{
			{Filter: "$share/g/sensors/+", QoS: 1, SubscriptionID: 7},
			{Filter: "cmd/" + id + "/#", QoS: 2, NoLocal: true, RetainAsPublished: true, RetainHandling: 2},
		},
		Will: &broker.WillRecord{Message: will, Delay: 30, Expiry: 600, HasExpiry: true},
	}
}

// Message returns a message record for tests, with a payload of n bytes.
func Message(seq uint64, n int) *broker.MessageRecord {
	m := broker.NewMessage(fmt.Sprintf("sensors/%d", seq), bytes.Repeat([]byte{byte(seq)}, n), 1, false)
	return &broker.MessageRecord{Seq: seq, Message: m, QoS: 1, PacketID: uint16(seq), Sent: seq%2 == 0, SubIDs: []uint32{1, 268435455}}
}

func load(t *testing.T, s broker.Store) *broker.Snapshot {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Sync(ctx); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	snap, err := s.Load(ctx)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if snap == nil {
		t.Fatal("Load returned a nil snapshot")
	}
	return snap
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func testEmpty(t *testing.T, s broker.Store) {
	snap := load(t, s)
	if len(snap.Sessions)+len(snap.Messages)+len(snap.Inbound)+len(snap.Retained) != 0 {
		t.Fatalf("new store not empty: %s", Describe(snap))
	}
}

func testSession(t *testing.T, s broker.Store) {
	a, b := Session("a"), Session("b")
	b.Will = nil
	b.Disconnected = time.Time{} // connected
	b.Subscriptions = nil
	b.Version = packet.V311
	must(t, s.SaveSession(a))
	must(t, s.SaveSession(b))
	snap := load(t, s)
	if len(snap.Sessions) != 2 {
		t.Fatalf("got %d sessions, want 2", len(snap.Sessions))
	}
	for _, want := range []*broker.SessionRecord{a, b} {
		got := findSession(snap, want.ClientID)
		if got == nil {
			t.Fatalf("session %q not loaded", want.ClientID)
		}
		if err := EqualSession(got, want); err != nil {
			t.Errorf("session %q: %v", want.ClientID, err)
		}
	}
}

func testSessionReplace(t *testing.T, s broker.Store) {
	a := Session("a")
	must(t, s.SaveSession(a))
	load(t, s)
	a2 := Session("a")
	a2.Subscriptions = a2.Subscriptions[:1]
	a2.Will = nil
	a2.ExpiryInterval = 0xFFFFFFFF
	must(t, s.SaveSession(a2))
	snap := load(t, s)
	if len(snap.Sessions) != 1 {
		t.Fatalf("got %d sessions, want 1", len(snap.Sessions))
	}
	if err := EqualSession(snap.Sessions[0], a2); err != nil {
		t.Fatal(err)
	}
}

func testMessages(t *testing.T, s broker.Store) {
	m1, m2 := Message(1, 10), Message(2, 0)
	m2.Message.Payload = []byte{} // an empty payload is a valid queued message
	m2.GroupName, m2.GroupFilter = "g", "sensors/+"
	m2.QoS, m2.Released, m2.Retain = 2, true, true
	m2.SubIDs = nil
	must(t, s.SaveMessage("a", m1))
	must(t, s.SaveMessage("a", m2))
	must(t, s.SaveMessage("b", Message(1, 5)))
	snap := load(t, s)
	if len(snap.Messages["a"]) != 2 || len(snap.Messages["b"]) != 1 {
		t.Fatalf("loaded %s", Describe(snap))
	}
	for i, want := range []*broker.MessageRecord{m1, m2} {
		if err := EqualMessage(snap.Messages["a"][i], want); err != nil {
			t.Errorf("message %d: %v", want.Seq, err)
		}
	}
	must(t, s.DeleteMessage("a", 1))
	must(t, s.DeleteMessage("a", 99)) // not stored: no error
	snap = load(t, s)
	if len(snap.Messages["a"]) != 1 || snap.Messages["a"][0].Seq != 2 {
		t.Fatalf("after delete: %s", Describe(snap))
	}
}

func testMessageReplace(t *testing.T, s broker.Store) {
	m := Message(5, 20)
	must(t, s.SaveMessage("a", m))
	load(t, s)
	m2 := Message(5, 20)
	m2.Sent, m2.PacketID = true, 77
	must(t, s.SaveMessage("a", m2))
	snap := load(t, s)
	if len(snap.Messages["a"]) != 1 {
		t.Fatalf("replace: %s", Describe(snap))
	}
	if err := EqualMessage(snap.Messages["a"][0], m2); err != nil {
		t.Fatal(err)
	}
}

func testMessageOrder(t *testing.T, s broker.Store) {
	// Orders that break a little-endian or decimal-string key.
	seqs := []uint64{256, 1, 1 << 40, 255, 2, 65536, 10, 9, 1<<64 - 1}
	for _, q := range seqs {
		must(t, s.SaveMessage("a", Message(q, 1)))
	}
	snap := load(t, s)
	var got []uint64
	for _, m := range snap.Messages["a"] {
		got = append(got, m.Seq)
	}
	want := slices.Clone(seqs)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("Seq order: got %v, want %v", got, want)
	}
}

func testInbound(t *testing.T, s broker.Store) {
	for _, pid := range []uint16{300, 1, 65535, 2} {
		must(t, s.SetInbound("a", pid, true))
	}
	must(t, s.SetInbound("a", 2, false))
	must(t, s.SetInbound("a", 9, false)) // never set: no error
	must(t, s.SetInbound("b", 1, true))
	snap := load(t, s)
	if got := snap.Inbound["a"]; !slices.Equal(sorted(got), []uint16{1, 300, 65535}) {
		t.Fatalf("inbound a = %v", got)
	}
	if got := snap.Inbound["b"]; !slices.Equal(got, []uint16{1}) {
		t.Fatalf("inbound b = %v", got)
	}
}

func testDeleteSession(t *testing.T, s broker.Store) {
	for _, id := range []string{"a", "b"} {
		must(t, s.SaveSession(Session(id)))
		must(t, s.SaveMessage(id, Message(1, 10)))
		must(t, s.SaveMessage(id, Message(2, 10)))
		must(t, s.SetInbound(id, 7, true))
	}
	load(t, s)
	must(t, s.DeleteSession("a"))
	must(t, s.DeleteSession("never-stored"))
	snap := load(t, s)
	if findSession(snap, "a") != nil || len(snap.Messages["a"]) != 0 || len(snap.Inbound["a"]) != 0 {
		t.Fatalf("deleted session a still has state: %s", Describe(snap))
	}
	if findSession(snap, "b") == nil || len(snap.Messages["b"]) != 2 || len(snap.Inbound["b"]) != 1 {
		t.Fatalf("session b lost state: %s", Describe(snap))
	}
}

// testDeleteSessionThenReuse: a client id deleted and saved again, without
// a Sync between, must come back with only the new state.
func testDeleteSessionThenReuse(t *testing.T, s broker.Store) {
	must(t, s.SaveSession(Session("a")))
	must(t, s.SaveMessage("a", Message(1, 10)))
	must(t, s.SetInbound("a", 1, true))
	load(t, s)
	must(t, s.SaveMessage("a", Message(2, 10)))
	must(t, s.DeleteSession("a"))
	fresh := Session("a")
	fresh.Subscriptions = nil
	must(t, s.SaveSession(fresh))
	must(t, s.SaveMessage("a", Message(3, 10)))
	snap := load(t, s)
	got := findSession(snap, "a")
	if got == nil || len(got.Subscriptions) != 0 {
		t.Fatalf("session a after reuse: %+v", got)
	}
	if ms := snap.Messages["a"]; len(ms) != 1 || ms[0].Seq != 3 {
		t.Fatalf("messages after reuse: %s", Describe(snap))
	}
	if len(snap.Inbound["a"]) != 0 {
		t.Fatalf("inbound after reuse: %v", snap.Inbound["a"])
	}
}

func testRetained(t *testing.T, s broker.Store) {
	a := broker.NewMessage("status/a", []byte("on"), 1, true)
	b := broker.NewMessage("status/b", []byte("off"), 0, true)
	must(t, s.SaveRetained(a))
	must(t, s.SaveRetained(b))
	snap := load(t, s)
	if err := equalRetained(snap.Retained, a, b); err != nil {
		t.Fatal(err)
	}
	a2 := broker.NewMessage("status/a", []byte("off"), 2, true)
	must(t, s.SaveRetained(a2))
	must(t, s.SaveRetained(broker.NewMessage("status/b", nil, 0, true)))      // clear
	must(t, s.SaveRetained(broker.NewMessage("status/c", nil, 0, true)))      // clear of nothing
	must(t, s.SaveRetained(broker.NewMessage("status/d", []byte{}, 0, true))) // clear of nothing
	snap = load(t, s)
	if err := equalRetained(snap.Retained, a2); err != nil {
		t.Fatal(err)
	}
}

// testSaveDeleteCancel: a message saved and deleted before any Sync is
// gone, and so is a retained message set and cleared.
func testSaveDeleteCancel(t *testing.T, s broker.Store) {
	must(t, s.SaveMessage("a", Message(1, 10)))
	must(t, s.DeleteMessage("a", 1))
	must(t, s.SaveRetained(broker.NewMessage("t", []byte("x"), 0, true)))
	must(t, s.SaveRetained(broker.NewMessage("t", nil, 0, true)))
	must(t, s.SetInbound("a", 1, true))
	must(t, s.SetInbound("a", 1, false))
	snap := load(t, s)
	if len(snap.Messages["a"])+len(snap.Retained)+len(snap.Inbound["a"]) != 0 {
		t.Fatalf("cancelled changes were stored: %s", Describe(snap))
	}
}

func testSync(t *testing.T, s broker.Store) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	must(t, s.Sync(ctx)) // nothing written
	for i := range uint64(50) {
		must(t, s.SaveMessage("a", Message(i, 100)))
		if i%10 == 0 {
			must(t, s.Sync(ctx))
		}
	}
	must(t, s.Sync(ctx))
	must(t, s.Sync(ctx)) // twice in a row
	if n := len(load(t, s).Messages["a"]); n != 50 {
		t.Fatalf("loaded %d messages, want 50", n)
	}
}

// testConcurrent runs writers for distinct clients side by side, as the
// broker does (one session's writes are ordered under its lock, sessions
// run in parallel), with Syncs and retained writes in between.
func testConcurrent(t *testing.T, s broker.Store) {
	const writers, perWriter = 8, 200
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			id := fmt.Sprintf("client-%d", w)
			if err := s.SaveSession(Session(id)); err != nil {
				errs <- err
				return
			}
			for i := range uint64(perWriter) {
				if err := s.SaveMessage(id, Message(i, 50)); err != nil {
					errs <- err
					return
				}
				// Acknowledge every other message soon after.
				if i%2 == 1 {
					if err := s.DeleteMessage(id, i-1); err != nil {
						errs <- err
						return
					}
				}
				if err := s.SetInbound(id, uint16(i%16), i%3 != 0); err != nil {
					errs <- err
					return
				}
				if i%25 == 0 {
					if err := s.SaveRetained(broker.NewMessage(id+"/status", []byte{byte(i)}, 0, true)); err != nil {
						errs <- err
						return
					}
					if err := s.Sync(ctx); err != nil {
						errs <- err
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	snap := load(t, s)
	if len(snap.Sessions) != writers || len(snap.Retained) != writers {
		t.Fatalf("%d sessions, %d retained; want %d each", len(snap.Sessions), len(snap.Retained), writers)
	}
	for w := range writers {
		id := fmt.Sprintf("client-%d", w)
		ms := snap.Messages[id]
		if len(ms) != perWriter/2 {
			t.Fatalf("%s: %d messages, want %d", id, len(ms), perWriter/2)
		}
		for i, m := range ms {
			if m.Seq != uint64(2*i+1) {
				t.Fatalf("%s: message %d has Seq %d, want %d", id, i, m.Seq, 2*i+1)
			}
		}
		var want []uint16
		for pid := range uint64(16) {
			// The last write to pid was at the largest i < perWriter with i%16 == pid.
			last := pid + (perWriter-1-pid)/16*16
			if last%3 != 0 {
				want = append(want, uint16(pid))
			}
		}
		if got := sorted(snap.Inbound[id]); !slices.Equal(got, want) {
			t.Fatalf("%s: inbound %v, want %v", id, got, want)
		}
	}
}

func findSession(snap *broker.Snapshot, id string) *broker.SessionRecord {
	for _, s := range snap.Sessions {
		if s.ClientID == id {
			return s
		}
	}
	return nil
}

func sorted(ids []uint16) []uint16 {
	ids = slices.Clone(ids)
	slices.Sort(ids)
	return ids
}

// EqualSession reports how got differs from want, or nil. Times compare by
// instant, messages by their binary form, and nil and empty lists are equal.
func EqualSession(got, want *broker.SessionRecord) error {
	switch {
	case got.ClientID != want.ClientID:
		return fmt.Errorf("ClientID %q, want %q", got.ClientID, want.ClientID)
	case got.Version != want.Version:
		return fmt.Errorf("Version %v, want %v", got.Version, want.Version)
	case got.ExpiryInterval != want.ExpiryInterval:
		return fmt.Errorf("ExpiryInterval %d, want %d", got.ExpiryInterval, want.ExpiryInterval)
	case !got.Disconnected.Equal(want.Disconnected):
		return fmt.Errorf("Disconnected %v, want %v", got.Disconnected, want.Disconnected)
	case !slices.Equal(got.Subscriptions, want.Subscriptions):
		return fmt.Errorf("Subscriptions %+v, want %+v", got.Subscriptions, want.Subscriptions)
	case (got.Will == nil) != (want.Will == nil):
		return fmt.Errorf("Will %+v, want %+v", got.Will, want.Will)
	}
	if got.Will != nil {
		g, w := *got.Will, *want.Will
		if g.Delay != w.Delay || g.Expiry != w.Expiry || g.HasExpiry != w.HasExpiry {
			return fmt.Errorf("Will %+v, want %+v", g, w)
		}
		if err := equalMsg(g.Message, w.Message); err != nil {
			return fmt.Errorf("Will message: %v", err)
		}
	}
	return nil
}

// EqualMessage reports how got differs from want, or nil.
func EqualMessage(got, want *broker.MessageRecord) error {
	g, w := *got, *want
	g.Message, w.Message = nil, nil
	if len(g.SubIDs) == 0 && len(w.SubIDs) == 0 {
		g.SubIDs, w.SubIDs = nil, nil
	}
	if !slices.Equal(g.SubIDs, w.SubIDs) {
		return fmt.Errorf("SubIDs %v, want %v", g.SubIDs, w.SubIDs)
	}
	g.SubIDs, w.SubIDs = nil, nil
	if fmt.Sprintf("%+v", g) != fmt.Sprintf("%+v", w) {
		return fmt.Errorf("record %+v, want %+v", g, w)
	}
	return equalMsg(got.Message, want.Message)
}

func equalMsg(got, want *broker.Message) error {
	if got == nil || want == nil {
		if got != want {
			return fmt.Errorf("message %v, want %v", got, want)
		}
		return nil
	}
	if got.Topic != want.Topic || !bytes.Equal(got.AppendBinary(nil), want.AppendBinary(nil)) {
		return fmt.Errorf("message %q (%d-byte payload, created %v) differs from %q (%d-byte payload, created %v)",
			got.Topic, len(got.Payload), got.Created, want.Topic, len(want.Payload), want.Created)
	}
	return nil
}

func equalRetained(got []*broker.Message, want ...*broker.Message) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d retained messages, want %d", len(got), len(want))
	}
	for _, w := range want {
		i := slices.IndexFunc(got, func(m *broker.Message) bool { return m.Topic == w.Topic })
		if i < 0 {
			return fmt.Errorf("retained %q missing", w.Topic)
		}
		if err := equalMsg(got[i], w); err != nil {
			return fmt.Errorf("retained %q: %v", w.Topic, err)
		}
	}
	return nil
}

// Describe summarises a snapshot for failure messages.
func Describe(snap *broker.Snapshot) string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%d sessions [", len(snap.Sessions))
	for _, s := range snap.Sessions {
		fmt.Fprintf(&b, " %q", s.ClientID)
	}
	b.WriteString(" ], messages {")
	for _, id := range sortedKeys(snap.Messages) {
		fmt.Fprintf(&b, " %q:[", id)
		for _, m := range snap.Messages[id] {
			fmt.Fprintf(&b, " %d", m.Seq)
		}
		b.WriteString(" ]")
	}
	fmt.Fprintf(&b, " }, inbound %v, %d retained", snap.Inbound, len(snap.Retained))
	return b.String()
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
