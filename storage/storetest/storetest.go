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
// session with its subscriptions, messages and inbound ids), a retained
// message with an empty payload clears its topic, messages come back in
// Seq order, the records of one MessageID come back sharing one
// *broker.Message (the body of a fan-out is held once), a save and a
// delete made before a Sync cancel out, Sync succeeds after writes, and
// concurrent writers (run it with -race) lose nothing.
//
// A Store that also implements SubscriptionStore keeps each subscription as
// a record of its own; the suite then writes subscriptions through it, and
// checks that SaveSession leaves them alone.
//
// Run does not restart the store. RunRestart does, for an implementation
// that can close a store and open its data again: shared bodies and
// subscriptions survive, and so do cancellations.
package storetest

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/packet"
)

// SubscriptionStore is a Store that keeps each subscription as a record of
// its own, so that a SUBSCRIBE writes only what it changed. Its SaveSession
// stores the session's own fields and ignores SessionRecord.Subscriptions;
// Load returns a session's subscriptions sorted by filter, and DeleteSession
// removes them.
type SubscriptionStore interface {
	// SaveSubscription records one subscription of a session, replacing
	// the one with the same filter.
	SaveSubscription(clientID string, sub broker.SubscriptionRecord) error
	// DeleteSubscription forgets a session's subscription to filter; a
	// filter never stored is not an error.
	DeleteSubscription(clientID, filter string) error
}

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
		{"SharedMessages", testShared},
		{"SharedMessagesCancel", testSharedCancel},
		{"SharedMessagesDeleteSession", testSharedDeleteSession},
		{"Subscriptions", testSubscriptions},
		{"SubscriptionsCancel", testSubscriptionsCancel},
		{"Sync", testSync},
		{"ConcurrentWriters", testConcurrent},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.f(t, open(t)) })
	}
}

// RunRestart runs the cases that restart a store: open makes a fresh,
// empty store, and reopen closes s and returns a store on the same data.
func RunRestart(t *testing.T, open func(t *testing.T) broker.Store, reopen func(t *testing.T, s broker.Store) broker.Store) {
	cases := []struct {
		name string
		f    func(t *testing.T, s broker.Store, reopen func(broker.Store) broker.Store)
	}{
		{"Everything", testRestartEverything},
		{"Cancelled", testRestartCancelled},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.f(t, open(t), func(s broker.Store) broker.Store { return reopen(t, s) })
		})
	}
}

// saveSession stores rec as the broker does: the session, then each of its
// subscriptions where the store keeps them apart.
func saveSession(t *testing.T, s broker.Store, rec *broker.SessionRecord) {
	t.Helper()
	must(t, s.SaveSession(rec))
	if ss, ok := s.(SubscriptionStore); ok {
		for _, sub := range rec.Subscriptions {
			must(t, ss.SaveSubscription(rec.ClientID, sub))
		}
	}
}

