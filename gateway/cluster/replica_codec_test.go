package cluster

import (
	"bytes"
	"reflect"
	"testing"
	"time"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/packet"
)

// replicaOps is one op of each kind, with every field set that the kind
// carries.
func replicaOps() []replicaOp {
	body := &broker.Message{Topic: "line/1/temp", Payload: []byte("21.5"), QoS: 1, Created: time.Unix(0, 1_700_000_000_000_000_000)}
	will := &broker.Message{Topic: "will/edge", Payload: []byte("dead"), QoS: 1, Created: time.Unix(0, 1_700_000_000_000_000_001)}
	return []replicaOp{
		{kind: opResyncBegin},
		{kind: opDeleteSession, client: "edge-7"},
		{kind: opKeep, client: "edge-8"},
		{kind: opSaveSession, client: "edge-7", session: &broker.SessionRecord{ClientID: "edge-7", Version: packet.V5,
			ExpiryInterval: 3600, Disconnected: time.Unix(0, 1_700_000_001_000_000_000),
			Will: &broker.WillRecord{Message: will, Delay: 5, Expiry: 60, HasExpiry: true}}},
		{kind: opSaveSession, client: "hist", session: &broker.SessionRecord{ClientID: "hist", Version: packet.V311, ExpiryInterval: 0xFFFFFFFF}},
		{kind: opSaveSub, client: "edge-7", sub: broker.SubscriptionRecord{Filter: "$share/g/line/#", QoS: 2, NoLocal: true,
			RetainAsPublished: true, RetainHandling: 2, SubscriptionID: 42}},
		{kind: opDeleteSub, client: "edge-7", filter: "old/#"},
		{kind: opSaveMsg, client: "edge-7", msg: &broker.MessageRecord{Seq: 9, MessageID: 77, Message: body, QoS: 1,
			Retain: true, PacketID: 12, Sent: true, Released: true, GroupName: "g", GroupFilter: "line/#", SubIDs: []uint32{42, 7}}},
		// The same body for another session travels once.
		{kind: opSaveMsg, client: "hist", msg: &broker.MessageRecord{Seq: 1, MessageID: 77, Message: body, QoS: 1}},
		{kind: opSaveMsg, client: "hist", msg: &broker.MessageRecord{Seq: 2, Message: body, QoS: 0}},
		{kind: opDeleteMsg, client: "edge-7", seq: 8},
		{kind: opInbound, client: "edge-7", pid: 65535, pending: true},
		{kind: opInbound, client: "edge-7", pid: 3},
		{kind: opResyncEnd},
	}
}

func TestReplicaBatchRoundTrip(t *testing.T) {
	ops := replicaOps()
	var enc batchEncoder
	enc.reset(7, 3)
	for i := range ops {
		enc.add(&ops[i])
	}
	bt, err := decodeBatch(enc.buf)
	if err != nil {
		t.Fatal(err)
	}
	if bt.run != 7 || bt.seq != 3 {
		t.Errorf("header: run %d seq %d, want 7 3", bt.run, bt.seq)
	}
	if len(bt.ops) != len(ops) {
		t.Fatalf("%d ops decoded, want %d", len(bt.ops), len(ops))
	}
	for i := range ops {
		want, got := ops[i], bt.ops[i]
		if want.msg != nil {
			if !sameMessage(want.msg.Message, got.msg.Message) {
				t.Errorf("op %d: body %+v, want %+v", i, got.msg.Message, want.msg.Message)
			}
			w, g := *want.msg, *got.msg
			w.Message, g.Message = nil, nil
			if !reflect.DeepEqual(w, g) {
				t.Errorf("op %d: message record %+v, want %+v", i, g, w)
			}
			want.msg, got.msg = nil, nil
		}
		if want.session != nil {
			if w, g := want.session.Will, got.session.Will; (w == nil) != (g == nil) ||
				w != nil && (!sameMessage(w.Message, g.Message) || w.Delay != g.Delay || w.Expiry != g.Expiry || w.HasExpiry != g.HasExpiry) {
				t.Errorf("op %d: will %+v, want %+v", i, g, w)
			}
			w, g := *want.session, *got.session
			w.Will, g.Will = nil, nil
			if !w.Disconnected.Equal(g.Disconnected) {
				t.Errorf("op %d: disconnected %v, want %v", i, g.Disconnected, w.Disconnected)
			}
			w.Disconnected, g.Disconnected = time.Time{}, time.Time{}
			if !reflect.DeepEqual(w, g) {
				t.Errorf("op %d: session %+v, want %+v", i, g, w)
			}
			want.session, got.session = nil, nil
		}
		if !reflect.DeepEqual(want, got) {
			t.Errorf("op %d: %+v, want %+v", i, got, want)
		}
	}
	// The shared body went once.
	if n := bytes.Count(enc.buf, []byte("21.5")); n != 2 {
		t.Errorf("the body is in the batch %d times, want 2 (once shared by id 77, once for the record without an id)", n)
	}
}

