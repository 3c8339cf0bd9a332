package broker

import (
	"context"
	"fmt"
	"time"

	"github.com/linemq/linemq/broker/packet"
	"github.com/linemq/linemq/broker/topic"
)

// persistentLocked reports whether the session's changes go to the Store:
// only sessions that outlive their connection are worth a disk write.
func (s *session) persistentLocked() bool {
	return s.srv.opts.Store != nil && s.expiry != 0 && !s.ended && !s.replaced
}

// saveLocked writes the session's own record (expiry, will); its
// subscriptions are written one by one as they change (saveSubLocked).
func (s *session) saveLocked() {
	if !s.persistentLocked() {
		return
	}
	s.stored = true
	s.srv.storeErr("save session", s.id, s.srv.opts.Store.SaveSession(s.recordLocked()))
}

// recordLocked is the session's own record, without its subscriptions.
func (s *session) recordLocked() *SessionRecord {
	rec := &SessionRecord{ClientID: s.id, Version: s.version, ExpiryInterval: s.expiry}
	if s.conn == nil {
		rec.Disconnected = s.since // zero while connected: a restart counts from then
	}
	w := s.pendingWill
	if w == nil && s.conn != nil {
		w = s.conn.will
	}
	if w != nil {
		rec.Will = &WillRecord{Message: w.msg, Delay: w.delay, Expiry: w.expiry, HasExpiry: w.hasExpiry}
	}
	return rec
}

// saveSubLocked writes one subscription of a persistent session; it
// reports whether the Store was written to.
func (s *session) saveSubLocked(sub *subscription) bool {
	if !s.persistentLocked() {
		return false
	}
	s.srv.storeErr("save subscription", s.id, s.srv.opts.Store.SaveSubscription(s.id, sub.record()))
	return true
}

// deleteSubLocked forgets one subscription of a stored session; it reports
// whether the Store was written to.
func (s *session) deleteSubLocked(filter string) bool {
	if !s.stored || s.srv.opts.Store == nil || s.ended {
		return false
	}
	s.srv.storeErr("delete subscription", s.id, s.srv.opts.Store.DeleteSubscription(s.id, filter))
	return true
}

// saveMsgLocked writes a QoS 1/2 delivery of a persistent session.
func (s *session) saveMsgLocked(d *delivery) {
	if d.qos == 0 || !s.persistentLocked() {
		return
	}
	rec := s.messageRecord(d)
	d.stored = true
	s.srv.storeErr("save message", s.id, s.srv.opts.Store.SaveMessage(s.id, rec))
}

// messageRecord is the stored form of a delivery.
func (s *session) messageRecord(d *delivery) *MessageRecord {
	rec := &MessageRecord{
		Seq: d.seq, Message: d.msg, QoS: d.qos, Retain: d.retain, Sent: d.sent, Released: d.released,
		SubIDs: d.subIDs.appendTo(nil),
	}
	rec.PacketID = d.pid // 0 while queued
	rec.MessageID = d.msg.storeID(&s.srv.msgIDs)
	if d.group != nil {
		rec.GroupName, rec.GroupFilter = d.group.key.name, d.group.key.filter
	}
	return rec
}

// forgetMsgLocked deletes a delivery's record, if it has one.
func (s *session) forgetMsgLocked(d *delivery) {
	if !d.stored || s.srv.opts.Store == nil || s.replaced {
		d.stored = false // a replaced session's records went with it
		return
	}
	d.stored = false
	s.srv.storeErr("delete message", s.id, s.srv.opts.Store.DeleteMessage(s.id, d.seq))
}

// setInboundLocked records or forgets an inbound QoS 2 packet id.
func (s *session) setInboundLocked(pid uint16, pending bool) bool {
	if !s.persistentLocked() {
		return false
	}
	s.srv.storeErr("save inbound id", s.id, s.srv.opts.Store.SetInbound(s.id, pid, pending))
	return true
}

// deleteStored forgets a session that ended.
func (srv *Server) deleteStored(s *session) {
	s.mu.Lock()
	stored := s.stored
	s.stored = false
	s.mu.Unlock()
	if stored && srv.opts.Store != nil {
		srv.storeErr("delete session", s.id, srv.opts.Store.DeleteSession(s.id))
	}
}

