package registry

import (
	"fmt"
	"slices"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// kv makes a key-value as etcd would return it.
func kv(key, value string, create, mod int64) *mvccpb.KeyValue {
	return &mvccpb.KeyValue{Key: []byte(key), Value: []byte(value), CreateRevision: create, ModRevision: mod}
}

func clients(ms []Member) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Node+":"+m.Client)
	}
	return out
}

func kinds(evs []Event) []string {
	var out []string
	for _, e := range evs {
		what := e.Client
		if what == "" {
			what = e.Filter
		}
		out = append(out, fmt.Sprintf("%v %s:%s", e.Kind, e.Node, what))
	}
	return out
}

func TestMirrorMemberOrder(t *testing.T) {
	ks := keyspace{prefix: "/p/"}
	m := newMirror(ks)
	v := `{"qos":1}`
	// Created at revisions 5, 3, 3, 7: ties go by node, then client.
	m.put(kv(ks.member("n2", "g", "f", "d"), v, 5, 5), 5, false, nil)
	m.put(kv(ks.member("n1", "g", "f", "b"), v, 3, 3), 3, false, nil)
	m.put(kv(ks.member("n1", "g", "f", "a"), v, 3, 3), 3, false, nil)
	m.put(kv(ks.member("n3", "g", "f", "e"), v, 7, 7), 7, false, nil)
	m.put(kv(ks.member("n0", "g", "f", "z"), v, 3, 3), 3, false, nil)
	want := []string{"n0:z", "n1:a", "n1:b", "n2:d", "n3:e"}
	if got := clients(m.members(GroupKey{"g", "f"})); !slices.Equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
	if got := clients(m.membersLocalFirst(GroupKey{"g", "f"}, "n2")); !slices.Equal(got, []string{"n2:d", "n0:z", "n1:a", "n1:b", "n3:e"}) {
		t.Fatalf("local first %v", got)
	}
	// A new QoS is an update in place; the same value again is nothing.
	evs := m.put(kv(ks.member("n1", "g", "f", "a"), `{"qos":2}`, 3, 9), 9, false, nil)
	if got := kinds(evs); !slices.Equal(got, []string{"MemberUpdated n1:a"}) {
		t.Fatalf("QoS change: %v", got)
	}
	if evs := m.put(kv(ks.member("n1", "g", "f", "a"), `{"qos":2}`, 3, 10), 10, false, nil); len(evs) != 0 {
		t.Fatalf("rewrite with the same value reported %v", kinds(evs))
	}
	if got := clients(m.members(GroupKey{"g", "f"})); !slices.Equal(got, want) {
		t.Fatalf("order after updates %v, want %v", got, want)
	}
}

func TestMirrorReplaceReportsOnlyTheDifference(t *testing.T) {
	ks := keyspace{prefix: "/p/"}
	m := newMirror(ks)
	v := `{"qos":1}`
	node := func(n string, c, mod int64) *mvccpb.KeyValue { return kv(ks.node(n), `{"addr":"x"}`, c, mod) }
	mem := func(n, c string, create, mod int64) *mvccpb.KeyValue {
		return kv(ks.member(n, "g", "f", c), v, create, mod)
	}
	first := []*mvccpb.KeyValue{node("n1", 1, 1), node("n2", 2, 2),
		mem("n1", "a", 3, 3), mem("n1", "b", 4, 4), mem("n2", "c", 5, 5), mem("n2", "d", 6, 6),
		kv(ks.route("n2", "x/#"), "", 6, 6)}
	if evs := m.replace(first, 6, false); len(evs) != 7 {
		t.Fatalf("first load reported %d events, want one per key: %v", len(evs), kinds(evs))
	}
	// While we were away: b left, d was removed and added again (a new
	// create revision), e joined, n2's route went, n1 re-registered under
	// a new lease (same value, new mod revision).
	second := []*mvccpb.KeyValue{node("n1", 1, 9), node("n2", 2, 2),
		mem("n1", "a", 3, 3), mem("n2", "c", 5, 5), mem("n2", "d", 8, 8), mem("n2", "e", 10, 10)}
	evs := m.replace(second, 11, true)
	want := []string{ // sorted
		"MemberJoined n2:d",
		"MemberJoined n2:e",
		"MemberLeft n1:b",
		"MemberLeft n2:d",
		"RouteRemoved n2:x/#",
	}
	got := kinds(evs)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("resync events\n got %v\nwant %v", got, want)
	}
	for _, e := range evs {
		if !e.Resync || e.Revision != 11 {
			t.Errorf("event %v: Resync %v Revision %d, want true 11", e.Kind, e.Resync, e.Revision)
		}
	}
	if got := clients(m.members(GroupKey{"g", "f"})); !slices.Equal(got, []string{"n1:a", "n2:c", "n2:d", "n2:e"}) {
		t.Fatalf("order after resync %v", got)
	}
	if m.rev != 11 {
		t.Fatalf("revision %d, want 11", m.rev)
	}
}

func TestMirrorSessions(t *testing.T) {
	ks := keyspace{prefix: "/p/"}
	m := newMirror(ks)
	k := ks.session("c/1")
	evs := m.put(kv(k, `{"node":"n1","epoch":1,"seq":1}`, 2, 2), 2, false, nil)
	if len(evs) != 1 || evs[0].Kind != SessionOwned || evs[0].Owner.Node != "n1" || evs[0].Prev.Node != "" {
		t.Fatalf("first claim: %+v", evs)
	}
	// The same claim moved to a new lease is not a change of owner.
	if evs := m.put(kv(k, `{"node":"n1","epoch":1,"seq":1}`, 2, 5), 5, false, nil); len(evs) != 0 {
		t.Fatalf("rewrite reported %v", kinds(evs))
	}
	if o := m.sessions["c/1"]; o.Revision != 5 {
		t.Fatalf("owner revision %d, want 5", o.Revision)
	}
	evs = m.put(kv(k, `{"node":"n2","epoch":7,"seq":3}`, 2, 6), 6, false, nil)
	if len(evs) != 1 || evs[0].Owner.Node != "n2" || evs[0].Prev.Node != "n1" || evs[0].Prev.Revision != 5 {
		t.Fatalf("takeover: %+v", evs)
	}
	evs = m.del(k, 7, false, nil)
	if len(evs) != 1 || evs[0].Kind != SessionReleased || evs[0].Node != "n2" {
		t.Fatalf("release: %+v", evs)
	}
}
