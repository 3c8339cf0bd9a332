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

// Store persists what must survive a restart: sessions with their
// subscriptions, queued and in-flight messages, and retained messages. The
// broker keeps the working copy in memory and tells the Store about every
// change to a persistent session; a nil Store keeps everything in memory only.
//
// Writes may be batched by the implementation: Sync blocks until every
// write made before it is durable, and the broker calls it before it
// acknowledges a QoS 1 or 2 message that a persistent session needs.
type Store interface {
	// Load returns everything stored, for the broker to restore at start.
	Load(ctx context.Context) (*Snapshot, error)
	// SaveSession records a persistent session's state (subscriptions, will,
	// expiry); it replaces what was stored for that client.
	SaveSession(s *SessionRecord) error
	// DeleteSession forgets a session and all its messages.
	DeleteSession(clientID string) error
	// SaveMessage records a message queued or in flight to a session.
	SaveMessage(clientID string, m *MessageRecord) error
	// DeleteMessage forgets a message of a session once it is acknowledged.
	DeleteMessage(clientID string, seq uint64) error
	// SaveRetained records (or, with an empty payload, clears) a retained message.
	SaveRetained(m *Message) error
	// Sync waits until every write made before the call is durable.
	Sync(ctx context.Context) error
}

// Snapshot is everything a Store holds, as loaded at start.
type Snapshot struct {
	Sessions []*SessionRecord
	Messages map[string][]*MessageRecord // by client id, in queue order
	Retained []*Message
}

// SessionRecord is the stored form of a persistent session.
type SessionRecord struct {
	ClientID       string
	Version        packet.Version
	ExpiryInterval uint32    // seconds; 0xFFFFFFFF never
	Disconnected   time.Time // zero while connected
	Subscriptions  []SubscriptionRecord
	Will           *Message // nil when none
	WillDelay      uint32
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

// MessageRecord is a message queued or in flight to one session.
type MessageRecord struct {
	Seq      uint64 // order within the session
	Message  *Message
	QoS      byte   // QoS it is delivered at
	PacketID uint16 // 0 while queued
	Released bool   // QoS 2: PUBREC received, PUBREL sent
	Group    string // share group it was dispatched for, "" if none
	SubIDs   []uint32
}

// Cluster connects this broker to its peers. A nil Cluster is a single node.
// The broker calls it on the publish path, so implementations must answer
// from memory and do network I/O asynchronously.
type Cluster interface {
	// Forward delivers m to the remote nodes with ordinary interest in its
	// topic. It returns once the forwards are queued.
	Forward(ctx context.Context, m *Message) error
	// SharedMembers appends the remote members of a share group to dst.
	SharedMembers(dst []RemoteMember, group, filter string) []RemoteMember
	// Deliver sends m to one client on another node as a share pick; the
	// error is non-nil when that node reports the client is not there or is
	// unreachable, and the broker then picks again.
	Deliver(ctx context.Context, to RemoteMember, group string, m *Message) error
	// Subscribed and Unsubscribed announce local interest changes.
	Subscribed(clientID, filter string)
	Unsubscribed(clientID, filter string)
}

// RemoteMember is a share group member held by another node.
type RemoteMember struct {
	ClientID string
	NodeID   string
}
