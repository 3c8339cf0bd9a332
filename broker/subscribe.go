package broker

import (
	"slices"
	"strings"
	"sync/atomic"

	"github.com/linemq/linemq/broker/packet"
	"github.com/linemq/linemq/broker/topic"
)

// subscription is one filter of one session with its options. Ordinary
// subscriptions are values of the server's subscription index; shared ones
// are members of their group.
type subscription struct {
	sess              *session
	filter            string // as subscribed, $share prefix included
	topicFilter       string // the filter proper
	qos               byte   // granted QoS
	noLocal           bool
	retainAsPublished bool
	retainHandling    byte
	id                uint32      // subscription identifier, 0 for none
	group             *shareGroup // nil for ordinary subscriptions
	groupName         string
	delivered         atomic.Uint64 // messages its group handed to it
	remote            *RemoteMember // a member on another node (sess is nil), or nil
}

// clientID is the id of the subscriber, local or remote.
func (sub *subscription) clientID() string {
	if sub.remote != nil {
		return sub.remote.ClientID
	}
	return sub.sess.id
}

// handleSubscribe handles SUBSCRIBE: each filter is validated, authorised
// and granted or refused on its own [MQTT-3.8.4-6]. The SUBACK is held like
// a PUBACK until what it promises is durable (a persistent session's
// subscriptions are on disk), and the retained messages the new
// subscriptions receive follow it.
func (c *conn) handleSubscribe(body []byte) error {
	p := &c.sc.sub
	if err := p.Decode(c.version, body); err != nil {
		return err
	}
	opts := &c.srv.opts
	var subID uint32
	if len(p.Props.SubscriptionIDs) > 0 {
		if opts.DisableSubIDs {
			return errSubIDsOff
		}
		subID = p.Props.SubscriptionIDs[0]
	}
	reply := &heldReply{reasons: make([]packet.ReasonCode, 0, len(p.Subs))}
	for i := range p.Subs {
		s := &p.Subs[i]
		filter := string(s.Filter)
		group, tf, shared, err := topic.ParseShare(filter)
		if err == nil && !shared {
			tf = filter
			err = topic.ValidateFilter(s.Filter)
		}
		switch {
		case err != nil || c.srv.tooDeep(tf):
			reply.reasons = append(reply.reasons, packet.TopicFilterInvalid)
			continue
		case shared && s.NoLocal:
			return errNoLocalShared
		case shared && opts.DisableSharedSubs:
			reply.reasons = append(reply.reasons, packet.SharedSubsNotSupported)
			continue
		case opts.DisableWildcardSubs && strings.ContainsAny(tf, "+#"):
			reply.reasons = append(reply.reasons, packet.WildcardSubsNotSupported)
			continue
		case !opts.Auth.CanSubscribe(c.info, filter):
			reply.reasons = append(reply.reasons, opts.DeniedSubscriptionReason) // 3.1.1: 0x80
			continue
		case c.atSubscriptionLimit(filter):
			reply.reasons = append(reply.reasons, packet.QuotaExceeded) // 3.1.1: 0x80
			continue
		}
		sub := &subscription{
			sess:              c.sess,
			filter:            filter,
			topicFilter:       tf,
			qos:               min(s.QoS, 2),
			noLocal:           s.NoLocal,
			retainAsPublished: s.RetainAsPublished,
			retainHandling:    s.RetainHandling,
			id:                subID,
			groupName:         group,
		}
		existed, rc, lb := c.srv.subscribe(sub, shared, c.rx)
		c.needSync = c.needSync || lb.persisted
		if rc.IsError() {
			reply.reasons = append(reply.reasons, rc)
			continue
		}
		reply.reasons = append(reply.reasons, packet.ReasonCode(sub.qos))
		reply.added = append(reply.added, addedSub{sub: sub, at: len(reply.reasons) - 1, existed: existed, back: lb.msgs})
		sess := c.sess
		sess.mu.Lock()
		if sess.subs[sub.filter] == sub && sess.saveSubLocked(sub) {
			c.needSync = true // the SUBACK waits for the record to be durable
		}
		sess.mu.Unlock()
		// A resubscription changes nothing the other nodes route by,
		// except a member's granted QoS.
		if cl := c.srv.opts.Cluster; cl != nil && (!existed || shared) {
			if reg := cl.Subscribed(c.clientID, sub.filter, sub.qos); reg != nil {
				reply.regs = append(reply.regs, reg)
			}
		}
	}
	c.queueReply(heldAck{t: packet.SUBACK, pid: p.PacketID, reply: reply})
	return nil
}

