package broker

import "strings"

// Observer watches the messages a node routes, for a layer that understands
// an application protocol carried over MQTT (the gateway's Sparkplug B
// awareness is one). The broker knows nothing of the protocol: it shows
// the Observer each message once, where it enters this node, and lets it
// hold a message back from this node's subscribers.
//
// Methods are called synchronously on the broker's goroutines (a client's
// reader, the cluster's receivers), outside the broker's locks, for every
// message: they must be fast and must not block. Messages are immutable
// and may be kept.
type Observer interface {
	// Observe is shown each message this node routes, once: a client's
	// publish here (after authorisation), a will or a message of the
	// broker's own (Server.Publish), or a message another node forwarded
	// to this node's ordinary subscribers. from is "" for the first two
	// and the sending node's name for the last, but for the will of a
	// client whose node died, which this node publishes for the line
	// (ClusterInbound.PublishWill): FromLine. Its answer says what
	// becomes of the message (see Observation). after, if not nil, is
	// called once the message has been routed (or held back): between
	// the two the Observer may hold a lock, so that what it decided about
	// a message and the order the message reaches subscribers in agree
	// when two arrive at once (from two nodes, say). It must then not
	// call back into the broker for that message's topic.
	Observe(m *Message, from string) (o Observation, after func())
	// WillSet is told the will a client's accepted connection registered
	// (its CONNACK queued), before anything the client sends on it is
	// routed.
	WillSet(c ClientInfo, will *Message)
}

// FromLine is the from an Observer is shown for the will of a client whose
// node died, which this node publishes for the line: it entered the line
// here, but on behalf of the node the client was connected to.
const FromLine = "\x00line"

// Observation is an Observer's answer about one message.
type Observation uint8

const (
	// Ignored: not the Observer's business; routed as usual.
	Ignored Observation = iota
	// Watched: routed as usual, and taken by the Observer on this node: a
	// message another node sent here for the Observer is not sent back as
	// unwanted when no subscriber here matches it.
	Watched
	// HeldBack: taken by the Observer and kept from this node's
	// subscribers (and, for a message that entered here, from the other
	// nodes): for a message the protocol says is stale.
	HeldBack
)

// reservedTopic reports whether topic lies under one of prefixes:
// topics the broker (or an Observer through Server.Publish) publishes
// itself, which clients may neither publish to nor use as a will.
func reservedTopic(prefixes []string, topic string) bool {
	if len(topic) == 0 || topic[0] != '$' {
		return false // every reserved prefix starts with '$'
	}
	for _, p := range prefixes {
		if strings.HasPrefix(topic, p) {
			return true
		}
	}
	return false
}

// observe shows m to the Observer, if there is one; after, if not nil,
// must be called once m has been routed.
func (srv *Server) observe(m *Message, from string) (Observation, func()) {
	if o := srv.opts.Observer; o != nil {
		return o.Observe(m, from)
	}
	return Ignored, nil
}
