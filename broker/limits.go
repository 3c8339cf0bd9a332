package broker

import (
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/linemq/linemq/broker/packet"
)

// This file holds the limits that keep one client, or many, from exhausting
// the broker: connections (Options.MaxConnections), the publish rate
// (MaxPublishRate), subscriptions per client (MaxSubscriptionsPerClient,
// MaxSubscriptionBytesPerClient),
// retained messages (MaxRetainedMessages, MaxRetainedBytes; enforced in
// retained.go) and sessions (MaxSessions). Each refusal is counted (see
// LimitStats) and logged as a warning at most once every limitLogEvery per
// limit, so that a flood of refusals is not a flood of log lines on an SD
// card.

// errRateTooHigh ends a v5 connection that publishes faster than
// MaxPublishRate allows.
var errRateTooHigh = &packet.Error{Code: packet.MessageRateTooHigh, Reason: "publishing faster than the broker allows (max_publish_rate)"}

// limitLogEvery rate-limits the warning each limit logs when it refuses.
const limitLogEvery = 10 * time.Second

// limitKind names one limit, for its counter and its warning.
type limitKind int

const (
	limitAccept            limitKind = iota // connection closed at accept (MaxConnections plus headroom)
	limitConnections                        // CONNECT refused at MaxConnections
	limitSessions                           // CONNECT refused at MaxSessions
	limitRateKicked                         // v5 client disconnected for its publish rate
	limitRatePaused                         // 3.1.1 client paused for its publish rate
	limitSubscriptions                      // filter refused at MaxSubscriptionsPerClient
	limitSubscriptionBytes                  // filter refused at MaxSubscriptionBytesPerClient
	limitRetained                           // retained message not kept at MaxRetainedMessages/Bytes
	numLimits
)

// limitWarnings are the warnings logged when a limit refuses, with the key
// that sets it.
var limitWarnings = [numLimits]struct{ msg, key string }{
	limitAccept:            {"connection closed at accept: too many connections open (max_connections and its headroom)", "mqtt.max_connections"},
	limitConnections:       {"connection refused: max_connections clients connected (CONNACK 0x97)", "mqtt.max_connections"},
	limitSessions:          {"new persistent session refused: max_sessions sessions kept (CONNACK 0x97); sessions of clients that never return stay until they expire: consider mqtt.max_session_expiry", "mqtt.max_sessions"},
	limitRateKicked:        {"client disconnected: publishing faster than max_publish_rate (DISCONNECT 0x96)", "mqtt.max_publish_rate"},
	limitRatePaused:        {"3.1.1 client slowed down: publishing faster than max_publish_rate", "mqtt.max_publish_rate"},
	limitSubscriptions:     {"subscription refused: client at max_subscriptions_per_client (SUBACK 0x97)", "mqtt.max_subscriptions_per_client"},
	limitSubscriptionBytes: {"subscription refused: the client's subscriptions would take more memory than max_subscription_bytes (SUBACK 0x97)", "mqtt.max_subscription_bytes"},
	limitRetained:          {"retained message not kept: max_retained_messages or max_retained_bytes reached (routed, PUBACK 0x97)", "mqtt.max_retained_messages"},
}

// limitCounters count the refusals of each limit and when each was last
// logged.
type limitCounters struct {
	n      [numLimits]atomic.Uint64
	logged [numLimits]atomic.Int64 // srv.mono of the last warning, 0 for none
}

// refused counts one refusal by limit k and logs it (with args) unless it
// was logged less than limitLogEvery ago.
func (srv *Server) refused(k limitKind, args ...any) {
	n := srv.limits.n[k].Add(1)
	now := srv.mono()
	last := srv.limits.logged[k].Load()
	if last != 0 && now-last < int64(limitLogEvery) || !srv.limits.logged[k].CompareAndSwap(last, now) {
		return
	}
	w := limitWarnings[k]
	srv.log.Warn(w.msg, append(args, "key", w.key, "refused_total", n)...)
}