// subscriptionStore returns s as a SubscriptionStore, or skips the test.
func subscriptionStore(t *testing.T, s broker.Store) SubscriptionStore {
	t.Helper()
	ss, ok := s.(SubscriptionStore)
	if !ok {
		t.Skip("the store keeps subscriptions in the session record")
	}
	return ss
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
	saveSession(t, s, a)
	saveSession(t, s, b)
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
	saveSession(t, s, a)
	load(t, s)
	a2 := Session("a")
	a2.Subscriptions = a2.Subscriptions[:1]
	a2.Will = nil
	a2.ExpiryInterval = 0xFFFFFFFF
	saveSession(t, s, a2)
	if ss, ok := s.(SubscriptionStore); ok {
		must(t, ss.DeleteSubscription("a", a.Subscriptions[1].Filter))
	}
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
		saveSession(t, s, Session(id))
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
	saveSession(t, s, Session("a"))
	must(t, s.SaveMessage("a", Message(1, 10)))
	must(t, s.SetInbound("a", 1, true))
	load(t, s)
	must(t, s.SaveMessage("a", Message(2, 10)))
	must(t, s.DeleteSession("a"))
	fresh := Session("a")
	fresh.Subscriptions = nil
	saveSession(t, s, fresh)
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

// Shared returns a record of m for tests, sharing its body under id.
func Shared(seq, id uint64, m *broker.Message) *broker.MessageRecord {
	return &broker.MessageRecord{Seq: seq, MessageID: id, Message: m, QoS: 1, SubIDs: []uint32{9}}
}

// testShared: the records of one MessageID, in many sessions, come back
// equal and sharing one *Message; deleting them one by one keeps the body
// until the last.
func testShared(t *testing.T, s broker.Store) {
	fan := broker.NewMessage("fan/out", bytes.Repeat([]byte("x"), 2000), 1, false)
	fan.ContentType = []byte("text/plain")
	other := broker.NewMessage("fan/other", []byte("o"), 2, false)
	clients := []string{"a", "b", "c", "d"}
	for i, id := range clients {
		must(t, s.SaveMessage(id, Shared(10, 1, fan)))
		must(t, s.SaveMessage(id, Message(11, 10))) // inline, between shared ones
		r := Shared(12, 2, other)
		r.QoS, r.Sent, r.PacketID = 2, i%2 == 0, uint16(i+1) // per-delivery fields differ
		must(t, s.SaveMessage(id, r))
	}
	snap := load(t, s)
	for i, id := range clients {
		ms := snap.Messages[id]
		if len(ms) != 3 {
			t.Fatalf("%s: %s", id, Describe(snap))
		}
		if err := EqualMessage(ms[0], Shared(10, 1, fan)); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		r := Shared(12, 2, other)
		r.QoS, r.Sent, r.PacketID = 2, i%2 == 0, uint16(i+1)
		if err := EqualMessage(ms[2], r); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		if ms[0].Message != snap.Messages["a"][0].Message || ms[2].Message != snap.Messages["a"][2].Message {
			t.Fatalf("%s: the records of one MessageID do not share one *Message", id)
		}
	}
	for _, id := range clients[:3] {
		must(t, s.DeleteMessage(id, 10))
	}
	snap = load(t, s)
	if ms := snap.Messages["d"]; len(ms) != 3 || EqualMessage(ms[0], Shared(10, 1, fan)) != nil {
		t.Fatalf("the last record lost its body: %s", Describe(snap))
	}
	must(t, s.DeleteMessage("d", 10))
	// With no record left, the id may come back as another message.
	again := broker.NewMessage("fan/again", []byte("new body"), 1, false)
	must(t, s.SaveMessage("e", Shared(1, 1, again)))
	snap = load(t, s)
	if len(snap.Messages["d"]) != 2 || EqualMessage(snap.Messages["e"][0], Shared(1, 1, again)) != nil {
		t.Fatalf("after the last delete and a reuse: %s", Describe(snap))
	}
}

// testSharedCancel: shared records saved and deleted before a Sync cancel
// out without disturbing the records of the same id that stay, and an id
// whose records all went in one batch can be reused in it.
func testSharedCancel(t *testing.T, s broker.Store) {
	m := broker.NewMessage("t", []byte("kept"), 1, false)
	must(t, s.SaveMessage("a", Shared(1, 5, m)))
	must(t, s.SaveMessage("b", Shared(1, 5, m)))
	must(t, s.DeleteMessage("a", 1))
	must(t, s.SaveMessage("c", Shared(1, 6, m)))
	must(t, s.DeleteMessage("c", 1))
	snap := load(t, s)
	if len(snap.Messages["a"])+len(snap.Messages["c"]) != 0 || len(snap.Messages["b"]) != 1 ||
		EqualMessage(snap.Messages["b"][0], Shared(1, 5, m)) != nil {
		t.Fatalf("after cancelling: %s", Describe(snap))
	}
	// One batch: one more record of 5 saved and deleted, b's deleted, and
	// 5 given to another message.
	must(t, s.SaveMessage("d", Shared(1, 5, m)))
	must(t, s.DeleteMessage("d", 1))
	must(t, s.DeleteMessage("b", 1))
	reused := broker.NewMessage("t", []byte("reused"), 1, false)
	must(t, s.SaveMessage("e", Shared(1, 5, reused)))
	snap = load(t, s)
	if len(snap.Messages["b"])+len(snap.Messages["d"]) != 0 || len(snap.Messages["e"]) != 1 ||
		EqualMessage(snap.Messages["e"][0], Shared(1, 5, reused)) != nil {
		t.Fatalf("after reuse: %s", Describe(snap))
	}
}

// testSharedDeleteSession: DeleteSession releases its shared records; the
// other sessions keep theirs, and the client id starts afresh.
func testSharedDeleteSession(t *testing.T, s broker.Store) {
	m := broker.NewMessage("t", []byte("body"), 1, false)
	for _, id := range []string{"a", "b"} {
		saveSession(t, s, Session(id))
		must(t, s.SaveMessage(id, Shared(1, 3, m)))
		must(t, s.SaveMessage(id, Shared(2, 4, m)))
	}
	load(t, s)
	must(t, s.DeleteSession("a"))
	must(t, s.SaveSession(&broker.SessionRecord{ClientID: "a", Version: packet.V5}))
	must(t, s.SaveMessage("a", Shared(7, 4, m)))
	snap := load(t, s)
	if len(snap.Messages["a"]) != 1 || snap.Messages["a"][0].Seq != 7 || len(snap.Messages["b"]) != 2 {
		t.Fatalf("after DeleteSession: %s", Describe(snap))
	}
	if snap.Messages["a"][0].Message != snap.Messages["b"][1].Message {
		t.Fatal("the records of one MessageID do not share one *Message")
	}
	must(t, s.DeleteSession("b"))
	snap = load(t, s)
	if len(snap.Messages["b"]) != 0 || EqualMessage(snap.Messages["a"][0], Shared(7, 4, m)) != nil {
		t.Fatalf("after the second DeleteSession: %s", Describe(snap))
	}
}

// testSubscriptions: subscriptions are saved, replaced and deleted one at a
// time, come back sorted by filter, are not touched by SaveSession, and go
// with DeleteSession.
func testSubscriptions(t *testing.T, s broker.Store) {
	ss := subscriptionStore(t, s)
	rec := Session("a")
	rec.Subscriptions = nil
	must(t, s.SaveSession(rec))
	subs := []broker.SubscriptionRecord{
		{Filter: "z/last", QoS: 0},
		{Filter: "$share/g/s/+", QoS: 1, SubscriptionID: 268435455},
		{Filter: "a/#", QoS: 2, NoLocal: true, RetainAsPublished: true, RetainHandling: 2},
		{Filter: "é/✓", QoS: 1, RetainHandling: 1},
	}
	for _, sub := range subs {
		must(t, ss.SaveSubscription("a", sub))
	}
	must(t, ss.SaveSubscription("b", subs[0])) // another session, same filter
	must(t, s.SaveSession(Session("b")))
	snap := load(t, s)
	want := slices.Clone(subs)
	slices.SortFunc(want, func(a, b broker.SubscriptionRecord) int { return strings.Compare(a.Filter, b.Filter) })
	if got := findSession(snap, "a"); got == nil || !slices.Equal(got.Subscriptions, want) {
		t.Fatalf("subscriptions %+v, want %+v", got, want)
	}

	// A SUBSCRIBE replacing one, an UNSUBSCRIBE, one of something never
	// subscribed, and a SaveSession with a list of its own (ignored).
	changed := subs[2]
	changed.QoS, changed.NoLocal, changed.SubscriptionID = 0, false, 5
	must(t, ss.SaveSubscription("a", changed))
	must(t, ss.DeleteSubscription("a", "z/last"))
	must(t, ss.DeleteSubscription("a", "never"))
	rec.ExpiryInterval = 10
	rec.Subscriptions = []broker.SubscriptionRecord{{Filter: "ignored"}}
	must(t, s.SaveSession(rec))
	snap = load(t, s)
	want = []broker.SubscriptionRecord{subs[1], changed, subs[3]}
	got := findSession(snap, "a")
	if got == nil || got.ExpiryInterval != 10 || !slices.Equal(got.Subscriptions, want) {
		t.Fatalf("subscriptions %+v, want %+v", got, want)
	}
	if got := findSession(snap, "b"); got == nil || !slices.Equal(got.Subscriptions, subs[:1]) {
		t.Fatalf("session b: %+v", got)
	}

	must(t, s.DeleteSession("a"))
	rec.Subscriptions = nil
	must(t, s.SaveSession(rec))
	snap = load(t, s)
	if got := findSession(snap, "a"); got == nil || len(got.Subscriptions) != 0 {
		t.Fatalf("subscriptions after DeleteSession: %+v", got)
	}
}

// testSubscriptionsCancel: a subscription saved and deleted before a Sync
// is gone, deleted and saved again is there, and one saved before a
// DeleteSession in the same batch goes with it.
func testSubscriptionsCancel(t *testing.T, s broker.Store) {
	ss := subscriptionStore(t, s)
	must(t, s.SaveSession(&broker.SessionRecord{ClientID: "a", Version: packet.V5, ExpiryInterval: 60}))
	must(t, ss.SaveSubscription("a", broker.SubscriptionRecord{Filter: "stays", QoS: 1}))
	load(t, s)
	must(t, ss.SaveSubscription("a", broker.SubscriptionRecord{Filter: "brief", QoS: 1}))
	must(t, ss.DeleteSubscription("a", "brief"))
	must(t, ss.DeleteSubscription("a", "stays"))
	must(t, ss.SaveSubscription("a", broker.SubscriptionRecord{Filter: "stays", QoS: 2}))
	must(t, s.SaveSession(&broker.SessionRecord{ClientID: "b", Version: packet.V5, ExpiryInterval: 60}))
	must(t, ss.SaveSubscription("b", broker.SubscriptionRecord{Filter: "old"}))
	must(t, s.DeleteSession("b"))
	must(t, s.SaveSession(&broker.SessionRecord{ClientID: "b", Version: packet.V5, ExpiryInterval: 60}))
	must(t, ss.SaveSubscription("b", broker.SubscriptionRecord{Filter: "new"}))
	snap := load(t, s)
	if got := findSession(snap, "a"); got == nil || !slices.Equal(got.Subscriptions, []broker.SubscriptionRecord{{Filter: "stays", QoS: 2}}) {
		t.Fatalf("session a: %+v", got)
	}
	if got := findSession(snap, "b"); got == nil || !slices.Equal(got.Subscriptions, []broker.SubscriptionRecord{{Filter: "new"}}) {
		t.Fatalf("session b: %+v", got)
	}
}

// testRestartEverything: a session with subscriptions, shared and inline
// messages, inbound ids and retained messages survive a restart, the
// shared records sharing one *Message.
func testRestartEverything(t *testing.T, s broker.Store, reopen func(broker.Store) broker.Store) {
	fan := broker.NewMessage("fan/out", bytes.Repeat([]byte{7}, 5000), 1, false)
	sessions := map[string]*broker.SessionRecord{}
	inline := map[string]*broker.MessageRecord{}
	for _, id := range []string{"a", "b", "c"} {
		sessions[id], inline[id] = Session(id), Message(2, 30)
		saveSession(t, s, sessions[id])
		must(t, s.SaveMessage(id, Shared(1, 40, fan)))
		must(t, s.SaveMessage(id, inline[id]))
	}
	must(t, s.DeleteMessage("c", 1))
	must(t, s.SetInbound("a", 9, true))
	ret := broker.NewMessage("status", []byte("up"), 1, true)
	must(t, s.SaveRetained(ret))
	load(t, s)
	s = reopen(s)
	snap := load(t, s)
	if len(snap.Sessions) != 3 || len(snap.Inbound["a"]) != 1 || equalRetained(snap.Retained, ret) != nil {
		t.Fatalf("after restart: %s", Describe(snap))
	}
	for _, id := range []string{"a", "b", "c"} {
		if err := EqualSession(findSession(snap, id), sessions[id]); err != nil {
			t.Fatalf("session %s: %v", id, err)
		}
	}
	for _, id := range []string{"a", "b"} {
		ms := snap.Messages[id]
		if len(ms) != 2 || EqualMessage(ms[0], Shared(1, 40, fan)) != nil || EqualMessage(ms[1], inline[id]) != nil {
			t.Fatalf("messages of %s: %s", id, Describe(snap))
		}
	}
	if snap.Messages["a"][0].Message != snap.Messages["b"][0].Message {
		t.Fatal("after a restart, the records of one MessageID do not share one *Message")
	}
	if len(snap.Messages["c"]) != 1 {
		t.Fatalf("messages of c: %s", Describe(snap))
	}
	// The restored file goes on counting: the last records of 40 go.
	must(t, s.DeleteMessage("a", 1))
	must(t, s.DeleteSession("b"))
	s = reopen(s)
	snap = load(t, s)
	if len(snap.Messages["a"]) != 1 || len(snap.Messages["b"]) != 0 {
		t.Fatalf("after the second restart: %s", Describe(snap))
	}
}

// testRestartCancelled: what a batch cancelled is not there after a
// restart, even when the store is closed with the batch pending.
func testRestartCancelled(t *testing.T, s broker.Store, reopen func(broker.Store) broker.Store) {
	m := broker.NewMessage("t", []byte("x"), 1, false)
	a := Session("a")
	saveSession(t, s, a)
	must(t, s.SaveMessage("a", Shared(1, 8, m)))
	load(t, s)
	must(t, s.SaveMessage("b", Shared(1, 8, m)))
	must(t, s.DeleteMessage("b", 1))
	must(t, s.SaveMessage("a", Shared(2, 9, m)))
	must(t, s.DeleteMessage("a", 2))
	if ss, ok := s.(SubscriptionStore); ok {
		must(t, ss.SaveSubscription("a", broker.SubscriptionRecord{Filter: "brief"}))
		must(t, ss.DeleteSubscription("a", "brief"))
	}
	s = reopen(s) // no Sync: closing commits the batch
	snap := load(t, s)
	if len(snap.Messages["a"]) != 1 || len(snap.Messages["b"]) != 0 {
		t.Fatalf("after restart: %s", Describe(snap))
	}
	if err := EqualSession(findSession(snap, "a"), a); err != nil {
		t.Fatal(err)
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
// run in parallel), with Syncs and retained writes in between, and every
// writer queueing the same shared messages, as a fan-out does.
func testConcurrent(t *testing.T, s broker.Store) {
	const writers, perWriter = 8, 200
	const sharedSeq = 1 << 20 // Seq of the shared records: after the others
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// fan[k] is published at i = 25k to every writer's session, and
	// acknowledged 12 messages later when k is odd.
	fan := make([]*broker.Message, perWriter/25)
	for k := range fan {
		fan[k] = broker.NewMessage(fmt.Sprintf("fan/%d", k), bytes.Repeat([]byte{byte(k)}, 100), 1, false)
	}
	ss, perSub := s.(SubscriptionStore)
	subFilter := func(i uint64) string { return fmt.Sprintf("f/%d", i%20) }
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			id := fmt.Sprintf("client-%d", w)
			try := func(err error) bool {
				if err != nil {
					errs <- err
				}
				return err == nil
			}
			if !try(s.SaveSession(Session(id))) {
				return
			}
			for i := range uint64(perWriter) {
				if !try(s.SaveMessage(id, Message(i, 50))) {
					return
				}
				// Acknowledge every other message soon after.
				if i%2 == 1 && !try(s.DeleteMessage(id, i-1)) {
					return
				}
				if !try(s.SetInbound(id, uint16(i%16), i%3 != 0)) {
					return
				}
				if k := i / 25; i%25 == 0 && !try(s.SaveMessage(id, Shared(sharedSeq+k, 1000+k, fan[k]))) {
					return
				}
				if k := i / 25; i%25 == 12 && k%2 == 1 && !try(s.DeleteMessage(id, sharedSeq+k)) {
					return
				}
				if perSub {
					if !try(ss.SaveSubscription(id, broker.SubscriptionRecord{Filter: subFilter(i), QoS: byte(i % 3)})) {
						return
					}
					if i%7 == 0 && !try(ss.DeleteSubscription(id, subFilter(i+3))) {
						return
					}
				}
				if i%25 == 0 {
					if !try(s.SaveRetained(broker.NewMessage(id+"/status", []byte{byte(i)}, 0, true))) {
						return
					}
					if !try(s.Sync(ctx)) {
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
	// What the subscriptions should be, replaying one writer's changes.
	wantSubs := map[string]byte{}
	for i := range uint64(perWriter) {
		wantSubs[subFilter(i)] = byte(i % 3)
		if i%7 == 0 {
			delete(wantSubs, subFilter(i+3))
		}
	}
	snap := load(t, s)
	if len(snap.Sessions) != writers || len(snap.Retained) != writers {
		t.Fatalf("%d sessions, %d retained; want %d each", len(snap.Sessions), len(snap.Retained), writers)
	}
	first := snap.Messages["client-0"]
	for w := range writers {
		id := fmt.Sprintf("client-%d", w)
		ms := snap.Messages[id]
		if len(ms) != perWriter/2+len(fan)/2 {
			t.Fatalf("%s: %d messages, want %d", id, len(ms), perWriter/2+len(fan)/2)
		}
		for i, m := range ms[:perWriter/2] {
			if m.Seq != uint64(2*i+1) {
				t.Fatalf("%s: message %d has Seq %d, want %d", id, i, m.Seq, 2*i+1)
			}
		}
		for j, m := range ms[perWriter/2:] {
			k := uint64(2 * j) // the odd ones were acknowledged
			if err := EqualMessage(m, Shared(sharedSeq+k, 1000+k, fan[k])); err != nil {
				t.Fatalf("%s: shared message %d: %v", id, k, err)
			}
			if m.Message != first[perWriter/2+j].Message {
				t.Fatalf("%s: shared message %d does not share its *Message", id, k)
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
		if perSub {
			got := findSession(snap, id).Subscriptions
			if len(got) != len(wantSubs) {
				t.Fatalf("%s: %d subscriptions, want %d", id, len(got), len(wantSubs))
			}
			for _, sub := range got {
				if q, ok := wantSubs[sub.Filter]; !ok || q != sub.QoS {
					t.Fatalf("%s: subscription %+v, want QoS %d (present %v)", id, sub, q, ok)
				}
			}
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
