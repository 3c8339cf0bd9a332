package broker

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/linemq/linemq/broker/packet"
)

// Options configure a Server. The zero value of every field means its
// default, so Options{} is a working standalone broker. Options are read once
// by New; changing them afterwards has no effect.
type Options struct {
	// MaxPacketSize is the largest packet accepted from a client, advertised
	// as Maximum Packet Size in a v5 CONNACK. A larger packet ends the
	// connection with 0x95 Packet too large. Default 1 MiB.
	MaxPacketSize int

	// ReceiveMaximum is how many QoS 1 and 2 PUBLISH packets a client may
	// have unacknowledged towards the broker at once (v5 section 4.9). A client
	// that exceeds it is disconnected with 0x93. Default 1024.
	ReceiveMaximum uint16

	// TopicAliasMaximum is the highest topic alias a client may use towards
	// the broker. Default 1024; set it negative to refuse topic aliases.
	TopicAliasMaximum int

	// MaxKeepAlive caps the keep alive a client asks for. A client asking for
	// more (or for 0, which would disable the timeout) is told the cap through
	// Server Keep Alive. Default 0: no cap, the client's value stands.
	MaxKeepAlive time.Duration

	// MaxSessionExpiry caps the Session Expiry Interval a client asks for, and
	// is the expiry of 3.1.1 persistent sessions. Default 0: no cap (3.1.1
	// persistent sessions never expire).
	MaxSessionExpiry time.Duration

	// MaxQueuedMessages bounds each session's queue of messages waiting for
	// its send window or for it to reconnect. When it is full the oldest
	// message is dropped, and counted. Default 1000.
	MaxQueuedMessages int

	// MaxQueuedTotal bounds the messages queued in all sessions together,
	// so that many offline sessions cannot exhaust the gateway's memory.
	// Past it, each session that queues one more message drops one of its
	// own by the same policy (QoS 0 first, then the oldest). Default
	// 100,000; negative for no global bound.
	MaxQueuedTotal int

	// Overload is what happens when a session cannot take a QoS 1 or 2
	// message because its queue holds MaxQueuedMessages (or the broker
	// MaxQueuedTotal). "backpressure" (the default) never drops a message
	// it acknowledged: the new message is refused for that session, and a
	// v5 publisher learns it from PUBACK/PUBREC 0x97 Quota exceeded (a
	// 3.1.1 publisher has no negative acknowledgement: the message is
	// dropped for that session, counted and logged). A queued QoS 0
	// message, never promised, is dropped to make room first. "drop_oldest"
	// drops the oldest queued message instead (QoS 0 first) and accepts the
	// new one, for subscribers that prefer fresh data. Share groups follow
	// ShareOptions.Overload, which defaults to this.
	Overload string

	// QueueQoS0 queues QoS 0 messages for offline persistent sessions, within
	// MaxQueuedMessages; they are kept in memory only. Default false: QoS 0
	// messages to an offline client are dropped, as in Mosquitto.
	QueueQoS0 bool

	// MaxPendingBytes bounds the encoded bytes waiting to be written to one
	// connection. QoS 0 messages beyond it are dropped (counted); a client
	// that stops reading holds at most this much memory. Default 1 MiB.
	MaxPendingBytes int

	// MaxClientIDLength is the longest client identifier accepted. Default 256.
	MaxClientIDLength int

	// MaxTopicLevels bounds the levels of a topic name or filter (a filter's
	// $share/<name>/ prefix not counted). Deep filters cost memory in the
	// subscription index; a filter over the bound is refused (0x8F v5,
	// 0x80 3.1.1) and a PUBLISH to a topic over it ends the connection with
	// 0x90 Topic Name invalid. Default 128; negative for no bound.
	MaxTopicLevels int

	// MaxTopicLength bounds the length in bytes of a topic name or filter,
	// refused like MaxTopicLevels. Default 4096; negative for the
	// protocol's own limit of 65535.
	MaxTopicLength int

	// MaxPendingBytesTotal bounds the encoded bytes waiting to be written to
	// all connections together, so that many clients that stop reading
	// cannot exhaust memory: past it, QoS 0 messages to a connection with
	// bytes already pending are dropped (counted) and QoS 1/2 messages stay
	// queued until writes make room. Default 256 MiB; negative for none.
	MaxPendingBytesTotal int

	// PartialPacketTimeout is how long a packet that has started to arrive
	// may take to arrive completely; a client that sends part of a packet
	// and stops is disconnected, so that half-sent packets cannot pin read
	// buffers forever. Default 30 s; negative for none.
	PartialPacketTimeout time.Duration

	// ConnectTimeout is how long a new connection may take to send CONNECT.
	// Default 10 s.
	ConnectTimeout time.Duration

	// MaxConnectSize is the largest CONNECT accepted: until a connection has
	// been authenticated, nobody knows who holds its buffer, so its first
	// packet gets a bound of its own, well below MaxPacketSize. A larger
	// CONNECT (in practice a large will, or a password of megabytes) ends the
	// connection as soon as its header says so. Default 64 KiB.
	MaxConnectSize int
	// MaxConnectingBytes bounds the read buffers of all the connections that
	// have not completed CONNECT, together: a connection whose buffer would
	// take them past it is closed. At the defaults, 2,048 connections that
	// each send most of a CONNECT and stop hold at most this much, however
	// large their CONNECTs claim to be. Default 64 MiB.
	MaxConnectingBytes int64

	// WriteTimeout is how long one write to a client may block before the
	// connection is considered dead. Default 30 s.
	WriteTimeout time.Duration

	// MaxConnections bounds the clients connected at once, over every
	// listener (each listener may have its own, lower, bound). A CONNECT
	// beyond it is refused with CONNACK 0x97 Quota exceeded (3.1.1: 0x03
	// Server unavailable), unless it takes over the session of a client
	// that is connected (a reconnecting client must not be locked out by
	// its own half-open connection). Connections that have not sent
	// CONNECT yet are bounded too: past MaxConnections plus a headroom of
	// an eighth (at least 16), left for those refusals and takeovers, a new
	// connection is closed as soon as it is accepted. Default 2048;
	// negative for none.
	MaxConnections int

	// MaxPublishRate is how many PUBLISH packets per second one connection
	// may send, sustained; PublishBurst more may arrive at once (a token
	// bucket). A v5 client over it is disconnected with 0x96 Message rate
	// too high; a 3.1.1 client, which cannot be told why, is slowed down
	// instead: the broker stops reading from it until the rate allows its
	// next PUBLISH (TCP then slows the sender), as EMQX does. The bucket
	// belongs to the connection: a client that reconnects starts with a
	// full one (a CONNECT costs more than the publishes it buys). Default
	// 0 (or negative): no limit.
	MaxPublishRate int

	// PublishBurst is the depth of the MaxPublishRate bucket: how many
	// PUBLISH packets a connection may send at once after a quiet spell.
	// Default MaxPublishRate (one second's worth).
	PublishBurst int

	// MaxSubscriptionsPerClient bounds the subscriptions of one session
	// (shared ones included). A new filter beyond it is refused in the
	// SUBACK with 0x97 Quota exceeded (3.1.1: 0x80); a filter the session
	// already has may be subscribed again. Default 1000; negative for none.
	MaxSubscriptionsPerClient int

	// MaxSubscriptionBytesPerClient bounds the memory one session's
	// subscriptions take, as estimated for each filter from its length and
	// its levels (a node of the subscription tree each, as if shared with
	// no other filter): MaxSubscriptionsPerClient alone lets a client
	// whose thousand filters are 128 levels deep take 40 MB. A new filter
	// that would take the session past it is refused in the SUBACK with
	// 0x97 Quota exceeded (3.1.1: 0x80). Default
	// DefaultMaxSubscriptionBytesPerClient; negative for none.
	MaxSubscriptionBytesPerClient int

	// MaxRetainedMessages and MaxRetainedBytes bound the retained messages
	// the broker keeps (bytes: topic, payload and properties). A retained
	// PUBLISH that would go over either is still routed to the current
	// subscribers but not retained, and a v5 publisher is told so with
	// PUBACK/PUBREC 0x97 Quota exceeded. Replacing a retained message with
	// one no larger, and clearing one (empty payload), are always
	// accepted. Defaults 100,000 and 64 MiB; negative for none.
	MaxRetainedMessages int
	MaxRetainedBytes    int

	// MaxSessions bounds the sessions the broker keeps, connected or not:
	// in effect, the sessions left behind by clients that went away. A
	// CONNECT that would create a new session outliving its connection
	// (3.1.1 Clean Session 0, v5 Session Expiry Interval above 0) while
	// the broker holds MaxSessions is refused with CONNACK 0x97 Quota
	// exceeded (3.1.1: 0x03 Server unavailable). Resuming a session, and
	// sessions that end with their connection, are never refused. No
	// existing session is expired to make room: it may hold messages that
	// were acknowledged to their publishers. Default 10,000; negative for
	// none.
	MaxSessions int

	// DisableRetain refuses retained messages (0x9A) and says so in
	// CONNACK; by default they are available.
	DisableRetain bool

	// DisableWildcardSubs refuses filters with + or # (0xA2).
	DisableWildcardSubs bool

	// DisableSubIDs refuses subscription identifiers (0xA1).
	DisableSubIDs bool

	// DisableSharedSubs refuses $share filters (0x9E).
	DisableSharedSubs bool

	// DeniedSubscriptionReason is the v5 SUBACK reason code for a filter
	// the Authenticator refuses: packet.NotAuthorized (0x87, the default)
	// or packet.UnspecifiedError (0x80), for MQTT 5 clients that take
	// only 0x80 as a failure (the Paho interoperability suite's among
	// them). 3.1.1 always gets 0x80.
	DeniedSubscriptionReason packet.ReasonCode

	// IdleParkAfter is how long a client may send nothing before its
	// connection is parked: its reader goroutine and read buffer are
	// released and one epoll set watches its socket instead (Linux). It
	// changes nothing a client can see and keeps thousands of idle clients
	// cheap. Default 1 s; negative never parks.
	IdleParkAfter time.Duration

	// Shares configures shared subscription groups.
	Shares ShareOptions

	// Auth authenticates connections and authorises publishes and
	// subscriptions. Nil allows everything.
	Auth Authenticator

	// Store persists sessions and retained messages. Nil keeps them in memory.
	Store Store

	// Cluster connects the broker to the other nodes of a cluster. Nil is
	// a single node.
	Cluster Cluster

	// Forwards bound the QoS 1 and 2 messages kept for other nodes'
	// ordinary subscribers until those nodes have them (outbox.go).
	Forwards ForwardOptions

	// Events receives lifecycle events. Nil discards them.
	Events Events

	// Observer is shown every message this node routes, once, and may
	// hold one back (observer.go). Nil shows nothing.
	Observer Observer

	// ReservedTopics are topic prefixes, each starting with '$', under
	// which only the broker publishes (an Observer's republications, for
	// example "$sparkplug/"): a client's PUBLISH there is refused as the
	// ACL refuses one (v5 0x87; 3.1.1 dropped) and so is a will there
	// (CONNACK 0x87 Not authorized, 3.1.1 0x05).
	ReservedTopics []string

	// Clock is the time source for keep alive, expiry and will delays. Nil
	// uses the system clock.
	Clock Clock

	// Logger receives the broker's logs. Nil discards them.
	Logger *slog.Logger
}

