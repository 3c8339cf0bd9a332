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
// other nodes now, adopted from their replicas (adopted: client -> the
// node that owns it now, "" for this one): its routes go, and what this
// node kept for its subscribers (its outbox, which waits for a node that
// is away) goes, with DUP, to the adopted sessions by name. Sent to
// their nodes for their ordinary subscribers instead, it would be taken
// there by any other subscriber of the topic, and not reach the adopted
// session once that has moved on (fault suite: 922 and 998 messages
// missed by a session handed back to its gateway just before the whole
// line was killed). With no adoption known, it is routed again to the
// subscriptions that match now. The publishers waiting for it are
// acknowledged once the new copies are durable.
//
// back, when not nil, says that node is registered again, a new run (a
// blank card, or a fail-over that ended only after its return): back is
// its routes now. They stay, and so does its outbox, which serves the new
// run; the adopted sessions get their copies by name besides. Dropping
// them, a gateway stopped forwarding to the new run's subscribers and
// routed what was on its way to it elsewhere (fault suite: one message
// lost, published 10 ms after a fail-over ended 3 s after its gateway's
// return).
func (srv *Server) NodeFailedOver(node string, adopted map[string]string, back []string) {
	srv.routesMu.Lock()
	for key, rr := range srv.routes {
		if key.node == node && (back == nil || !slices.Contains(back, rr.filter)) {
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
	if back != nil {
		o.mu.Lock()
		entries := slices.Clone(o.entries)
		o.mu.Unlock()
		named := 0
		for _, e := range entries {
			named += srv.failOver(node, e, adopted, false)
		}
		if named > 0 {
			srv.log.Info("sent what was kept for a node back with a new run to the sessions adopted from its earlier one", "node", node,
				"messages", len(entries), "to_adopted_sessions", named, "adopted", len(adopted))
		}
		return
	}
	o.mu.Lock()
	entries := o.entries
	o.entries, o.next, o.inflight, o.bytes = nil, 0, 0, 0
	o.gen++ // an answer still on its way finds nothing to complete
	var waits []*remoteWait
	for _, e := range entries {
		if e.wait != nil {
			waits = append(waits, e.wait)
			e.wait = nil
		}
		o.rerouted++
	}
	o.mu.Unlock()
	// The new copies are written before the old records go, so that a
	// crash between the two leaves a message twice rather than nowhere.
	named := 0
	for _, e := range entries {
		named += srv.failOver(node, e, adopted, true)
	}
	o.mu.Lock()
	for _, e := range entries {
		o.forgetLocked(e)
	}
	o.mu.Unlock()
	if len(entries) > 0 {
		srv.log.Info("routed again what was kept for a node whose sessions failed over", "node", node,
			"messages", len(entries), "to_adopted_sessions", named, "adopted", len(adopted))
	}
	if len(waits) > 0 {
		go o.release(waits, true)
	}
}

// failOver sends e, kept for node's subscribers (or for one client of
// node, e.client), to the sessions adopted from node, and returns how many
// copies it sent by name. A copy named for a client goes to its node
// only if that node has a route matching it; one for this node goes
// straight to the session. With reroute, what no adopted session is
// named for is routed again to whoever matches it.
func (srv *Server) failOver(node string, e *outboxEntry, adopted map[string]string, reroute bool) int {
	c := e.msg.dupCopy()
	c.view.Store(0)
	c.fromPeer, c.owed = true, true
	if e.client != "" {
		if owner, ok := adopted[e.client]; ok {
			srv.sendNamed(e.client, owner, c)
			return 1
		}
		if reroute {
			srv.reroute(node, e.msg)
		}
		return 0
	}
	if len(adopted) == 0 {
		if reroute {
			srv.reroute(node, e.msg)
		}
		return 0
	}
	var routed []string // nodes with a route matching c
	for _, rr := range srv.remote.Match(c.topicBytes) {
		if !slices.Contains(routed, rr.node) {
			routed = append(routed, rr.node)
		}
	}
	n := 0
	for client, owner := range adopted {
		if owner == "" || slices.Contains(routed, owner) {
			srv.sendNamed(client, owner, c)
			n++
		}
	}
	if n == 0 && reroute {
		// No adopted session's node routes it: perhaps it was for a
		// session that did not outlive its node, perhaps a route not yet
		// seen here. Routed again as before, it reaches whoever matches.
		srv.reroute(node, e.msg)
	}
	return n
}

// sendNamed gives c to client's session on owner ("" for this node), by
// name: there only its own subscriptions are matched. What this node
// cannot give it (the session moved on meanwhile) is routed again.
func (srv *Server) sendNamed(client, owner string, c *Message) {
	if owner != "" {
		srv.forwardDurable(owner, client, c, nil)
		return
	}
	srv.deliverMoved(client, c, func(accepted bool, err error) {
		if !accepted && err == nil {
			srv.reroute("", c)
		}
	})
}