// queueReply sends a SUBACK or UNSUBACK. When nothing makes it wait (no
// Store write, no cluster registration, no acknowledgement of this
// connection still on its way) it goes out at once: the new subscription
// already receives messages, and a client reading its SUBACK first is the
// usual order. Otherwise it joins the held acknowledgements, in order.
func (c *conn) queueReply(a heldAck) {
	if len(c.held) == 0 && !c.needSync && c.syncing.Load() == 0 && len(a.reply.regs) == 0 && c.acksIdle() {
		c.sendReply(a, nil)
		return
	}
	c.held = append(c.held, a)
}

// heldReply is a SUBACK or UNSUBACK held until the Store has made the
// change durable, with what the SUBSCRIBE made (undone if it could not).
type heldReply struct {
	reasons []packet.ReasonCode
	added   []addedSub
	regs    []Registration // the cluster's registrations of the change
}

// addedSub is a subscription a SUBSCRIBE installed; at is its reason
// code's index in the SUBACK.
type addedSub struct {
	sub     *subscription
	at      int
	existed bool
	back    []*Message // what its look-back delivered (arrival.go)
}

// sendReply writes a held SUBACK or UNSUBACK. err is the Store's failure:
// a SUBSCRIBE that could not be made durable is undone and refused (0x97),
// an UNSUBSCRIBE is answered 0x80 (its subscriptions are gone from memory
// but may come back after a restart). Once a SUBACK is out, the new
// subscriptions receive their retained messages.
func (c *conn) sendReply(a heldAck, err error) {
	r := a.reply
	if err != nil {
		for _, ad := range r.added {
			c.srv.unsubscribe(ad.sub)
			r.reasons[ad.at] = packet.QuotaExceeded
		}
		if a.t == packet.UNSUBACK {
			for i, rc := range r.reasons {
				if rc == packet.Success {
					r.reasons[i] = packet.UnspecifiedError
				}
			}
		}
		r.added = nil
	}
	var b []byte
	if a.t == packet.SUBACK {
		b = (&packet.Suback{PacketID: a.pid, Reasons: r.reasons}).Append(nil, c.version)
	} else {
		b = (&packet.Unsuback{PacketID: a.pid, Reasons: r.reasons}).Append(nil, c.version)
	}
	c.writeBytes(b)
	now := c.srv.clock.Now()
	for _, ad := range r.added {
		sub := ad.sub
		// Retained messages go to new ordinary subscriptions per Retain
		// Handling [MQTT-3.3.1-9..11], never to shared ones (section 4.8.2).
		if sub.group != nil || sub.retainHandling == 2 || (sub.retainHandling == 1 && ad.existed) {
			continue
		}
		msgs := c.srv.retained.match(sub.topicFilter, now)
		if len(ad.back) > 0 {
			// A retained message the look-back delivered arrived after
			// the SUBSCRIBE: it was not retained when the subscription
			// began.
			msgs = slices.DeleteFunc(msgs, func(m *Message) bool { return slices.Contains(ad.back, m) })
		}
		if len(msgs) == 0 {
			continue
		}
		s := c.sess
		s.mu.Lock()
		if s.subs[sub.filter] == sub {
			s.startFeedLocked(sub, msgs)
		}
		s.mu.Unlock()
	}
}

// handleUnsubscribe handles UNSUBSCRIBE, answering each filter with
// Success or No subscription existed.
func (c *conn) handleUnsubscribe(body []byte) error {
	p := &c.sc.unsub
	if err := p.Decode(c.version, body); err != nil {
		return err
	}
	reply := &heldReply{reasons: make([]packet.ReasonCode, 0, len(p.Filters))}
	for _, f := range p.Filters {
		s := c.sess
		s.mu.Lock()
		sub := s.subs[string(f)]
		if sub != nil {
			s.dropSubLocked(sub.filter)
			if s.deleteSubLocked(sub.filter) {
				c.needSync = true
			}
		}
		s.mu.Unlock()
		if sub == nil {
			reply.reasons = append(reply.reasons, packet.NoSubscriptionExisted)
			continue
		}
		c.srv.removeSubscription(sub)
		reply.reasons = append(reply.reasons, packet.Success)
		if cl := c.srv.opts.Cluster; cl != nil {
			if reg := cl.Unsubscribed(c.clientID, sub.filter); reg != nil {
				reply.regs = append(reply.regs, reg)
			}
		}
	}
	c.queueReply(heldAck{t: packet.UNSUBACK, pid: p.PacketID, reply: reply})
	return nil
}

