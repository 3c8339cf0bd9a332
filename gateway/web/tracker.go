package web

import (
	"sync"
	"time"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/packet"
)

// Tracker records what the broker reports through its Events rather than
// keeps: when each client's current connection was accepted, and how many
// connections ended for each reason code. Pass it as the broker's
// Options.Events (or call it from the Events the gateway uses) and as
// Options.Tracker here. Its methods return at once, as Events requires.
type Tracker struct {
	clock broker.Clock

	mu      sync.Mutex
	conns   map[string]connRecord
	reasons map[packet.ReasonCode]uint64
}

// connRecord counts a client id's open connections: during a session
// takeover the new connection is reported before the old one has gone.
type connRecord struct {
	since time.Time // when the newest connection was accepted
	open  int
}

// NewTracker returns an empty tracker stamping times with clock (nil: the
// system clock).
func NewTracker(clock broker.Clock) *Tracker {
	if clock == nil {
		clock = systemClock{}
	}
	return &Tracker{clock: clock, conns: make(map[string]connRecord), reasons: make(map[packet.ReasonCode]uint64)}
}

// ClientConnected records the connection's start.
func (t *Tracker) ClientConnected(c broker.ClientInfo, sessionPresent bool) {
	now := t.clock.Now()
	t.mu.Lock()
	r := t.conns[c.ClientID]
	t.conns[c.ClientID] = connRecord{since: now, open: r.open + 1}
	t.mu.Unlock()
}

// ClientDisconnected counts the reason and forgets the connection once
// none of the client id's is open.
func (t *Tracker) ClientDisconnected(c broker.ClientInfo, reason packet.ReasonCode, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.reasons[reason]++
	r, ok := t.conns[c.ClientID]
	if !ok {
		return
	}
	if r.open <= 1 {
		delete(t.conns, c.ClientID)
		return
	}
	r.open--
	t.conns[c.ClientID] = r
}

// ConnectedSince returns when the client's current connection was
// accepted.
func (t *Tracker) ConnectedSince(clientID string) (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r, ok := t.conns[clientID]
	return r.since, ok
}

// Disconnects returns how many connections ended, by reason code.
func (t *Tracker) Disconnects() map[packet.ReasonCode]uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[packet.ReasonCode]uint64, len(t.reasons))
	for rc, n := range t.reasons {
		out[rc] = n
	}
	return out
}

// Interface guard: the broker calls the tracker as its Events.
var _ broker.Events = (*Tracker)(nil)
