package web

import (
	"github.com/prometheus/client_golang/prometheus"
)

// bridgeCollector exports the linemq_bridge_* families, read at scrape
// time from Options.Bridges. Their one free label, bridge, names a bridge
// of the configuration, so the series are bounded by it: 16 families (the
// state one with 4 values) per configured bridge, none without bridges.
type bridgeCollector struct {
	s *Server

	state   metric
	scalars []bridgeScalar
}

type bridgeScalar = series[BridgeStats]

func newBridgeCollector(s *Server) *bridgeCollector {
	c := &bridgeCollector{s: s}
	c.state = newMetric("bridge_state", "1 for the bridge's current link state (connecting, connected, down, stopped), 0 for the others.", gauge, "bridge", "state")
	bs := func(name, help string, kind prometheus.ValueType, f func(*BridgeStats) float64) {
		c.scalars = append(c.scalars, bridgeScalar{newMetric("bridge_"+name, help, kind, "bridge"), f})
	}
	bs("up", "1 while the bridge is connected to its remote.", gauge, func(b *BridgeStats) float64 { return b2f(b.State == "connected") })
	bs("queued_messages", "Messages in the bridge's store-and-forward queue.", gauge, func(b *BridgeStats) float64 { return float64(b.Queued) })
	bs("queued_bytes", "Bytes of the queued messages, as stored.", gauge, func(b *BridgeStats) float64 { return float64(b.QueuedBytes) })
	bs("oldest_queued_seconds", "Age of the oldest queued message: how far the remote is behind.", gauge, func(b *BridgeStats) float64 { return b.OldestQueued.Seconds() })
	bs("in_flight", "QoS 1 messages sent to the remote and not yet acknowledged.", gauge, func(b *BridgeStats) float64 { return float64(b.InFlight) })
	bs("sent_total", "Messages the remote acknowledged (QoS 1) or that were sent to it (QoS 0).", counter, func(b *BridgeStats) float64 { return float64(b.Sent) })
	bs("received_total", "Messages from the remote published on this broker.", counter, func(b *BridgeStats) float64 { return float64(b.Received) })
	bs("enqueued_total", "QoS 1 messages put in the queue.", counter, func(b *BridgeStats) float64 { return float64(b.Enqueued) })
	bs("dropped_total", "Queued messages dropped, oldest first, at queue.max_bytes.", counter, func(b *BridgeStats) float64 { return float64(b.Dropped) })
	bs("expired_total", "Queued messages dropped at queue.max_age.", counter, func(b *BridgeStats) float64 { return float64(b.Expired) })
	bs("rejected_total", "Messages the remote refused for good (0x87, 0x90, 0x95, 0x99), dropped.", counter, func(b *BridgeStats) float64 { return float64(b.Rejected) })
	bs("dropped_qos0_total", "QoS 0 messages dropped while the link was down.", counter, func(b *BridgeStats) float64 { return float64(b.DroppedQoS0) })
	bs("loops_total", "Messages dropped because they had already gone out from this node.", counter, func(b *BridgeStats) float64 { return float64(b.Loops) })
	bs("retries_total", "Sends to the remote that failed and were repeated.", counter, func(b *BridgeStats) float64 { return float64(b.Retries) })
	bs("last_error_timestamp_seconds", "When the bridge's last error happened, in Unix seconds; 0 when none did.", gauge, func(b *BridgeStats) float64 {
		if b.LastError == "" || b.LastErrorAt.IsZero() {
			return 0
		}
		return float64(b.LastErrorAt.UnixNano()) / 1e9
	})
	return c
}

// Describe sends every family's description.
func (c *bridgeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.state.desc
	for _, m := range c.scalars {
		ch <- m.desc
	}
}

// Collect reads the bridges' figures; a gateway without bridges has none.
func (c *bridgeCollector) Collect(ch chan<- prometheus.Metric) {
	bs := c.s.bridges()
	for i := range bs {
		b := &bs[i]
		for _, st := range bridgeStates {
			ch <- prometheus.MustNewConstMetric(c.state.desc, c.state.kind, b2f(b.State == st), b.Name, st)
		}
		for _, m := range c.scalars {
			ch <- prometheus.MustNewConstMetric(m.desc, m.kind, m.value(b), b.Name)
		}
	}
}

// Interface guard.
var _ prometheus.Collector = (*bridgeCollector)(nil)
