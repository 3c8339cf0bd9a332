package web

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/gateway/cluster"
	"github.com/linemq/linemq/gateway/peer"
)

// ClusterStats are a clustered gateway's figures for /metrics: its side of
// the etcd registry and one entry per peer node. The gateway fills them
// from gateway/cluster/registry and gateway/peer, so this package imports
// neither.
type ClusterStats struct {
	Registry RegistryStats
	Peers    []peer.PeerStats // one per other node of the cluster, by name
	// Up and Missing count the gateways of the line that are registered
	// now and those that belong to it but are not.
	Up, Missing int
	// Wills: what this node did with dead gateways' clients' wills.
	Wills WillStats
	// Replicas: the copies of persistent sessions, this node's and those
	// it keeps for others.
	Replicas cluster.ReplicaStats
}

// WillStats count the wills of dead gateways' clients handled by this
// node (cluster.WillStats).
type WillStats struct {
	Published, Cancelled uint64 // published here; taken by another node or cancelled by the client's return
	Waiting              int    // waiting out their delay here
}

// RegistryStats are the registry's figures (registry.Stats).
type RegistryStats struct {
	// State is "starting", "healthy", "degraded" or "closed".
	State string
	// Revision is the etcd revision the local copy reflects.
	Revision int64
	// Lag is the registry lag of this node's last write (sent to seen in
	// its own watch), LagMax the largest; LagSum and LagCount cover every
	// write measured.
	Lag, LagMax, LagSum time.Duration
	LagCount            uint64
	// Resyncs counts full re-reads after the first load (a lost or
	// compacted watch); WatchLost and Compacted why the watch ended.
	Resyncs, WatchLost, Compacted uint64
	// Reregistrations counts leases granted after the first: the node
	// lost its lease while running and wrote all it holds again.
	Reregistrations uint64
	// Txns, TxnOps and TxnErrors count the registrar's transactions;
	// Queued the writes waiting for it.
	Txns, TxnOps, TxnErrors uint64
	Queued                  int
	// The local copy's size: nodes, route keys, share-group members and
	// session ownership records, of every node.
	Nodes, Routes, Members, Sessions int
}

// breakerValues are the linemq_cluster_peer_breaker_state values.
var breakerValues = map[string]float64{"closed": 0, "half-open": 1, "open": 2}

// registryStates are the states linemq_cluster_registry_state sets.
var registryStates = []string{"starting", "healthy", "degraded", "closed"}

// clusterCollector exports ClusterStats and the broker's cluster counters,
// read at scrape time. Its series are bounded by the cluster's size (3 to
// 5 nodes): one label, peer, names another node.
type clusterCollector struct {
	s *Server

	brokerScalars []scalar
	regState      metric
	nodes         metric
	registry      []regScalar
	peers         []peerScalar
	deliveries    metric
	forwards      []forwardScalar
	wills         []series[WillStats]
	replicas      []series[cluster.ReplicaStats]
}

type (
	regScalar     = series[RegistryStats]
	peerScalar    = series[peer.PeerStats]
	forwardScalar = series[broker.ForwardQueueStats]
)

