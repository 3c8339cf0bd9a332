package broker

import (
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/linemq/linemq/broker/packet"
)

// Message is one application message as the broker routes it: immutable
// once made and shared by every session it is delivered to, so that a
// publish to a thousand subscribers copies its payload once. Make one with
// NewMessage (or UnmarshalMessage); a Message literal lacks the internal
// fields the encoder uses.
type Message struct {
	Topic   string
	Payload []byte
	QoS     byte
	Retain  bool

	// The v5 properties that travel with the message unchanged.
	PayloadFormat   byte
	ContentType     []byte
	ResponseTopic   []byte
	CorrelationData []byte
	User            []packet.UserProperty

	// Expires is when the message expires; zero if it has no Message Expiry
	// Interval.
	Expires time.Time
	// Created is when the broker received it.
	Created time.Time
	// Origin is the publisher's client id (for No Local); empty for messages
	// the broker made itself.
	Origin string

	// props records which optional properties were present, so a forwarded
	// message carries exactly the properties it came with.
	props uint64
	// topicBytes aliases Topic, for the encoder; originBytes aliases
	// Origin, for the hash_clientid strategy.
	topicBytes  []byte
	originBytes []byte

	// fromPeer is set on a message another node forwarded or delivered:
	// it reaches local subscribers only, never a group pick and never
	// another node.
	fromPeer bool

	// redelivery marks a copy picked again for another member after an
	// earlier delivery that may have reached its member: every copy of it
	// is sent with DUP, so a duplicate is always told apart.
	redelivery bool

	// view is the Cluster.View of the node that received the message from
	// its publisher, read when it routed the message to the other nodes;
	// 0 if unknown. A node a session was adopted on from its replica
	// (AdoptReplica) tells by it a forward routed while the session was
	// still on its earlier node, which got the message itself
	// (deliverLocked). It travels only between nodes, never to the Store.
	view atomic.Uint64
	// sender names the node that forwarded the message here for the
	// ordinary subscribers here (ForwardFrom, an outbox's forward), whose
	// view deliverLocked may find stale; "" otherwise: a delivery sent to
	// its client by name (a group pick, a redirect) is never passed over.
	// Set once, before the message is routed.
	sender string

	// owed marks a copy whose publisher was acknowledged long ago and that
	// nothing else holds any more (an outbox's message routed again): a
	// full queue takes it rather than refuse it (deliverLocked).
	owed bool

	// echoConn and echoGate hold a client's own message back until its
	// publish is acknowledged (see conn.echo): echoConn is the serial of
	// the connection that published it (0 for none), echoGate the number
	// of that connection's publish acknowledgements that must be written
	// before the message may go back to it.
	echoConn uint64
	echoGate uint64

	// rx is when the kernel received the PUBLISH (Unix ns), 0 when unknown;
	// matchedGen is one more than the generation of the subscription index
	// its match saw, 0 until it is matched. A new subscription looks back
	// at recent messages by both (arrival.go).
	rx         int64
	matchedGen atomic.Uint64

	// id names the message in the Store once it is queued to a persistent
	// session, so that its body is stored once however many sessions it
	// is queued to. 0 until then.
	id atomic.Uint64
}

// clone returns a copy of m that shares its (immutable) bytes but not its
// Store id: a different message as far as the Store is concerned.
func (m *Message) clone() *Message {
	return &Message{
		Topic: m.Topic, Payload: m.Payload, QoS: m.QoS, Retain: m.Retain,
		PayloadFormat: m.PayloadFormat, ContentType: m.ContentType, ResponseTopic: m.ResponseTopic,
		CorrelationData: m.CorrelationData, User: m.User, Expires: m.Expires, Created: m.Created,
		Origin: m.Origin, props: m.props, topicBytes: m.topicBytes, originBytes: m.originBytes,
	}
}

// Redelivery reports whether m is a copy sent again, which subscribers
// get with DUP: another node may have delivered it already.
func (m *Message) Redelivery() bool { return m.redelivery }

// View returns the cluster view the publishing node routed m by (see
// Cluster.View); 0 if unknown. A cluster's transport carries it.
func (m *Message) View() uint64 { return m.view.Load() }

// SetView sets what View returns, for a cluster's transport on a message
// it has just decoded.
func (m *Message) SetView(v uint64) { m.view.Store(v) }

// Clone returns a copy of m for another broker (in tests, a node of a
// cluster in the same process: what the network would carry).
func (m *Message) Clone() *Message {
	b := m.AppendBinary(nil)
	c, err := UnmarshalMessage(b)
	if err != nil {
		panic(err) // a message always decodes what it encoded
	}
	return c
}

