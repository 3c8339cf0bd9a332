package broker

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/linemq/linemq/broker/packet"
	"github.com/linemq/linemq/broker/topic"
)

// errClientDisconnect ends the read loop after a client's DISCONNECT.
var errClientDisconnect = errors.New("broker: client disconnected")

// Protocol errors found by the session rather than the decoder.
var (
	errSecondConnect   = &packet.Error{Code: packet.ProtocolError, Reason: "second CONNECT on a connection"}  // [MQTT-3.1.0-2]
	errFirstNotConnect = &packet.Error{Code: packet.ProtocolError, Reason: "first packet is not CONNECT"}     // [MQTT-3.1.0-1]
	errUnexpected      = &packet.Error{Code: packet.ProtocolError, Reason: "packet type not sent by clients"} // e.g. CONNACK
	errAuthNoMethod    = &packet.Error{Code: packet.ProtocolError, Reason: "AUTH without an authentication method in CONNECT"}
	errExpiryFromZero  = &packet.Error{Code: packet.ProtocolError, Reason: "DISCONNECT sets a session expiry after CONNECT set 0"} // [MQTT-3.14.2-2]
	errBadAlias        = &packet.Error{Code: packet.TopicAliasInvalid, Reason: "topic alias above the maximum"}                    // [MQTT-3.3.2-9]
	errUnknownAlias    = &packet.Error{Code: packet.ProtocolError, Reason: "topic alias not yet mapped to a topic"}                // section 3.3.2.3.4
	errBadTopicName    = &packet.Error{Code: packet.TopicNameInvalid, Reason: "topic name with wildcards or empty"}                // [MQTT-3.3.2-2]
	errTopicTooDeep    = &packet.Error{Code: packet.TopicNameInvalid, Reason: "topic name longer or deeper than the broker allows"}
	errRetainDisabled  = &packet.Error{Code: packet.RetainNotSupported, Reason: "retained publish while retain is not available"} // section 3.3.1.3, 0x9A
	errRecvMaxExceeded = &packet.Error{Code: packet.ReceiveMaximumExceeded, Reason: "more unacknowledged QoS 1 and 2 publishes than Receive Maximum"}
	errNoLocalShared   = &packet.Error{Code: packet.ProtocolError, Reason: "No Local on a shared subscription"} // [MQTT-3.8.3-4]
	errSubIDsOff       = &packet.Error{Code: packet.SubIDsNotSupported, Reason: "subscription identifiers are not available"}
	errPubSubID        = &packet.Error{Code: packet.ProtocolError, Reason: "PUBLISH from a client carries a subscription identifier"} // [MQTT-3.3.4-6]
)

// handle dispatches one packet. body aliases the read buffer.
func (c *conn) handle(h packet.FixedHeader, body []byte) error {
	c.srv.stats.packetsIn.Add(1)
	if !c.connected {
		if h.Type != packet.CONNECT {
			return errFirstNotConnect
		}
		return c.handleConnect(body)
	}
	switch h.Type {
	case packet.PUBLISH:
		return c.handlePublish(h.Flags, body)
	case packet.PUBACK, packet.PUBCOMP, packet.PUBREC:
		a := &c.sc.ack
		if err := a.Decode(c.version, h.Type, body); err != nil {
			return err
		}
		if h.Type == packet.PUBREC {
			c.sess.pubrec(a.PacketID, a.Reason)
			return nil
		}
		c.sess.ack(h.Type, a.PacketID)
		return nil
	case packet.PUBREL:
		a := &c.sc.ack
		if err := a.Decode(c.version, h.Type, body); err != nil {
			return err
		}
		return c.handlePubrel(a.PacketID)
	case packet.SUBSCRIBE:
		return c.handleSubscribe(body)
	case packet.UNSUBSCRIBE:
		return c.handleUnsubscribe(body)
	case packet.PINGREQ:
		if err := packet.DecodeEmpty(body); err != nil {
			return err
		}
		c.writeBytes(packet.AppendPingresp(c.scratch[:0]))
		return nil
	case packet.DISCONNECT:
		return c.handleDisconnect(body)
	case packet.AUTH:
		if c.version < packet.V5 {
			return errUnexpected
		}
		return errAuthNoMethod
	case packet.CONNECT:
		return errSecondConnect
	default:
		return errUnexpected
	}
}

