package broker

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"github.com/linemq/linemq/broker/packet"
	"github.com/linemq/linemq/broker/share"
)

// neverExpires is the Session Expiry Interval meaning "never" [MQTT-3.1.2.11.2].
const neverExpires = 0xFFFFFFFF

// session is the state the broker keeps for one client id: its
// subscriptions, the messages queued for it and in flight to it, and the
// inbound QoS 2 packet ids it has not released yet. It outlives connections
// when the client asked for a persistent session.
//
// Every field below mu is guarded by mu.
type session struct {
	srv *Server
	id  string

	mu      sync.Mutex
	conn    *conn // nil while offline
	version packet.Version
	expiry  uint32 // Session Expiry Interval in seconds
	ended   bool   // removed from the server; deliveries are refused
	moved   bool   // ended by a hand-over to another node (redirect.go)
	// unclaimed: adopted from another node, its claim not yet written
	// (Adopt, Server.claimed); redirected messages wait (deliverMoved).
	unclaimed bool

	subs map[string]*subscription // by filter as subscribed
	// subBytes is what subs take by subscriptionCost, for
	// Options.MaxSubscriptionBytesPerClient; kept with subs (setSubLocked,
	// dropSubLocked, takeSubsLocked).
	subBytes int

	seq     uint64 // last delivery sequence number
	adopted uint64 // seq of the last message of a state handed over (Adopt): later ones were delivered here
	// dupBefore: a message another node forwarded that was published
	// before it may have reached the client before, through another node
	// (see deliverLocked). Zero for a session restored from the Store.
	dupBefore time.Time
	// adoptedFrom and viewFrom: the session was adopted here from the
	// replica of node adoptedFrom by a claim made at cluster view viewFrom
	// (AdoptReplica); "" and 0 otherwise. A forward from that node routed
	// by an older view was routed while the session was still there
	// (deliverLocked).
	adoptedFrom string
	viewFrom    uint64
	nextPID     uint16              // last packet id handed out
	inflight    map[uint16]delivery // outbound QoS 1/2 awaiting acknowledgement
	queue       ring                // waiting for the send window or a connection
	inQoS2      map[uint16]struct{} // inbound QoS 2 ids received, PUBREL not yet

	pendingWill *will // a will waiting out its delay while the client is away
	willTimer   Timer
	expiryTimer Timer

	stored   bool      // the Store holds a record of this session
	replaced bool      // a clean start replaced it: its records are deleted and it writes no more
	since    time.Time // while connected, when the connection was accepted; else when the last one ended

	dropped      uint64 // messages dropped for this session (queue full, too large)
	overflowing  bool   // the queue overflowed and has not drained to half since: logged once
	disconnects  uint64 // connections that ended
	redeliveries uint64 // PUBLISH packets resent with DUP after a reconnect

	waiters []*pendingAck // publishers' acknowledgements held by backpressure
}

func newSession(srv *Server, id string, v packet.Version) *session {
	return &session{
		srv:      srv,
		id:       id,
		version:  v,
		subs:     make(map[string]*subscription),
		inflight: make(map[uint16]delivery),
		inQoS2:   make(map[uint16]struct{}),
		queue:    ring{total: &srv.queued},
	}
}

// verdict tells a share group whether the session can take a message at
// QoS qos now: Take when it can be sent at once, Full when it would have to
// wait for the send window, Skip when it cannot be accepted at all. An
// offline member whose queue is full can take one only where the group
// drops the oldest (dropOldest); under backpressure it is passed over.
func (s *session) verdict(qos byte, dropOldest bool) share.Verdict {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.ended:
		return share.Skip
	case s.conn == nil:
		if qos == 0 && !s.queuesQoS0Locked() {
			return share.Skip
		}
		if s.queueFullLocked() && !dropOldest && (qos == 0 || s.queue.qos0 == 0) {
			return share.Skip
		}
		return share.Full
	case qos == 0:
		return share.Take
	case s.queue.len() == 0 && s.windowOpenLocked():
		return share.Take
	case !dropOldest && s.hardFullLocked():
		return share.Skip
	default:
		return share.Full
	}
}

