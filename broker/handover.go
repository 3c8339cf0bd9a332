package broker

import (
	"cmp"
	"encoding/binary"
	"errors"
	"maps"
	"slices"

	"github.com/linemq/linemq/broker/packet"
)

// SessionState is a session on its way from one node of a cluster to
// another: what a client resuming it (clean start = false) on the new node
// expects to find there. Its Will is always nil: the connection that
// resumes the session brings its own.
type SessionState struct {
	Session  SessionRecord    // with its Subscriptions
	Messages []*MessageRecord // in flight (PacketID != 0) and queued, in Seq order
	Inbound  []uint16         // inbound QoS 2 ids not yet released
}

// stateFormat is the version byte of SessionState's binary form.
const stateFormat = 1

// ErrBadState is returned by UnmarshalSessionState for bytes that are not a
// session state this broker reads.
var ErrBadState = errors.New("broker: malformed session state")

// AppendBinary appends st's binary form to dst, for the wire between nodes.
func (st *SessionState) AppendBinary(dst []byte) []byte {
	s := &st.Session
	dst = append(dst, stateFormat, byte(s.Version))
	dst = appendStr(dst, s.ClientID)
	dst = binary.AppendUvarint(dst, uint64(s.ExpiryInterval))
	dst = binary.AppendUvarint(dst, uint64(len(s.Subscriptions)))
	for _, sub := range s.Subscriptions {
		dst = appendStr(dst, sub.Filter)
		flags := sub.QoS & 3
		if sub.NoLocal {
			flags |= 1 << 2
		}
		if sub.RetainAsPublished {
			flags |= 1 << 3
		}
		flags |= (sub.RetainHandling & 3) << 4
		dst = append(dst, flags)
		dst = binary.AppendUvarint(dst, uint64(sub.SubscriptionID))
	}
	dst = binary.AppendUvarint(dst, uint64(len(st.Messages)))
	for _, m := range st.Messages {
		flags := m.QoS & 3
		if m.Retain {
			flags |= 1 << 2
		}
		if m.Sent {
			flags |= 1 << 3
		}
		if m.Released {
			flags |= 1 << 4
		}
		dst = append(dst, flags)
		dst = binary.AppendUvarint(dst, m.Seq)
		dst = binary.AppendUvarint(dst, uint64(m.PacketID))
		dst = appendStr(dst, m.GroupName)
		dst = appendStr(dst, m.GroupFilter)
		dst = binary.AppendUvarint(dst, uint64(len(m.SubIDs)))
		for _, id := range m.SubIDs {
			dst = binary.AppendUvarint(dst, uint64(id))
		}
		body := m.Message.AppendBinary(nil)
		dst = binary.AppendUvarint(dst, uint64(len(body)))
		dst = append(dst, body...)
	}
	dst = binary.AppendUvarint(dst, uint64(len(st.Inbound)))
	for _, pid := range st.Inbound {
		dst = binary.AppendUvarint(dst, uint64(pid))
	}
	return dst
}

