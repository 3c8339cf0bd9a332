package broker

import (
	"bytes"
	"cmp"
	"slices"
	"strings"
	"sync"
	"time"
)

// retainedStore holds the last retained message of each topic in a tree of
// topic levels, so that a new subscription costs what its filter matches
// rather than a scan of every retained topic: with half a million retained
// topics a scan took 45 ms per filter and held up retained publishes.
type retainedStore struct {
	mu    sync.RWMutex
	root  retainedNode
	n     int
	bytes int // retainedSize of every message held, for MaxRetainedBytes

	// lww is set in a cluster, where every node holds every retained
	// message and they must agree whatever order the copies arrive in:
	// the last writer wins, by the time the message was received, then
	// its publisher (newerRetained). tombs remembers the clears, so that
	// an older copy of a cleared message, from a node that was away,
	// does not bring it back.
	lww   bool
	tombs map[string]*Message
}

// maxTombstones bounds the clears remembered; past it a quarter of them
// are forgotten (a message cleared long ago could then come back from a
// node that was away all that time, which docs/cluster.md states).
const maxTombstones = 1 << 16

// setOutcome is what setWithin did.
type setOutcome uint8

const (
	kept  setOutcome = iota // stored, or cleared
	full                    // over MaxRetainedMessages or MaxRetainedBytes: nothing kept
	stale                   // older than what the topic holds (lww only): nothing kept
)

// newerRetained reports whether a is a later write of its topic than b:
// by receive time, then publisher, then payload, so that every node
// orders any two writes alike.
func newerRetained(a, b *Message) bool {
	if c := a.Created.Compare(b.Created); c != 0 {
		return c > 0
	}
	if a.Origin != b.Origin {
		return a.Origin > b.Origin
	}
	return bytes.Compare(a.Payload, b.Payload) > 0
}

// retainedNode is one topic level.
type retainedNode struct {
	children map[string]*retainedNode
	msg      *Message // the retained message of the topic ending here, or nil
}

// set stores m as its topic's retained message, or clears the topic's
// retained message when m has an empty payload [MQTT-3.3.1-6] [MQTT-3.3.1-7].
// It applies no limit: it restores what the Store kept.
func (r *retainedStore) set(m *Message) { r.setWithin(m, 0, 0) }

// setWithin is set within limits of maxN messages and maxBytes bytes (0:
// none). It keeps nothing when m would take the store over one of them
// (full; a message no larger than the one it replaces, and a clearing one,
// always fit), or, in a cluster, when the topic holds a later write
// (stale).
func (r *retainedStore) setWithin(m *Message, maxN, maxBytes int) setOutcome {
	r.mu.Lock()
	defer r.mu.Unlock()
	old := r.lookupLocked(m.Topic)
	if r.lww {
		cur := old
		if cur == nil {
			cur = r.tombs[m.Topic]
		}
		if cur != nil && !newerRetained(m, cur) {
			return stale
		}
	}
	if len(m.Payload) == 0 {
		r.clearLocked(m.Topic, nil)
		if r.lww {
			r.tombLocked(m)
		}
		return kept
	}
	size := retainedSize(m)
	if maxN > 0 || maxBytes > 0 {
		n, bytes := r.n+1, r.bytes+size
		if old != nil {
			n, bytes = r.n, bytes-retainedSize(old)
		}
		if (maxN > 0 && n > maxN && n > r.n) || (maxBytes > 0 && bytes > maxBytes && bytes > r.bytes) {
			return full
		}
	}
	if r.lww {
		delete(r.tombs, m.Topic)
	}
	n := &r.root
	for rest, more := m.Topic, true; more; {
		var level string
		level, rest, more = strings.Cut(rest, "/")
		child := n.children[level]
		if child == nil {
			if n.children == nil {
				n.children = make(map[string]*retainedNode)
			}
			child = &retainedNode{}
			n.children[level] = child
		}
		n = child
	}
	if n.msg == nil {
		r.n++
	} else {
		r.bytes -= retainedSize(n.msg)
	}
	r.bytes += size
	n.msg = m
	return kept
}

// tombLocked remembers a clear, keeping only what it needs to compare.
func (r *retainedStore) tombLocked(m *Message) {
	if r.tombs == nil {
		r.tombs = make(map[string]*Message)
	}
	if len(r.tombs) >= maxTombstones {
		forget := len(r.tombs) / 4
		for k := range r.tombs {
			if forget == 0 {
				break
			}
			delete(r.tombs, k)
			forget--
		}
	}
	r.tombs[m.Topic] = &Message{Topic: m.Topic, Payload: []byte{}, Retain: true, Created: m.Created, Origin: m.Origin}
}

// snapshot returns every live retained message and every clear
// remembered, for a node that joins or comes back.
func (r *retainedStore) snapshot(now time.Time) []*Message {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := r.root.appendAll(nil, now)
	for _, t := range r.tombs {
		out = append(out, t)
	}
	return out
}

// lookupLocked returns topic's retained message, or nil.
func (r *retainedStore) lookupLocked(topic string) *Message {
	n := &r.root
	for rest, more := topic, true; more; {
		var level string
		level, rest, more = strings.Cut(rest, "/")
		if n = n.children[level]; n == nil {
			return nil
		}
	}
	return n.msg
}

// retainedSize is what a retained message counts against MaxRetainedBytes:
// its topic, payload and properties.
func retainedSize(m *Message) int {
	n := len(m.Topic) + len(m.Payload) + len(m.ContentType) + len(m.ResponseTopic) + len(m.CorrelationData)
	for _, u := range m.User {
		n += len(u.Key) + len(u.Value)
	}
	return n
}