// dupCopy returns a copy of m sent with DUP everywhere (an earlier copy may
// have reached its subscriber), leaving m, which other sessions may be
// sending, untouched.
func (m *Message) dupCopy() *Message {
	c := m.Clone()
	c.redelivery, c.fromPeer = true, m.fromPeer
	c.view.Store(m.view.Load()) // an outbox's resend was routed when the first send was
	return c
}

// storeID returns the message's Store id, taking the next one from next
// the first time.
func (m *Message) storeID(next *atomic.Uint64) uint64 {
	if id := m.id.Load(); id != 0 {
		return id
	}
	id := next.Add(1)
	if m.id.CompareAndSwap(0, id) {
		return id
	}
	return m.id.Load() // another session's save named it first
}

// copiedProps are the PUBLISH properties a message carries to subscribers.
const copiedProps = 1<<packet.PropPayloadFormat | 1<<packet.PropContentType |
	1<<packet.PropResponseTopic | 1<<packet.PropCorrelationData

// newMessage materialises a PUBLISH as a Message. Every byte it keeps
// (topic, payload, properties) is copied into one backing array, because the
// packet's fields alias the connection's read buffer.
func newMessage(p *packet.Publish, topic []byte, origin string, now time.Time) *Message {
	n := len(topic) + len(origin) + len(p.Payload) + len(p.Props.ContentType) +
		len(p.Props.ResponseTopic) + len(p.Props.CorrelationData)
	for _, u := range p.Props.User {
		n += len(u.Key) + len(u.Value)
	}
	m := &Message{QoS: p.QoS, Retain: p.Retain, Created: now, Origin: origin}
	arena := make([]byte, 0, n)
	take := func(b []byte) []byte {
		if len(b) == 0 {
			return nil
		}
		start := len(arena)
		arena = append(arena, b...)
		return arena[start:len(arena):len(arena)]
	}
	m.topicBytes = take(topic)
	// The arena is never written again, so a string over it is immutable.
	if len(m.topicBytes) > 0 {
		m.Topic = unsafe.String(&m.topicBytes[0], len(m.topicBytes))
	}
	if origin != "" {
		start := len(arena)
		arena = append(arena, origin...)
		m.originBytes = arena[start:len(arena):len(arena)]
	}
	m.Payload = take(p.Payload)
	if m.Payload == nil {
		m.Payload = []byte{}
	}
	m.props = p.Props.Present & copiedProps
	m.PayloadFormat = p.Props.PayloadFormat
	m.ContentType = take(p.Props.ContentType)
	m.ResponseTopic = take(p.Props.ResponseTopic)
	m.CorrelationData = take(p.Props.CorrelationData)
	if len(p.Props.User) > 0 {
		m.User = make([]packet.UserProperty, len(p.Props.User))
		for i, u := range p.Props.User {
			m.User[i] = packet.UserProperty{Key: take(u.Key), Value: take(u.Value)}
		}
	}
	if p.Props.Has(packet.PropMessageExpiry) {
		m.Expires = now.Add(time.Duration(p.Props.MessageExpiry) * time.Second)
	}
	return m
}

// NewMessage makes a message the broker publishes on its own behalf, for
// example a will or a message injected through Server.Publish.
func NewMessage(topic string, payload []byte, qos byte, retain bool) *Message {
	p := packet.Publish{QoS: qos, Retain: retain, Payload: payload}
	return newMessage(&p, []byte(topic), "", time.Now())
}

// expired reports whether m has passed its expiry at now.
func (m *Message) expired(now time.Time) bool {
	return !m.Expires.IsZero() && !now.Before(m.Expires)
}

// remaining returns the Message Expiry Interval to send at now: the
// original interval less the time the message has waited [MQTT-3.3.2-6].
func (m *Message) remaining(now time.Time) uint32 {
	d := m.Expires.Sub(now)
	if d <= 0 {
		return 0
	}
	s := uint32((d + time.Second - 1) / time.Second)
	return s
}

// fill sets the fields of out that come from the message; the caller sets
// QoS, packet id, DUP, retain, subscription ids and topic alias.
func (m *Message) fill(out *packet.Publish, now time.Time) {
	out.Topic = m.topicBytes
	out.Payload = m.Payload
	out.Props.Reset()
	out.Props.Present = m.props
	out.Props.PayloadFormat = m.PayloadFormat
	out.Props.ContentType = m.ContentType
	out.Props.ResponseTopic = m.ResponseTopic
	out.Props.CorrelationData = m.CorrelationData
	out.Props.User = append(out.Props.User, m.User...)
	if !m.Expires.IsZero() {
		out.Props.Set(packet.PropMessageExpiry)
		out.Props.MessageExpiry = m.remaining(now)
	}
}