// Defaults of Options.
const (
	DefaultMaxPacketSize     = 1 << 20
	DefaultReceiveMaximum    = 1024
	DefaultTopicAliasMaximum = 1024
	DefaultMaxQueuedMessages = 1000
	DefaultMaxPendingBytes   = 1 << 20
	DefaultMaxClientIDLength = 256
	DefaultConnectTimeout    = 10 * time.Second
	DefaultMaxConnectSize    = 64 << 10
	DefaultMaxConnecting     = 64 << 20
	DefaultWriteTimeout      = 30 * time.Second
	DefaultIdleParkAfter     = time.Second
	DefaultMaxQueuedTotal    = 100_000
	DefaultMaxTopicLevels    = 128
	DefaultMaxTopicLength    = 4096
	DefaultMaxPendingTotal   = 256 << 20
	DefaultPartialPacketTime = 30 * time.Second

	DefaultMaxConnections            = 2048
	DefaultMaxSubscriptionsPerClient = 1000
	// DefaultMaxSubscriptionBytesPerClient keeps one client's
	// subscriptions within 4 MB of heap however it shapes its filters
	// (TestSubscriptionMemoryBound measured 74 filters of the deepest, 128
	// levels, and 276 of the longest, 4 KB; by the estimate, about 900 of
	// ten levels that share no level with another). Filters that share
	// their first levels cost less than the estimate, which counts each
	// one alone.
	DefaultMaxSubscriptionBytesPerClient = 3584 << 10 // 3.5 MiB
	DefaultMaxRetainedMessages           = 100_000
	DefaultMaxRetainedBytes              = 64 << 20
	DefaultMaxSessions                   = 10_000
)