// clearLocked removes topic's retained message (only if it is still only,
// when only is not nil) and prunes the levels left empty.
func (r *retainedStore) clearLocked(topic string, only *Message) {
	path := make([]*retainedNode, 0, 8)
	levels := make([]string, 0, 8)
	n := &r.root
	for rest, more := topic, true; more; {
		var level string
		level, rest, more = strings.Cut(rest, "/")
		path = append(path, n)
		levels = append(levels, level)
		if n = n.children[level]; n == nil {
			return
		}
	}
	if n.msg == nil || (only != nil && n.msg != only) {
		return
	}
	r.bytes -= retainedSize(n.msg)
	n.msg = nil
	r.n--
	for i := len(path) - 1; i >= 0 && n.msg == nil && len(n.children) == 0; i-- {
		delete(path[i].children, levels[i])
		n = path[i]
	}
}

// RetainedMatching returns the retained messages whose topics match
// filter (a valid filter; wildcards do not reach '$' topics from the first
// level, as for a subscription), in the order they were received. It costs
// what the filter matches, not a scan of every retained topic.
func (srv *Server) RetainedMatching(filter string) []*Message {
	return srv.retained.match(filter, srv.clock.Now())
}

// match returns the retained messages whose topics match filter, leaving out
// the expired ones, in the order they were received: a subscriber gets a
// device's configuration before the later message that refers to it (a
// Sparkplug edge node's NBIRTH certificate before its devices' DBIRTH
// ones), not in the tree's arbitrary order.
func (r *retainedStore) match(filter string, now time.Time) []*Message {
	r.mu.RLock()
	var out []*Message
	out = r.root.match(filter, true, now, out)
	r.mu.RUnlock()
	// By the wall clock (a restored message has no monotonic reading to
	// compare with a live one's).
	slices.SortFunc(out, func(a, b *Message) int {
		return cmp.Or(cmp.Compare(a.Created.UnixNano(), b.Created.UnixNano()), strings.Compare(a.Topic, b.Topic))
	})
	return out
}

// match appends the messages below n matching the levels of filter; top is
// true at the first level, where wildcards do not match topics starting
// with '$' [MQTT-4.7.2-1].
func (n *retainedNode) match(filter string, top bool, now time.Time, out []*Message) []*Message {
	level, rest, more := strings.Cut(filter, "/")
	switch level {
	case "#":
		// "a/#" matches "a" too [MQTT-4.7.1-2]; at the top there is no "a".
		if !top {
			out = n.msg.appendLive(out, now)
		}
		for name, child := range n.children {
			if top && strings.HasPrefix(name, "$") {
				continue
			}
			out = child.appendAll(out, now)
		}
		return out
	case "+":
		for name, child := range n.children {
			if top && strings.HasPrefix(name, "$") {
				continue
			}
			out = child.matchRest(rest, more, now, out)
		}
		return out
	}
	if child := n.children[level]; child != nil {
		out = child.matchRest(rest, more, now, out)
	}
	return out
}

// matchRest continues a match at n with what is left of the filter.
func (n *retainedNode) matchRest(rest string, more bool, now time.Time, out []*Message) []*Message {
	if !more {
		return n.msg.appendLive(out, now)
	}
	return n.match(rest, false, now, out)
}

// appendAll appends every live message at n and below.
func (n *retainedNode) appendAll(out []*Message, now time.Time) []*Message {
	out = n.msg.appendLive(out, now)
	for _, child := range n.children {
		out = child.appendAll(out, now)
	}
	return out
}

// appendLive appends m unless it is nil or expired.
func (m *Message) appendLive(out []*Message, now time.Time) []*Message {
	if m == nil || m.expired(now) {
		return out
	}
	return append(out, m)
}

// len returns the number of retained messages.
func (r *retainedStore) len() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.n
}

// size returns the bytes the retained messages count against
// MaxRetainedBytes.
func (r *retainedStore) size() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.bytes
}

// retain records m as retained, and persists it when a Store is configured.
// It reports false when MaxRetainedMessages or MaxRetainedBytes leave no
// room for it: then nothing is kept or stored, and the caller routes m
// all the same (the publisher is told 0x97 if it can be).
func (srv *Server) retain(m *Message) bool { return srv.keepRetained(m) != full }

// keepRetained is retain, telling what became of m.
func (srv *Server) keepRetained(m *Message) setOutcome {
	// The stored copy is delivered later with RETAIN set, whatever the
	// subscription's options; keep the flag on it.
	out := srv.retained.setWithin(m, srv.opts.MaxRetainedMessages, srv.opts.MaxRetainedBytes)
	switch out {
	case full:
		srv.refused(limitRetained, "topic", m.Topic, "origin", m.Origin, "retained", srv.retained.len(),
			"max_retained_messages", srv.opts.MaxRetainedMessages, "max_retained_bytes", srv.opts.MaxRetainedBytes)
	case stale:
		// A later write of the topic (another node's) is already here:
		// the cluster agrees on that one. m is routed all the same.
		srv.stats.retainedStale.Add(1)
	default:
		if st := srv.opts.Store; st != nil {
			srv.storeErr("save retained", m.Topic, st.SaveRetained(m))
		}
	}
	return out
}

// removeExpired drops retained messages whose expiry has passed and returns them.
func (r *retainedStore) removeExpired(now time.Time) []*Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	var expired []*Message
	for _, m := range r.root.appendAll(nil, time.Time{}) {
		if m.expired(now) {
			expired = append(expired, m)
		}
	}
	for _, m := range expired {
		r.clearLocked(m.Topic, m)
	}
	return expired
}
