package web

import (
	"strconv"
	"time"

	"github.com/linemq/linemq/broker"
)

// SysPrefix is where the $SYS figures are published.
const SysPrefix = "$SYS/broker/"

// sysValue is one $SYS topic (below SysPrefix) and its payload.
type sysValue struct {
	topic, value string
}

// sysValues computes the $SYS topics at now. The names follow Mosquitto's
// where a figure means the same; docs/api.md lists where they differ.
func (s *Server) sysValues(now time.Time) []sysValue {
	st := s.b.Stats()
	views := s.groupViews(now)
	u := func(v uint64) string { return strconv.FormatUint(v, 10) }
	i := func(v int) string { return strconv.Itoa(v) }
	shared := 0
	for k := range views {
		shared += views[k].GroupStats.Members
	}
	out := []sysValue{
		{"version", "linemq " + s.opts.Version},
		{"uptime", strconv.FormatInt(int64(now.Sub(s.opts.Started)/time.Second), 10) + " seconds"},
		{"clients/connected", strconv.FormatInt(st.ClientsConnected, 10)},
		{"clients/disconnected", i(max(0, st.Sessions-int(st.ClientsConnected)))},
		{"clients/total", i(st.Sessions)},
		{"clients/parked", i(st.ClientsParked)},
		{"messages/received", u(st.MessagesIn)},
		{"messages/sent", u(st.MessagesRouted)},
		{"publish/messages/received", u(st.MessagesIn)},
		{"publish/messages/sent", u(st.MessagesRouted)},
		{"publish/messages/dropped", u(st.DroppedQoS0 + st.DroppedQueueFull + st.DroppedTooLarge)},
		{"packets/received", u(st.PacketsIn)},
		{"bytes/received", u(st.BytesIn)},
		{"subscriptions/count", i(st.Subscriptions + shared)},
		{"retained messages/count", i(st.Retained)},
		{"shared/count", i(len(views))},
	}
	// Per group name: a name used with several filters is several groups
	// to MQTT, but one worker pool to an operator; their figures add up.
	type agg struct {
		members, queued, inFlight       int
		in, delivered, acked            uint64
		dropped, redispatched, degraded uint64
	}
	var names []string
	byName := make(map[string]*agg)
	for k := range views {
		g := &views[k]
		a := byName[g.Name]
		if a == nil {
			if len(names) >= s.opts.MaxGroupSeries {
				continue
			}
			a = &agg{}
			byName[g.Name] = a
			names = append(names, g.Name)
		}
		a.members += g.GroupStats.Members
		a.queued += g.Queued
		a.inFlight += g.InFlight
		a.in += g.In
		a.delivered += g.Delivered
		a.acked += g.Acked
		a.dropped += g.Dropped
		a.redispatched += g.Redispatched
		if g.degraded() {
			a.degraded = 1
		}
	}
	out = append(out, s.sparkplugSys()...)
	for _, n := range names {
		a := byName[n]
		p := "shared/" + n + "/"
		out = append(out,
			sysValue{p + "members", i(a.members)},
			sysValue{p + "degraded", u(a.degraded)},
			sysValue{p + "messages/received", u(a.in)},
			sysValue{p + "messages/delivered", u(a.delivered)},
			sysValue{p + "messages/acknowledged", u(a.acked)},
			sysValue{p + "messages/dropped", u(a.dropped)},
			sysValue{p + "messages/redispatched", u(a.redispatched)},
			sysValue{p + "queued", i(a.queued)},
			sysValue{p + "inflight", i(a.inFlight)},
		)
	}
	return out
}

// publishSys publishes the $SYS topics once, as QoS 0 messages without the
// retain flag (see the package doc for why).
func (s *Server) publishSys(now time.Time) {
	for _, v := range s.sysValues(now) {
		s.b.Publish(broker.NewMessage(SysPrefix+v.topic, []byte(v.value), 0, false))
	}
}