// handlePublish handles a PUBLISH from the client: topic alias, checks,
// QoS 2 duplicate suppression, retained update, routing and the
// acknowledgement.
func (c *conn) handlePublish(flags byte, body []byte) error {
	p := &c.sc.pub
	if err := p.Decode(c.version, flags, body); err != nil {
		return err
	}
	if c.srv.opts.MaxPublishRate > 0 {
		if err := c.throttle(); err != nil {
			return err
		}
	}
	c.srv.stats.msgsIn.Add(1)
	c.srv.stats.bytesIn.Add(uint64(len(p.Payload)))
	v5 := c.version >= packet.V5
	opts := &c.srv.opts

	// Resolve the topic alias: a topic with an alias (re)maps it, an empty
	// topic uses it [MQTT-3.3.2-12].
	name := p.Topic
	if v5 && p.Props.Has(packet.PropTopicAlias) {
		a := int(p.Props.TopicAlias)
		if a > opts.TopicAliasMaximum {
			return errBadAlias
		}
		if a >= len(c.aliasIn) {
			// Grown on use, not sized to the maximum at CONNECT: most
			// clients use a handful of aliases or none.
			c.aliasIn = append(c.aliasIn, make([]string, a+1-len(c.aliasIn))...)
		}
		if len(name) == 0 {
			if c.aliasIn[a] == "" {
				return errUnknownAlias
			}
			c.scratch = append(c.scratch[:0], c.aliasIn[a]...)
			name = c.scratch
		} else if c.aliasIn[a] != string(name) {
			c.aliasIn[a] = string(name)
		}
	}
	if err := topic.ValidateName(name); err != nil {
		return errBadTopicName
	}
	if tooDeep(&c.srv.opts, name) {
		return errTopicTooDeep
	}
	if len(p.Props.SubscriptionIDs) > 0 {
		return errPubSubID
	}
	if p.Retain && opts.DisableRetain {
		return errRetainDisabled
	}
	if p.QoS == 1 {
		// Acknowledgements held by the Store or by backpressure count
		// against the client's quota, as its unacknowledged publishes.
		// Only a v5 client was told the maximum; a 3.1.1 client is slowed by
		// its acknowledgements alone.
		if c.unackedIn.Add(1) > int32(opts.ReceiveMaximum) && v5 {
			return errRecvMaxExceeded // [MQTT-3.3.4-9]
		}
	}

	// QoS 2: a PUBLISH whose packet id is still unreleased is a resend,
	// acknowledged again but not routed again [MQTT-4.3.3-10].
	if p.QoS == 2 {
		s := c.sess
		s.mu.Lock()
		_, dup := s.inQoS2[p.PacketID]
		if v5 && !dup && len(s.inQoS2)+int(c.unackedIn.Load()) >= int(opts.ReceiveMaximum) {
			s.mu.Unlock()
			return errRecvMaxExceeded // [MQTT-3.3.4-9]
		}
		if !dup {
			s.inQoS2[p.PacketID] = struct{}{}
			if s.setInboundLocked(p.PacketID, true) {
				c.needSync = true
			}
		}
		s.mu.Unlock()
		if dup {
			c.srv.stats.dupQoS2.Add(1)
			c.writeAck(packet.PUBREC, p.PacketID, packet.Success)
			return nil
		}
	}

	rc := packet.Success
	retainRefused := false
	var wait *session
	var remote *remoteWait
	// The message is made before the authorisation check so that the check
	// gets its topic as a string without another allocation.
	m := newMessage(p, name, c.clientID, c.srv.clock.Now())
	if p.QoS > 0 {
		c.ackSeq++
	}
	// Should the client be subscribed to its own topic, the message goes
	// back to it only after this publish's acknowledgement (a QoS 0
	// message, after the acknowledgements before it): a client that sees
	// its own message may take its publish as done, and it is.
	m.echoConn, m.echoGate = c.serial, c.ackSeq
	m.rx = c.rx
	if p.QoS > 0 && c.srv.stall.readDuring(c.rx) {
		// It waited in the socket while this node was stopped (stall.go):
		// its publisher, given up on it, may have sent it again through
		// another gateway, and later ones since. Every copy carries DUP,
		// so that a subscriber takes it for what it may be.
		m.redelivery = true
		c.srv.stats.stallRedeliveries.Add(1)
	}
	if reservedTopic(opts.ReservedTopics, m.Topic) || !opts.Auth.CanPublish(c.info, m.Topic) {
		rc = packet.NotAuthorized
		c.srv.stats.publishDenied.Add(1)
		if !c.deniedLogged {
			// Once per connection: a client retrying a denied topic in a
			// loop must not flood the log. A 3.1.1 client is not told
			// (it has no negative acknowledgement), so this line is how
			// its operator finds out.
			c.deniedLogged = true
			c.srv.logConn("publish denied by the ACL (further denials of this connection are counted, not logged)",
				"client", c.clientID, "user", c.info.Username, "topic", m.Topic, "version", int(c.version))
		}
	} else {
		if p.Retain {
			// Over MaxRetainedMessages or MaxRetainedBytes the message is
			// routed but not kept, and a v5 publisher told 0x97.
			retainRefused = !c.srv.retain(m)
			// A retained message is acknowledged once it is durable too:
			// it is often a device's configuration.
			c.needSync = c.needSync || (c.srv.opts.Store != nil && p.QoS > 0 && !retainRefused)
		}
		r := c.router()
		seen, after := c.srv.observe(m, "")
		if seen != HeldBack {
			c.srv.recordArrival(m)
			r.route(c.srv, m, c)
		} else {
			r.matched = true // held back: taken, as far as the publisher goes
		}
		if after != nil {
			after()
		}
		switch {
		case r.refused || retainRefused:
			// A queue was full and nothing acknowledged is ever dropped
			// (Options.Overload), or the retained store had no room: the
			// publisher learns that not all it asked for was done. 0x10
			// would claim nobody matched.
			rc = packet.QuotaExceeded
			r.refused = false
		case !r.matched && v5:
			rc = packet.NoMatchingSubscribers
		}
		if r.persisted {
			c.needSync = true
			r.persisted = false
		}
		wait = r.congested
		r.congested = nil
		remote = r.remote
		r.remote = nil
	}
	if !v5 && rc.IsError() {
		rc = packet.Success // 3.1.1 has no negative acknowledgement
	}
	switch p.QoS {
	case 1:
		c.held = append(c.held, heldAck{t: packet.PUBACK, pid: p.PacketID, rc: rc, wait: wait, remote: remote, seq: c.ackSeq})
	case 2:
		if rc.IsError() {
			c.forgetInbound(p.PacketID)
		}
		c.held = append(c.held, heldAck{t: packet.PUBREC, pid: p.PacketID, rc: rc, wait: wait, remote: remote, seq: c.ackSeq})
	}
	return nil
}