// deliver hands a message to the session at QoS qos. It sends it at once
// when the session is connected and its send window has room, queues it
// otherwise, and drops it (counted) when that is all that is left. It
// returns the connection that now has bytes to flush, or nil, and whether
// the message was accepted. The result says whether the Store was written
// to, so that the publisher's acknowledgement waits for it to be durable.
func (s *session) deliver(m *Message, qos byte, retain bool, ids *subIDs, g *shareGroup) deliverResult {
	now := s.srv.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deliverLocked(m, qos, retain, ids, g, now)
}

// deliverLocked is deliver with s.mu held.
func (s *session) deliverLocked(m *Message, qos byte, retain bool, ids *subIDs, g *shareGroup, now time.Time) deliverResult {
	if s.ended {
		return deliverResult{moved: s.moved}
	}
	if s.viewFrom != 0 && g == nil && m.sender == s.adoptedFrom {
		if v := m.view.Load(); v != 0 && v < s.viewFrom {
			// Routed by the node this session was adopted from, before
			// it saw the adoption (it was frozen or cut off): the session
			// was its own then, and had the message there. That node
			// delivered it on the connection still open there, or kept
			// it and hands it on (DropReplicated) if the client had not
			// taken it; a copy here too would reach the client twice,
			// the second time not known for a duplicate. (A third node
			// routing by a view older than the adoption may have sent
			// the message to neither place, the old owner's routes gone
			// from its view: its forward is taken.)
			s.srv.stats.staleForwards.Add(1)
			return deliverResult{ok: true}
		}
	}
	if qos > 0 && m.fromPeer && g == nil && !m.redelivery && m.Created.Before(s.dupBefore) {
		// Published before the session came here, and forwarded by a
		// node that may have sent it to the node the client was on
		// before as well (for that node's subscribers or this one's):
		// the session there, moved here since, may have had it (it is
		// then in the state handed over, or acknowledged), or, when the
		// client started afresh here, its earlier session may have. A
		// forward held up (its node was away) arrives late enough for
		// that. The copy goes with DUP.
		m = m.dupCopy()
	}
	if qos == 0 {
		if s.conn == nil {
			// QoS 0 is queued for an offline session only when the operator
			// asked for it (as Mosquitto's queue_qos0_messages), and never
			// written to the Store.
			if !s.queuesQoS0Locked() {
				return deliverResult{}
			}
			d := delivery{msg: m, retain: retain}
			if ids != nil {
				d.subIDs = *ids
			}
			return deliverResult{ok: s.enqueueLocked(d)}
		}
		d := delivery{msg: m, retain: retain}
		if ids != nil {
			d.subIDs = *ids
		}
		if s.queue.len() > 0 || s.srv.stall.holding() {
			// QoS 1 or 2 messages wait for the send window: this one
			// waits behind them rather than overtake them, so that the
			// client gets the messages in the order they were routed
			// to it, whatever their QoS (a Sparkplug host must not get
			// an edge node's QoS 0 NBIRTH before the QoS 1 NDEATH of its
			// previous session). A full queue drops QoS 0 first.
			return deliverResult{conn: s.conn, ok: s.enqueueLocked(d)}
		}
		switch s.sendLocked(&d, 0, now) {
		case written:
		case deniedMsg:
			return deliverResult{ok: true} // taken, and not for this client's eyes
		default:
			s.dropped++
			s.srv.stats.droppedQoS0.Add(1)
			return deliverResult{}
		}
		return deliverResult{conn: s.conn, ok: true}
	}
	s.seq++
	d := delivery{msg: m, seq: s.seq, qos: qos, retain: retain, group: g}
	if ids != nil {
		d.subIDs = *ids
	}
	persisted := s.persistentLocked()
	if s.conn != nil && s.queue.len() == 0 && s.windowOpenLocked() && !s.srv.stall.holding() {
		s.sendNewLocked(d, now)
		return deliverResult{conn: s.conn, ok: true, persisted: persisted}
	}
	res := deliverResult{ok: true, persisted: persisted}
	switch {
	case !s.queueFullLocked():
	case g != nil && g.backpressure && !s.hardFullLocked():
		// A group passes over full members while another has room; it
		// picked this one because none has. The queue grows past its
		// limit and the publisher's acknowledgement waits for it to
		// drain, which bounds the queue by the publishers' windows; a
		// publisher that reconnects gets a new window, so the growth
		// stops at hardFullLocked's ceiling whatever they do.
		res.congested = s
	case s.dropsOldest(g):
		s.dropOldestLocked()
	case s.queue.qos0 > 0:
		// A QoS 0 message was never promised: it makes room first.
		s.dropLocked(s.queue.oldestQoS0())
	case m.owed:
		// Acknowledged long ago and held nowhere else any more (an
		// outbox routing again what its node turned away): refusing it
		// would drop it. The queue takes it past its limit; the outbox's
		// bound (cluster.forwards.max_bytes) bounds how far.
	default:
		// Backpressure: nothing acknowledged is ever dropped, so the new
		// message is refused for this session instead.
		s.overflowLocked()
		s.srv.stats.refusedQueueFull.Add(1)
		return deliverResult{refused: true}
	}
	s.saveMsgLocked(&d) // before the queue takes its copy, which must know it is stored
	s.queue.push(d)
	return res
}

