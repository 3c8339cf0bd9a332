package web

import (
	"encoding/json"
	"errors"
	"mime"
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/gateway/sparkplug"
)

// sparkplugJSON is /api/v1/sparkplug's answer.
type sparkplugJSON struct {
	Enabled bool   `json:"enabled"`
	Message string `json:"message,omitempty"`
	sparkplug.Stats
}

func (s *Server) handleSparkplug(w http.ResponseWriter, r *http.Request) {
	if s.opts.Sparkplug == nil {
		writeJSON(w, r, http.StatusOK, sparkplugJSON{Message: "Sparkplug awareness is off (sparkplug.aware: false)"})
		return
	}
	writeJSON(w, r, http.StatusOK, sparkplugJSON{Enabled: true, Stats: s.opts.Sparkplug.Stats(s.clock.Now())})
}

// rebirthRequest is the body of POST /api/v1/sparkplug/rebirth.
type rebirthRequest struct {
	Group    string `json:"group"`
	EdgeNode string `json:"edge_node"`
}

// maxRebirthBody bounds a rebirth request's body.
const maxRebirthBody = 4 << 10

// handleRebirth sends an edge node a rebirth command. It changes what
// devices do, so it needs a logged-in user: without http.login there is
// nobody to trust with it. The body must be JSON (a cross-site form cannot
// send that without the browser asking this server first), which keeps a
// page elsewhere from using a logged-in browser's credentials.
func (s *Server) handleRebirth(w http.ResponseWriter, r *http.Request) {
	if s.opts.Sparkplug == nil {
		writeError(w, r, http.StatusNotFound, "Sparkplug awareness is off (sparkplug.aware: false)")
		return
	}
	if s.opts.Login == nil {
		writeError(w, r, http.StatusForbidden, "a rebirth needs a logged-in user: set auth.password_file (and http.login) to enable it")
		return
	}
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
		writeError(w, r, http.StatusUnsupportedMediaType, `send {"group": ..., "edge_node": ...} as application/json`)
		return
	}
	var req rebirthRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxRebirthBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil || req.Group == "" || req.EdgeNode == "" {
		msg := `the body must be {"group": ..., "edge_node": ...}`
		if err != nil {
			msg += ": " + err.Error()
		}
		writeError(w, r, http.StatusBadRequest, msg)
		return
	}
	topic := sparkplug.Namespace + "/" + req.Group + "/NCMD/" + req.EdgeNode
	if acl, ok := s.opts.Login.Verifier.(publishChecker); ok {
		// The command is published for the user: the ACL that would
		// stop them sending it over MQTT stops them here too.
		user, _, _ := r.BasicAuth()
		if !acl.CanPublish(broker.ClientInfo{Username: user}, topic) {
			writeError(w, r, http.StatusForbidden, "the ACL does not let "+strconv.Quote(user)+" publish to "+topic)
			return
		}
	}
	err := s.opts.Sparkplug.Rebirth(req.Group, req.EdgeNode, s.clock.Now())
	switch {
	case errors.Is(err, sparkplug.ErrUnknownEdgeNode):
		writeError(w, r, http.StatusNotFound, "no edge node "+strconv.Quote(req.EdgeNode)+" in group "+strconv.Quote(req.Group))
		return
	case err != nil:
		writeError(w, r, http.StatusInternalServerError, err.Error())
		return
	}
	s.log.Info("sparkplug rebirth requested", "group", req.Group, "edge_node", req.EdgeNode, "remote", r.RemoteAddr)
	writeJSON(w, r, http.StatusAccepted, map[string]string{"sent": topic})
}

// publishChecker is the part of the MQTT authorisation (gateway/auth's
// Authenticator, the Login's Verifier) that a rebirth asks.
type publishChecker interface {
	CanPublish(c broker.ClientInfo, topic string) bool
}

// sparkplugCollector exports the linemq_sparkplug_* families. Per group
// always (groups are few: a line's areas); per edge node only for the first
// Options.SparkplugEdgeSeries edge nodes in name order, so that a plant
// with thousands cannot swamp the time-series database.
type sparkplugCollector struct {
	s *Server

	groups []series[sparkplug.Group]
	edges  []series[sparkplug.EdgeNode]
	hosts  metric
	totals []series[sparkplug.Stats]
}