func sameMessage(a, b *broker.Message) bool {
	return a.Topic == b.Topic && bytes.Equal(a.Payload, b.Payload) && a.QoS == b.QoS && a.Created.Equal(b.Created)
}

func TestReplicaBatchMalformed(t *testing.T) {
	ops := replicaOps()
	var enc batchEncoder
	enc.reset(1, 1)
	for i := range ops {
		enc.add(&ops[i])
	}
	good := enc.buf
	// Every cut short of the end leaves an op half written, but for
	// the cuts that fall between ops.
	bounds := map[int]bool{}
	enc.reset(1, 1)
	bounds[len(enc.buf)] = true
	for i := range ops {
		enc.add(&ops[i])
		bounds[len(enc.buf)] = true
	}
	for n := 0; n < len(good); n++ {
		_, err := decodeBatch(good[:n])
		if bounds[n] && err != nil {
			t.Errorf("cut at an op boundary (%d bytes): %v", n, err)
		}
		if !bounds[n] && err == nil {
			t.Errorf("cut inside an op (%d bytes of %d) decoded", n, len(good))
		}
	}
	cases := map[string][]byte{
		"empty":           nil,
		"format 2":        {2, 0, 0},
		"unknown kind":    {replicaFormat, 1, 1, 99, 0},
		"body never sent": append([]byte{replicaFormat, 1, 1, opSaveMsg, 1, 'c', 1, 5, 1, 0, 0, 0, 0, 0, 0, 0}, 0),
		"huge sub ids":    {replicaFormat, 1, 1, opSaveMsg, 1, 'c', 1, 0, 1, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f},
	}
	for name, b := range cases {
		if _, err := decodeBatch(b); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
}

// FuzzReplicaBatch: no bytes make the decoder panic or allocate without
// bound, and what it accepts encodes back to a batch it accepts alike.
func FuzzReplicaBatch(f *testing.F) {
	ops := replicaOps()
	var enc batchEncoder
	enc.reset(1, 1)
	for i := range ops {
		enc.add(&ops[i])
		f.Add(bytes.Clone(enc.buf))
	}
	f.Add([]byte{replicaFormat, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		bt, err := decodeBatch(b)
		if err != nil {
			return
		}
		var e batchEncoder
		e.reset(bt.run, bt.seq)
		for i := range bt.ops {
			e.add(&bt.ops[i])
		}
		again, err := decodeBatch(e.buf)
		if err != nil {
			t.Fatalf("a decoded batch encodes to one that does not decode: %v", err)
		}
		if len(again.ops) != len(bt.ops) {
			t.Fatalf("%d ops, then %d", len(bt.ops), len(again.ops))
		}
	})
}

// TestRendezvous: every node computes the same replicas, spread over the
// peers, and a peer's departure moves only the sessions it held.
func TestRendezvous(t *testing.T) {
	r := &replicator{count: 1, peers: []string{"gw1", "gw2", "gw4"}}
	before := map[string]string{}
	per := map[string]int{}
	for i := range 3000 {
		id := "client-" + string(rune('a'+i%26)) + string(rune('0'+i%10)) + string(rune(i))
		ts := r.targetsLocked(id, nil)
		if len(ts) != 1 {
			t.Fatalf("%d replicas, want 1", len(ts))
		}
		before[id] = ts[0]
		per[ts[0]]++
	}
	for p, n := range per {
		if n < 800 || n > 1200 {
			t.Errorf("%s holds %d of 3000 sessions; the hashing does not spread", p, n)
		}
	}
	r.peers = []string{"gw1", "gw4"}
	for id, was := range before {
		now := r.targetsLocked(id, nil)[0]
		if was != "gw2" && now != was {
			t.Fatalf("%s moved from %s to %s though %s is still there", id, was, now, was)
		}
	}
	r.count = 2
	if ts := r.targetsLocked("x", nil); len(ts) != 2 || ts[0] == ts[1] {
		t.Errorf("two replicas: %v", ts)
	}
	r.count = 3
	if ts := r.targetsLocked("x", nil); len(ts) != 2 {
		t.Errorf("three replicas wanted of two peers: %v", ts)
	}
}
