package peer

import (
	"fmt"
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

// PeerStats are one peer's figures, for metrics and the status page.
// Counters count from when SetPeers first listed the peer.
type PeerStats struct {
	Node      string
	Addr      string
	Dialer    bool         // this node dials the peer (its name sorts first)
	Connected bool         // a stream is up
	Available bool         // Available(Node) at the time of the call
	Breaker   BreakerState // as of its last change (open turns half-open lazily, when a probe is due)

	Queued   int // forwards and deliveries waiting for the writer (answers and pings not counted)
	InFlight int // directed deliveries awaiting an answer (the ring's span)

	Streams    uint64 // streams established
	DialErrors uint64 // dials that failed (this node dials only)
	// LastError says why the last stream ended or the last dial failed
	// (refused, a certificate rejected, ...); empty if none has.
	LastError string

	SentRecords, SentFrames, SentBytes uint64
	RecvRecords, RecvFrames, RecvBytes uint64

	Answers  uint64 // directed deliveries answered (accepted, not here or error)
	Timeouts uint64 // ... completed with ErrTimeout
	Broken   uint64 // ... completed with ErrBroken
	// Late counts answers that came after their delivery had completed
	// (timed out or cancelled); LateAccepted those that accepted it: the
	// caller had re-picked, so each is a duplicate.
	Late, LateAccepted uint64
	Dropped            uint64 // forwards lost in the queue when a stream ended
	Rejected           uint64 // Send and Deliver refused at once (unavailable, queue full)
	Malformed          uint64 // frames or messages that did not decode

	PingTimeouts uint64 // pongs missed
	Opens        uint64 // times the breaker opened
	Probes       uint64 // times it went half-open (probe pings sent)

	// RTT is the last ping's round trip, RTTMean and RTTMax over all
	// pings answered.
	RTT, RTTMean, RTTMax time.Duration
}

// counters are the PeerStats counters, updated without locks.
type counters struct {
	streams, dialErrors                atomic.Uint64
	sentRecords, sentFrames, sentBytes atomic.Uint64
	recvRecords, recvFrames, recvBytes atomic.Uint64
	answers, timeouts, broken          atomic.Uint64
	late, lateAccepted, dropped        atomic.Uint64
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
	l.mu.Unlock()
	st.Available = l.available()
	st.Breaker = l.breakerState()
	c := &l.c
	st.Streams, st.DialErrors = c.streams.Load(), c.dialErrors.Load()
	st.SentRecords, st.SentFrames, st.SentBytes = c.sentRecords.Load(), c.sentFrames.Load(), c.sentBytes.Load()
	st.RecvRecords, st.RecvFrames, st.RecvBytes = c.recvRecords.Load(), c.recvFrames.Load(), c.recvBytes.Load()
	st.Answers, st.Timeouts, st.Broken = c.answers.Load(), c.timeouts.Load(), c.broken.Load()
	st.Late, st.LateAccepted, st.Dropped = c.late.Load(), c.lateAccepted.Load(), c.dropped.Load()
	st.Rejected, st.Malformed = c.rejected.Load(), c.malformed.Load()
	st.PingTimeouts, st.Opens, st.Probes = c.pingTimeouts.Load(), c.opens.Load(), c.probes.Load()
	return st
}