// queueFullLocked reports whether the session's queue is at its limit, or
// the broker's total is and this session holds some of it.
func (s *session) queueFullLocked() bool {
	o := &s.srv.opts
	return s.queue.len() >= o.MaxQueuedMessages ||
		(o.MaxQueuedTotal > 0 && s.srv.queued.Load() >= int64(o.MaxQueuedTotal) && s.queue.len() > 0)
}

// hardFullLocked reports whether the session's queue is past what even a
// share group's backpressure may grow it to: twice MaxQueuedMessages, or
// the broker's MaxQueuedTotal, the bound on all queued memory.
func (s *session) hardFullLocked() bool {
	o := &s.srv.opts
	return s.queue.len() >= 2*o.MaxQueuedMessages ||
		(o.MaxQueuedTotal > 0 && s.srv.queued.Load() >= int64(o.MaxQueuedTotal))
}

// dropsOldest reports whether an overflow for group g (nil: an ordinary
// subscription) drops the oldest queued message rather than refusing.
func (s *session) dropsOldest(g *shareGroup) bool {
	if g != nil {
		return !g.backpressure
	}
	return s.srv.opts.Overload == OverloadDropOldest
}

// dropOldestLocked makes room in a full queue by the drop_oldest policy:
// the oldest QoS 0 entry, else the oldest entry.
func (s *session) dropOldestLocked() {
	victim := s.queue.oldestQoS0()
	if victim < 0 {
		victim = 0
	}
	s.dropLocked(victim)
}

// dropLocked removes the i-th queued delivery, counted as a queue-full drop.
func (s *session) dropLocked(i int) {
	old := s.queue.removeAt(i)
	s.forgetMsgLocked(&old)
	s.dropped++
	s.srv.stats.droppedQueueFull.Add(1)
	s.overflowLocked()
}

// overflowLocked notes that the session's queue overflowed; the first
// overflow of an episode is logged, the rest only counted, until the queue
// has drained to half its limit.
func (s *session) overflowLocked() {
	if s.overflowing {
		return
	}
	s.overflowing = true
	s.srv.log.Warn("session queue full", "client", s.id, "queued", s.queue.len(),
		"online", s.conn != nil, "overload", s.srv.opts.Overload)
}

// deliverResult is what deliver did with a message.
type deliverResult struct {
	conn      *conn    // has bytes to flush, or nil
	ok        bool     // the session took the message
	refused   bool     // the session's queue is full and the message was refused
	persisted bool     // the Store was written to
	congested *session // a share-group member past its high-water mark: hold the publisher's ack
	moved     bool     // the session was handed to another node: redirect the message (redirect.go)
}

// windowOpenLocked reports whether a QoS 1/2 message can be sent now: the
// client's Receive Maximum has room, and the connection is not already
// holding MaxPendingBytes unwritten (a client that stops reading must not
// pin more than that, whatever window it advertised).
func (s *session) windowOpenLocked() bool {
	c := s.conn
	return len(s.inflight) < int(c.sendMax) && !c.overPending()
}

// queuesQoS0Locked reports whether QoS 0 messages queue while the session
// is offline.
func (s *session) queuesQoS0Locked() bool {
	return s.srv.opts.QueueQoS0 && s.expiry != 0
}

