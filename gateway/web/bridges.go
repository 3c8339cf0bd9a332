package web

import (
	"net/http"
	"time"
)

// BridgeStats are one uplink bridge's figures, for the bridges panel, the
// API and /metrics. The gateway fills them from gateway/bridge's Stats, so
// this package imports neither the bridge nor its MQTT client, and the
// API's names and units are decided here.
type BridgeStats struct {
	Name string
	// State is "connecting" (not connected since start), "connected",
	// "down" (was connected, lost the link) or "stopped"; Since is when it
	// last changed.
	State    string
	Since    time.Time
	Remote   []string // the remote's addresses, in failover order
	Protocol int      // 5 or 311

	Queued       int           // messages in the store-and-forward queue
	QueuedBytes  int64         // their bytes as stored
	OldestQueued time.Duration // age of the oldest queued message; 0 when none
	InFlight     int           // sent, PUBACK awaited

	Sent        uint64 // acknowledged by the remote (QoS 1) or sent (QoS 0)
	Received    uint64 // from the remote, published here
	Enqueued    uint64 // QoS 1 messages queued
	Dropped     uint64 // oldest dropped at queue.max_bytes
	Expired     uint64 // dropped at queue.max_age
	Rejected    uint64 // refused by the remote for good
	DroppedQoS0 uint64 // QoS 0 messages while the link was down
	Loops       uint64 // incoming messages that had gone out from this node
	Retries     uint64 // sends that failed and were repeated

	// SentRate and ReceivedRate are messages a second over the bridge's
	// own window (the last 10 s).
	SentRate, ReceivedRate float64

	LastError   string
	LastErrorAt time.Time // zero when there was none
}

// bridgeStates are the states linemq_bridge_state sets.
var bridgeStates = []string{"connecting", "connected", "down", "stopped"}

// bridgeJSON is a bridge in /api/v1/bridges and /api/v1/status.
type bridgeJSON struct {
	Name                string     `json:"name"`
	State               string     `json:"state"`
	Since               *time.Time `json:"since"`
	Remote              []string   `json:"remote"`
	Protocol            int        `json:"protocol"`
	Queued              int        `json:"queued"`
	QueuedBytes         int64      `json:"queued_bytes"`
	OldestQueuedSeconds float64    `json:"oldest_queued_seconds"`
	InFlight            int        `json:"in_flight"`
	Sent                uint64     `json:"sent"`
	Received            uint64     `json:"received"`
	Enqueued            uint64     `json:"enqueued"`
	Dropped             uint64     `json:"dropped"`
	Expired             uint64     `json:"expired"`
	Rejected            uint64     `json:"rejected"`
	DroppedQoS0         uint64     `json:"dropped_qos0"`
	Loops               uint64     `json:"loops"`
	Retries             uint64     `json:"retries"`
	SentRate            float64    `json:"sent_rate"`
	ReceivedRate        float64    `json:"received_rate"`
	LastError           string     `json:"last_error"`
	LastErrorAt         *time.Time `json:"last_error_at"`
}

type bridgesJSON struct {
	Bridges []bridgeJSON `json:"bridges"`
}

// timeOrNull is t, or null when it is zero.
func timeOrNull(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func bridgeJSONOf(b *BridgeStats) bridgeJSON {
	out := bridgeJSON{
		Name: b.Name, State: b.State, Since: timeOrNull(b.Since), Remote: append([]string{}, b.Remote...),
		Protocol: b.Protocol, Queued: b.Queued, QueuedBytes: b.QueuedBytes,
		OldestQueuedSeconds: round3(b.OldestQueued.Seconds()), InFlight: b.InFlight,
		Sent: b.Sent, Received: b.Received, Enqueued: b.Enqueued, Dropped: b.Dropped, Expired: b.Expired,
		Rejected: b.Rejected, DroppedQoS0: b.DroppedQoS0, Loops: b.Loops, Retries: b.Retries,
		SentRate: round2(b.SentRate), ReceivedRate: round2(b.ReceivedRate),
		LastError: b.LastError, LastErrorAt: timeOrNull(b.LastErrorAt),
	}
	if b.LastError == "" {
		out.LastErrorAt = nil
	}
	return out
}

// bridges returns the configured bridges' figures; none without
// Options.Bridges.
func (s *Server) bridges() []BridgeStats {
	if s.opts.Bridges == nil {
		return nil
	}
	return s.opts.Bridges()
}

// bridgesList is every bridge as the API shows it, [] when none is
// configured.
func (s *Server) bridgesList() []bridgeJSON {
	bs := s.bridges()
	out := make([]bridgeJSON, 0, len(bs))
	for i := range bs {
		out = append(out, bridgeJSONOf(&bs[i]))
	}
	return out
}

func (s *Server) handleBridges(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, r, http.StatusOK, bridgesJSON{Bridges: s.bridgesList()})
}
