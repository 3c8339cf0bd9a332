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
// as a subscriber's would be), judges an edge node's stale messages with
// the mesh's view of which gateways are up, and tells the others the wills
// its clients register.
func newSparkplug(cfg *config.Config, cl *cluster.Cluster, srv *atomic.Pointer[broker.Server], log *slog.Logger) (*sparkplug.Tracker, error) {
	opts := sparkplug.Options{
		Publish:      func(m *broker.Message) { srv.Load().Publish(m) },
		Retained:     func(filter string) []*broker.Message { return srv.Load().RetainedMatching(filter) },
		MaxEdgeNodes: int(cfg.Sparkplug.MaxEdgeNodes),
		Logger:       log.With("component", "sparkplug"),
	}
	if cl == nil {
		return sparkplug.NewTracker(opts), nil
	}
	opts.Node = cfg.NodeID
	opts.Reachable = cl.Hooks().Available
	opts.Line = cl
	cl.Watch(sparkplugRoute)
	t := sparkplug.NewTracker(opts)
	if err := cl.Handle(sparkplug.WillCall, t.HandleWill); err != nil {
		return nil, err
	}
	return t, nil
}
