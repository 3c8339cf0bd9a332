package peer

import (
	"encoding/json"
	"fmt"
	"math"
	"sync/atomic"
	"time"
)

// BreakerState is a peer's circuit breaker state.
type BreakerState uint8

// The states, numbered as gobreaker numbers them.
const (
	// BreakerClosed: traffic flows (if the stream is ready).
	BreakerClosed BreakerState = iota
	// BreakerHalfOpen: one ping is probing the peer; no traffic.
	BreakerHalfOpen
	// BreakerOpen: the peer failed; no traffic until OpenTimeout has
	// passed and a probe succeeds.
	BreakerOpen
)

// String returns "closed", "half-open" or "open", as gobreaker names them.
func (s BreakerState) String() string {
	switch s {
	case BreakerClosed:
		return "closed"
	case BreakerHalfOpen:
		return "half-open"
	case BreakerOpen:
		return "open"
	}
	return fmt.Sprintf("BreakerState(%d)", s)
}

// MarshalText gives the state's name, so JSON shows "closed", not 0.
func (s BreakerState) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText reads a name MarshalText gives.
func (s *BreakerState) UnmarshalText(b []byte) error {
	for _, v := range []BreakerState{BreakerClosed, BreakerHalfOpen, BreakerOpen} {
		if v.String() == string(b) {
			*s = v
			return nil
		}
	}
	return fmt.Errorf("peer: unknown breaker state %q", b)
}

// PeerStats are one peer's figures, for metrics and the status page.
// Counters count from when SetPeers first listed the peer. In JSON the
// names are snake_case, the breaker state is its name and the round
// trips are in seconds (rtt_seconds, rtt_mean_seconds, rtt_max_seconds).
//
// Directed deliveries to the peer: every Deliver to it (whose context has
// not already ended) counts in Deliveries and ends in exactly one of Refused (at once), Accepted,
// NotHere, RemoteErrors, ExpiredByPeer, Timeouts, Broken or Cancelled,
// or is still waiting (InFlight); so Deliveries is their sum. A Deliver to
// a node that is not a peer (ErrUnknownPeer) has no PeerStats to count
// in.
type PeerStats struct {
	Node      string       `json:"node"`
	Addr      string       `json:"addr"`
	Dialer    bool         `json:"dialer"`    // this node dials the peer (its name sorts first)
	Connected bool         `json:"connected"` // a stream is up
	Available bool         `json:"available"` // Available(Node) at the time of the call
	Breaker   BreakerState `json:"breaker"`   // as of its last change (open turns half-open lazily, when a probe is due)
	// Problem says in plain words why the peer cannot take traffic ("no
	// answer to pings for 1.5 s (frozen or cut off)", "connection refused
	// at 10.0.0.13:7946 (is linemq running there?)", ...), for an
	// operator; empty when it can. LastError has the raw error.
	Problem string `json:"problem"`

	Queued   int `json:"queued"`    // forwards and deliveries waiting for the writer (answers and pings not counted)
	InFlight int `json:"in_flight"` // directed deliveries awaiting an answer (the ring's span)

	Streams    uint64 `json:"streams"`     // streams established
	DialErrors uint64 `json:"dial_errors"` // dials that failed (this node dials only)
	// LastError says why the last stream ended or the last dial failed
	// (refused, a certificate rejected, ...); empty if none has.
	LastError string `json:"last_error"`

	SentRecords uint64 `json:"sent_records"`
	SentFrames  uint64 `json:"sent_frames"`
	SentBytes   uint64 `json:"sent_bytes"`
	RecvRecords uint64 `json:"recv_records"`
	RecvFrames  uint64 `json:"recv_frames"`
	RecvBytes   uint64 `json:"recv_bytes"`

	// Directed deliveries to the peer, by outcome (see above).
	Deliveries   uint64 `json:"deliveries"`    // Deliver calls for the peer
	Refused      uint64 `json:"refused"`       // ... failed at once: unavailable, queue or window full
	Accepted     uint64 `json:"accepted"`      // ... the peer queued it to the client
	NotHere      uint64 `json:"not_here"`      // ... the client is not there (ErrNotHere)
	RemoteErrors uint64 `json:"remote_errors"` // ... the peer had the client but could not take it (*RemoteError)
	// ExpiredByPeer: the peer answered that it got the delivery too late
	// and did not deliver it, while this node still waited (ErrExpired).
	ExpiredByPeer uint64 `json:"expired_by_peer"`
	Timeouts      uint64 `json:"timeouts"`  // ... completed with ErrTimeout (deadline or missed pong)
	Broken        uint64 `json:"broken"`    // ... completed with ErrBroken
	Cancelled     uint64 `json:"cancelled"` // ... ended by the caller's context, or by Close (ErrClosed)

	Answers uint64 `json:"answers"` // answers received in time (accepted, not here, error or expired)
	// Late counts answers that came after their delivery had completed
	// (timed out or cancelled); LateAccepted those that accepted it: the
	// caller had re-picked, so each is a duplicate; LateExpired those
	// where the peer found it had come too late and did not deliver it
	// (no duplicate).
	Late         uint64 `json:"late"`
	LateAccepted uint64 `json:"late_accepted"`
	LateExpired  uint64 `json:"late_expired"`

	// Expired counts deliveries from the peer that this node read after
	// the peer had given up on them (this node was stopped or far behind)
	// and so answered "expired" instead of handing them to the Handler.
	Expired uint64 `json:"expired"`
	// Stalls counts times this node's clock for the peer woke far past a
	// deadline (this process was stopped or starved) and waited for the
	// reader before timing anything out.
	Stalls uint64 `json:"stalls"`

	Dropped   uint64 `json:"dropped"`   // forwards lost in the queue when a stream ended
	Rejected  uint64 `json:"rejected"`  // Send and Deliver refused at once (unavailable, queue full)
	Malformed uint64 `json:"malformed"` // frames or messages that did not decode

	PingTimeouts uint64 `json:"ping_timeouts"` // pongs missed
	Opens        uint64 `json:"opens"`         // times the breaker opened
	Probes       uint64 `json:"probes"`        // times it went half-open (probe pings sent)

	// RTT is the last ping's round trip, RTTMean and RTTMax over all
	// pings answered. In JSON: rtt_seconds, rtt_mean_seconds and
	// rtt_max_seconds.
	RTT     time.Duration `json:"-"`
	RTTMean time.Duration `json:"-"`
	RTTMax  time.Duration `json:"-"`
}