// heldAck is a PUBACK or PUBREC waiting for the end of the read: the
// acknowledgement goes out only once what it acknowledges is durable.
type heldAck struct {
	t      packet.Type // PUBACK, PUBREC, SUBACK or UNSUBACK
	pid    uint16
	rc     packet.ReasonCode
	wait   *session    // a congested share-group member to wait for, or nil
	remote *remoteWait // directed deliveries to other nodes to wait for, or nil
	reply  *heldReply  // a SUBACK's or UNSUBACK's reasons, nil otherwise
	seq    uint64      // a publish acknowledgement's number (conn.ackSeq), 0 otherwise
}

// errStoreFailed ends a 3.1.1 connection whose publish could not be made
// durable: 3.1.1 has no negative acknowledgement to send instead.
var errStoreFailed = &packet.Error{Code: packet.ServerUnavailable, Reason: "persisting the message failed"}

// releaseAcks sends the acknowledgements held during this read. When the
// read wrote to the Store they go to the server's syncer, which sends them
// once a Store sync covering them has returned; the reader carries on
// reading meanwhile, so the next publishes join the next sync (group
// commit). Acknowledgements of a connection leave in the order of its
// publishes [MQTT-4.6.0-2]: while any of its batches wait in the syncer,
// later ones queue behind them even if they need no sync.
func (c *conn) releaseAcks() {
	if len(c.held) == 0 && !c.needSync {
		return
	}
	if c.needSync || c.syncing.Load() > 0 {
		c.needSync = false
		c.srv.syncer.add(c, c.held)
		c.held = nil
		return
	}
	c.sendAcks(c.held, nil)
	clear(c.held)
	c.held = c.held[:0]
}

