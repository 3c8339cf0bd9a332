package broker

import (
	"sync"
	"time"

	"github.com/linemq/linemq/broker/packet"
)

// attach binds a freshly accepted connection to its session, taking the
// session over from any connection that holds it [MQTT-3.1.4-3], and
// queues the CONNACK (made by connack, told whether a session is present)
// before anything the session has to resend. It reports session present,
// and Success; or, touching nothing, the CONNACK refusal of a limit
// (MaxConnections, MaxSessions: admitLocked).
//
// The session is chosen, bound to c and given its CONNACK in one critical
// section under srv.mu: a CONNECT for the same client id arriving a moment
// later must find this connection in place and take the session over from
// it. Were the binding done after srv.mu is released, that CONNECT could
// find the session without a connection, kick nobody, and leave two live
// connections on one client id.
func (srv *Server) attach(c *conn, cleanStart bool, expiry uint32, connack func(present bool) []byte) (bool, packet.ReasonCode) {
	var (
		oldConn  *conn
		oldWill  *will
		ended    *session
		sess     *session
		present  bool
		now      = srv.clock.Now()
		clientID = c.clientID
	)
	srv.mu.Lock()
	old := srv.sessions[clientID]
	if rc := srv.admitLocked(c, old, expiry); rc != packet.Success {
		srv.mu.Unlock()
		if cl := srv.opts.Cluster; cl != nil && old == nil {
			cl.Release(clientID) // claimed by handleConnect, never used
		}
		return false, rc
	}
	if old != nil {
		old.mu.Lock()
		oldConn = old.conn
		old.conn = nil
		if w := oldConnWill(oldConn); w != nil && (w.delay == 0 || cleanStart) {
			// The will of the connection taken over goes out here,
			// before the new connection's first packet is read: a client
			// that reconnects sees its old will come before its new
			// traffic, never after (a Sparkplug edge node's NDEATH before
			// its new NBIRTH). Taken from the connection, so that its
			// teardown does not publish it again. (A packet the old
			// connection's reader is routing at this very moment may
			// still come after the will.)
			oldWill, oldConn.will = w, nil
		}
		stopTimer(&old.expiryTimer)
		if stopTimer(&old.willTimer) || old.pendingWill != nil {
			// A connection arriving within the will delay cancels the will,
			// unless it starts clean: then the old session ends, and its
			// will goes with it [MQTT-3.1.3-9].
			if cleanStart && old.pendingWill != nil {
				oldWill = old.pendingWill
			}
			old.pendingWill = nil
		}
		if cleanStart && old.stored {
			// The new session's records must not be deleted by the old
			// one's cleanup, which runs later (endSession): the old
			// records go now, before the new session saves its own,
			// and the old session writes nothing from here on.
			old.stored, old.replaced = false, true
			srv.storeErr("delete session", clientID, srv.opts.Store.DeleteSession(clientID))
		}
		old.mu.Unlock()
	}
	if old == nil || cleanStart {
		sess = newSession(srv, clientID, c.version)
		sess.dupBefore = srv.clock.Now()
		ended = old
	} else {
		sess = old
		present = true // [MQTT-3.2.2-3]
	}
	srv.sessions[clientID] = sess
	if oldConn != nil {
		// Marked before the new connection is visible, so that the old
		// one's teardown knows it was taken over.
		oldConn.wmu.Lock()
		oldConn.takeover, oldConn.takenByClean = true, cleanStart
		oldConn.wmu.Unlock()
	}

	sess.mu.Lock()
	sess.version = c.version
	sess.expiry = expiry
	sess.conn = c
	c.sess = sess
	sess.since = now
	sess.saveLocked()
	// connected turns true with the CONNACK queued, under the write lock, so
	// that a kick racing with this (a shutdown) sends DISCONNECT to a client
	// that may already hold its CONNACK.
	ack := connack(present)
	srv.stats.connected.Add(1) // counted before the client can see its CONNACK
	srv.stats.connects.Add(1)
	c.wmu.Lock()
	c.connected = true
	if !c.closing {
		c.out = append(c.out, ack...)
	}
	c.wmu.Unlock()
	if present {
		// Resent before anything new can be delivered, in their original
		// order [MQTT-4.6.0-1].
		sess.resumeLocked()
	}
	sess.mu.Unlock()
	srv.mu.Unlock()

	if oldConn != nil {
		oldConn.kick(packet.SessionTakenOver)
	}
	if ended != nil {
		srv.endSession(ended)
	}
	if oldWill != nil {
		srv.publishWill(oldWill, now)
	}
	c.signal()
	return present, packet.Success
}

