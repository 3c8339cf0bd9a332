package broker

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"github.com/linemq/linemq/broker/packet"
)

// A message an outbox routes again (its subscriber moved to another node
// with its session, or left; see reroute) can find no subscription
// anywhere for a moment though its subscriber still exists: the session
// is between two nodes, handed over from the one that turned the message
// away to one whose route this node's copy of the registry does not show
// yet, or this node has just started and its copy has not read the
// others' routes. Its publisher was acknowledged long ago and nothing
// else holds it, so dropping it then loses an acknowledged message
// (fault suite: a gateway replaced with a blank card, its ordinary
// subscriber's session adopted, handed back, and the whole line killed
// and started again, 922 messages). Such a message is kept here, on disk
// like an outbox's, and routed again with a growing pause until something
// takes it. One that nothing takes within unroutedGrace had a subscriber
// that left for good: it is dropped and counted.

// unroutedNode is the outbox name whose Store records hold the unrouted
// messages: no node has an empty name, and the records are thereby
// treated everywhere as a forward queue's (never replicated, never a
// client's session).
const unroutedNode = ""

// unroutedGrace is how long an unrouted message is routed again before it
// is taken for one whose subscriber left: longer than a line takes to
// start again and its copies to read each other's routes (a few seconds),
// and short, since a subscription made meanwhile that matches it gets it
// too (with DUP) though it was published before. A subscriber's
// UNSUBSCRIBE while messages were on their way to it ends so as well.
const unroutedGrace = 15 * time.Second

// unroutedRetryMin and unroutedRetryMax bound the pause between rounds.
const (
	unroutedRetryMin = 50 * time.Millisecond
	unroutedRetryMax = 2 * time.Second
)

// unrouted is the Server's list of messages routed again that matched no
// subscription anywhere yet.
type unrouted struct {
	mu      sync.Mutex
	msgs    []*unroutedMsg
	seq     uint64
	pause   time.Duration
	pending bool // a round is scheduled
	stored  bool // the list's Store session record is written
	kept    uint64
	routed  uint64
	dropped uint64
}

// unroutedMsg is one message waiting for a subscriber.
type unroutedMsg struct {
	msg    *Message
	seq    uint64
	since  time.Time
	stored bool
}

// keepUnrouted keeps c, a copy routed again that nothing took, and
// schedules a round.
func (srv *Server) keepUnrouted(c *Message) {
	u := &srv.unrouted
	u.mu.Lock()
	u.seq++
	e := &unroutedMsg{msg: c, seq: u.seq, since: srv.clock.Now()}
	srv.storeUnroutedLocked(e)
	u.msgs = append(u.msgs, e)
	u.kept++
	first := len(u.msgs) == 1
	u.mu.Unlock()
	if first {
		srv.log.Info("a message routed again found no subscriber on any node: kept and routed again until one takes it",
			"topic", c.Topic, "for", unroutedGrace)
	}
	srv.scheduleUnrouted(false)
}

// storeUnroutedLocked writes e's record, if there is a Store.
func (srv *Server) storeUnroutedLocked(e *unroutedMsg) {
	store := srv.opts.Store
	if store == nil {
		return
	}
	u := &srv.unrouted
	id := outboxPrefix + unroutedNode
	if !u.stored {
		u.stored = true
		srv.storeErr("save unrouted list", id, store.SaveSession(&SessionRecord{ClientID: id, Version: packet.V5, ExpiryInterval: neverExpires}))
	}
	e.stored = true
	srv.storeErr("save unrouted", id, store.SaveMessage(id, &MessageRecord{Seq: e.seq, MessageID: e.msg.storeID(&srv.msgIDs), Message: e.msg, QoS: e.msg.QoS}))
}

// forgetUnrouted deletes e's record.
func (srv *Server) forgetUnrouted(e *unroutedMsg) {
	if e.stored {
		e.stored = false
		id := outboxPrefix + unroutedNode
		srv.storeErr("delete unrouted", id, srv.opts.Store.DeleteMessage(id, e.seq))
	}
}

