package broker

import (
	"cmp"
	"slices"
	"time"
)

// A cluster may keep a copy of each persistent session on other nodes (its
// replicas), so that the line keeps the session when its node dies with
// its storage. The copy is made from the Store's writes, which the cluster
// sees as they happen; what the broker adds here is what the writes
// cannot give: a whole session at once (for a replica that joins or comes
// back), a session installed from a replica once its owner is gone, and
// the letting go of a copy the line has adopted elsewhere.

// ReplicaSnapshot calls f with the state of clientID's persistent session
// as its records in the Store stand, under the session's lock: every
// Store write for the session made before f is called is in the state,
// and none made after. The cluster queues it among those writes, so a
// replica that applies them in order ends with the owner's state. It
// reports false, without calling f, when there is no such stored session
// here. f must not block.
func (srv *Server) ReplicaSnapshot(clientID string, f func(st *SessionState)) bool {
	srv.mu.Lock()
	s := srv.sessions[clientID]
	srv.mu.Unlock()
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.stored || !s.persistentLocked() {
		return false
	}
	st := &SessionState{Session: *s.recordLocked()}
	for _, sub := range s.subs {
		st.Session.Subscriptions = append(st.Session.Subscriptions, sub.record())
	}
	slices.SortFunc(st.Session.Subscriptions, func(a, b SubscriptionRecord) int { return cmp.Compare(a.Filter, b.Filter) })
	// Only what the Store holds: a retained feed being sent is not
	// stored (a restart sends it again), and so is not replicated.
	add := func(d *delivery) {
		if d.stored {
			st.Messages = append(st.Messages, s.messageRecord(d))
		}
	}
	for _, d := range s.inflight {
		add(&d)
	}
	for i := range s.queue.len() {
		if d := s.queue.at(i); d.feed == nil {
			add(d)
		}
	}
	slices.SortFunc(st.Messages, func(a, b *MessageRecord) int { return cmp.Compare(a.Seq, b.Seq) })
	for pid := range s.inQoS2 {
		st.Inbound = append(st.Inbound, pid)
	}
	slices.Sort(st.Inbound)
	f(st)
	return true
}

// AdoptReplica installs a session from a replica this node kept of a dead
// node's session, once the cluster has made this node its owner (a claim
// the dead node cannot contest). The session is offline: its expiry runs
// from disconnected (from now if zero: its client was connected when its
// node died), and a client resuming it, here or on any node, finds it
// with its messages, those that went out before with DUP. from is the
// dead node, and view the cluster view (Cluster.View) the claim was made
// at: forwards from that node routed by an older view are not for this
// copy (deliverLocked). It returns once the state is durable here.
func (srv *Server) AdoptReplica(st *SessionState, disconnected time.Time, from string, view uint64) error {
	if err := srv.Adopt(st); err != nil {
		return err
	}
	srv.claimed(st.Session.ClientID)
	srv.mu.Lock()
	s := srv.sessions[st.Session.ClientID]
	srv.mu.Unlock()
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != nil || s.ended {
		return nil // its client is back already
	}
	now := srv.clock.Now()
	if !disconnected.IsZero() && disconnected.Before(now) {
		s.since = disconnected
	}
	// Every message came through a node that is gone: whether it reached
	// the client before is unknown, so each is sent with DUP.
	s.dupBefore = now.Add(moveSkew)
	s.adoptedFrom, s.viewFrom = from, view
	for pid, d := range s.inflight {
		d.sent = true
		s.inflight[pid] = d
	}
	if s.expiry != neverExpires {
		left := max(s.since.Add(time.Duration(s.expiry)*time.Second).Sub(now), 0)
		s.expiryTimer = srv.clock.AfterFunc(left, func() { srv.expire(s) })
	}
	return nil
}

// DropReplicated lets go of a session whose copy the line has adopted on
// node owner from a replica, while this node was taken for dead (cut off
// from the others for longer than its lease). Its connection is closed
// (0x8E) and its records go. Its messages up to seq upTo are in the
// adopted copy and go with it; those after it (queued here while the
// replica could not be reached) are handed on, so that nothing
// acknowledged here is lost with the copy: share-group messages to the
// group's other members, ordinary ones to the session on owner, with DUP.
func (srv *Server) DropReplicated(clientID string, upTo uint64, owner string) {
	srv.mu.Lock()
	sess := srv.sessions[clientID]
	if sess != nil {
		delete(srv.sessions, clientID)
	}
	srv.mu.Unlock()
	if sess != nil {
		srv.discardAbove(sess, upTo, owner)
	}
}

// record is the stored form of a subscription.
func (sub *subscription) record() SubscriptionRecord {
	return SubscriptionRecord{
		Filter: sub.filter, QoS: sub.qos, NoLocal: sub.noLocal, RetainAsPublished: sub.retainAsPublished,
		RetainHandling: sub.retainHandling, SubscriptionID: sub.id,
	}
}

// NodeFailedOver says that node is gone and the sessions it held live on
// other nodes now, adopted from their replicas: its routes go, and what
// this node kept for its subscribers (its outbox, which waits for a node
// that is away) is routed again, with DUP, to the subscriptions that match
// now, where the adopted sessions subscribe. The publishers waiting for it
// are acknowledged once the new copies are durable.
func (srv *Server) NodeFailedOver(node string) {
	srv.routesMu.Lock()
	for key, rr := range srv.routes {
		if key.node == node {
			delete(srv.routes, key)
			srv.remote.Remove(rr.filter, rr)
		}
	}
	srv.routesMu.Unlock()
	srv.forwards.mu.RLock()
	o := srv.forwards.m[node]
	srv.forwards.mu.RUnlock()
	if o == nil {
		return
	}
	o.rerouteMu.Lock()
	defer o.rerouteMu.Unlock()
	o.mu.Lock()
	entries := o.entries
	o.entries, o.next, o.inflight, o.bytes = nil, 0, 0, 0
	o.gen++ // an answer still on its way finds nothing to complete
	var waits []*remoteWait
	for _, e := range entries {
		o.forgetLocked(e)
		if e.wait != nil {
			waits = append(waits, e.wait)
			e.wait = nil
		}
		o.rerouted++
	}
	o.mu.Unlock()
	for _, e := range entries {
		srv.reroute(node, e.msg)
	}
	if len(entries) > 0 {
		srv.log.Info("routed again what was kept for a node whose sessions failed over", "node", node, "messages", len(entries))
	}
	if len(waits) > 0 {
		go o.release(waits, true)
	}
}