// oldConnWill is c's will, nil when c is nil or has none; the caller
// holds c's session's lock.
func oldConnWill(c *conn) *will {
	if c == nil {
		return nil
	}
	return c.will
}

// detach runs when a connection has ended: the session is left to expire,
// or ends now, and the will is published or scheduled.
func (srv *Server) detach(c *conn, reason packet.ReasonCode) {
	sess := c.sess
	now := srv.clock.Now()
	c.wmu.Lock()
	takenOver, takenByClean := c.takeover, c.takenByClean
	c.wmu.Unlock()
	sess.mu.Lock()
	w := c.will // nil after a DISCONNECT that discards it, or a takeover that published it
	if sess.conn != c {
		// Taken over: the new connection owns the session now. The old
		// will goes out only if it had no delay, or if the new connection
		// started clean and so ended the session it belonged to.
		sess.mu.Unlock()
		if w != nil && takenOver && (w.delay == 0 || takenByClean) {
			srv.publishWill(w, now)
		}
		return
	}
	sess.conn = nil
	sess.dropQueuedQoS0Locked()
	sess.disconnects++
	sess.since = now
	expiry := sess.expiry
	var early []delivery
	for _, sub := range sess.subs {
		// Groups that asked for it get this member's messages back as soon
		// as its connection breaks, not when its session ends.
		if sub.group != nil && sub.group.policy.RedispatchOnDisconnect {
			early = append(early, sess.takeUndelivered(sub.group)...)
		}
	}
	if expiry != 0 && w != nil && w.delay > 0 {
		delay := time.Duration(min(w.delay, expiry)) * time.Second
		pending := w
		sess.pendingWill = pending
		sess.willTimer = srv.clock.AfterFunc(delay, func() { srv.willDue(sess, pending) })
		w = nil
	}
	if expiry != 0 && expiry != neverExpires {
		sess.expiryTimer = srv.clock.AfterFunc(time.Duration(expiry)*time.Second, func() { srv.expire(sess) })
	}
	sess.saveLocked()
	sess.mu.Unlock()

	srv.settle(sess, early, nil)
	if w != nil {
		srv.publishWill(w, now)
	}
	if expiry == 0 {
		srv.mu.Lock()
		mine := srv.sessions[sess.id] == sess
		if mine {
			delete(srv.sessions, sess.id)
		}
		srv.mu.Unlock()
		srv.endSession(sess)
		if cl := srv.opts.Cluster; cl != nil && mine {
			cl.Release(sess.id)
		}
	}
}

// willDue publishes a delayed will whose delay passed with the client still away.
func (srv *Server) willDue(sess *session, w *will) {
	sess.mu.Lock()
	due := sess.pendingWill == w && sess.conn == nil
	if due {
		sess.pendingWill = nil
		sess.willTimer = nil
		sess.saveLocked()
	}
	sess.mu.Unlock()
	if due {
		srv.publishWill(w, srv.clock.Now())
	}
}

// expire ends a session whose expiry interval passed while it was offline.
func (srv *Server) expire(sess *session) {
	srv.mu.Lock()
	sess.mu.Lock()
	gone := srv.sessions[sess.id] == sess && sess.conn == nil
	sess.mu.Unlock()
	if gone {
		delete(srv.sessions, sess.id)
	}
	srv.mu.Unlock()
	if gone {
		srv.stats.expiredSessions.Add(1)
		srv.endSession(sess)
		if cl := srv.opts.Cluster; cl != nil {
			cl.Release(sess.id)
		}
	}
}