func (srv *Server) storeErr(op, clientID string, err error) {
	if err != nil {
		srv.stats.storeErrors.Add(1)
		srv.log.Error("store write failed", "op", op, "client", clientID, "err", err)
	}
}

// syncStore waits for the Store to make every write so far durable.
func (srv *Server) syncStore() error {
	st := srv.opts.Store
	if st == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), srv.opts.WriteTimeout)
	defer cancel()
	err := st.Sync(ctx)
	if err != nil {
		srv.stats.storeErrors.Add(1)
		srv.log.Error("store sync failed", "err", err)
	}
	return err
}

// restore rebuilds sessions, their messages and the retained messages from
// the Store at start. Every restored session is offline: its expiry and
// any will count from when it was last seen connected (or from now, for a
// session that was connected when the broker stopped).
func (srv *Server) restore(ctx context.Context) error {
	snap, err := srv.opts.Store.Load(ctx)
	if err != nil {
		return fmt.Errorf("broker: loading stored state: %w", err)
	}
	now := srv.clock.Now()
	// Stored times are wall-clock readings. Each becomes a time on this
	// run's clock (now plus its distance from base), so that no deadline
	// moves when the wall clock is stepped later. base is now, unless the
	// clock is behind the newest stored time: a board without a real-time
	// clock that has booted before NTP answered. Then no time is taken to
	// have passed since that newest time, and each expiry runs the rest of
	// its interval from now, instead of expiring nothing for decades (the
	// deadlines would lie far ahead of a clock at 1970), or everything at
	// once when the clock is set.
	base := now
	if newest := newestTime(snap); now.Before(newest) {
		base = newest
		srv.log.Warn("the clock is behind the newest time in the store (not set yet?): expiry counts from now as if no time had passed since then",
			"clock", now.UTC().Format(time.RFC3339), "newest_stored", newest.UTC().Format(time.RFC3339))
	}
	rebased := map[*Message]bool{}
	rebase := func(m *Message) {
		if m == nil || rebased[m] {
			return
		}
		rebased[m] = true
		m.Created = onRun(m.Created, now, base)
		m.Expires = onRun(m.Expires, now, base)
	}
	for _, ms := range snap.Messages {
		for _, mr := range ms {
			rebase(mr.Message)
		}
	}
	for _, m := range snap.Retained {
		rebase(m)
		if !m.expired(now) {
			srv.retained.set(m)
		}
	}
	var ended []*session
	for _, rec := range snap.Sessions {
		if _, ok := ForwardQueueOf(rec.ClientID); ok {
			srv.restoreOutbox(rec, snap.Messages[rec.ClientID])
			continue
		}
		s := newSession(srv, rec.ClientID, rec.Version)
		s.expiry = rec.ExpiryInterval
		s.stored = true
		since := onRun(rec.Disconnected, now, base)
		if since.IsZero() {
			since = now
		}
		s.since = since
		for _, sr := range rec.Subscriptions {
			srv.restoreSubscription(s, sr)
		}
		for _, mr := range snap.Messages[rec.ClientID] {
			d := srv.deliveryOf(mr)
			d.stored = true
			s.seq = max(s.seq, mr.Seq)
			srv.restoreMessageID(mr)
			if mr.PacketID != 0 {
				s.inflight[mr.PacketID] = d
			} else {
				// The process died (or the session was stored as
				// connected, for a Store that cannot tell): what it had
				// queued may have gone out just before, its "sent" (and
				// the connection's record) not yet committed.
				d.maybeSent = snap.Unclean || rec.Disconnected.IsZero()
				s.queue.push(d)
			}
		}
		for _, pid := range snap.Inbound[rec.ClientID] {
			s.inQoS2[pid] = struct{}{}
		}
		srv.sessions[s.id] = s
		if rec.Will != nil {
			s.pendingWill = &will{msg: rec.Will.Message, delay: rec.Will.Delay, expiry: rec.Will.Expiry, hasExpiry: rec.Will.HasExpiry, client: s.id}
		}
		left := time.Duration(0)
		if s.expiry != neverExpires {
			left = since.Add(time.Duration(s.expiry) * time.Second).Sub(now)
			if left <= 0 {
				ended = append(ended, s)
				continue
			}
			s.expiryTimer = srv.clock.AfterFunc(left, func() { srv.expire(s) })
		}
		if w := s.pendingWill; w != nil {
			delay := time.Duration(min(w.delay, s.expiry)) * time.Second
			due := since.Add(delay).Sub(now)
			pending := w
			s.willTimer = srv.clock.AfterFunc(max(due, 0), func() { srv.willDue(s, pending) })
		}
	}
	for _, s := range ended {
		delete(srv.sessions, s.id)
		srv.endSession(s)
	}
	srv.log.Info("restored state", "sessions", len(srv.sessions), "retained", srv.retained.len(), "expired_sessions", len(ended))
	return nil
}