// peerStatsJSON is PeerStats as JSON has it: the round trips in seconds.
type peerStatsJSON struct {
	plainPeerStats
	RTT     float64 `json:"rtt_seconds"`
	RTTMean float64 `json:"rtt_mean_seconds"`
	RTTMax  float64 `json:"rtt_max_seconds"`
}

// plainPeerStats is PeerStats without its methods, so encoding it does
// not recurse.
type plainPeerStats PeerStats

// MarshalJSON encodes s with snake_case names and the round trips in
// seconds, for people reading the status page.
func (s PeerStats) MarshalJSON() ([]byte, error) {
	return json.Marshal(peerStatsJSON{
		plainPeerStats: plainPeerStats(s),
		RTT:            s.RTT.Seconds(), RTTMean: s.RTTMean.Seconds(), RTTMax: s.RTTMax.Seconds(),
	})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (s *PeerStats) UnmarshalJSON(b []byte) error {
	var j peerStatsJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*s = PeerStats(j.plainPeerStats)
	sec := func(f float64) time.Duration { return time.Duration(math.Round(f * float64(time.Second))) }
	s.RTT, s.RTTMean, s.RTTMax = sec(j.RTT), sec(j.RTTMean), sec(j.RTTMax)
	return nil
}

// counters are the PeerStats counters, updated without locks.
type counters struct {
	streams, dialErrors                atomic.Uint64
	sentRecords, sentFrames, sentBytes atomic.Uint64
	recvRecords, recvFrames, recvBytes atomic.Uint64
	deliveries, refused, accepted      atomic.Uint64
	notHere, remoteErrors              atomic.Uint64
	expiredByPeer, cancelled           atomic.Uint64
	answers, timeouts, broken          atomic.Uint64
	late, lateAccepted, lateExpired    atomic.Uint64
	expired, stalls, dropped           atomic.Uint64
	rejected, malformed                atomic.Uint64
	pingTimeouts, opens, probes        atomic.Uint64
}

// rttStats summarise ping round trips; guarded by link.mu.
type rttStats struct {
	last, max, sum time.Duration
	n              int64
}

func (r *rttStats) add(d time.Duration) {
	r.last, r.max, r.sum, r.n = d, max(r.max, d), r.sum+d, r.n+1
}

func (l *link) stats() PeerStats {
	now := time.Now()
	l.mu.Lock()
	st := PeerStats{
		Node:      l.name,
		Addr:      l.addr,
		Dialer:    l.dial,
		Connected: l.sess != nil,
		Queued:    len(l.q),
		InFlight:  l.fl.len(),
		RTT:       l.rtt.last,
		RTTMax:    l.rtt.max,
	}
	if l.last != nil {
		st.LastError = l.last.Error()
	}
	if l.rtt.n > 0 {
		st.RTTMean = l.rtt.sum / time.Duration(l.rtt.n)
	}
	heard := l.up
	if l.lastPong.After(heard) {
		heard = l.lastPong
	}
	cond := condition{
		node: l.name, addr: l.addr, dial: l.dial, connected: l.sess != nil,
		silent: now.Sub(heard), threshold: l.m.opts.FailureThreshold, last: l.last,
	}
	l.mu.Unlock()
	w := l.word.Load()
	st.Available = w == readyBit
	st.Breaker = BreakerState(w >> 1)
	cond.ready, cond.breaker, cond.cause = w&readyBit != 0, st.Breaker, l.cause.Load()
	st.Problem = cond.describe()
	c := &l.c
	st.Streams, st.DialErrors = c.streams.Load(), c.dialErrors.Load()
	st.SentRecords, st.SentFrames, st.SentBytes = c.sentRecords.Load(), c.sentFrames.Load(), c.sentBytes.Load()
	st.RecvRecords, st.RecvFrames, st.RecvBytes = c.recvRecords.Load(), c.recvFrames.Load(), c.recvBytes.Load()
	st.Deliveries, st.Refused, st.Accepted = c.deliveries.Load(), c.refused.Load(), c.accepted.Load()
	st.NotHere, st.RemoteErrors, st.ExpiredByPeer = c.notHere.Load(), c.remoteErrors.Load(), c.expiredByPeer.Load()
	st.Answers, st.Timeouts, st.Broken, st.Cancelled = c.answers.Load(), c.timeouts.Load(), c.broken.Load(), c.cancelled.Load()
	st.Late, st.LateAccepted, st.LateExpired = c.late.Load(), c.lateAccepted.Load(), c.lateExpired.Load()
	st.Expired, st.Stalls, st.Dropped = c.expired.Load(), c.stalls.Load(), c.dropped.Load()
	st.Rejected, st.Malformed = c.rejected.Load(), c.malformed.Load()
	st.PingTimeouts, st.Opens, st.Probes = c.pingTimeouts.Load(), c.opens.Load(), c.probes.Load()
	return st
}
