package bridge

import (
	"encoding/binary"
	"errors"
	"time"
)

// message is one forwarded message, as queued (encode/decode) and sent.
type message struct {
	at      time.Time // when it was queued
	topic   string    // the remote topic, already mapped
	retain  bool
	qos     byte
	user    [][2]string // user properties, the via marks included
	ctype   string      // content type
	payload []byte
}

// encode appends m's queue entry: enqueue time (8 bytes, Unix ns), flags,
// topic, content type, user properties, payload. About 20 bytes beyond the
// topic, properties and payload.
func (m *message) encode(b []byte) []byte {
	b = binary.BigEndian.AppendUint64(b, uint64(m.at.UnixNano()))
	var flags byte
	if m.retain {
		flags |= 1
	}
	b = append(b, flags)
	b = appendString(b, m.topic)
	b = appendString(b, m.ctype)
	b = binary.AppendUvarint(b, uint64(len(m.user)))
	for _, kv := range m.user {
		b = appendString(appendString(b, kv[0]), kv[1])
	}
	return append(b, m.payload...)
}

var errEntry = errors.New("bridge: malformed queue entry")

func decodeMessage(b []byte) (*message, error) {
	if len(b) < 9 {
		return nil, errEntry
	}
	m := &message{at: time.Unix(0, int64(binary.BigEndian.Uint64(b))), retain: b[8]&1 != 0, qos: 1}
	b = b[9:]
	var ok bool
	if m.topic, b, ok = readString(b); !ok {
		return nil, errEntry
	}
	if m.ctype, b, ok = readString(b); !ok {
		return nil, errEntry
	}
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)) {
		return nil, errEntry
	}
	b = b[k:]
	for range n {
		var kv [2]string
		if kv[0], b, ok = readString(b); !ok {
			return nil, errEntry
		}
		if kv[1], b, ok = readString(b); !ok {
			return nil, errEntry
		}
		m.user = append(m.user, kv)
	}
	m.payload = b
	return m, nil
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

func readString(b []byte) (string, []byte, bool) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)-k) {
		return "", nil, false
	}
	return string(b[k : k+int(n)]), b[k+int(n):], true
}

// entry is what the bridge keeps in memory of a queued message: its place,
// size and age; the message itself stays in the file until it is sent.
type entry struct {
	seq      uint64
	size     int
	at       time.Time
	topic    *topicQueue
	ready    bool // committed: QueueGet sees it, it may be sent
	inflight bool // being sent
	gone     bool // sent, dropped or expired
}

// topicQueue is one remote topic's queued entries, oldest first. Entries
// of one topic are sent one at a time, in order.
type topicQueue struct {
	name    string
	entries []*entry
	inRing  bool
}

// index orders the queue: every entry by Seq (for drop-oldest and age),
// and per topic (for sending). It is guarded by Bridge.mu.
type index struct {
	all    []*entry // by Seq; gone entries are trimmed from the front
	topics map[string]*topicQueue
	ring   []*topicQueue // topics with entries, served round robin
	rr     int
	bytes  int64
	count  int
	last   uint64 // highest Seq used
}

func newIndex() *index { return &index{topics: make(map[string]*topicQueue)} }

func (ix *index) add(e *entry, topic string) {
	t := ix.topics[topic]
	if t == nil {
		t = &topicQueue{name: topic}
		ix.topics[topic] = t
	}
	e.topic = t
	t.entries = append(t.entries, e)
	if !t.inRing {
		t.inRing = true
		ix.ring = append(ix.ring, t)
	}
	ix.all = append(ix.all, e)
	ix.bytes += int64(e.size)
	ix.count++
	if e.seq > ix.last {
		ix.last = e.seq
	}
}

// remove takes e out of the index (it was sent, dropped or expired).
func (ix *index) remove(e *entry) {
	if e.gone {
		return
	}
	e.gone = true
	ix.bytes -= int64(e.size)
	ix.count--
	t := e.topic
	for i, x := range t.entries {
		if x == e {
			t.entries = append(t.entries[:i], t.entries[i+1:]...)
			break
		}
	}
	if len(t.entries) == 0 {
		delete(ix.topics, t.name)
		t.entries = nil
	}
	for len(ix.all) > 0 && ix.all[0].gone {
		ix.all[0] = nil
		ix.all = ix.all[1:]
	}
}

// oldest returns the oldest entry that is not being sent, or nil.
func (ix *index) oldest() *entry {
	for _, e := range ix.all {
		if !e.gone && !e.inflight {
			return e
		}
	}
	return nil
}

// oldestAt returns when the oldest queued entry was queued.
func (ix *index) oldestAt() time.Time {
	for _, e := range ix.all {
		if !e.gone {
			return e.at
		}
	}
	return time.Time{}
}

// next returns the head of the next topic, round robin, that may be sent
// now: committed, not in flight, and if it is backlog (Seq <= backlog) only
// when mayPace says a token is left. Topics left empty leave the ring.
func (ix *index) next(backlog uint64, mayPace func() bool) *entry {
	for n := len(ix.ring); n > 0 && len(ix.ring) > 0; n-- {
		if ix.rr >= len(ix.ring) {
			ix.rr = 0
		}
		t := ix.ring[ix.rr]
		if len(t.entries) == 0 {
			t.inRing = false
			ix.ring = append(ix.ring[:ix.rr], ix.ring[ix.rr+1:]...)
			continue
		}
		ix.rr++
		h := t.entries[0]
		if !h.ready || h.inflight {
			continue
		}
		if h.seq <= backlog && !mayPace() {
			continue
		}
		return h
	}
	return nil
}