func appendStr(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

// UnmarshalSessionState decodes what AppendBinary made. It copies what it
// keeps.
func UnmarshalSessionState(b []byte) (*SessionState, error) {
	if len(b) < 2 || b[0] != stateFormat {
		return nil, ErrBadState
	}
	r := reader{b: b[2:]}
	st := &SessionState{}
	s := &st.Session
	s.Version = packet.Version(b[1])
	s.ClientID = string(r.bytes())
	exp := r.uvarint()
	s.ExpiryInterval = uint32(exp)
	// Every count is checked against what is left, so a hostile length
	// cannot make a huge allocation: each element takes at least 2 bytes.
	n := r.uvarint()
	if n > uint64(len(r.b)) || exp > 0xFFFFFFFF {
		return nil, ErrBadState
	}
	for range n {
		sub := SubscriptionRecord{Filter: string(r.bytes())}
		f := r.byte()
		sub.QoS, sub.NoLocal, sub.RetainAsPublished, sub.RetainHandling = f&3, f&(1<<2) != 0, f&(1<<3) != 0, (f>>4)&3
		sub.SubscriptionID = uint32(r.uvarint())
		s.Subscriptions = append(s.Subscriptions, sub)
	}
	n = r.uvarint()
	if n > uint64(len(r.b)) {
		return nil, ErrBadState
	}
	for range n {
		f := r.byte()
		m := &MessageRecord{QoS: f & 3, Retain: f&(1<<2) != 0, Sent: f&(1<<3) != 0, Released: f&(1<<4) != 0}
		m.Seq = r.uvarint()
		m.PacketID = uint16(r.uvarint())
		m.GroupName, m.GroupFilter = string(r.bytes()), string(r.bytes())
		ids := r.uvarint()
		if ids > uint64(len(r.b)) {
			return nil, ErrBadState
		}
		for range ids {
			m.SubIDs = append(m.SubIDs, uint32(r.uvarint()))
		}
		body := r.bytes()
		if r.err {
			return nil, ErrBadState
		}
		msg, err := UnmarshalMessage(body)
		if err != nil || m.QoS > 2 {
			return nil, ErrBadState
		}
		m.Message = msg
		st.Messages = append(st.Messages, m)
	}
	n = r.uvarint()
	if n > uint64(len(r.b)) {
		return nil, ErrBadState
	}
	for range n {
		st.Inbound = append(st.Inbound, uint16(r.uvarint()))
	}
	if r.err || len(r.b) != 0 || s.Version < packet.V311 || s.Version > packet.V5 {
		return nil, ErrBadState
	}
	return st, nil
}

// handedOver holds the sessions this node gave to another node and has
// not yet seen it take (Server.Evict, when the cluster reports the new
// owner, forgets them): should the new node fail before it owns the
// session, the client finds it here again.
type handedOver map[string]*SessionState

// HandOver gives clientID's session to node to, where the client is
// resuming it: its connection here is closed with 0x8E (Session taken
// over), its state is returned, messages and all, and what its ordinary
// QoS 1 and 2 subscriptions match here from then on is sent on to it there
// until every node routes to it there (redirect.go); its other
// subscriptions stop routing here. The session's records stay in the
// Store until the new owner's claim is seen (Evict), so a new node that
// fails before it has stored the state loses nothing. It reports false
// when this node has no such session.
func (srv *Server) HandOver(clientID, to string) (*SessionState, bool) {
	srv.mu.Lock()
	sess := srv.sessions[clientID]
	if sess == nil {
		// Handed over before, to a node whose claim failed: the client
		// is resuming it again, there or on another node.
		st, ok := srv.handed[clientID]
		srv.mu.Unlock()
		if ok {
			srv.retarget(clientID, to)
			srv.departureClaimed(clientID, to)
		}
		return st, ok
	}
	delete(srv.sessions, clientID)
	srv.mu.Unlock()

	// The subscriptions stop routing here before the state is read, so
	// what was matched before lands in it; what arrives later finds the
	// session ended: its ordinary QoS 1 and 2 subscriptions redirect it
	// (redirect.go), a share group picks another member.
	subs := srv.letGo(sess, to)
	if srv.departed(clientID, to, subs) {
		// This node may die as soon as the state is out, and the others'
		// outboxes bring it what they kept when it is back (departed.go).
		srv.storeErr("sync departure", clientID, srv.syncStore())
	}

	sess.mu.Lock()
	sess.ended, sess.moved = true, to != ""
	st := sess.exportLocked(subs)
	sess.queue.reset()
	clear(sess.inflight)
	sess.releaseWaitersLocked(true)
	stored := sess.stored
	sess.stored = false // it writes nothing more; its records go at Evict
	sess.mu.Unlock()

	if stored {
		srv.mu.Lock()
		if srv.handed == nil {
			srv.handed = make(handedOver)
		}
		srv.handed[clientID] = st
		srv.mu.Unlock()
	}
	srv.stats.handedOver.Add(1)
	srv.log.Info("session handed over to another node", "client", clientID,
		"subscriptions", len(st.Session.Subscriptions), "messages", len(st.Messages))
	return st, true
}

// exportLocked copies the session's state. A retained feed still being
// sent becomes queued messages.
func (s *session) exportLocked(subs map[string]*subscription) *SessionState {
	st := &SessionState{Session: SessionRecord{ClientID: s.id, Version: s.version, ExpiryInterval: s.expiry}}
	for _, sub := range subs {
		st.Session.Subscriptions = append(st.Session.Subscriptions, SubscriptionRecord{
			Filter: sub.filter, QoS: sub.qos, NoLocal: sub.noLocal, RetainAsPublished: sub.retainAsPublished,
			RetainHandling: sub.retainHandling, SubscriptionID: sub.id,
		})
	}
	slices.SortFunc(st.Session.Subscriptions, func(a, b SubscriptionRecord) int { return cmp.Compare(a.Filter, b.Filter) })
	for _, d := range s.inflight {
		st.Messages = append(st.Messages, d.record(d.msg))
	}
	seq := s.seq
	for i := range s.queue.len() {
		d := s.queue.at(i)
		if d.feed == nil {
			st.Messages = append(st.Messages, d.record(d.msg))
			continue
		}
		// The feed's messages go as ordinary queued ones, numbered after
		// everything else so they keep their order among themselves.
		f := d.feed
		msgs := append([]*Message{d.msg}, f.msgs...)
		for _, m := range msgs {
			if m == nil {
				continue
			}
			seq++
			fd := delivery{seq: seq, qos: min(m.QoS, f.qos), retain: true, subIDs: f.ids}
			st.Messages = append(st.Messages, fd.record(m))
		}
	}
	slices.SortFunc(st.Messages, func(a, b *MessageRecord) int { return cmp.Compare(a.Seq, b.Seq) })
	for pid := range s.inQoS2 {
		st.Inbound = append(st.Inbound, pid)
	}
	slices.Sort(st.Inbound)
	return st
}

// record is the handed-over form of a delivery of m.
func (d *delivery) record(m *Message) *MessageRecord {
	r := &MessageRecord{Seq: d.seq, Message: m, QoS: d.qos, Retain: d.retain, PacketID: d.pid,
		Sent: d.sent || d.maybeSent, Released: d.released, SubIDs: d.subIDs.appendTo(nil)}
	if d.group != nil {
		r.GroupName, r.GroupFilter = d.group.key.name, d.group.key.filter
	}
	return r
}

// takenSinceAdoption returns, for a session adopted here whose claim was
// not confirmed (unclaimed), the messages it took after its adoption, in
// order: they exist nowhere else. Those in flight are read too: a session
// that is unclaimed has no connection, but what an earlier connection of
// it had in flight may still be there.
func (s *session) takenSinceAdoption() []*MessageRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.unclaimed {
		return nil
	}
	var out []*MessageRecord
	for i := range s.queue.len() {
		if d := s.queue.at(i); d.seq > s.adopted && d.feed == nil {
			out = append(out, d.record(d.msg))
		}
	}
	for _, d := range s.inflight {
		if d.seq > s.adopted {
			out = append(out, d.record(d.msg))
		}
	}
	slices.SortFunc(out, func(a, b *MessageRecord) int { return cmp.Compare(a.Seq, b.Seq) })
	return out
}