func newClusterCollector(s *Server) *clusterCollector {
	c := &clusterCollector{s: s}
	bs := func(name, help string, f func(*broker.Stats) float64) {
		c.brokerScalars = append(c.brokerScalars, scalar{newMetric("cluster_"+name, help, counter), f})
	}
	bs("forwards_total", "Messages forwarded to other nodes' ordinary subscribers (one per node).", func(s *broker.Stats) float64 { return float64(s.ClusterForwards) })
	bs("delivers_total", "Directed deliveries to share-group members on other nodes.", func(s *broker.Stats) float64 { return float64(s.ClusterDelivers) })
	bs("repicks_total", "Directed deliveries that failed (not here, timeout, broken) and were picked again.", func(s *broker.Stats) float64 { return float64(s.ClusterRepicks) })
	bs("repicks_maybe_delivered_total", "Messages picked again for another member after an earlier delivery that may have reached its member (no answer in time, a broken stream), and messages a departed member held, handed to another: their new copy carries DUP.", func(s *broker.Stats) float64 { return float64(s.RepicksMaybeDelivered) })
	bs("not_here_total", "Directed deliveries from other nodes for a client not here.", func(s *broker.Stats) float64 { return float64(s.ClusterNotHere) })
	bs("redirects_total", "Messages sent on to the gateway a session moved to, while the others learnt of the move.", func(s *broker.Stats) float64 { return float64(s.ClusterRedirects) })
	bs("passed_on_total", "Forwards held up past a session's move from this gateway (its outbox elsewhere kept them), sent on to the session by name.", func(s *broker.Stats) float64 { return float64(s.ClusterPassedOn) })
	bs("stalls_total", "Times this gateway found it had not run for over a second (stopped, paused, starved); deliveries to clients waited until its view of the line had caught up.", func(s *broker.Stats) float64 { return float64(s.Stalls) })
	bs("stall_redeliveries_total", "QoS 1 and 2 publishes this gateway read while its deliveries waited after a stall, routed with DUP: their publishers may have sent them again elsewhere.", func(s *broker.Stats) float64 { return float64(s.StallRedeliveries) })
	bs("stale_forwards_total", "Forwards not given to a session adopted from a replica: sent by the gateway it was adopted from before that gateway saw the adoption, when the session was still its own.", func(s *broker.Stats) float64 { return float64(s.ClusterStaleForwards) })
	bs("sessions_handed_over_total", "Sessions given to another node where their client resumed them.", func(s *broker.Stats) float64 { return float64(s.SessionsHandedOver) })
	bs("sessions_adopted_total", "Sessions taken from another node for a client resuming here.", func(s *broker.Stats) float64 { return float64(s.SessionsAdopted) })
	bs("retained_from_peers_total", "Retained messages and clears from other nodes kept here (later writes than this node's).", func(s *broker.Stats) float64 { return float64(s.RetainedFromPeers) })
	c.brokerScalars = append(c.brokerScalars, scalar{newMetric("cluster_unrouted_waiting", "Messages routed again (their subscriber moved or left) that no subscription on any node has taken yet: kept and routed again.", gauge), func(s *broker.Stats) float64 { return float64(s.UnroutedWaiting) }})
	bs("unrouted_dropped_total", "Messages routed again that no subscription on any node took for 15 s (their subscriber left): dropped.", func(s *broker.Stats) float64 { return float64(s.UnroutedDropped) })
	bs("retained_stale_total", "Retained writes not kept because the topic held a later write from another node.", func(s *broker.Stats) float64 { return float64(s.RetainedStale) })

	c.wills = []series[WillStats]{
		{newMetric("cluster_dead_node_wills_published_total", "Wills of clients of a gateway that died, published by this node.", counter), func(w *WillStats) float64 { return float64(w.Published) }},
		{newMetric("cluster_dead_node_wills_cancelled_total", "Such wills this node waited for and did not publish: another node did, or the client came back within the delay.", counter), func(w *WillStats) float64 { return float64(w.Cancelled) }},
		{newMetric("cluster_dead_node_wills_waiting", "Such wills waiting out their delay on this node.", gauge), func(w *WillStats) float64 { return float64(w.Waiting) }},
	}
	rp := func(name, help string, kind prometheus.ValueType, f func(*cluster.ReplicaStats) float64) {
		c.replicas = append(c.replicas, series[cluster.ReplicaStats]{newMetric("cluster_replica_"+name, help, kind), f})
	}
	rp("count", "cluster.replicas: how many other gateways keep a copy of each persistent session owned here.", gauge, func(r *cluster.ReplicaStats) float64 { return float64(r.Count) })
	rp("sessions", "Persistent sessions owned here.", gauge, func(r *cluster.ReplicaStats) float64 { return float64(r.Sessions) })
	rp("sessions_below_count", "Of them, sessions with fewer copies in step than cluster.replicas (a replica unreachable, or being sent the session whole).", gauge, func(r *cluster.ReplicaStats) float64 { return float64(r.BelowCount) })
	rp("batches_total", "Batches of session changes a replica accepted.", counter, func(r *cluster.ReplicaStats) float64 { return float64(r.Batches) })
	rp("bytes_total", "Bytes of those batches.", counter, func(r *cluster.ReplicaStats) float64 { return float64(r.Bytes) })
	rp("changes_total", "Session changes in those batches.", counter, func(r *cluster.ReplicaStats) float64 { return float64(r.Ops) })
	rp("resyncs_total", "Times a replica was sent every session meant for it whole.", counter, func(r *cluster.ReplicaStats) float64 { return float64(r.Resyncs) })
	rp("unreplicated_total", "Session changes acknowledged without their replica, which could not be reached (sent whole once it can).", counter, func(r *cluster.ReplicaStats) float64 { return float64(r.Unreplicated) })
	rp("absorbed_total", "Session changes that never had to travel to a replica: a message saved and then acknowledged by its client before its batch left.", counter, func(r *cluster.ReplicaStats) float64 { return float64(r.Absorbed) })
	rp("adopted_total", "Sessions of gateways that died adopted here from their replicas.", counter, func(r *cluster.ReplicaStats) float64 { return float64(r.Adopted) })
	rp("held_sessions", "Sessions of other gateways kept here as their replica.", gauge, func(r *cluster.ReplicaStats) float64 { return float64(r.HeldSessions) })
	rp("failing_over", "Gone gateways whose sessions this one is adopting from their replicas (fail-overs under way).", gauge, func(r *cluster.ReplicaStats) float64 { return float64(r.FailingOver) })
	c.nodes = newMetric("cluster_nodes", "Gateways of the line by state: up (registered now) or missing (belongs to the line, not registered).", gauge, "state")
	c.regState = newMetric("cluster_registry_state", "1 for the registry's current state (starting, healthy, degraded, closed), 0 for the others.", gauge, "state")
	rs := func(name, help string, kind prometheus.ValueType, f func(*RegistryStats) float64) {
		c.registry = append(c.registry, regScalar{newMetric("cluster_registry_"+name, help, kind), f})
	}
	rs("revision", "The etcd revision the local copy reflects.", gauge, func(r *RegistryStats) float64 { return float64(r.Revision) })
	rs("lag_seconds", "Registry lag of this node's last write: from sending it to etcd to seeing it in its own watch.", gauge, func(r *RegistryStats) float64 { return r.Lag.Seconds() })
	rs("lag_max_seconds", "Largest registry lag measured.", gauge, func(r *RegistryStats) float64 { return r.LagMax.Seconds() })
	rs("lag_seconds_total", "Sum of the registry lags measured (with lag_measurements_total: the mean).", counter, func(r *RegistryStats) float64 { return r.LagSum.Seconds() })
	rs("lag_measurements_total", "Writes whose registry lag was measured.", counter, func(r *RegistryStats) float64 { return float64(r.LagCount) })
	rs("resyncs_total", "Full re-reads of the registry after the first load (a lost or compacted watch).", counter, func(r *RegistryStats) float64 { return float64(r.Resyncs) })
	rs("watch_lost_total", "Watches given up as silent, closed or cancelled.", counter, func(r *RegistryStats) float64 { return float64(r.WatchLost) })
	rs("watch_compacted_total", "Watches ended because the history they needed was compacted.", counter, func(r *RegistryStats) float64 { return float64(r.Compacted) })
	rs("reregistrations_total", "Times the node lost its lease while running and registered everything again.", counter, func(r *RegistryStats) float64 { return float64(r.Reregistrations) })
	rs("txns_total", "Transactions the registrar committed.", counter, func(r *RegistryStats) float64 { return float64(r.Txns) })
	rs("txn_ops_total", "Operations in those transactions.", counter, func(r *RegistryStats) float64 { return float64(r.TxnOps) })
	rs("txn_errors_total", "Transactions that failed (and were retried).", counter, func(r *RegistryStats) float64 { return float64(r.TxnErrors) })
	rs("queued_writes", "Writes waiting for the registrar.", gauge, func(r *RegistryStats) float64 { return float64(r.Queued) })
	rs("nodes", "Nodes in the local copy of the registry, this one included.", gauge, func(r *RegistryStats) float64 { return float64(r.Nodes) })
	rs("routes", "Route keys (a node's filter with ordinary subscribers) in the local copy.", gauge, func(r *RegistryStats) float64 { return float64(r.Routes) })
	rs("members", "Share-group members of every node in the local copy.", gauge, func(r *RegistryStats) float64 { return float64(r.Members) })
	rs("sessions", "Session ownership records in the local copy.", gauge, func(r *RegistryStats) float64 { return float64(r.Sessions) })

	ps := func(name, help string, kind prometheus.ValueType, f func(*peer.PeerStats) float64) {
		c.peers = append(c.peers, peerScalar{newMetric("cluster_peer_"+name, help, kind, "peer"), f})
	}
	ps("up", "1 while a stream to the peer is established.", gauge, func(p *peer.PeerStats) float64 { return b2f(p.Connected) })
	ps("available", "1 while deliveries may be sent to the peer (its stream answered a ping and its breaker is closed).", gauge, func(p *peer.PeerStats) float64 { return b2f(p.Available) })
	ps("breaker_state", "The peer's circuit breaker: 0 closed, 1 half-open, 2 open.", gauge, func(p *peer.PeerStats) float64 { return breakerValues[p.Breaker.String()] })
	ps("breaker_opens_total", "Times the peer's breaker opened.", counter, func(p *peer.PeerStats) float64 { return float64(p.Opens) })
	ps("rtt_seconds", "Round trip of the last ping answered by the peer.", gauge, func(p *peer.PeerStats) float64 { return p.RTT.Seconds() })
	ps("rtt_max_seconds", "Largest ping round trip to the peer.", gauge, func(p *peer.PeerStats) float64 { return p.RTTMax.Seconds() })
	ps("ping_timeouts_total", "Pongs the peer missed.", counter, func(p *peer.PeerStats) float64 { return float64(p.PingTimeouts) })
	ps("streams_total", "Streams established with the peer.", counter, func(p *peer.PeerStats) float64 { return float64(p.Streams) })
	ps("dial_errors_total", "Dials to the peer that failed (the node whose name sorts first dials).", counter, func(p *peer.PeerStats) float64 { return float64(p.DialErrors) })
	ps("queued", "Records waiting for the peer's writer.", gauge, func(p *peer.PeerStats) float64 { return float64(p.Queued) })
	ps("in_flight", "Directed deliveries to the peer awaiting an answer.", gauge, func(p *peer.PeerStats) float64 { return float64(p.InFlight) })
	ps("sent_frames_total", "Frames sent to the peer.", counter, func(p *peer.PeerStats) float64 { return float64(p.SentFrames) })
	ps("sent_records_total", "Records (forwards, deliveries, answers, pings) sent to the peer.", counter, func(p *peer.PeerStats) float64 { return float64(p.SentRecords) })
	ps("sent_bytes_total", "Bytes of frames sent to the peer.", counter, func(p *peer.PeerStats) float64 { return float64(p.SentBytes) })
	ps("received_frames_total", "Frames received from the peer.", counter, func(p *peer.PeerStats) float64 { return float64(p.RecvFrames) })
	ps("received_records_total", "Records received from the peer.", counter, func(p *peer.PeerStats) float64 { return float64(p.RecvRecords) })
	ps("received_bytes_total", "Bytes of frames received from the peer.", counter, func(p *peer.PeerStats) float64 { return float64(p.RecvBytes) })
	ps("forwards_dropped_total", "Forwards lost in the peer's queue when its stream ended.", counter, func(p *peer.PeerStats) float64 { return float64(p.Dropped) })
	ps("rejected_total", "Forwards and deliveries refused at once (peer unavailable, queue full).", counter, func(p *peer.PeerStats) float64 { return float64(p.Rejected) })
	ps("late_answers_total", "Answers that came after their delivery had timed out.", counter, func(p *peer.PeerStats) float64 { return float64(p.Late) })
	ps("late_accepted_total", "Late answers that accepted the delivery: duplicates, the message having been picked again.", counter, func(p *peer.PeerStats) float64 { return float64(p.LateAccepted) })
	ps("deliveries_sent_total", "Directed deliveries to share-group members on the peer.", counter, func(p *peer.PeerStats) float64 { return float64(p.Deliveries) })
	fs := func(name, help string, kind prometheus.ValueType, f func(*broker.ForwardQueueStats) float64) {
		c.forwards = append(c.forwards, forwardScalar{newMetric("cluster_forward_"+name, help, kind, "peer"), f})
	}
	fs("queued", "QoS 1 and 2 messages kept for the peer's ordinary subscribers until it has them.", gauge, func(f *broker.ForwardQueueStats) float64 { return float64(f.Queued) })
	fs("queued_bytes", "Topic and payload bytes of those messages.", gauge, func(f *broker.ForwardQueueStats) float64 { return float64(f.Bytes) })
	fs("oldest_seconds", "Age of the oldest message kept for the peer.", gauge, func(f *broker.ForwardQueueStats) float64 { return float64(f.OldestMs) / 1000 })
	fs("handed_total", "Kept messages the peer answered it has.", counter, func(f *broker.ForwardQueueStats) float64 { return float64(f.Handed) })
	fs("resent_total", "Kept messages sent again, with DUP, after no answer.", counter, func(f *broker.ForwardQueueStats) float64 { return float64(f.Resent) })
	fs("dropped_total", "Kept messages dropped past cluster.forwards.max_bytes or max_age.", counter, func(f *broker.ForwardQueueStats) float64 { return float64(f.Dropped + f.Expired) })
	c.deliveries = newMetric("cluster_peer_deliveries_total", "Directed deliveries to the peer by outcome: accepted, not_here, timeout, broken, refused, error.", counter, "peer", "outcome")
	return c
}