// scheduleUnrouted schedules a round after the current pause, unless one
// is scheduled; again (a round that left messages) doubles the pause.
func (srv *Server) scheduleUnrouted(again bool) {
	u := &srv.unrouted
	u.mu.Lock()
	if u.pending || len(u.msgs) == 0 {
		u.mu.Unlock()
		return
	}
	switch {
	case !again || u.pause == 0:
		u.pause = unroutedRetryMin
	default:
		u.pause = min(2*u.pause, unroutedRetryMax)
	}
	u.pending = true
	pause := u.pause
	u.mu.Unlock()
	srv.clock.AfterFunc(pause, srv.routeUnrouted)
}

// routeUnrouted routes every kept message again, in the order kept; what
// something took is forgotten, what waited past unroutedGrace is dropped.
func (srv *Server) routeUnrouted() {
	if srv.isStopping() {
		return
	}
	u := &srv.unrouted
	u.mu.Lock()
	msgs := u.msgs
	u.msgs = nil
	u.pending = false
	u.mu.Unlock()
	now := srv.clock.Now()
	var left []*unroutedMsg
	routed, dropped := 0, 0
	for _, e := range msgs {
		switch {
		case srv.routeAgain("", e.msg):
			routed++
			srv.forgetUnrouted(e)
		case now.Sub(e.since) > unroutedGrace:
			dropped++
			srv.forgetUnrouted(e)
		default:
			left = append(left, e)
		}
	}
	u.mu.Lock()
	u.msgs = append(left, u.msgs...)
	u.routed += uint64(routed)
	u.dropped += uint64(dropped)
	u.mu.Unlock()
	if routed > 0 {
		srv.log.Info("messages that had found no subscriber routed again", "messages", routed, "still_waiting", len(left))
	}
	if dropped > 0 {
		// Info, not a warning: a subscriber that unsubscribed while
		// messages were on their way to it ends this way too.
		srv.log.Info("messages dropped: routed again for longer than their grace, no subscriber on any node took them (it left)",
			"messages", dropped, "grace", unroutedGrace)
	}
	srv.scheduleUnrouted(true)
}

// restoreUnrouted rebuilds the list from its stored records at start; the
// grace starts again.
func (srv *Server) restoreUnrouted(msgs []*MessageRecord) {
	u := &srv.unrouted
	now := srv.clock.Now()
	slices.SortFunc(msgs, func(a, b *MessageRecord) int { return cmp.Compare(a.Seq, b.Seq) })
	u.mu.Lock()
	u.stored = true
	for _, mr := range msgs {
		srv.restoreMessageID(mr)
		c := mr.Message
		c.redelivery, c.fromPeer, c.owed = true, true, true
		u.msgs = append(u.msgs, &unroutedMsg{msg: c, seq: mr.Seq, since: now, stored: true})
		u.seq = max(u.seq, mr.Seq)
	}
	u.mu.Unlock()
	if len(msgs) > 0 {
		srv.log.Info("restored messages that wait for a subscriber on some node", "messages", len(msgs))
	}
	srv.scheduleUnrouted(false)
}

// UnroutedStats are the figures of the messages routed again that found
// no subscriber at first.
type UnroutedStats struct {
	Waiting int    `json:"waiting"` // kept now, routed again in rounds
	Kept    uint64 `json:"kept"`    // kept since start
	Routed  uint64 `json:"routed"`  // taken in a later round
	Dropped uint64 `json:"dropped"` // dropped after unroutedGrace
}

// Unrouted returns the figures of the unrouted messages.
func (srv *Server) Unrouted() UnroutedStats {
	u := &srv.unrouted
	u.mu.Lock()
	defer u.mu.Unlock()
	return UnroutedStats{Waiting: len(u.msgs), Kept: u.kept, Routed: u.routed, Dropped: u.dropped}
}
