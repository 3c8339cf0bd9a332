package broker

import (
	"context"
	"net"
	"time"

	"github.com/linemq/linemq/broker/packet"
)

// ClientInfo describes a connected client to the interfaces below. It is a
// value: implementations may keep it.
type ClientInfo struct {
	ClientID   string
	Username   string
	RemoteAddr net.Addr
	Version    packet.Version
}

// ConnectRequest is what an Authenticator sees of a CONNECT.
type ConnectRequest struct {
	ClientInfo
	Password   []byte // valid only during the call
	CleanStart bool
}

// Authenticator decides who may connect and what they may do. Methods are
// called concurrently from connection goroutines and must not block on
// slow I/O for long: they run on the client's read path.
type Authenticator interface {
	// Authenticate accepts (packet.Success) or refuses a connection; a refusal
	// is sent in the CONNACK (for example packet.BadUsernameOrPassword or
	// packet.NotAuthorized) and the connection is closed.
	Authenticate(ctx context.Context, req ConnectRequest) packet.ReasonCode
	// CanPublish reports whether the client may publish to topic.
	CanPublish(c ClientInfo, topic string) bool
	// CanSubscribe reports whether the client may subscribe to filter (the
	// filter as sent, $share prefix included).
	CanSubscribe(c ClientInfo, filter string) bool
}

// ReadChecker is implemented by an Authenticator that may grant a
// subscription wider than what its client may read, on the condition that
// the topics it may not read are never sent to it (Mosquitto's way with a
// deny rule inside a granted filter). ReadCheck is called once per
// connection, after Authenticate accepted it, and returns the check every
// message sent to the client must pass, or nil when the client needs none.
// The check runs on the delivery path, under the session's lock: it must
// be fast and must not block.
type ReadChecker interface {
	ReadCheck(c ClientInfo) func(topic string) bool
}

// AllowAll is the default Authenticator: every client may connect, publish
// and subscribe.
type AllowAll struct{}

// Authenticate accepts every connection.
func (AllowAll) Authenticate(context.Context, ConnectRequest) packet.ReasonCode {
	return packet.Success
}

// CanPublish allows every publish.
func (AllowAll) CanPublish(ClientInfo, string) bool { return true }

// CanSubscribe allows every subscription.
func (AllowAll) CanSubscribe(ClientInfo, string) bool { return true }

// Events receives notice of lifecycle changes, for logs, metrics and the
// status page. Methods are called synchronously from the broker's goroutines,
// outside its locks, and must return quickly.
type Events interface {
	// ClientConnected is called after a CONNACK accepting the client was queued.
	ClientConnected(c ClientInfo, sessionPresent bool)
	// ClientDisconnected is called once a connection has closed; reason is the
	// reason code the broker or the client gave (packet.NormalDisconnection
	// for a clean DISCONNECT) and err the underlying cause, if any.
	ClientDisconnected(c ClientInfo, reason packet.ReasonCode, err error)
}

// ListenerLimits is implemented by a connection (the net.Conn given to the
// broker) whose listener sets limits of its own, tighter than the
// broker's Options: a listener facing contractors' laptops can take
// smaller packets than the loopback one a historian uses.
type ListenerLimits interface {
	// MaxPacketSize is the largest packet accepted on the connection,
	// advertised in a v5 CONNACK; 0 means the broker's MaxPacketSize.
	MaxPacketSize() int
}

// Clock is the broker's time source, replaceable in tests.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f in its own goroutine after d, like time.AfterFunc.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a timer made by a Clock.
type Timer interface {
	// Stop prevents the timer from firing; it reports whether it did so.
	Stop() bool
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }
func (systemClock) AfterFunc(d time.Duration, f func()) Timer {
	return time.AfterFunc(d, f)
}