// enqueueLocked appends a QoS 0 delivery: for an offline session, or for a
// connected one whose QoS 1/2 messages wait for its send window. QoS 0 is
// never promised, so a full queue drops (counted) rather than refuses:
// another QoS 0 entry, or the oldest entry under drop_oldest, or the new
// message itself; it reports whether d was queued.
func (s *session) enqueueLocked(d delivery) bool {
	if s.queueFullLocked() {
		victim := s.queue.oldestQoS0()
		if victim < 0 && s.dropsOldest(nil) {
			victim = 0
		}
		if victim < 0 {
			s.dropped++
			s.srv.stats.droppedQoS0.Add(1)
			s.overflowLocked()
			return false
		}
		s.dropLocked(victim)
	}
	s.queue.push(d)
	return true
}

// dropQueuedQoS0Locked drops the QoS 0 messages waiting in the queue of a
// session whose connection ended, unless the operator asked for QoS 0 to be
// kept for offline sessions (Options.QueueQoS0): they waited behind QoS 1/2
// messages for a connection that is gone.
func (s *session) dropQueuedQoS0Locked() {
	if s.queuesQoS0Locked() {
		return
	}
	// From the newest back, so that removing one leaves the positions of
	// those still to look at in place. A retained feed (a queue entry
	// with qos 0 too) is not a QoS 0 message: it stays, for the
	// reconnection.
	for i := s.queue.len() - 1; i >= 0 && s.queue.qos0 > 0; i-- {
		if d := s.queue.at(i); d.qos == 0 && d.feed == nil {
			s.queue.removeAt(i)
			s.dropped++
			s.srv.stats.droppedQoS0.Add(1)
		}
	}
}

// newPacketID returns an unused packet id for an outbound message.
func (s *session) newPacketID() uint16 {
	for {
		s.nextPID++
		if s.nextPID == 0 {
			s.nextPID = 1
		}
		if _, used := s.inflight[s.nextPID]; !used {
			return s.nextPID
		}
	}
}

// sendNewLocked puts a QoS 1 or 2 delivery in flight and sends it. A
// message the client can never accept (too large) or that expired is
// dropped and counted; as the spec asks, the broker then behaves as if it
// had been delivered [MQTT-3.1.2-25]. A message that could not be written
// because the connection is closing stays in flight, to be sent on
// reconnect.
func (s *session) sendNewLocked(d delivery, now time.Time) {
	d.pid = s.newPacketID()
	switch s.sendLocked(&d, d.pid, now) {
	case written:
		d.sent = true
		s.saveMsgLocked(&d) // before the map takes its copy, which must know it is stored
		s.inflight[d.pid] = d
	case busy:
		s.saveMsgLocked(&d)
		s.inflight[d.pid] = d
	case tooLarge:
		s.dropped++
		s.srv.stats.droppedTooLarge.Add(1)
		s.forgetMsgLocked(&d)
	case expiredMsg:
		s.srv.stats.expired.Add(1)
		s.forgetMsgLocked(&d)
	case deniedMsg:
		s.forgetMsgLocked(&d)
	}
}

// sendLocked encodes d as a PUBLISH onto the session's connection.
func (s *session) sendLocked(d *delivery, pid uint16, now time.Time) writeResult {
	c := s.conn
	if c == nil {
		return busy
	}
	// Expiry stops a message that has not started onward delivery; one
	// already sent is completed [MQTT-3.3.2-5].
	if !d.sent && d.msg.expired(now) {
		return expiredMsg
	}
	// A subscription wider than what the client may read was granted on
	// the condition that what it may not read is never sent on it
	// (auth.acl_overlap: filter): checked here, where every message to the
	// client passes, live, queued, retained or from its share groups.
	if c.readCheck != nil && !d.sent && !c.readCheck(d.msg.Topic) {
		s.srv.stats.readDenied.Add(1)
		return deniedMsg
	}
	p := s.srv.outPubs.Get().(*packet.Publish)
	defer s.srv.outPubs.Put(p)
	d.msg.fill(p, now)
	p.QoS = d.qos
	p.Retain = d.retain
	p.Dup = (d.sent || d.maybeSent || d.msg.redelivery) && d.qos > 0
	p.PacketID = pid
	p.Props.SubscriptionIDs = d.subIDs.appendTo(p.Props.SubscriptionIDs[:0])
	if c.version < packet.V5 {
		p.Props.Reset()
	}
	var gate uint64
	if d.msg.echoConn == c.serial {
		gate = d.msg.echoGate
	}
	return c.writePublish(p, d.msg.Topic, d.qos == 0, gate)
}