// sendAcks writes held acknowledgements; err is the Store sync's failure,
// if any: a v5 publisher is then told 0x97 Quota exceeded (and may retry),
// a 3.1.1 publisher, which has no negative acknowledgement, is
// disconnected. It runs on the reader or on the syncer.
//
// An acknowledgement that must still wait (for a congested share-group
// member's queue to drain) waits in the connection's acknowledgement queue,
// and those after it wait behind it: acknowledgements leave in the order of
// the packets they answer [MQTT-4.6.0-2].
func (c *conn) sendAcks(held []heldAck, err error) {
	if err != nil && c.version < packet.V5 {
		c.kickWith(packet.ServerUnavailable, errStoreFailed.Reason)
		return
	}
	simple := true
	for i := range held {
		a := &held[i]
		if err != nil && a.reply == nil && !a.rc.IsError() {
			a.rc = packet.QuotaExceeded
			if a.t == packet.PUBREC {
				c.forgetInbound(a.pid)
			}
		}
		if a.reply != nil || a.remote != nil || (a.wait != nil && !a.rc.IsError()) {
			simple = false
		}
	}
	// The common case costs nothing more: plain acknowledgements with
	// nothing queued before them are written at once, in order.
	// (sendAcks runs on the reader, or on the syncer while the reader
	// leaves this connection's acknowledgements to it: one at a time.)
	q := c.acks.Load()
	if simple {
		if q == nil {
			for _, a := range held {
				c.writeHeldAck(&a)
			}
			return
		}
		q.mu.Lock()
		if len(q.q) == 0 && !q.draining {
			for _, a := range held {
				c.writeHeldAck(&a)
			}
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()
	}
	if q == nil {
		c.acks.CompareAndSwap(nil, new(ackQueue))
		q = c.acks.Load()
	}

	ps := make([]*pendingAck, 0, len(held))
	for _, a := range held {
		p := &pendingAck{c: c, a: a, err: err}
		p.blocked.Store(1) // until it is in the queue
		if a.wait != nil && !a.rc.IsError() {
			s := a.wait
			s.mu.Lock()
			if s.holdAckLocked(p) {
				p.blocked.Add(1)
			}
			s.mu.Unlock()
		}
		if a.remote != nil {
			a.remote.hold(p)
		}
		if a.reply != nil && len(a.reply.regs) > 0 && err == nil {
			p.blocked.Add(1)
			go p.awaitRegistrations()
		}
		ps = append(ps, p)
	}
	q.mu.Lock()
	q.q = append(q.q, ps...)
	q.mu.Unlock()
	for _, p := range ps {
		p.unblock()
	}
}

// acksIdle reports whether no acknowledgement of the connection is waiting
// or being written.
func (c *conn) acksIdle() bool {
	q := c.acks.Load()
	if q == nil {
		return true
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.q) == 0 && !q.draining
}

// ackQueue holds a connection's acknowledgements once one of them had to
// wait, so that those after it wait behind it.
type ackQueue struct {
	mu       sync.Mutex
	q        []*pendingAck
	draining bool // a goroutine is writing the ready front of q
}

// pendingAck is an acknowledgement in the connection's queue, written once
// nothing blocks it and everything before it is written.
type pendingAck struct {
	c       *conn
	a       heldAck
	err     error // the Store's failure, for SUBACK and UNSUBACK
	blocked atomic.Int32
}

// awaitRegistrations waits, bounded, for the cluster to register what a
// SUBSCRIBE or UNSUBSCRIBE changed, then lets its reply go.
func (p *pendingAck) awaitRegistrations() {
	ctx, cancel := context.WithTimeout(context.Background(), ClusterRegisterTimeout)
	defer cancel()
	for _, reg := range p.a.reply.regs {
		if err := reg.Wait(ctx); err != nil {
			p.c.srv.log.Warn("subscription not registered with the cluster in time", "client", p.c.clientID, "err", err)
			break
		}
	}
	p.unblock()
}

// unblock lifts one of the things p waits for, and writes every
// acknowledgement at the front of the queue that is ready. One goroutine
// at a time writes (the others leave it to that one), so the order holds
// though the writing happens outside ackMu: a SUBACK's write takes its
// session's lock. unblock must not be called with a session lock held.
func (p *pendingAck) unblock() {
	if p.blocked.Add(-1) > 0 {
		return
	}
	c := p.c
	q := c.acks.Load()
	q.mu.Lock()
	if q.draining {
		q.mu.Unlock()
		return // the writer at work sees p when it looks again
	}
	q.draining = true
	wrote := false
	for {
		n := 0
		for n < len(q.q) && q.q[n].blocked.Load() <= 0 {
			n++
		}
		if n == 0 {
			q.draining = false
			q.mu.Unlock()
			break
		}
		ready := append([]*pendingAck(nil), q.q[:n]...)
		clear(q.q[:n])
		q.q = q.q[n:]
		if len(q.q) == 0 {
			q.q = nil
		}
		q.mu.Unlock()
		for _, r := range ready {
			if r.a.reply != nil {
				c.sendReply(r.a, r.err)
			} else {
				c.writeHeldAck(&r.a)
			}
		}
		wrote = true
		q.mu.Lock()
	}
	if wrote {
		c.signal()
	}
}

// forgetInbound ends an inbound QoS 2 exchange that was refused.
func (c *conn) forgetInbound(pid uint16) {
	s := c.sess
	s.mu.Lock()
	delete(s.inQoS2, pid)
	s.setInboundLocked(pid, false)
	s.mu.Unlock()
}

// handlePubrel releases an inbound QoS 2 packet id and answers PUBCOMP.
func (c *conn) handlePubrel(pid uint16) error {
	s := c.sess
	s.mu.Lock()
	_, ok := s.inQoS2[pid]
	if ok {
		delete(s.inQoS2, pid)
		s.setInboundLocked(pid, false)
	}
	s.mu.Unlock()
	rc := packet.Success
	if !ok {
		rc = packet.PacketIDNotFound
	}
	c.writeAck(packet.PUBCOMP, pid, rc)
	return nil
}

// handleDisconnect handles the client's DISCONNECT: a normal one discards
// the will [MQTT-3.14.4-3], 0x04 keeps it, and a v5 client may change its
// session expiry on the way out.
func (c *conn) handleDisconnect(body []byte) error {
	var d packet.Disconnect
	if err := d.Decode(c.version, body); err != nil {
		return err
	}
	if d.Props.Has(packet.PropSessionExpiry) {
		if c.expiryIn == 0 && d.Props.SessionExpiry != 0 {
			return errExpiryFromZero
		}
		exp := d.Props.SessionExpiry
		if maxExp := c.srv.opts.MaxSessionExpiry; maxExp > 0 && uint64(exp) > uint64(maxExp.Seconds()) {
			exp = uint32(maxExp.Seconds())
		}
		c.sess.mu.Lock()
		c.sess.expiry = exp
		c.sess.mu.Unlock()
	}
	if d.Reason != packet.DisconnectWithWill {
		// Under the session's lock: the session's record reads the will.
		c.sess.mu.Lock()
		w := c.will
		c.will = nil
		c.sess.mu.Unlock()
		if cl := c.srv.opts.Cluster; cl != nil && w != nil {
			cl.DropWill(w.client, w.ref)
		}
	}
	return errClientDisconnect
}

// router returns the connection's reusable router.
func (c *conn) router() *router {
	if c.r == nil {
		c.r = &router{}
	}
	c.r.owner = c
	return c.r
}