// onRun turns a stored wall-clock time t into a time on this run's clock:
// as far from now as it was from base. Zero stays zero.
func onRun(t, now, base time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return now.Add(t.Sub(base))
}

// newestTime is the latest time a snapshot records: when a session went
// offline, when a message arrived.
func newestTime(snap *Snapshot) time.Time {
	var newest time.Time
	later := func(t time.Time) {
		if t.After(newest) {
			newest = t
		}
	}
	for _, m := range snap.Retained {
		later(m.Created)
	}
	for _, rec := range snap.Sessions {
		later(rec.Disconnected)
	}
	for _, ms := range snap.Messages {
		for _, mr := range ms {
			if mr.Message != nil {
				later(mr.Message.Created)
			}
		}
	}
	return newest
}

// deliveryOf makes the delivery a stored (or handed over) message record
// stands for, linked to its share group if it was picked for one.
func (srv *Server) deliveryOf(mr *MessageRecord) delivery {
	d := delivery{msg: mr.Message, seq: mr.Seq, pid: mr.PacketID, qos: mr.QoS, retain: mr.Retain,
		sent: mr.Sent, released: mr.Released}
	for _, id := range mr.SubIDs {
		d.subIDs.add(id)
	}
	if mr.GroupName != "" {
		srv.groupsMu.Lock()
		d.group = srv.groups[groupKey{mr.GroupName, mr.GroupFilter}]
		srv.groupsMu.Unlock()
	}
	return d
}

// restoreSubscription re-creates a stored subscription of an offline session.
func (srv *Server) restoreSubscription(s *session, sr SubscriptionRecord) {
	group, tf, shared, err := topic.ParseShare(sr.Filter)
	if err != nil {
		srv.log.Warn("dropping an invalid stored subscription", "client", s.id, "filter", sr.Filter, "err", err)
		srv.storeErr("delete subscription", s.id, srv.opts.Store.DeleteSubscription(s.id, sr.Filter))
		return
	}
	if !shared {
		tf = sr.Filter
	}
	sub := &subscription{sess: s, filter: sr.Filter, topicFilter: tf, qos: sr.QoS, noLocal: sr.NoLocal,
		retainAsPublished: sr.RetainAsPublished, retainHandling: sr.RetainHandling, id: sr.SubscriptionID, groupName: group}
	if shared {
		if rc := srv.joinGroup(group, tf, sub); rc != packet.GrantedQoS0 {
			srv.log.Warn("stored member refused by its group's contract", "client", s.id, "group", group)
			srv.storeErr("delete subscription", s.id, srv.opts.Store.DeleteSubscription(s.id, sr.Filter))
			return
		}
	} else {
		srv.subs.Add(tf, sub)
	}
	s.setSubLocked(sub)
	if cl := srv.opts.Cluster; cl != nil {
		cl.Subscribed(s.id, sr.Filter, sr.QoS)
	}
}

// restoreMessageID gives a restored record's message its Store id (shared
// by every record of that id) and keeps the next id past it.
func (srv *Server) restoreMessageID(mr *MessageRecord) {
	if mr.MessageID == 0 {
		return
	}
	srv.msgIDs.Store(max(srv.msgIDs.Load(), mr.MessageID))
	mr.Message.id.Store(mr.MessageID)
}
