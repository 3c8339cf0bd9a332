package gateway

import (
	"log/slog"
	"sync/atomic"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/gateway/cluster"
	"github.com/linemq/linemq/gateway/config"
	"github.com/linemq/linemq/gateway/sparkplug"
)

// sparkplugRoute is the filter every node of a line registers for its
// tracker, so that every Sparkplug message reaches every node once and
// each keeps the same state and certificates.
const sparkplugRoute = sparkplug.Namespace + "/#"

// newSparkplug makes the Sparkplug tracker (docs/sparkplug.md). On a line
// it asks the other nodes for every Sparkplug message (a route of its own,
// as a subscriber's would be) and judges an edge node's stale messages
// with the mesh's view of which gateways are up.
func newSparkplug(cfg *config.Config, cl *cluster.Cluster, srv *atomic.Pointer[broker.Server], log *slog.Logger) *sparkplug.Tracker {
	opts := sparkplug.Options{
		Publish:      func(m *broker.Message) { srv.Load().Publish(m) },
		MaxEdgeNodes: int(cfg.Sparkplug.MaxEdgeNodes),
		Logger:       log.With("component", "sparkplug"),
	}
	if cl != nil {
		opts.Node = cfg.NodeID
		opts.Reachable = cl.Hooks().Available
		cl.Watch(sparkplugRoute)
	}
	return sparkplug.NewTracker(opts)
}