// Adopt installs a session another node handed over (HandOver there), for
// the client about to resume it here: it is stored (and synced) before
// Adopt returns, so that the CONNACK that follows promises only what is
// durable. A session this node already has for the client is replaced;
// but when that one is itself an adopted copy whose claim was never
// confirmed (the same state, handed over again), the messages it took
// since are kept, after the state's.
func (srv *Server) Adopt(st *SessionState) error {
	rec := &st.Session
	s := newSession(srv, rec.ClientID, rec.Version)
	s.expiry = rec.ExpiryInterval
	s.since = srv.clock.Now()
	srv.mu.Lock()
	old := srv.sessions[rec.ClientID]
	delete(srv.sessions, rec.ClientID)
	delete(srv.handed, rec.ClientID)
	srv.mu.Unlock()
	var carried []*MessageRecord
	if old != nil {
		// A stale copy (this node's, from before the client moved): the
		// state handed over supersedes it, messages included, so nothing
		// of it is redispatched. Its records go before the new ones are
		// written. What an unconfirmed adoption took since goes on.
		carried = old.takenSinceAdoption()
		srv.discard(old)
	}
	s.mu.Lock()
	s.saveLocked()
	s.mu.Unlock()
	for _, sr := range rec.Subscriptions {
		srv.restoreSubscription(s, sr)
	}
	// Back here from the node it was handed to: what was redirected
	// there ends, now that its subscriptions route here again (not
	// before, so that its filters stay registered from here throughout).
	s.mu.Lock()
	back := maps.Clone(s.subs)
	s.mu.Unlock()
	srv.endRedirectOf(rec.ClientID, back)
	srv.returned(rec.ClientID)
	s.mu.Lock()
	for _, sub := range s.subs {
		s.saveSubLocked(sub)
	}
	for _, mr := range st.Messages {
		d := srv.deliveryOf(mr)
		s.seq = max(s.seq, mr.Seq)
		s.saveMsgLocked(&d)
		if d.pid != 0 {
			s.inflight[d.pid] = d
			s.nextPID = max(s.nextPID, d.pid)
		} else {
			s.queue.push(d)
		}
	}
	for _, pid := range st.Inbound {
		s.inQoS2[pid] = struct{}{}
		s.setInboundLocked(pid, true)
	}
	s.adopted = s.seq
	for _, mr := range carried {
		d := srv.deliveryOf(mr)
		s.seq++
		d.seq, d.pid, d.sent = s.seq, 0, false
		s.saveMsgLocked(&d)
		s.queue.push(d)
	}
	s.dupBefore = s.since.Add(moveSkew)
	s.unclaimed = true
	s.mu.Unlock()
	srv.mu.Lock()
	srv.sessions[s.id] = s
	srv.mu.Unlock()
	srv.stats.adopted.Add(1)
	if err := srv.syncStore(); err != nil {
		return err
	}
	srv.log.Info("session adopted from another node", "client", s.id,
		"subscriptions", len(rec.Subscriptions), "messages", len(st.Messages))
	return nil
}

