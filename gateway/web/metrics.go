package web

import (
	"runtime"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/linemq/linemq/broker"
)

// registerMetrics fills the server's own registry: the broker collector
// and the Go runtime and process collectors. Nothing goes to the global
// registry, so two servers (tests) never collide.
func (s *Server) registerMetrics() error {
	for _, c := range []prometheus.Collector{
		newBrokerCollector(s),
		newClusterCollector(s),
		newBridgeCollector(s),
		newSparkplugCollector(s),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	} {
		if err := s.metrics.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// metric is one family: its description and how it is exported.
type metric struct {
	desc *prometheus.Desc
	kind prometheus.ValueType
}

func newMetric(name, help string, kind prometheus.ValueType, labels ...string) metric {
	return metric{prometheus.NewDesc("linemq_"+name, help, labels, nil), kind}
}

// brokerCollector reads the broker, the health registry and the store at
// scrape time: the figures are exact at that moment, and nothing runs
// between scrapes.
type brokerCollector struct {
	s *Server

	brokerScalars []scalar
	buildInfo     metric
	startTime     metric
	ready         metric
	healthState   metric
	disconnects   metric
	storage       []storageScalar
	groups        []groupScalar
	members       []memberScalar
	omitted       metric
}

// series is one metric whose value is read from a T: the broker's
// statistics (scalar), the store's, a group's, a member's; the cluster's
// and the bridges' families are series too.
type series[T any] struct {
	metric
	value func(*T) float64
}

type (
	scalar        = series[broker.Stats]
	storageScalar = series[StorageStats]
	groupScalar   = series[groupView]
	memberScalar  = series[memberView]
)

var (
	gauge   = prometheus.GaugeValue
	counter = prometheus.CounterValue
)

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func newBrokerCollector(s *Server) *brokerCollector {
	c := &brokerCollector{s: s}
	st := func(name, help string, kind prometheus.ValueType, f func(*broker.Stats) float64) {
		c.brokerScalars = append(c.brokerScalars, scalar{newMetric(name, help, kind), f})
	}
	st("clients_connected", "Connections with an accepted CONNECT.", gauge, func(s *broker.Stats) float64 { return float64(s.ClientsConnected) })
	st("clients_parked", "Idle connections parked without a goroutine.", gauge, func(s *broker.Stats) float64 { return float64(s.ClientsParked) })
	st("sessions", "Sessions, connected or not.", gauge, func(s *broker.Stats) float64 { return float64(s.Sessions) })
	st("subscriptions", "Ordinary (non-shared) subscriptions.", gauge, func(s *broker.Stats) float64 { return float64(s.Subscriptions) })
	st("share_groups", "Share groups with at least one member.", gauge, func(s *broker.Stats) float64 { return float64(s.ShareGroups) })
	st("retained_messages", "Retained messages.", gauge, func(s *broker.Stats) float64 { return float64(s.Retained) })
	st("connects_total", "CONNECTs accepted.", counter, func(s *broker.Stats) float64 { return float64(s.Connects) })
	st("packets_received_total", "MQTT packets received.", counter, func(s *broker.Stats) float64 { return float64(s.PacketsIn) })
	st("messages_received_total", "PUBLISH packets received from clients.", counter, func(s *broker.Stats) float64 { return float64(s.MessagesIn) })
	st("bytes_received_total", "Payload bytes of PUBLISH packets received.", counter, func(s *broker.Stats) float64 { return float64(s.BytesIn) })
	st("messages_delivered_total", "Messages handed to sessions (one per subscriber or group pick).", counter, func(s *broker.Stats) float64 { return float64(s.MessagesRouted) })
	st("messages_acknowledged_total", "QoS 1/2 deliveries acknowledged by subscribers.", counter, func(s *broker.Stats) float64 { return float64(s.Acknowledged) })
	st("messages_duplicate_qos2_total", "QoS 2 resends recognised and not routed again.", counter, func(s *broker.Stats) float64 { return float64(s.DuplicateQoS2) })
	st("messages_looked_back_total", "Messages a new subscription received because they arrived after its SUBSCRIBE but were routed before it was handled.", counter, func(s *broker.Stats) float64 { return float64(s.LookedBack) })
	st("messages_expired_total", "Messages whose expiry passed before delivery.", counter, func(s *broker.Stats) float64 { return float64(s.Expired) })
	st("sessions_expired_total", "Sessions ended by their expiry interval.", counter, func(s *broker.Stats) float64 { return float64(s.ExpiredSessions) })
	st("wills_published_total", "Will messages published.", counter, func(s *broker.Stats) float64 { return float64(s.WillsPublished) })
	st("store_errors_total", "Failed store writes and syncs.", counter, func(s *broker.Stats) float64 { return float64(s.StoreErrors) })
	st("acks_held_total", "Publisher acknowledgements held back by share-group backpressure.", counter, func(s *broker.Stats) float64 { return float64(s.AcksHeld) })
	st("share_messages_discarded_total", "Messages discarded because their share group ended.", counter, func(s *broker.Stats) float64 { return float64(s.GroupDiscarded) })
	// One family with a fixed reason label, from three Stats fields.
	for _, d := range []struct {
		reason string
		f      func(*broker.Stats) float64
	}{
		{"qos0_slow_client", func(s *broker.Stats) float64 { return float64(s.DroppedQoS0) }},
		{"queue_full", func(s *broker.Stats) float64 { return float64(s.DroppedQueueFull) }},
		{"too_large", func(s *broker.Stats) float64 { return float64(s.DroppedTooLarge) }},
	} {
		m := metric{prometheus.NewDesc("linemq_messages_dropped_total", "Messages dropped, by reason.", nil, prometheus.Labels{"reason": d.reason}), counter}
		c.brokerScalars = append(c.brokerScalars, scalar{m, d.f})
	}

	c.buildInfo = newMetric("build_info", "Always 1; the labels name the gateway.", gauge, "version", "node_id", "goversion")
	c.startTime = newMetric("start_time_seconds", "When the gateway started, in Unix seconds.", gauge)
	c.ready = newMetric("ready", "1 while the gateway is ready to serve MQTT (what /readyz answers).", gauge)
	c.healthState = newMetric("health_state", "Health check state: 0 ok, 1 degraded, 2 failed.", gauge, "check")
	c.disconnects = newMetric("client_disconnects_total", "Connections ended, by reason code (0x00 counts clean disconnects and closed sockets alike).", counter, "reason")

	ss := func(name, help string, kind prometheus.ValueType, f func(*StorageStats) float64) {
		c.storage = append(c.storage, storageScalar{newMetric(name, help, kind), f})
	}
	ss("storage_file_bytes", "Size of the database file.", gauge, func(s *StorageStats) float64 { return float64(s.FileSize) })
	ss("storage_bytes_written_total", "Key and value bytes committed.", counter, func(s *StorageStats) float64 { return float64(s.BytesWritten) })
	ss("storage_page_bytes_written_total", "Bytes written to the database file (what the flash sees).", counter, func(s *StorageStats) float64 { return float64(s.PageBytesWritten) })
	ss("storage_commits_total", "Transactions committed.", counter, func(s *StorageStats) float64 { return float64(s.Commits) })
	ss("storage_commit_errors_total", "Failed commits.", counter, func(s *StorageStats) float64 { return float64(s.CommitErrors) })
	ss("storage_pending_ops", "Changes not on disk yet: waiting for a commit, or in the one being written.", gauge, func(s *StorageStats) float64 { return float64(s.PendingOps) })
	ss("storage_failing", "1 while the most recent commit failed.", gauge, func(s *StorageStats) float64 { return b2f(s.Failing) })

	gs := func(name, help string, kind prometheus.ValueType, f func(*groupView) float64) {
		c.groups = append(c.groups, groupScalar{newMetric("share_group_"+name, help, kind, "group", "filter"), f})
	}
	gs("members", "Members of the share group.", gauge, func(g *groupView) float64 { return float64(g.GroupStats.Members) })
	gs("min_members", "The group's min_members policy; 0 when undeclared.", gauge, func(g *groupView) float64 { return float64(g.MinMembers) })
	gs("degraded", "1 while the group is degraded (see the status page for why).", gauge, func(g *groupView) float64 { return b2f(g.degraded()) })
	gs("messages_total", "Messages that matched the group.", counter, func(g *groupView) float64 { return float64(g.In) })
	gs("delivered_total", "Messages handed to a member.", counter, func(g *groupView) float64 { return float64(g.Delivered) })
	gs("acknowledged_total", "QoS 1/2 messages a member acknowledged.", counter, func(g *groupView) float64 { return float64(g.Acked) })
	gs("redispatched_total", "Messages moved to another member after one left.", counter, func(g *groupView) float64 { return float64(g.Redispatched) })
	gs("dropped_total", "Messages no member could take.", counter, func(g *groupView) float64 { return float64(g.Dropped) })
	gs("discarded_total", "Messages lost because the group ended.", counter, func(g *groupView) float64 { return float64(g.Discarded) })
	gs("queued", "Messages waiting in members' queues for this group.", gauge, func(g *groupView) float64 { return float64(g.Queued) })
	gs("in_flight", "Messages sent to members and not yet acknowledged.", gauge, func(g *groupView) float64 { return float64(g.InFlight) })
	gs("oldest_queued_seconds", "Age of the oldest queued message: the group's lag.", gauge, func(g *groupView) float64 { return g.OldestQueued.Seconds() })

	ms := func(name, help string, kind prometheus.ValueType, f func(*memberView) float64) {
		c.members = append(c.members, memberScalar{newMetric("share_member_"+name, help, kind, "group", "filter", "client"), f})
	}
	ms("connected", "1 while the member's client is connected.", gauge, func(m *memberView) float64 { return b2f(m.Connected) })
	ms("degraded", "1 while the member is degraded.", gauge, func(m *memberView) float64 { return b2f(len(m.Reasons) > 0) })
	ms("delivered_total", "Messages the group handed to the member.", counter, func(m *memberView) float64 { return float64(m.Delivered) })
	ms("in_flight", "This group's messages in flight to the member.", gauge, func(m *memberView) float64 { return float64(m.InFlight) })
	ms("receive_maximum", "The member's Receive Maximum (its send window); 0 while offline.", gauge, func(m *memberView) float64 { return float64(m.ReceiveMaximum) })
	ms("window_full_seconds", "How long the member's send window has been full.", gauge, func(m *memberView) float64 { return m.WindowFull.Seconds() })
	ms("queued", "This group's messages queued for the member.", gauge, func(m *memberView) float64 { return float64(m.Queued) })
	ms("oldest_queued_seconds", "Age of the member's oldest queued message of this group.", gauge, func(m *memberView) float64 { return m.OldestQueued.Seconds() })
	ms("redeliveries_total", "Messages resent to the member after a reconnect.", counter, func(m *memberView) float64 { return float64(m.Redeliveries) })
	ms("disconnects_total", "Connections of the member's session that ended.", counter, func(m *memberView) float64 { return float64(m.Disconnects) })

	c.omitted = newMetric("share_series_omitted", "Groups or members left out of /metrics by MaxGroupSeries and MaxMemberSeries.", gauge, "kind")
	return c
}

// Describe sends every family's description.
func (c *brokerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range c.brokerScalars {
		ch <- m.desc
	}
	for _, m := range []metric{c.buildInfo, c.startTime, c.ready, c.healthState, c.disconnects, c.omitted} {
		ch <- m.desc
	}
	for _, m := range c.storage {
		ch <- m.desc
	}
	for _, m := range c.groups {
		ch <- m.desc
	}
	for _, m := range c.members {
		ch <- m.desc
	}
}

// Collect reads everything at scrape time.
func (c *brokerCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	emit := func(m metric, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(m.desc, m.kind, v, labels...)
	}
	st := s.b.Stats()
	for _, m := range c.brokerScalars {
		emit(m.metric, m.value(&st))
	}
	emit(c.buildInfo, 1, s.opts.Version, s.opts.NodeID, runtime.Version())
	emit(c.startTime, float64(s.opts.Started.UnixNano())/1e9)
	emit(c.ready, b2f(s.ready.Load()))
	if s.opts.Health != nil {
		for _, chk := range s.opts.Health.Checks() {
			emit(c.healthState, float64(chk.State), chk.Name)
		}
	}
	if s.opts.Tracker != nil {
		for rc, n := range s.opts.Tracker.Disconnects() {
			emit(c.disconnects, float64(n), rc.String())
		}
	}
	if s.opts.Storage != nil {
		ss := s.opts.Storage()
		for _, m := range c.storage {
			emit(m.metric, m.value(&ss))
		}
	}

	views := s.groupViews(s.clock.Now())
	groupsOut, membersOut := 0, 0
	omittedGroups, omittedMembers := 0, 0
	for i := range views {
		g := &views[i]
		if groupsOut >= s.opts.MaxGroupSeries {
			omittedGroups++
			omittedMembers += len(g.Members)
			continue
		}
		groupsOut++
		for _, m := range c.groups {
			emit(m.metric, m.value(g), g.Name, g.Filter)
		}
		for j := range g.Members {
			mv := &g.Members[j]
			if membersOut >= s.opts.MaxMemberSeries {
				omittedMembers++
				continue
			}
			membersOut++
			for _, m := range c.members {
				emit(m.metric, m.value(mv), g.Name, g.Filter, mv.ClientID)
			}
		}
	}
	emit(c.omitted, float64(omittedGroups), "group")
	emit(c.omitted, float64(omittedMembers), "member")
}

// Interface guard.
var _ prometheus.Collector = (*brokerCollector)(nil)