func newSparkplugCollector(s *Server) *sparkplugCollector {
	c := &sparkplugCollector{s: s}
	g := func(name, help string, kind prometheus.ValueType, f func(*sparkplug.Group) float64) {
		c.groups = append(c.groups, series[sparkplug.Group]{newMetric("sparkplug_"+name, help, kind, "group"), f})
	}
	g("edge_nodes", "Edge nodes of the group this gateway knows of.", gauge, func(x *sparkplug.Group) float64 { return float64(x.EdgeNodes) })
	g("edge_nodes_online", "Edge nodes of the group online (born and not dead).", gauge, func(x *sparkplug.Group) float64 { return float64(x.Online) })
	g("messages_total", "Messages from the group's edge nodes.", counter, func(x *sparkplug.Group) float64 { return float64(x.Messages) })
	g("seq_gaps_total", "Messages missing from the group's edge nodes' sequences.", counter, func(x *sparkplug.Group) float64 { return float64(x.SeqGaps) })
	g("births_total", "NBIRTHs of the group's edge nodes.", counter, func(x *sparkplug.Group) float64 { return float64(x.Births) })
	g("deaths_total", "NDEATHs of the group's edge nodes.", counter, func(x *sparkplug.Group) float64 { return float64(x.Deaths) })
	g("bdseq_mismatches", "Edge nodes of the group whose NBIRTH bdSeq is not the one of the will they registered.", gauge, func(x *sparkplug.Group) float64 { return float64(x.Mismatch) })
	e := func(name, help string, kind prometheus.ValueType, f func(*sparkplug.EdgeNode) float64) {
		c.edges = append(c.edges, series[sparkplug.EdgeNode]{newMetric("sparkplug_edge_"+name, help, kind, "group", "edge_node"), f})
	}
	e("online", "1 while the edge node is online.", gauge, func(x *sparkplug.EdgeNode) float64 { return b2f(x.Online) })
	e("messages_total", "Messages from the edge node.", counter, func(x *sparkplug.EdgeNode) float64 { return float64(x.Messages) })
	e("seq_gaps_total", "Messages missing from the edge node's sequence.", counter, func(x *sparkplug.EdgeNode) float64 { return float64(x.SeqGaps) })
	e("out_of_order_total", "Messages of the edge node that came after a later one.", counter, func(x *sparkplug.EdgeNode) float64 { return float64(x.OutOfOrder) })
	e("last_seen_timestamp_seconds", "When the edge node was last heard from, in Unix seconds.", gauge, func(x *sparkplug.EdgeNode) float64 {
		if x.LastSeen.IsZero() {
			return 0
		}
		return float64(x.LastSeen.UnixNano()) / 1e9
	})
	c.hosts = newMetric("sparkplug_host_online", "1 while the primary host application's STATE says online.", gauge, "host")
	t := func(name, help string, f func(*sparkplug.Stats) float64) {
		c.totals = append(c.totals, series[sparkplug.Stats]{newMetric("sparkplug_"+name, help, counter), f})
	}
	t("not_sparkplug_total", "Messages under spBv1.0/ that were not Sparkplug B (passed through unchanged).", func(x *sparkplug.Stats) float64 { return float64(x.NotSparkplug) })
	t("held_back_total", "Stale messages of an earlier edge node session kept from subscribers.", func(x *sparkplug.Stats) float64 { return float64(x.HeldBack) })
	t("untracked_total", "Messages of edge nodes beyond sparkplug.max_edge_nodes.", func(x *sparkplug.Stats) float64 { return float64(x.Untracked) })
	t("certificates_total", "Births republished under $sparkplug/certificates/.", func(x *sparkplug.Stats) float64 { return float64(x.Certificates) })
	t("rebirths_total", "Rebirth commands sent from the API.", func(x *sparkplug.Stats) float64 { return float64(x.Rebirths) })
	return c
}

// Describe sends every family's description.
func (c *sparkplugCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range c.groups {
		ch <- m.desc
	}
	for _, m := range c.edges {
		ch <- m.desc
	}
	ch <- c.hosts.desc
	for _, m := range c.totals {
		ch <- m.desc
	}
}

// Collect reads the tracker; with the awareness off there is nothing.
func (c *sparkplugCollector) Collect(ch chan<- prometheus.Metric) {
	sp := c.s.opts.Sparkplug
	if sp == nil {
		return
	}
	st := sp.Stats(c.s.clock.Now())
	for _, m := range c.totals {
		ch <- prometheus.MustNewConstMetric(m.desc, m.kind, m.value(&st))
	}
	for i := range st.Groups {
		for _, m := range c.groups {
			ch <- prometheus.MustNewConstMetric(m.desc, m.kind, m.value(&st.Groups[i]), st.Groups[i].Group)
		}
	}
	for i := range st.EdgeNodes[:min(len(st.EdgeNodes), c.s.opts.SparkplugEdgeSeries)] {
		n := &st.EdgeNodes[i]
		for _, m := range c.edges {
			ch <- prometheus.MustNewConstMetric(m.desc, m.kind, m.value(n), n.Group, n.EdgeNode)
		}
	}
	for _, h := range st.Hosts {
		ch <- prometheus.MustNewConstMetric(c.hosts.desc, c.hosts.kind, b2f(h.Online), h.Host)
	}
}

// Interface guard.
var _ prometheus.Collector = (*sparkplugCollector)(nil)

// sparkplugSys returns the $SYS/broker/sparkplug/... values: totals, and
// per group up to MaxGroupSeries groups.
func (s *Server) sparkplugSys() []sysValue {
	sp := s.opts.Sparkplug
	if sp == nil {
		return nil
	}
	st := sp.Stats(s.clock.Now())
	u := func(v uint64) string { return strconv.FormatUint(v, 10) }
	online := 0
	for _, n := range st.EdgeNodes {
		if n.Online {
			online++
		}
	}
	out := []sysValue{
		{"sparkplug/edge_nodes/total", strconv.Itoa(len(st.EdgeNodes))},
		{"sparkplug/edge_nodes/online", strconv.Itoa(online)},
		{"sparkplug/messages/not_sparkplug", u(st.NotSparkplug)},
		{"sparkplug/messages/held_back", u(st.HeldBack)},
	}
	for i, g := range st.Groups {
		if i >= s.opts.MaxGroupSeries {
			break
		}
		p := "sparkplug/groups/" + g.Group + "/"
		out = append(out,
			sysValue{p + "edge_nodes/total", strconv.Itoa(g.EdgeNodes)},
			sysValue{p + "edge_nodes/online", strconv.Itoa(g.Online)},
			sysValue{p + "messages", u(g.Messages)},
			sysValue{p + "seq_gaps", u(g.SeqGaps)},
			sysValue{p + "bdseq_mismatches", strconv.Itoa(g.Mismatch)},
		)
	}
	return out
}
