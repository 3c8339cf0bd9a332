package broker

import (
	"cmp"
	"slices"
	"time"

	"github.com/linemq/linemq/broker/packet"
)

// ClientStats is a snapshot of one session and, while it is connected, its
// connection: what the status page's clients table and the API show. It is
// a value; the broker keeps no reference to it.
type ClientStats struct {
	ClientID string
	// Connection, while connected: zero values while the session is
	// offline.
	Connected      bool
	Username       string
	RemoteAddr     string
	Version        packet.Version // of the current or last connection
	KeepAlive      time.Duration  // as granted (after MaxKeepAlive)
	ReceiveMaximum int            // the client's Receive Maximum: the broker's send window
	PendingBytes   int            // encoded bytes waiting to be written to the socket

	ExpiryInterval uint32    // Session Expiry Interval, seconds; 0xFFFFFFFF never
	ConnectedAt    time.Time // when the current connection was accepted; zero while offline
	DisconnectedAt time.Time // when the last connection ended; zero while connected
	Subscriptions  int       // ordinary and shared
	InFlight       int       // QoS 1/2 messages sent and not yet acknowledged
	Queued         int       // messages waiting for the send window or a connection
	OldestQueued   time.Duration
	Dropped        uint64 // messages dropped for this session (queue full, too large)
	Disconnects    uint64 // connections of this session that ended
	Redeliveries   uint64 // PUBLISH packets resent with DUP after a reconnect
}

// SubscriptionStats is one subscription of a session.
type SubscriptionStats struct {
	Filter            string // as subscribed, $share prefix included
	QoS               byte   // granted
	NoLocal           bool
	RetainAsPublished bool
	RetainHandling    byte
	SubscriptionID    uint32 // 0 for none
	Group             string // share group name; "" for an ordinary subscription
	Delivered         uint64 // share subscriptions: messages the group handed to it
}

// Clients returns a snapshot of every session, connected or not, sorted by
// client id. Each session is read under its own lock, one after the other,
// so the list is not one atomic picture of the whole broker; figures of one
// client are consistent with each other.
func (srv *Server) Clients() []ClientStats {
	sessions := srv.sessionList()
	now := srv.clock.Now()
	out := make([]ClientStats, 0, len(sessions))
	for _, s := range sessions {
		out = append(out, s.clientStats(now))
	}
	slices.SortFunc(out, func(a, b ClientStats) int { return cmp.Compare(a.ClientID, b.ClientID) })
	return out
}

// Client returns the snapshot of one session and its subscriptions sorted
// by filter, or false when no session has that client id.
func (srv *Server) Client(id string) (ClientStats, []SubscriptionStats, bool) {
	srv.mu.Lock()
	s := srv.sessions[id]
	srv.mu.Unlock()
	if s == nil {
		return ClientStats{}, nil, false
	}
	cs := s.clientStats(srv.clock.Now())
	s.mu.Lock()
	subs := make([]SubscriptionStats, 0, len(s.subs))
	for _, sub := range s.subs {
		subs = append(subs, SubscriptionStats{
			Filter: sub.filter, QoS: sub.qos, NoLocal: sub.noLocal,
			RetainAsPublished: sub.retainAsPublished, RetainHandling: sub.retainHandling,
			SubscriptionID: sub.id, Group: sub.groupName, Delivered: sub.delivered.Load(),
		})
	}
	s.mu.Unlock()
	slices.SortFunc(subs, func(a, b SubscriptionStats) int { return cmp.Compare(a.Filter, b.Filter) })
	return cs, subs, true
}

// sessionList copies the session table so that sessions can be read one
// by one without holding Server.mu.
func (srv *Server) sessionList() []*session {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	out := make([]*session, 0, len(srv.sessions))
	for _, s := range srv.sessions {
		out = append(out, s)
	}
	return out
}

// clientStats reads the session under its mu. A connection's CONNECT
// fields (version, info, keep alive, send window) are written before attach
// makes it the session's conn under that same mu, so they are safe to read
// here; its output buffer is read under its wmu (session.mu -> conn.wmu is
// the documented lock order).
func (s *session) clientStats(now time.Time) ClientStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	cs := ClientStats{
		ClientID:       s.id,
		Version:        s.version,
		ExpiryInterval: s.expiry,

		Subscriptions: len(s.subs),
		InFlight:      len(s.inflight),
		Queued:        s.queue.len(),
		Dropped:       s.dropped,
		Disconnects:   s.disconnects,
		Redeliveries:  s.redeliveries,
	}
	if cs.Queued > 0 {
		cs.OldestQueued = max(0, now.Sub(s.queue.at(0).msg.Created))
	}
	if s.conn == nil {
		cs.DisconnectedAt = s.since
	}
	if c := s.conn; c != nil {
		cs.Connected = true
		cs.ConnectedAt = s.since
		cs.Username = c.info.Username
		if c.info.RemoteAddr != nil {
			cs.RemoteAddr = c.info.RemoteAddr.String()
		}
		cs.Version = c.version
		cs.KeepAlive = c.keepAlive
		cs.ReceiveMaximum = int(c.sendMax)
		c.wmu.Lock()
		cs.PendingBytes = len(c.out)
		c.wmu.Unlock()
	}
	return cs
}
