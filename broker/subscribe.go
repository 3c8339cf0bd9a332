package broker

import (
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
}

// handleSubscribe handles SUBSCRIBE: each filter is validated, authorised
// and granted or refused on its own [MQTT-3.8.4-6]; the SUBACK goes out
// before the retained messages the new subscriptions receive.
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
	type retainedFor struct {
		sub  *subscription
		msgs []*Message
	}
	var retained []retainedFor
	reasons := c.reasons[:0]
	for i := range p.Subs {
		s := &p.Subs[i]
		filter := string(s.Filter)
		group, tf, shared, err := topic.ParseShare(filter)
		if err == nil && !shared {
			tf = filter
			err = topic.ValidateFilter(s.Filter)
		}
		switch {
		case err != nil:
			reasons = append(reasons, packet.TopicFilterInvalid)
			continue
		case shared && s.NoLocal:
			return errNoLocalShared
		case shared && opts.DisableSharedSubs:
			reasons = append(reasons, packet.SharedSubsNotSupported)
			continue
		case opts.DisableWildcardSubs && strings.ContainsAny(tf, "+#"):
			reasons = append(reasons, packet.WildcardSubsNotSupported)
			continue
		case !opts.Auth.CanSubscribe(c.info, filter):
			reasons = append(reasons, packet.NotAuthorized)
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
		existed, rc := c.srv.subscribe(sub, shared)
		if rc.IsError() {
			reasons = append(reasons, rc)
			continue
		}
		reasons = append(reasons, packet.ReasonCode(sub.qos))
		// Retained messages go to new ordinary subscriptions per Retain
		// Handling [MQTT-3.3.1-9..11], never to shared ones (section 4.8.2).
		if !shared && (sub.retainHandling == 0 || (sub.retainHandling == 1 && !existed)) {
			if msgs := c.srv.retained.match(tf, c.srv.clock.Now()); len(msgs) > 0 {
				retained = append(retained, retainedFor{sub, msgs})
			}
		}
	}
	c.reasons = reasons
	c.saveSubscriptions()
	ack := packet.Suback{PacketID: p.PacketID, Reasons: reasons}
	c.scratch = ack.Append(c.scratch[:0], c.version)
	c.writeBytes(c.scratch)
	for _, rf := range retained {
		var ids subIDs
		ids.add(rf.sub.id)
		for _, m := range rf.msgs {
			// Retained messages sent for a subscription keep RETAIN set [MQTT-3.3.1-8].
			c.sess.deliver(m, min(m.QoS, rf.sub.qos), true, &ids, nil)
			// The retained message is durable already; a crash only means it
			// is sent again on the next subscribe.
		}
	}
	return nil
}

// handleUnsubscribe handles UNSUBSCRIBE, answering each filter with
// Success or No subscription existed.
func (c *conn) handleUnsubscribe(body []byte) error {
	p := &c.sc.unsub
	if err := p.Decode(c.version, body); err != nil {
		return err
	}
	reasons := c.reasons[:0]
	for _, f := range p.Filters {
		s := c.sess
		s.mu.Lock()
		sub := s.subs[string(f)]
		if sub != nil {
			delete(s.subs, sub.filter)
		}
		s.mu.Unlock()
		if sub == nil {
			reasons = append(reasons, packet.NoSubscriptionExisted)
			continue
		}
		c.srv.removeSubscription(sub, false)
		reasons = append(reasons, packet.Success)
	}
	c.reasons = reasons
	c.saveSubscriptions()
	ack := packet.Unsuback{PacketID: p.PacketID, Reasons: reasons}
	c.scratch = ack.Append(c.scratch[:0], c.version)
	c.writeBytes(c.scratch)
	return nil
}

// saveSubscriptions records a persistent session's subscriptions and waits
// for them to be durable before the SUBACK or UNSUBACK says they are in
// place.
func (c *conn) saveSubscriptions() {
	s := c.sess
	s.mu.Lock()
	s.saveLocked()
	persistent := s.persistentLocked()
	s.mu.Unlock()
	if persistent {
		c.srv.syncStore() // a failure is logged and counted; the subscription stands in memory
	}
}

// subscribe installs sub for its session, replacing a subscription to the
// same filter [MQTT-3.8.4-3]. It reports whether one existed.
func (srv *Server) subscribe(sub *subscription, shared bool) (existed bool, rc packet.ReasonCode) {
	s := sub.sess
	if shared {
		if rc := srv.joinGroup(sub.groupName, sub.topicFilter, sub); rc.IsError() {
			return false, rc
		}
	}
	s.mu.Lock()
	old := s.subs[sub.filter]
	ended := s.ended
	if !ended {
		s.subs[sub.filter] = sub
	}
	s.mu.Unlock()
	if ended {
		if shared {
			srv.leaveGroup(sub)
		}
		return false, packet.UnspecifiedError
	}
	if !shared {
		srv.subs.Add(sub.topicFilter, sub)
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
		srv.removeSubscription(sub, true)
	}
	return old != nil, packet.Success
}

// removeSubscription takes sub out of the index or its group. Leaving a
// group hands the messages the session still holds for it to the other
// members (QoS 2 in flight excepted).
func (srv *Server) removeSubscription(sub *subscription, sessionEnding bool) {
	if sub.group == nil {
		srv.subs.Remove(sub.topicFilter, sub)
		return
	}
	srv.leaveGroup(sub)
	sub.sess.mu.Lock()
	left := sub.sess.takeUndelivered(sub.group)
	sub.sess.mu.Unlock()
	srv.redispatch(left)
}
