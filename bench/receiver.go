package bench

import (
	"fmt"
	"sync/atomic"

	"github.com/linemq/linemq/broker/packet"
)

// receiver is a worker of the share group (FanIn) or an ordinary subscriber
// (FanOut). One goroutine runs loop: it decodes every PUBLISH in place,
// records it, and acknowledges everything one read brought in one write.
type receiver struct {
	c     *client
	set   *seenSet // shared by the whole group in FanIn
	tag   uint32
	pubs  int
	paced bool

	// suback receives the outcome of the SUBSCRIBE: nil, or why the broker
	// refused it. Buffered, so the loop never waits on it.
	suback  chan error
	filter  string       // as subscribed, for messages
	granted atomic.Int32 // the QoS the broker granted, -1 until SUBACK

	// Progress, updated once per read so the run can watch the drain.
	received atomic.Int64
	distinct atomic.Int64
	lastAt   atomic.Int64 // clock time of the last read that carried a message

	// Owned by the loop goroutine; the run reads dups, foreign and hist
	// after the loop has returned.
	pub        packet.Publish
	in, out    packet.Ack
	sa         packet.Suback
	acks       []byte // acknowledgements not yet written
	recv, dist int64  // counts not yet published to received and distinct
	dups       int64
	foreign    int64
	hist       histogram
}

func newReceiver(c *client, set *seenSet, tag uint32, pubs int, paced bool) *receiver {
	rc := &receiver{c: c, set: set, tag: tag, pubs: pubs, paced: paced,
		suback: make(chan error, 1), acks: make([]byte, 0, 4096)}
	rc.granted.Store(-1)
	return rc
}

// subscribe sends the SUBSCRIBE; loop reports its SUBACK on rc.suback.
func (rc *receiver) subscribe(filter string, qos byte) error {
	rc.filter = filter
	s := packet.Subscribe{PacketID: 1, Subs: []packet.Subscription{{
		Filter: []byte(filter),
		QoS:    qos,
		// Retained messages on the bench topics are not this run's load
		// (v5 only; 3.1.1 receivers drop them by their tag).
		RetainHandling: 2,
	}}}
	return rc.c.write(s.Append(nil, rc.c.v))
}

// loop runs until the connection ends. Its error is the reason, which the
// run ignores once it is closing connections itself.
func (rc *receiver) loop() error {
	fr := rc.c.fr
	for {
		h, body, err := fr.next()
		if err != nil {
			return fmt.Errorf("bench: %s: %w", rc.c.id, err)
		}
		if err := rc.handle(h, body, fr.at); err != nil {
			return err
		}
		if !fr.buffered() {
			// Everything this read brought is handled.
			if err := rc.flush(fr.at); err != nil {
				return err
			}
		}
	}
}

// handle processes one packet that arrived at clock time at: it records a
// PUBLISH and appends the acknowledgements it needs to rc.acks.
func (rc *receiver) handle(h packet.FixedHeader, body []byte, at int64) error {
	v := rc.c.v
	switch h.Type {
	case packet.PUBLISH:
		if err := rc.pub.Decode(v, h.Flags, body); err != nil {
			return fmt.Errorf("bench: %s: PUBLISH: %w", rc.c.id, err)
		}
		if p, n, sent, ok := parsePayload(rc.pub.Payload, rc.tag, rc.pubs); ok {
			rc.recv++
			if rc.set.add(p, n) {
				rc.dist++
			} else {
				rc.dups++
			}
			if rc.paced {
				rc.hist.record(uint64(max(at-sent, 0)) / 1000)
			}
		} else {
			rc.foreign++
		}
		// QoS 1: PUBACK; QoS 2: PUBREC, then PUBCOMP for the PUBREL.
		switch rc.pub.QoS {
		case 1:
			rc.out.Type, rc.out.PacketID = packet.PUBACK, rc.pub.PacketID
			rc.acks = rc.out.Append(rc.acks, v)
		case 2:
			rc.out.Type, rc.out.PacketID = packet.PUBREC, rc.pub.PacketID
			rc.acks = rc.out.Append(rc.acks, v)
		}
	case packet.PUBREL:
		if err := rc.in.Decode(v, packet.PUBREL, body); err != nil {
			return fmt.Errorf("bench: %s: PUBREL: %w", rc.c.id, err)
		}
		rc.out.Type, rc.out.PacketID = packet.PUBCOMP, rc.in.PacketID
		rc.acks = rc.out.Append(rc.acks, v)
	case packet.SUBACK:
		if err := rc.sa.Decode(v, body); err != nil {
			return fmt.Errorf("bench: %s: SUBACK: %w", rc.c.id, err)
		}
		var res error
		if r := rc.sa.Reasons[0]; r.IsError() && v < packet.V5 {
			res = fmt.Errorf("bench: %s: subscription to %q refused (SUBACK return code 0x80)", rc.c.id, rc.filter)
		} else if r.IsError() {
			res = fmt.Errorf("bench: %s: subscription to %q refused: %w", rc.c.id, rc.filter, r)
		} else {
			rc.granted.Store(int32(r))
		}
		select {
		case rc.suback <- res:
		default:
		}
	case packet.PINGRESP:
	case packet.DISCONNECT:
		return disconnectError(rc.c, body)
	default:
		return fmt.Errorf("bench: %s: unexpected %v from the broker", rc.c.id, h.Type)
	}
	return nil
}

// flush writes the acknowledgements collected since the last flush in one
// write and publishes the counts with one atomic update each: once per
// read, not once per message.
func (rc *receiver) flush(at int64) error {
	if len(rc.acks) > 0 {
		if err := rc.c.write(rc.acks); err != nil {
			return fmt.Errorf("bench: %s: %w", rc.c.id, err)
		}
		rc.acks = rc.acks[:0]
	}
	if rc.recv > 0 {
		rc.received.Add(rc.recv)
		rc.distinct.Add(rc.dist)
		rc.lastAt.Store(at)
		rc.recv, rc.dist = 0, 0
	}
	return nil
}

// disconnectError describes a DISCONNECT the broker sent.
func disconnectError(c *client, body []byte) error {
	var d packet.Disconnect
	if c.v < packet.V5 || d.Decode(c.v, body) != nil {
		return fmt.Errorf("bench: %s: the broker sent DISCONNECT", c.id)
	}
	msg := ""
	if d.Props.Has(packet.PropReasonString) {
		msg = " (" + string(d.Props.ReasonString) + ")"
	}
	return fmt.Errorf("bench: %s: the broker disconnected%s: %w", c.id, msg, d.Reason)
}