// Describe sends every family's description.
func (c *clusterCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range c.brokerScalars {
		ch <- m.desc
	}
	ch <- c.regState.desc
	ch <- c.nodes.desc
	for _, m := range c.wills {
		ch <- m.desc
	}
	for _, m := range c.replicas {
		ch <- m.desc
	}
	for _, m := range c.registry {
		ch <- m.desc
	}
	for _, m := range c.peers {
		ch <- m.desc
	}
	ch <- c.deliveries.desc
	for _, m := range c.forwards {
		ch <- m.desc
	}
}

// Collect reads the figures; a standalone gateway has none.
func (c *clusterCollector) Collect(ch chan<- prometheus.Metric) {
	if c.s.opts.ClusterStats == nil {
		return
	}
	emit := func(m metric, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(m.desc, m.kind, v, labels...)
	}
	bst := c.s.b.Stats()
	for _, m := range c.brokerScalars {
		emit(m.metric, m.value(&bst))
	}
	cs := c.s.opts.ClusterStats()
	r := &cs.Registry
	emit(c.nodes, float64(cs.Up), "up")
	emit(c.nodes, float64(cs.Missing), "missing")
	for _, st := range registryStates {
		emit(c.regState, b2f(r.State == st), st)
	}
	for _, m := range c.registry {
		emit(m.metric, m.value(r))
	}
	for _, m := range c.wills {
		emit(m.metric, m.value(&cs.Wills))
	}
	for _, m := range c.replicas {
		emit(m.metric, m.value(&cs.Replicas))
	}
	for i := range cs.Peers {
		p := &cs.Peers[i]
		for _, m := range c.peers {
			emit(m.metric, m.value(p), p.Node)
		}
		for _, o := range []struct {
			outcome string
			n       uint64
		}{{"accepted", p.Accepted}, {"not_here", p.NotHere}, {"timeout", p.Timeouts}, {"broken", p.Broken}, {"refused", p.Refused}, {"error", p.RemoteErrors}} {
			emit(c.deliveries, float64(o.n), p.Node, o.outcome)
		}
	}
	for _, f := range c.s.b.ForwardQueues() {
		for _, m := range c.forwards {
			emit(m.metric, m.value(&f), f.Node)
		}
	}
}

// Interface guard.
var _ prometheus.Collector = (*clusterCollector)(nil)