// ack handles PUBACK (QoS 1) and PUBCOMP (QoS 2) from the client: the
// message is done, and the window has room for the next queued one.
func (s *session) ack(t packet.Type, pid uint16) (*conn, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, ok := s.inflight[pid]
	if !ok || (t == packet.PUBACK) != (d.qos == 1) || (t == packet.PUBCOMP && !d.released) {
		return nil, false
	}
	delete(s.inflight, pid)
	s.forgetMsgLocked(&d)
	s.srv.stats.acked.Add(1)
	if d.group != nil {
		d.group.acked.Add(1)
	}
	s.pumpLocked()
	return s.conn, true
}

// pubrec handles PUBREC: the client has the QoS 2 message; answer PUBREL.
// A PUBREC with an error reason ends the exchange (section 4.3.3).
func (s *session) pubrec(pid uint16, reason packet.ReasonCode) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, ok := s.inflight[pid]
	c := s.conn
	if !ok || d.qos != 2 {
		if c != nil {
			c.writeAck(packet.PUBREL, pid, packet.PacketIDNotFound)
		}
		return
	}
	if reason.IsError() {
		delete(s.inflight, pid)
		s.forgetMsgLocked(&d)
		s.pumpLocked()
		return
	}
	d.released = true
	s.saveMsgLocked(&d)
	s.inflight[pid] = d
	if c != nil {
		c.writeAck(packet.PUBREL, pid, packet.Success)
	}
}

// pumpLocked moves queued messages into flight while the send window has
// room.
func (s *session) pumpLocked() {
	c := s.conn
	if c == nil || s.srv.stall.holding() {
		return // after a stall, until the line is caught up with (stall.go)
	}
	now := s.srv.clock.Now()
	for s.queue.len() > 0 {
		head := s.queue.at(0)
		// A QoS 0 message at the head goes whether the window has room
		// or not: it waited only to keep its place behind what was
		// queued before it.
		if (head.qos > 0 || head.feed != nil) && !s.windowOpenLocked() {
			break
		}
		if head.feed != nil {
			if !s.feedLocked(head, now) {
				break
			}
			s.queue.pop()
			continue
		}
		d := s.queue.pop()
		if d.qos == 0 {
			// QoS 0 needs no window and no packet id.
			if r := s.sendLocked(&d, 0, now); r != written && r != deniedMsg {
				s.dropped++
				s.srv.stats.droppedQoS0.Add(1)
			}
			continue
		}
		s.sendNewLocked(d, now)
	}
	if s.overflowing && s.queue.len() <= s.srv.opts.MaxQueuedMessages/2 {
		s.overflowing = false
	}
	s.releaseWaitersLocked(false)
}

// feedLocked sends the retained messages of the feed at the head of the
// queue while the send window has room. It reports whether the feed is
// done; otherwise head.msg is the next message to send.
func (s *session) feedLocked(head *delivery, now time.Time) bool {
	f := head.feed
	for len(f.msgs) > 0 {
		if !s.windowOpenLocked() {
			head.msg = f.msgs[0]
			return false
		}
		m := f.msgs[0]
		f.msgs[0] = nil
		f.msgs = f.msgs[1:]
		// Retained messages sent for a subscription keep RETAIN set [MQTT-3.3.1-8].
		d := delivery{msg: m, qos: min(m.QoS, f.qos), retain: true, subIDs: f.ids}
		if d.qos == 0 {
			switch s.sendLocked(&d, 0, now) {
			case tooLarge:
				s.dropped++
				s.srv.stats.droppedTooLarge.Add(1)
			case expiredMsg:
				s.srv.stats.expired.Add(1)
			}
			continue
		}
		s.seq++
		d.seq = s.seq
		s.sendNewLocked(d, now)
	}
	return true
}

// startFeedLocked queues the retained messages for a new subscription
// behind what is already queued, and starts sending them.
func (s *session) startFeedLocked(sub *subscription, msgs []*Message) {
	if s.ended || len(msgs) == 0 {
		return
	}
	f := &retainedFeed{msgs: msgs, qos: sub.qos}
	f.ids.add(sub.id)
	// Its qos is 1 so that the QoS 0 drop rules never pick it as a victim.
	s.queue.push(delivery{msg: msgs[0], qos: 1, retain: true, feed: f})
	s.pumpLocked()
}