// LimitStats counts what the limits refused since the server started.
type LimitStats struct {
	ClosedAtAccept       uint64 // connections closed as soon as accepted (MaxConnections plus headroom)
	RefusedConnections   uint64 // CONNECTs refused at MaxConnections (CONNACK 0x97 / 0x03)
	RefusedSessions      uint64 // CONNECTs refused at MaxSessions (CONNACK 0x97 / 0x03)
	RateDisconnects      uint64 // v5 clients disconnected for their publish rate (0x96)
	RatePauses           uint64 // times a 3.1.1 client was paused for its publish rate
	RefusedSubscriptions uint64 // filters refused at MaxSubscriptionsPerClient (SUBACK 0x97 / 0x80)
	// RefusedSubscriptionBytes counts filters refused at
	// MaxSubscriptionBytesPerClient (SUBACK 0x97 / 0x80).
	RefusedSubscriptionBytes uint64
	RefusedRetained          uint64 // retained messages not kept at MaxRetainedMessages or MaxRetainedBytes
	RetainedBytes            int64  // bytes of the retained messages kept now
	OpenConnections          int    // connections open now, CONNECT sent or not
}

// LimitStats returns the counts of refusals by the limits.
func (srv *Server) LimitStats() LimitStats {
	n := &srv.limits.n
	srv.mu.Lock()
	open := len(srv.live)
	srv.mu.Unlock()
	return LimitStats{
		OpenConnections:          open,
		ClosedAtAccept:           n[limitAccept].Load(),
		RefusedConnections:       n[limitConnections].Load(),
		RefusedSessions:          n[limitSessions].Load(),
		RateDisconnects:          n[limitRateKicked].Load(),
		RatePauses:               n[limitRatePaused].Load(),
		RefusedSubscriptions:     n[limitSubscriptions].Load(),
		RefusedSubscriptionBytes: n[limitSubscriptionBytes].Load(),
		RefusedRetained:          n[limitRetained].Load(),
		RetainedBytes:            int64(srv.retained.size()),
	}
}

// acceptHeadroom is how many connections beyond MaxConnections are let in
// to send their CONNECT: to be refused with a reason code, or to take over
// their own session. Past it, a new connection is closed at accept.
func acceptHeadroom(maxConns int) int { return max(16, maxConns/8) }

// overAcceptLimitLocked reports whether a new connection must be closed
// unread: MaxConnections and its headroom are all open. srv.mu is held.
func (srv *Server) overAcceptLimitLocked() bool {
	m := srv.opts.MaxConnections
	return m > 0 && len(srv.live) >= m+acceptHeadroom(m)
}

// admitLocked decides whether a CONNECT may go on to take or make its
// session (old, nil when there is none); it returns Success or the CONNACK
// refusal. srv.mu is held, so the counts cannot change under it.
func (srv *Server) admitLocked(c *conn, old *session, expiry uint32) packet.ReasonCode {
	o := &srv.opts
	takeover := false
	if old != nil {
		old.mu.Lock()
		takeover = old.conn != nil
		old.mu.Unlock()
	}
	if o.MaxConnections > 0 && !takeover && srv.stats.connected.Load() >= int64(o.MaxConnections) {
		srv.refused(limitConnections, "client", c.clientID, "addr", addrString(c.info.RemoteAddr), "max_connections", o.MaxConnections)
		return packet.QuotaExceeded
	}
	if o.MaxSessions > 0 && old == nil && expiry != 0 && len(srv.sessions) >= o.MaxSessions {
		srv.refused(limitSessions, "client", c.clientID, "addr", addrString(c.info.RemoteAddr), "max_sessions", o.MaxSessions)
		return packet.QuotaExceeded
	}
	return packet.Success
}