// unsubscribe removes sub from its session if it is still the session's
// subscription to its filter.
func (srv *Server) unsubscribe(sub *subscription) {
	s := sub.sess
	s.mu.Lock()
	mine := s.subs[sub.filter] == sub
	if mine {
		s.dropSubLocked(sub.filter)
		s.deleteSubLocked(sub.filter)
	}
	s.mu.Unlock()
	if mine {
		srv.removeSubscription(sub)
		if cl := srv.opts.Cluster; cl != nil {
			cl.Unsubscribed(s.id, sub.filter)
		}
	}
}

// tooDeep reports whether a topic filter or name exceeds MaxTopicLevels or
// MaxTopicLength: deep filters cost memory in the subscription index.
func (srv *Server) tooDeep(t string) bool { return tooDeep(&srv.opts, t) }

func tooDeep[T string | []byte](o *Options, t T) bool {
	if len(t) > o.MaxTopicLength {
		return true
	}
	if o.MaxTopicLevels <= 0 || len(t) < o.MaxTopicLevels {
		return false // fewer bytes than levels allowed: cannot be too deep
	}
	seps := 0
	for i := 0; i < len(t); i++ {
		if t[i] == '/' {
			if seps++; seps >= o.MaxTopicLevels {
				return true
			}
		}
	}
	return false
}

// subscribe installs sub for its session, replacing a subscription to the
// same filter [MQTT-3.8.4-3]. It reports whether one existed, and what a
// new ordinary subscription received by looking back at the messages that
// arrived after its SUBSCRIBE (at arrived, a kernel timestamp; 0 for none).
func (srv *Server) subscribe(sub *subscription, shared bool, arrived int64) (existed bool, rc packet.ReasonCode, lb lookedBack) {
	s := sub.sess
	if shared {
		if rc := srv.joinGroup(sub.groupName, sub.topicFilter, sub); rc.IsError() {
			return false, rc, lb
		}
	}
	s.mu.Lock()
	old := s.subs[sub.filter]
	ended := s.ended
	if !ended {
		s.setSubLocked(sub)
	}
	if !ended && !shared {
		// The index lock is taken under the session's: matching never
		// holds it while taking a session's lock. Holding s.mu keeps any
		// message routed through sub from reaching s before the older
		// ones the look-back finds.
		gen := srv.subs.AddGen(sub.topicFilter, sub)
		if arrived != 0 && old == nil {
			lb = srv.lookBackLocked(s, sub, gen, arrived)
		}
	}
	s.mu.Unlock()
	if ended {
		if shared {
			srv.leaveGroup(sub)
		}
		return false, packet.UnspecifiedError, lb
	}
	if old != nil && !shared {
		srv.subs.Remove(old.topicFilter, old)
	}
	// A session that ended while this ran must not leave its subscription
	// behind in the index.
	s.mu.Lock()
	ended = s.ended
	s.mu.Unlock()
	if ended {
		srv.removeSubscription(sub)
	}
	return old != nil, packet.Success, lb
}

// removeSubscription takes sub out of the index or its group. Leaving a
// group hands the messages the session still holds for it to the other
// members (QoS 2 in flight excepted).
func (srv *Server) removeSubscription(sub *subscription) {
	srv.settle(sub.sess, srv.leave(sub), nil)
}

// leave takes sub out of the index or its group, and returns the
// messages the session held for the group it left, for settle.
func (srv *Server) leave(sub *subscription) []delivery {
	if sub.group == nil {
		srv.subs.Remove(sub.topicFilter, sub)
		return nil
	}
	srv.leaveGroup(sub)
	sub.sess.mu.Lock()
	defer sub.sess.mu.Unlock()
	return sub.sess.takeUndelivered(sub.group)
}