// holdAckLocked holds a publisher's acknowledgement while the session's
// queue is above half its limit; it reports false (no need to wait)
// otherwise. A held acknowledgement is released (p.unblock) when the queue
// drains below half, or when the session ends.
func (s *session) holdAckLocked(p *pendingAck) bool {
	if s.ended || s.queue.len() < s.srv.opts.MaxQueuedMessages/2 {
		return false
	}
	s.waiters = append(s.waiters, p)
	s.srv.stats.acksHeld.Add(1)
	return true
}

// releaseWaitersLocked releases the held acknowledgements once the queue is
// below half its limit, or at once with force (the session is ending).
func (s *session) releaseWaitersLocked(force bool) {
	if len(s.waiters) == 0 || (!force && s.queue.len() >= s.srv.opts.MaxQueuedMessages/2) {
		return
	}
	// Released outside this session's lock: writing an acknowledgement
	// may take a session lock (a SUBACK queued behind it).
	released := s.waiters
	s.waiters = nil
	go func() {
		for _, p := range released {
			p.unblock()
		}
	}()
}

// resumeLocked runs when a client reconnects to an existing session: it
// resends every unacknowledged message in its original order, PUBLISH with
// DUP or PUBREL as its state requires [MQTT-4.4.0-1], then fills the window
// from the queue.
func (s *session) resumeLocked() {
	c := s.conn
	now := s.srv.clock.Now()
	pids := make([]uint16, 0, len(s.inflight))
	for pid := range s.inflight {
		pids = append(pids, pid)
	}
	slices.SortFunc(pids, func(a, b uint16) int {
		return cmp.Compare(s.inflight[a].seq, s.inflight[b].seq)
	})
	for _, pid := range pids {
		d := s.inflight[pid]
		if d.released {
			c.writeAck(packet.PUBREL, pid, packet.Success)
			continue
		}
		wasSent := d.sent
		switch s.sendLocked(&d, pid, now) {
		case written:
			if wasSent {
				s.redeliveries++
			}
			d.sent = true
			s.inflight[pid] = d
		case tooLarge, expiredMsg:
			delete(s.inflight, pid)
			s.forgetMsgLocked(&d)
			s.dropped++
		case deniedMsg:
			delete(s.inflight, pid)
			s.forgetMsgLocked(&d)
		}
	}
	s.pumpLocked()
}

// takeUndelivered removes and returns the messages a departing member of
// group g (any group when g is nil) still holds: everything queued for g,
// and QoS 1 messages in flight for g, for settle. QoS 2 messages in flight stay with the member
// [MQTT-4.8.2-5]; the spec binds them to it.
func (s *session) takeUndelivered(g *shareGroup) []delivery {
	var out []delivery
	keep := ring{total: s.queue.total}
	for s.queue.len() > 0 {
		d := s.queue.pop()
		if d.group == g || (g == nil && d.group != nil) {
			out = append(out, d)
		} else {
			keep.push(d)
		}
	}
	s.queue = keep
	for pid, d := range s.inflight {
		if (d.group == g || (g == nil && d.group != nil)) && d.qos == 1 {
			out = append(out, d)
			delete(s.inflight, pid)
		}
	}
	slices.SortFunc(out, func(a, b delivery) int { return cmp.Compare(a.seq, b.seq) })
	// Their stored records stay until another member has each (settle).
	s.releaseWaitersLocked(false)
	return out
}

// setSubLocked makes sub the session's subscription to its filter.
// s.mu is held.
func (s *session) setSubLocked(sub *subscription) {
	if _, had := s.subs[sub.filter]; !had {
		s.subBytes += subscriptionCost(sub.filter)
	}
	s.subs[sub.filter] = sub
}

// dropSubLocked removes the session's subscription to filter. s.mu is
// held.
func (s *session) dropSubLocked(filter string) {
	if _, had := s.subs[filter]; had {
		s.subBytes -= subscriptionCost(filter)
		delete(s.subs, filter)
	}
}

// takeSubsLocked empties the session's subscriptions and returns them.
// s.mu is held.
func (s *session) takeSubsLocked() map[string]*subscription {
	subs := s.subs
	s.subs = make(map[string]*subscription)
	s.subBytes = 0
	return subs
}