// Store persists what must survive a restart: persistent sessions with
// their subscriptions and will, the messages queued and in flight to them,
// the inbound QoS 2 packet ids they have not released, and retained
// messages. The broker keeps the working copy in memory and tells the Store
// about every change; a nil Store keeps everything in memory only. Clean
// sessions (expiry 0) and QoS 0 messages are never written.
//
// The write methods must be cheap and must not block on I/O: they record the
// change (for example in a batch being collected) and return. The broker
// calls them in the order the changes happened, under the session's lock.
// Sync makes them durable: it blocks until every write made before the call
// is on disk, and the broker calls it before it acknowledges a QoS 1 or 2
// message that a persistent session needs. An error from Sync means those
// writes may be lost; the broker then refuses the publish (0x97 Quota
// exceeded) rather than acknowledge it.
type Store interface {
	// Load returns everything stored, for the broker to restore at start.
	Load(ctx context.Context) (*Snapshot, error)
	// SaveSession records a persistent session's own state (version,
	// expiry, disconnect time, will); it replaces what was stored for that
	// client id. Its Subscriptions are not written: subscriptions are
	// stored one by one, so that a SUBSCRIBE writes only what it changed.
	SaveSession(s *SessionRecord) error
	// DeleteSession forgets a session with all its subscriptions, messages
	// and inbound ids.
	DeleteSession(clientID string) error
	// SaveSubscription records one subscription of a stored session,
	// replacing the one with the same filter.
	SaveSubscription(clientID string, sub SubscriptionRecord) error
	// DeleteSubscription forgets one subscription of a stored session.
	DeleteSubscription(clientID, filter string) error
	// SaveMessage records a message queued or in flight to a session,
	// replacing the record with the same Seq.
	SaveMessage(clientID string, m *MessageRecord) error
	// DeleteMessage forgets a session's message once it is acknowledged,
	// redispatched or dropped.
	DeleteMessage(clientID string, seq uint64) error
	// SetInbound records (pending true) or forgets an inbound QoS 2 packet id
	// received from the client and not yet released by PUBREL.
	SetInbound(clientID string, packetID uint16, pending bool) error
	// SaveRetained records a topic's retained message, or clears it when m
	// has an empty payload.
	SaveRetained(m *Message) error
	// Sync blocks until every write made before it is durable.
	Sync(ctx context.Context) error
}

// Committer is a Store that can commit what it holds at once, rather than
// when its own batch is due (storage/bolt's Store, whose storage.sync:
// batch collects changes for an interval). The broker asks it to when the
// acknowledgements waiting for a sync stop coming: the publishers have
// sent all their windows allow, and waiting out the interval would only
// keep them waiting (see syncer).
type Committer interface {
	Commit(ctx context.Context) error
}

// Snapshot is everything a Store holds, as loaded at start.
type Snapshot struct {
	Sessions []*SessionRecord
	Messages map[string][]*MessageRecord // by client id, in Seq order
	Inbound  map[string][]uint16         // by client id
	Retained []*Message
	// Unclean reports that the process that last wrote the Store died
	// without closing it: a queued message may have gone out to its client
	// before the record of its sending was written, so each is sent with
	// DUP.
	Unclean bool
}

// SessionRecord is the stored form of a persistent session. Load fills
// Subscriptions; SaveSession ignores them.
type SessionRecord struct {
	ClientID       string
	Version        packet.Version
	ExpiryInterval uint32    // seconds; 0xFFFFFFFF never
	Disconnected   time.Time // zero while connected
	Subscriptions  []SubscriptionRecord
	Will           *WillRecord // the connection's will, or a will waiting out its delay
}

// SubscriptionRecord is a stored subscription with its options.
type SubscriptionRecord struct {
	Filter            string // as subscribed, $share prefix included
	QoS               byte
	NoLocal           bool
	RetainAsPublished bool
	RetainHandling    byte
	SubscriptionID    uint32
}

// WillRecord is a stored will message.
type WillRecord struct {
	Message   *Message
	Delay     uint32 // Will Delay Interval, seconds
	Expiry    uint32 // Message Expiry Interval, seconds, if HasExpiry
	HasExpiry bool
}

// MessageRecord is a message queued or in flight to one session.
type MessageRecord struct {
	Seq uint64 // order within the session
	// MessageID identifies Message among the records of all sessions: a
	// message queued to many sessions has one id, so that a Store can keep
	// its body once and hand back one shared *Message at Load. 0 means the
	// record does not share its body.
	MessageID uint64
	Message   *Message
	QoS       byte   // QoS it is delivered at
	Retain    bool   // RETAIN flag to deliver with
	PacketID  uint16 // 0 while queued
	Sent      bool   // sent at least once: a resend sets DUP
	Released  bool   // QoS 2: PUBREC received, PUBREL sent
	// GroupName is the share group it was dispatched for, "" if none. In
	// a forward queue's record (ForwardQueueOf) it names the client the
	// message is for, "" for the node's ordinary subscribers.
	GroupName   string
	GroupFilter string
	SubIDs      []uint32
}
