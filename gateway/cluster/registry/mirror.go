package registry

import (
	"encoding/json"
	"slices"
	"sort"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// entry is one key of the copy as etcd last gave it, kept to diff a re-read
// against: same create revision and mod revision means nothing changed.
type entry struct {
	info   keyInfo
	create int64
	mod    int64
}

// mirror is the local copy of the whole prefix, with the indexes the views
// read. It is changed only by the watcher goroutine, under Registry.mu.
type mirror struct {
	keys     keyspace
	rev      int64
	entries  map[string]entry
	nodes    map[string]Node
	routes   map[string]map[string]struct{} // node -> filters
	groups   map[GroupKey][]Member          // in cluster order
	sessions map[string]Owner               // client -> owner
}

func newMirror(ks keyspace) *mirror {
	return &mirror{
		keys:     ks,
		entries:  map[string]entry{},
		nodes:    map[string]Node{},
		routes:   map[string]map[string]struct{}{},
		groups:   map[GroupKey][]Member{},
		sessions: map[string]Owner{},
	}
}

// put applies a key's new value and returns the events it causes (none for
// a rewrite that changes nothing a reader cares about, such as a key moved
// to a new lease).
func (m *mirror) put(kv *mvccpb.KeyValue, rev int64, resync bool, out []Event) []Event {
	key := string(kv.Key)
	info, ok := m.keys.parse(key)
	if !ok {
		return out
	}
	old, existed := m.entries[key]
	if existed && old.create != kv.CreateRevision {
		// Deleted and created again while we were not watching: to the
		// readers it left and came back (a member changes place).
		out = m.del(key, rev, resync, out)
		existed = false
	}
	m.entries[key] = entry{info: info, create: kv.CreateRevision, mod: kv.ModRevision}
	ev := Event{Revision: rev, Resync: resync, Node: info.node, Group: info.group, Filter: info.filter, Client: info.client}

	switch info.kind {
	case kindNode:
		var v nodeValue
		_ = json.Unmarshal(kv.Value, &v) // a bad value still registers the node
		n := Node{Name: info.node, Addr: v.Addr, Version: v.Version, Epoch: v.Epoch, Store: v.Store, CreateRevision: kv.CreateRevision}
		prev, had := m.nodes[info.node]
		m.nodes[info.node] = n
		ev.NodeInfo = n
		switch {
		case !had:
			ev.Kind = NodeJoined
		case prev != n:
			ev.Kind = NodeUpdated
		default:
			return out
		}
	case kindRoute:
		fs := m.routes[info.node]
		if fs == nil {
			fs = map[string]struct{}{}
			m.routes[info.node] = fs
		}
		if _, had := fs[info.filter]; had {
			return out
		}
		fs[info.filter] = struct{}{}
		ev.Kind = RouteAdded
	case kindMember:
		var v memberValue
		_ = json.Unmarshal(kv.Value, &v)
		mb := Member{Node: info.node, Group: info.group, Filter: info.filter, Client: info.client,
			QoS: v.QoS, Since: v.Since, CreateRevision: kv.CreateRevision}
		ev.Member = mb
		g := GroupKey{info.group, info.filter}
		list := m.groups[g]
		i := sort.Search(len(list), func(i int) bool { return !list[i].less(&mb) })
		if existed && i < len(list) && list[i].Node == mb.Node && list[i].Client == mb.Client {
			if list[i].QoS == mb.QoS && list[i].Since.Equal(mb.Since) {
				return out
			}
			qosChanged := list[i].QoS != mb.QoS
			list[i] = mb
			if !qosChanged {
				return out // re-registered with a new time only
			}
			ev.Kind = MemberUpdated
		} else {
			m.groups[g] = slices.Insert(list, i, mb)
			ev.Kind = MemberJoined
		}
	case kindSession:
		var v sessionValue
		_ = json.Unmarshal(kv.Value, &v)
		o := v.owner()
		o.Revision = kv.ModRevision
		prev, had := m.sessions[info.client]
		m.sessions[info.client] = o
		if had && prev.Node == o.Node && prev.Epoch == o.Epoch && prev.Seq == o.Seq {
			return out // the same claim, moved to a new lease
		}
		ev.Kind, ev.Node, ev.Owner = SessionOwned, o.Node, o
		if had {
			ev.Prev = prev
		}
	}
	return append(out, ev)
}

// del forgets a key and returns the event it causes.
func (m *mirror) del(key string, rev int64, resync bool, out []Event) []Event {
	old, ok := m.entries[key]
	if !ok {
		return out
	}
	delete(m.entries, key)
	info := old.info
	ev := Event{Revision: rev, Resync: resync, Node: info.node, Group: info.group, Filter: info.filter, Client: info.client}
	switch info.kind {
	case kindNode:
		ev.Kind, ev.NodeInfo = NodeLeft, m.nodes[info.node]
		delete(m.nodes, info.node)
	case kindRoute:
		fs := m.routes[info.node]
		delete(fs, info.filter)
		if len(fs) == 0 {
			delete(m.routes, info.node)
		}
		ev.Kind = RouteRemoved
	case kindMember:
		g := GroupKey{info.group, info.filter}
		list := m.groups[g]
		i := slices.IndexFunc(list, func(mb Member) bool { return mb.Node == info.node && mb.Client == info.client })
		if i < 0 {
			return out
		}
		ev.Kind, ev.Member = MemberLeft, list[i]
		if list = slices.Delete(list, i, i+1); len(list) == 0 {
			delete(m.groups, g)
		} else {
			m.groups[g] = list
		}
	case kindSession:
		ev.Kind, ev.Prev = SessionReleased, m.sessions[info.client]
		ev.Node = ev.Prev.Node
		delete(m.sessions, info.client)
	}
	return append(out, ev)
}

// replace diffs a full read against the copy and applies the difference:
// keys gone are deleted, keys new or recreated are put, keys whose mod
// revision moved are put again (which reports only a real change). Keys
// whose create and mod revisions are unchanged are left alone, so members
// keep their place.
func (m *mirror) replace(kvs []*mvccpb.KeyValue, rev int64, resync bool) []Event {
	var out []Event
	seen := make(map[string]struct{}, len(kvs))
	for _, kv := range kvs {
		seen[string(kv.Key)] = struct{}{}
	}
	// Deletions first, in key order, so a reader never sees a member
	// twice in a group while a re-read is applied.
	gone := make([]string, 0)
	for k := range m.entries {
		if _, ok := seen[k]; !ok {
			gone = append(gone, k)
		}
	}
	slices.Sort(gone)
	for _, k := range gone {
		out = m.del(k, rev, resync, out)
	}
	for _, kv := range kvs { // etcd returns them in key order
		if e, ok := m.entries[string(kv.Key)]; ok && e.create == kv.CreateRevision && e.mod == kv.ModRevision {
			continue
		}
		out = m.put(kv, rev, resync, out)
	}
	m.rev = rev
	return out
}

// The views below copy what they return: callers may keep and change it.

func (m *mirror) nodeList() []Node {
	out := make([]Node, 0, len(m.nodes))
	for _, n := range m.nodes {
		out = append(out, n)
	}
	slices.SortFunc(out, func(a, b Node) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func (m *mirror) routesOf(node string) []string {
	fs := m.routes[node]
	out := make([]string, 0, len(fs))
	for f := range fs {
		out = append(out, f)
	}
	slices.Sort(out)
	return out
}

func (m *mirror) routeNodes(filter string) []string {
	var out []string
	for n, fs := range m.routes {
		if _, ok := fs[filter]; ok {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

func (m *mirror) members(g GroupKey) []Member { return slices.Clone(m.groups[g]) }

func (m *mirror) membersLocalFirst(g GroupKey, self string) []Member {
	list := m.groups[g]
	out := make([]Member, 0, len(list))
	for _, mb := range list {
		if mb.Node == self {
			out = append(out, mb)
		}
	}
	for _, mb := range list {
		if mb.Node != self {
			out = append(out, mb)
		}
	}
	return out
}

func (m *mirror) groupKeys() []GroupKey {
	out := make([]GroupKey, 0, len(m.groups))
	for g := range m.groups {
		out = append(out, g)
	}
	slices.SortFunc(out, func(a, b GroupKey) int {
		if c := strings.Compare(a.Group, b.Group); c != 0 {
			return c
		}
		return strings.Compare(a.Filter, b.Filter)
	})
	return out
}

// sizes counts the copy's nodes, route keys, members and sessions.
func (m *mirror) sizes() (nodes, routes, members, sessions int) {
	for _, fs := range m.routes {
		routes += len(fs)
	}
	for _, list := range m.groups {
		members += len(list)
	}
	return len(m.nodes), routes, members, len(m.sessions)
}