// atSubscriptionLimit reports whether the session may not add filter: it
// holds MaxSubscriptionsPerClient subscriptions, or filter's cost would
// take its subscriptions past MaxSubscriptionBytesPerClient, and filter
// is not one of them already (subscribing again replaces, costing
// nothing more).
func (c *conn) atSubscriptionLimit(filter string) bool {
	count, bytes := c.srv.opts.MaxSubscriptionsPerClient, c.srv.opts.MaxSubscriptionBytesPerClient
	if count <= 0 && bytes <= 0 {
		return false
	}
	s := c.sess
	s.mu.Lock()
	_, has := s.subs[filter]
	n, used := len(s.subs), s.subBytes
	s.mu.Unlock()
	switch {
	case has:
		return false
	case count > 0 && n >= count:
		c.srv.refused(limitSubscriptions, "client", c.clientID, "max_subscriptions_per_client", count)
		return true
	case bytes > 0 && used+subscriptionCost(filter) > bytes:
		c.srv.refused(limitSubscriptionBytes, "client", c.clientID, "max_subscription_bytes", bytes, "subscriptions", n, "bytes", used)
		return true
	}
	return false
}

// The heap one subscription takes, as subscriptionCost estimates it from
// TestSubscriptionMemoryBound's measurements: the filter's text (held by
// the subscription, the session's map and, split, by the tree's nodes),
// a node of the subscription tree per level a filter of its own makes,
// and the records of the subscription itself.
const (
	subCostPerByte  = 3   // measured 2.4 for 4 KB filters of 3 levels (the tree's level strings too)
	subCostPerLevel = 360 // measured 363 for 128 levels of distinct names
	subCostPerSub   = 200
)

// subscriptionCost is the heap subscribing to filter takes at most, for
// MaxSubscriptionBytesPerClient: as if none of its levels were shared with
// another filter's, which is the case a client shaping its filters to cost
// the most arranges.
func subscriptionCost(filter string) int {
	return subCostPerSub + subCostPerByte*len(filter) + subCostPerLevel*(strings.Count(filter, "/")+1)
}

// rateBucket is a connection's token bucket for MaxPublishRate: it holds
// up to PublishBurst tokens, gains MaxPublishRate a second, and each
// PUBLISH takes one. Owned by the connection's reader; the zero value is a
// full bucket.
type rateBucket struct {
	tokens float64
	last   time.Time // when tokens was brought up to date; zero: never used
}

// take takes a token at now, reporting how long the caller must wait
// for it (0: at once). A caller that waits owes the token: it is taken
// now, leaving the bucket below zero until the wait is over.
func (b *rateBucket) take(now time.Time, rate, burst int) time.Duration {
	if b.last.IsZero() {
		b.tokens = float64(burst)
	} else if d := now.Sub(b.last); d > 0 {
		b.tokens = min(float64(burst), b.tokens+d.Seconds()*float64(rate))
	}
	b.last = now
	b.tokens--
	if b.tokens >= 0 {
		return 0
	}
	return time.Duration(-b.tokens / float64(rate) * float64(time.Second))
}

// throttle charges one PUBLISH to the connection's bucket. A v5 client
// past its rate gets errRateTooHigh (DISCONNECT 0x96). A 3.1.1 client has
// its acknowledgements so far sent and is then not read from until its
// token is due: TCP slows it down, and it never learns of a reason it
// could not read.
func (c *conn) throttle() error {
	o := &c.srv.opts
	wait := c.pubRate.take(time.Now(), o.MaxPublishRate, o.PublishBurst)
	if wait == 0 {
		return nil
	}
	if c.version >= packet.V5 {
		c.srv.refused(limitRateKicked, "client", c.clientID, "addr", addrString(c.info.RemoteAddr), "max_publish_rate", o.MaxPublishRate)
		return errRateTooHigh
	}
	c.srv.refused(limitRatePaused, "client", c.clientID, "addr", addrString(c.info.RemoteAddr), "max_publish_rate", o.MaxPublishRate)
	c.releaseAcks()
	c.flush()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-c.wdone: // closed meanwhile (shutdown, takeover)
		return net.ErrClosed
	}
}