// Drop forgets the session Adopt installed for clientID when the claim
// that was to follow failed: its records go, and the messages it was
// handed are not given to other members, since the node it came from
// still has them (and hands them over again at the client's next
// attempt). Share-group messages its subscriptions took here while the
// claim was being written exist nowhere else: they go to the other
// members (settle), as a departed member's do. When owner names the node
// that holds the session now (its client resumed there), the ordinary
// QoS 1 and 2 messages the copy took since its adoption go there, with
// DUP; with owner empty (not known yet) they go with the copy.
func (srv *Server) Drop(clientID, owner string) {
	srv.mu.Lock()
	sess := srv.sessions[clientID]
	if sess != nil {
		delete(srv.sessions, clientID)
	}
	srv.mu.Unlock()
	if sess != nil {
		srv.discardAbove(sess, sess.adoptedSeq(), owner)
	}
}

// ConfirmAdopted tells the broker that the claim of a session Adopt
// installed, given up for lost when etcd did not confirm it in time, was
// written after all: the copy is the client's session, and takes the
// messages redirected to it from the node it came from.
func (srv *Server) ConfirmAdopted(clientID string) { srv.claimed(clientID) }

// discard drops a session superseded by one handed over: its connection
// is closed (0x8E), its subscriptions stop routing, and its records are
// deleted, without publishing its will (the session lives on, elsewhere).
// Its messages are not handed to other members.
func (srv *Server) discard(sess *session) {
	srv.discardAbove(sess, ^uint64(0), "")
}

// adoptedSeq is the seq of the last message of the state the session was
// adopted with.
func (sess *session) adoptedSeq() uint64 {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	return sess.adopted
}

