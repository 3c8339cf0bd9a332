package web

import (
	"sync"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/packet"
)

// Tracker counts what the broker reports through its Events rather than
// keeps: how many connections ended for each reason code. (When a client
// connected the broker keeps itself: ClientStats.ConnectedAt.) Pass it as
// the broker's Options.Events (or call it from the Events the gateway
// uses) and as Options.Tracker here. Its methods return at once, as Events
// requires, and it holds nothing per client.
type Tracker struct {
	mu      sync.Mutex
	reasons map[packet.ReasonCode]uint64
}

// NewTracker returns an empty tracker.
func NewTracker() *Tracker {
	return &Tracker{reasons: make(map[packet.ReasonCode]uint64)}
}

// ClientConnected does nothing: a connection is counted when it ends.
func (t *Tracker) ClientConnected(broker.ClientInfo, bool) {}

// ClientDisconnected counts the reason.
func (t *Tracker) ClientDisconnected(c broker.ClientInfo, reason packet.ReasonCode, err error) {
	t.mu.Lock()
	t.reasons[reason]++
	t.mu.Unlock()
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