// Validate reports every option that is out of range, joined into one
// error (nil when all are valid).
func (o *Options) Validate() error {
	var errs []error
	if o.MaxPacketSize < 0 || o.MaxPacketSize > 268_435_460 {
		errs = append(errs, fmt.Errorf("broker: MaxPacketSize %d out of range (0..268435460)", o.MaxPacketSize))
	}
	if r := o.DeniedSubscriptionReason; r != 0 && r != packet.NotAuthorized && r != packet.UnspecifiedError {
		errs = append(errs, fmt.Errorf("broker: DeniedSubscriptionReason 0x%02X: 0x87 or 0x80", byte(r)))
	}
	if o.TopicAliasMaximum > 65535 {
		errs = append(errs, fmt.Errorf("broker: TopicAliasMaximum %d out of range (..65535)", o.TopicAliasMaximum))
	}
	if o.MaxKeepAlive < 0 || o.MaxKeepAlive > 65535*time.Second || o.MaxKeepAlive%time.Second != 0 {
		errs = append(errs, fmt.Errorf("broker: MaxKeepAlive %v must be whole seconds in 0..65535s", o.MaxKeepAlive))
	}
	if o.MaxSessionExpiry < 0 || o.MaxSessionExpiry > neverExpires*time.Second || o.MaxSessionExpiry%time.Second != 0 {
		errs = append(errs, fmt.Errorf("broker: MaxSessionExpiry %v must be whole seconds in 0..4294967295s", o.MaxSessionExpiry))
	}
	for _, n := range []struct {
		name string
		v    int
	}{{"MaxQueuedMessages", o.MaxQueuedMessages}, {"MaxPendingBytes", o.MaxPendingBytes},
		{"PublishBurst", o.PublishBurst}, {"MaxConnectSize", o.MaxConnectSize}} {
		if n.v < 0 {
			errs = append(errs, fmt.Errorf("broker: %s %d is negative", n.name, n.v))
		}
	}
	if o.MaxClientIDLength < 0 || o.MaxClientIDLength > 65535 {
		errs = append(errs, fmt.Errorf("broker: MaxClientIDLength %d out of range (0..65535)", o.MaxClientIDLength))
	}
	if o.MaxConnectingBytes < 0 {
		errs = append(errs, fmt.Errorf("broker: MaxConnectingBytes %d is negative", o.MaxConnectingBytes))
	}
	if o.ConnectTimeout < 0 || o.WriteTimeout < 0 {
		errs = append(errs, errors.New("broker: timeouts must not be negative"))
	}
	for _, p := range o.ReservedTopics {
		if len(p) < 2 || p[0] != '$' {
			errs = append(errs, fmt.Errorf("broker: ReservedTopics %q: a reserved prefix starts with '$' and names something", p))
		}
	}
	if err := validOverload(o.Overload); err != nil {
		errs = append(errs, fmt.Errorf("broker: Overload: %w", err))
	}
	if err := o.Shares.validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// limitOrDefault resolves a limit whose zero value means its default and
// whose negative values mean "no limit": it returns d for 0, 0 (no limit)
// for a negative value, and v otherwise.
func limitOrDefault(v, d int) int {
	switch {
	case v == 0:
		return d
	case v < 0:
		return 0
	}
	return v
}

// withDefaults returns a copy of o with zero values replaced by defaults.
func (o Options) withDefaults() Options {
	if o.DeniedSubscriptionReason == 0 {
		o.DeniedSubscriptionReason = packet.NotAuthorized
	}
	if o.MaxPacketSize == 0 {
		o.MaxPacketSize = DefaultMaxPacketSize
	}
	if o.MaxConnectSize == 0 {
		o.MaxConnectSize = DefaultMaxConnectSize
	}
	if o.MaxConnectingBytes == 0 {
		o.MaxConnectingBytes = DefaultMaxConnecting
	}
	if o.ReceiveMaximum == 0 {
		o.ReceiveMaximum = DefaultReceiveMaximum
	}
	if o.TopicAliasMaximum == 0 {
		o.TopicAliasMaximum = DefaultTopicAliasMaximum
	} else if o.TopicAliasMaximum < 0 {
		o.TopicAliasMaximum = 0
	}
	if o.MaxQueuedMessages == 0 {
		o.MaxQueuedMessages = DefaultMaxQueuedMessages
	}
	if o.MaxPendingBytes == 0 {
		o.MaxPendingBytes = DefaultMaxPendingBytes
	}
	if o.MaxClientIDLength == 0 {
		o.MaxClientIDLength = DefaultMaxClientIDLength
	}
	o.MaxQueuedTotal = limitOrDefault(o.MaxQueuedTotal, DefaultMaxQueuedTotal)
	o.MaxTopicLevels = limitOrDefault(o.MaxTopicLevels, DefaultMaxTopicLevels)
	o.MaxTopicLength = limitOrDefault(o.MaxTopicLength, DefaultMaxTopicLength)
	if o.MaxTopicLength == 0 || o.MaxTopicLength > 65535 {
		o.MaxTopicLength = 65535
	}
	o.MaxPendingBytesTotal = limitOrDefault(o.MaxPendingBytesTotal, DefaultMaxPendingTotal)
	o.MaxConnections = limitOrDefault(o.MaxConnections, DefaultMaxConnections)
	o.MaxSubscriptionsPerClient = limitOrDefault(o.MaxSubscriptionsPerClient, DefaultMaxSubscriptionsPerClient)
	o.MaxSubscriptionBytesPerClient = limitOrDefault(o.MaxSubscriptionBytesPerClient, DefaultMaxSubscriptionBytesPerClient)
	o.MaxRetainedMessages = limitOrDefault(o.MaxRetainedMessages, DefaultMaxRetainedMessages)
	o.MaxRetainedBytes = limitOrDefault(o.MaxRetainedBytes, DefaultMaxRetainedBytes)
	o.MaxSessions = limitOrDefault(o.MaxSessions, DefaultMaxSessions)
	o.MaxPublishRate = max(o.MaxPublishRate, 0)
	if o.MaxPublishRate > 0 && o.PublishBurst == 0 {
		o.PublishBurst = o.MaxPublishRate
	}
	if o.PartialPacketTimeout == 0 {
		o.PartialPacketTimeout = DefaultPartialPacketTime
	} else if o.PartialPacketTimeout < 0 {
		o.PartialPacketTimeout = 0
	}
	if o.ConnectTimeout == 0 {
		o.ConnectTimeout = DefaultConnectTimeout
	}
	if o.WriteTimeout == 0 {
		o.WriteTimeout = DefaultWriteTimeout
	}
	if o.IdleParkAfter == 0 {
		o.IdleParkAfter = DefaultIdleParkAfter
	}
	if o.Overload == "" {
		o.Overload = OverloadBackpressure
	}
	if o.Shares.Overload == "" {
		o.Shares.Overload = o.Overload
	}
	if o.Clock == nil {
		o.Clock = systemClock{}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Auth == nil {
		o.Auth = AllowAll{}
	}
	return o
}
