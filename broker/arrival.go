package broker

// Arrival order across connections.
//
// MQTT orders the packets of one connection only. Clients nevertheless
// count on the order in which their packets reach the broker: a client
// subscribes on one connection and, without waiting for the SUBACK,
// publishes on another, and expects the new subscription to receive the
// message (Paho's interoperability suite does exactly that). A broker with
// one thread handles packets in arrival order and passes; linemq handles
// connections in parallel, and on an idle machine it lost that race most of
// the time: when both packets arrive while the broker sleeps, the thread
// that wakes for the first (57 to 175 us later on a virtual machine's idle
// CPU) finds both ready, and Go's netpoller hands it the goroutines last
// first (runtime/proc.go: the gList netpoll returns is pushed and popped
// at its head), so the PUBLISH that arrived 50 us after the SUBSCRIBE was routed
// before the SUBSCRIBE was read (docs/mqtt.md has the measurements;
// TestSubscribeThenPublishElsewhere counts how often it happens).
//
// So the broker orders the two by when the kernel received them. Reads of
// TCP sockets carry the kernel's receive timestamp (SO_TIMESTAMPNS, see
// arrival_linux.go); a message from a timestamped read goes into a small
// ring of recent messages (recentRing) with that time before it is
// matched, and records the generation of the subscription index its match
// saw (topic.Index.MatchGen); a new ordinary subscription then takes from
// the ring the matching messages that arrived after its SUBSCRIBE but were
// matched at an older generation than the one that added it
// (lookBackLocked). The result is what a broker handling packets one by one
// in arrival order would have done, and nothing more: a message that
// arrived before the SUBSCRIBE is never delivered to it, and the
// generations make sure none is delivered twice, however the two readers'
// steps interleave.
//
// Limits, by design: only plain TCP connections have timestamps (TLS and
// WebSocket reads do not, and their packets are handled as before); shared
// subscriptions and resubscriptions look back at nothing (their group or
// existing subscription already had the message); the ring holds the last
// recentSlots messages of at most recentMaxPayload bytes each, routed in
// the last recentWindow.

import (
	"runtime"
	"sync/atomic"
	"time"

	"github.com/linemq/linemq/broker/topic"
)

const (
	// recentSlots is the ring's size: the messages a late SUBSCRIBE can
	// still catch. A SUBSCRIBE handled late is late by a CPU's wake-up,
	// well under a millisecond; at 200,000 messages a second the ring
	// covers a little more than that.
	recentSlots = 256
	// recentMaxPayload keeps large messages out of the ring, which pins
	// what it holds: at most 256 x 16 KiB.
	recentMaxPayload = 16 << 10
	// recentWindow bounds how old a message the look-back considers, by
	// the monotonic clock: the receive timestamps are wall-clock time,
	// which may be stepped.
	recentWindow = time.Second
	// rxSane bounds how far a receive timestamp may lie behind the time
	// its read returned; one further off (a clock step, an emulator that
	// does not translate the control message) is not used.
	rxSane = time.Second
)

// recentRing holds the most recently routed timestamped messages. Readers
// add to it without locks; a new subscription reads it.
type recentRing struct {
	next  atomic.Uint64
	slots [recentSlots]atomic.Pointer[Message]
}

// add records m, routed from a read the kernel timestamped.
func (r *recentRing) add(m *Message) {
	i := r.next.Add(1) - 1
	r.slots[i%recentSlots].Store(m)
}

// recordArrival adds a message about to be routed to the ring, when it has
// an arrival time. It must be in the ring before it is matched: a
// subscription added after the match then finds it there.
func (srv *Server) recordArrival(m *Message) {
	if m.rx != 0 && len(m.Payload) <= recentMaxPayload {
		srv.recent.add(m)
	}
}

// matchWait bounds how long a look-back waits for a message that is in the
// ring but not matched yet: a match takes microseconds, but its reader may
// be descheduled right between the two on a loaded machine. One stalled
// for longer than this loses the message for the new subscription, as
// before arrival order.
const matchWait = 20 * time.Millisecond

// lookBackLocked delivers to session s, for its new ordinary subscription
// sub, the messages that arrived after sub's SUBSCRIBE (at arrived, a
// kernel timestamp) but were matched without sub: gen is the index
// generation that added sub, and a match at an older one did not see it.
// The caller holds s.mu from before sub entered the index, so no message
// routed through sub reaches s ahead of these older ones.
func (srv *Server) lookBackLocked(s *session, sub *subscription, gen uint64, arrived int64) (lb lookedBack) {
	now := srv.clock.Now()
	n := srv.recent.next.Load()
	var deadline time.Time
	for i := n - min(n, recentSlots); i < n; i++ {
		m := srv.recent.slots[i%recentSlots].Load()
		if m == nil || m.rx <= arrived || now.Sub(m.Created) > recentWindow || !topic.Match(sub.topicFilter, m.Topic) {
			continue
		}
		mg := m.matchedGen.Load()
		for mg == 0 {
			// In the ring, not matched yet: its reader is between the
			// two. Matching does not take session locks.
			if deadline.IsZero() {
				deadline = time.Now().Add(matchWait)
			} else if time.Now().After(deadline) {
				break
			}
			runtime.Gosched()
			mg = m.matchedGen.Load()
		}
		if mg == 0 || mg-1 >= gen {
			continue // its match saw sub, or we cannot tell
		}
		if sub.noLocal && m.Origin == s.id {
			continue // [MQTT-3.8.3-3]
		}
		if s.otherSubMatchesLocked(sub, m.Topic) {
			// It had the message through that subscription, or gets it
			// through that one's own look-back: once is enough.
			continue
		}
		var ids subIDs
		ids.add(sub.id)
		res := s.deliverLocked(m, min(m.QoS, sub.qos), m.Retain && sub.retainAsPublished, &ids, nil, now)
		if res.ok {
			srv.stats.lookedBack.Add(1)
			lb.msgs = append(lb.msgs, m)
		}
		lb.persisted = lb.persisted || res.persisted
	}
	return lb
}

// lookedBack is what a new subscription's look-back delivered.
type lookedBack struct {
	msgs      []*Message // not sent again among its retained messages
	persisted bool       // a delivery wrote to the Store: the SUBACK waits for it
}

// otherSubMatchesLocked reports whether another ordinary subscription of s
// matches name.
func (s *session) otherSubMatchesLocked(sub *subscription, name string) bool {
	for _, o := range s.subs {
		if o != sub && o.group == nil && topic.Match(o.topicFilter, name) {
			return true
		}
	}
	return false
}