// endSession discards a session that is no longer reachable: its
// subscriptions and group memberships go, share-group messages it held are
// handed to the other members, and a will still waiting is published now
// (the session ending ends the delay [MQTT-3.1.2-8]).
func (srv *Server) endSession(sess *session) {
	sess.mu.Lock()
	if sess.ended {
		sess.mu.Unlock()
		return
	}
	sess.ended = true
	stopTimer(&sess.expiryTimer)
	stopTimer(&sess.willTimer)
	w := sess.pendingWill
	sess.pendingWill = nil
	subs := sess.takeSubsLocked()
	sess.mu.Unlock()

	var left []delivery
	for _, sub := range subs {
		left = append(left, srv.leave(sub)...)
		if cl := srv.opts.Cluster; cl != nil {
			cl.Unsubscribed(sess.id, sub.filter)
		}
	}
	// Whatever share-group messages are left (their group may have been
	// left above) go to the remaining members of their groups; the
	// session's records go once each has (settle).
	sess.mu.Lock()
	left = append(left, sess.takeUndelivered(nil)...)
	sess.queue.reset()
	clear(sess.inflight)
	sess.releaseWaitersLocked(true)
	sess.mu.Unlock()
	srv.settle(sess, left, func() { srv.deleteStored(sess) })
	if w != nil {
		srv.publishWill(w, srv.clock.Now())
	}
}

// publishWill publishes a will as a message of the broker's own.
func (srv *Server) publishWill(w *will, now time.Time) {
	if cl := srv.opts.Cluster; cl != nil && !cl.TakeWill(w.client, w.ref) {
		srv.log.Info("will not published here: the line publishes it", "client", w.client)
		return
	}
	srv.stats.willsPublished.Add(1)
	srv.Publish(w.message(now))
}

// WillPublishedElsewhere implements ClusterInbound.
func (srv *Server) WillPublishedElsewhere(clientID string) {
	srv.mu.Lock()
	sess := srv.sessions[clientID]
	srv.mu.Unlock()
	if sess == nil {
		return
	}
	sess.mu.Lock()
	c := sess.conn
	sess.mu.Unlock()
	if c == nil {
		return
	}
	srv.log.Warn("closing a connection whose will the line published while this gateway was cut off", "client", clientID)
	c.kickWith(packet.AdministrativeAction, "your will was published while this gateway was cut off from its line: connect again")
}

// PublishWill implements ClusterInbound.
func (srv *Server) PublishWill(m *Message) {
	srv.stats.willsPublished.Add(1)
	srv.publishFrom(m, FromLine)
}

// flushDelayedWills publishes, at shutdown, every will still waiting out its
// delay: the broker going away is the end of those sessions' wait.
func (srv *Server) flushDelayedWills() {
	srv.mu.Lock()
	var due []*will
	for _, sess := range srv.sessions {
		sess.mu.Lock()
		if sess.pendingWill != nil {
			stopTimer(&sess.willTimer)
			due = append(due, sess.pendingWill)
			sess.pendingWill = nil
			sess.saveLocked() // so that a restart does not publish it again
		}
		stopTimer(&sess.expiryTimer)
		sess.mu.Unlock()
	}
	srv.mu.Unlock()
	now := srv.clock.Now()
	// Each may wait for the cluster (TakeWill): all at once, so that a
	// shutdown takes one wait, not one per will.
	var wg sync.WaitGroup
	for _, w := range due {
		wg.Add(1)
		go func() {
			defer wg.Done()
			srv.publishWill(w, now)
		}()
	}
	wg.Wait()
}

// stopTimer stops and clears *t; it reports whether a timer was pending.
func stopTimer(t *Timer) bool {
	if *t == nil {
		return false
	}
	stopped := (*t).Stop()
	*t = nil
	return stopped
}