// discardAbove is discard, settling the undelivered messages with a seq
// after upTo: share-group ones go to the group's other members, and, when
// to names the node that holds the session now, ordinary ones go there,
// to the session, with DUP (kept in to's outbox until it has them).
func (srv *Server) discardAbove(sess *session, upTo uint64, to string) {
	sess.mu.Lock()
	if sess.ended {
		sess.mu.Unlock()
		return
	}
	sess.ended = true
	sess.mu.Unlock()
	srv.letGo(sess, "")
	sess.mu.Lock()
	var since, owed []delivery
	if upTo != ^uint64(0) {
		since = slices.DeleteFunc(sess.takeUndelivered(nil), func(d delivery) bool { return d.seq <= upTo })
		if to != "" {
			owed = sess.owedLocked(since, upTo)
		}
	}
	sess.queue.reset()
	clear(sess.inflight)
	sess.releaseWaitersLocked(true)
	sess.mu.Unlock()
	for _, d := range owed {
		// Written before the session's records are deleted (the Store
		// applies writes in order), so a crash keeps one or the other.
		srv.forwardDurable(to, sess.id, d.msg.dupCopy(), nil)
	}
	if to != "" {
		grouped := 0
		for _, d := range since {
			if d.group != nil {
				grouped++
			}
		}
		srv.log.Info("let go of a session the line adopted elsewhere from its replica",
			"client", sess.id, "owner", to, "replicated_up_to", upTo, "handed_to_owner", len(owed), "to_group", grouped)
	}
	srv.settle(sess, since, func() { srv.deleteStored(sess) })
}

// owedLocked returns, of since (the undelivered messages after upTo, as
// takeUndelivered gives them) and of the QoS 2 ones still in flight that
// the client has not acknowledged with PUBREC, those of ordinary
// subscriptions, in seq order: what the session's new owner must get.
func (s *session) owedLocked(since []delivery, upTo uint64) []delivery {
	var out []delivery
	for _, d := range since {
		if d.group == nil && d.feed == nil && d.qos > 0 {
			out = append(out, d)
		}
	}
	for _, d := range s.inflight {
		if d.group == nil && d.qos == 2 && !d.released && d.seq > upTo {
			out = append(out, d)
		}
	}
	slices.SortFunc(out, func(a, b delivery) int { return cmp.Compare(a.seq, b.seq) })
	return out
}

// letGo detaches a session that lives on elsewhere (handed over to node
// to, or superseded by one handed over when to is empty): its connection
// is closed with 0x8E, its timers and any delayed will are cancelled (the
// client resumes within the delay, as on a takeover here), and its
// subscriptions stop routing here, without handing its messages to other
// members, but for those redirected to to (redirect.go). It returns the
// subscriptions it had. sess is already out of srv.sessions.
func (srv *Server) letGo(sess *session, to string) map[string]*subscription {
	sess.mu.Lock()
	c := sess.conn
	sess.conn = nil
	stopTimer(&sess.expiryTimer)
	stopTimer(&sess.willTimer)
	sess.pendingWill = nil
	subs := sess.takeSubsLocked()
	sess.mu.Unlock()
	if c != nil {
		c.wmu.Lock()
		c.takeover, c.takenByClean = true, false
		c.wmu.Unlock()
		c.kick(packet.SessionTakenOver)
	}
	for _, sub := range srv.startRedirect(sess.id, to, subs) {
		if sub.group != nil {
			srv.leaveGroup(sub)
		} else {
			srv.subs.Remove(sub.topicFilter, sub)
		}
		if cl := srv.opts.Cluster; cl != nil {
			cl.Unsubscribed(sess.id, sub.filter)
		}
	}
	return subs
}

// takeBackHanded restores a session this node handed over whose new owner
// never took it (its claim failed), for its client resuming here; a client
// starting clean here just ends it. It runs before attach.
func (srv *Server) takeBackHanded(clientID string, cleanStart bool) error {
	// The client is served here again: nothing of it goes to another node.
	defer srv.endRedirectOf(clientID, nil)
	defer srv.returned(clientID)
	srv.mu.Lock()
	st, ok := srv.handed[clientID]
	srv.mu.Unlock()
	switch {
	case !ok:
		return nil
	case cleanStart:
		srv.Evict(clientID)
		return nil
	default:
		return srv.Adopt(st)
	}
}
