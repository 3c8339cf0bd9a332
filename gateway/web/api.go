package web

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/packet"
	"github.com/linemq/linemq/gateway/health"
)

// Pagination of /api/v1/clients.
const (
	DefaultClientsLimit = 100
	MaxClientsLimit     = 1000
)

func (s *Server) routes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /{$}", s.pageHandler())
	mux.Handle("GET /static/", s.staticHandler())
	mux.HandleFunc("GET /api/v1/status", s.handleStatus)
	mux.HandleFunc("GET /api/v1/clients", s.handleClients)
	mux.HandleFunc("GET /api/v1/clients/{id...}", s.handleClient)
	mux.HandleFunc("GET /api/v1/groups", s.handleGroups)
	mux.HandleFunc("GET /api/v1/groups/{name}", s.handleGroup)
	mux.HandleFunc("GET /api/v1/storage", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, r, http.StatusOK, s.storageJSON(s.b.Stats()))
	})
	mux.HandleFunc("GET /api/v1/cluster", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, r, http.StatusOK, panelJSON(s.opts.Cluster, "standalone node: no cluster configured"))
	})
	mux.HandleFunc("GET /api/v1/bridges", s.handleBridges)
	mux.HandleFunc("GET /api/v1/hw", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, r, http.StatusOK, panelJSON(s.opts.Hardware, "no hardware configured (status LEDs, watchdog)"))
	})
	mux.HandleFunc("GET /api/v1/sparkplug", s.handleSparkplug)
	mux.HandleFunc("POST /api/v1/sparkplug/rebirth", s.handleRebirth)
	mux.HandleFunc("GET /api/v1/update", s.handleUpdate)
	mux.HandleFunc("POST /api/v1/update", s.handleUpload)
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeError(w, r, http.StatusMethodNotAllowed, "the API is read-only, but for POST /api/v1/sparkplug/rebirth and POST /api/v1/update")
			return
		}
		writeError(w, r, http.StatusNotFound, "no such endpoint: "+r.URL.Path)
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.metrics, promhttp.HandlerOpts{
		ErrorHandling: promhttp.ContinueOnError,
	}))
	mux.HandleFunc("GET /healthz", s.handleHealthz)
	mux.HandleFunc("GET /readyz", s.handleReadyz)
	return mux
}

// writeJSON writes v as the response; ?pretty indents it for people
// reading curl output.
func writeJSON(w http.ResponseWriter, r *http.Request, code int, v any) {
	h := w.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	if _, ok := r.URL.Query()["pretty"]; ok {
		enc.SetIndent("", "  ")
	}
	enc.Encode(v)
}

type errorJSON struct {
	Error string `json:"error"`
}

func writeError(w http.ResponseWriter, r *http.Request, code int, msg string) {
	writeJSON(w, r, code, errorJSON{msg})
}

// --- /api/v1/status ---

type statusJSON struct {
	Node    nodeJSON        `json:"node"`
	Health  healthJSON      `json:"health"`
	Broker  brokerJSON      `json:"broker"`
	Rates   ratesJSON       `json:"rates"`
	Groups  groupsSummary   `json:"groups"`
	Storage json.RawMessage `json:"storage"`
	Cluster json.RawMessage `json:"cluster"`
	HW      json.RawMessage `json:"hw"`
	Update  json.RawMessage `json:"update"`
	Bridges []bridgeJSON    `json:"bridges"`
}

type nodeJSON struct {
	ID            string     `json:"id"`
	Version       string     `json:"version"`
	GoVersion     string     `json:"go_version"`
	Started       time.Time  `json:"started"`
	UptimeSeconds float64    `json:"uptime_seconds"`
	Listeners     []Listener `json:"listeners"`
}

type healthJSON struct {
	State  health.State `json:"state"`
	Ready  bool         `json:"ready"`
	Checks []checkJSON  `json:"checks"`
}

type checkJSON struct {
	Name   string       `json:"name"`
	State  health.State `json:"state"`
	Reason string       `json:"reason"`
	Since  time.Time    `json:"since"`
	Polled bool         `json:"polled"`
}

type brokerJSON struct {
	ClientsConnected     int64  `json:"clients_connected"`
	ClientsParked        int    `json:"clients_parked"`
	Connects             uint64 `json:"connects"`
	Sessions             int    `json:"sessions"`
	Subscriptions        int    `json:"subscriptions"`
	SharedSubscriptions  int    `json:"shared_subscriptions"`
	ShareGroups          int    `json:"share_groups"`
	Retained             int    `json:"retained"`
	PacketsIn            uint64 `json:"packets_in"`
	MessagesIn           uint64 `json:"messages_in"`
	BytesIn              uint64 `json:"bytes_in"`
	MessagesOut          uint64 `json:"messages_out"`
	Acknowledged         uint64 `json:"acknowledged"`
	DuplicateQoS2        uint64 `json:"duplicate_qos2"`
	DroppedQoS0          uint64 `json:"dropped_qos0"`
	DroppedQueueFull     uint64 `json:"dropped_queue_full"`
	DroppedTooLarge      uint64 `json:"dropped_too_large"`
	Expired              uint64 `json:"expired"`
	ExpiredSessions      uint64 `json:"expired_sessions"`
	WillsPublished       uint64 `json:"wills_published"`
	StoreErrors          uint64 `json:"store_errors"`
	AcksHeld             uint64 `json:"acks_held"`
	ShareGroupsDiscarded uint64 `json:"group_discarded"`
}

type ratesJSON struct {
	IntervalSeconds float64     `json:"interval_seconds"`
	MessagesIn      float64     `json:"messages_in_per_second"`
	MessagesOut     float64     `json:"messages_out_per_second"`
	BytesIn         float64     `json:"bytes_in_per_second"`
	History         historyJSON `json:"history"`
}

type historyJSON struct {
	MessagesIn  []float64 `json:"messages_in"`
	MessagesOut []float64 `json:"messages_out"`
}

type groupsSummary struct {
	Total    int      `json:"total"`
	Degraded int      `json:"degraded"`
	Names    []string `json:"degraded_names"`
}

func (s *Server) handleStatus(w http.ResponseWriter, r *http.Request) {
	now := s.clock.Now()
	st := s.b.Stats()
	views := s.groupViews(now)
	out := statusJSON{
		Node: nodeJSON{
			ID: s.opts.NodeID, Version: s.opts.Version, GoVersion: runtime.Version(),
			Started: s.opts.Started, UptimeSeconds: round3(now.Sub(s.opts.Started).Seconds()),
			Listeners: []Listener{},
		},
		Health: s.healthJSON(),
		Broker: brokerFigures(st, views),
		Groups: groupsSummary{Total: len(views), Names: []string{}},
	}
	if s.opts.Listeners != nil {
		out.Node.Listeners = append(out.Node.Listeners, s.opts.Listeners()...)
	}
	for i := range views {
		if views[i].degraded() {
			out.Groups.Degraded++
			out.Groups.Names = append(out.Groups.Names, views[i].Name)
		}
	}
	s.mu.Lock()
	ss := &s.sampled
	out.Rates = ratesJSON{
		IntervalSeconds: s.opts.SampleInterval.Seconds(),
		MessagesIn:      round2(ss.rateIn), MessagesOut: round2(ss.rateOut), BytesIn: round2(ss.rateBytesIn),
		History: historyJSON{MessagesIn: roundAll2(ss.histIn), MessagesOut: roundAll2(ss.histOut)},
	}
	s.mu.Unlock()
	out.Storage = mustJSON(s.storageJSON(st))
	out.Cluster = mustJSON(panelJSON(s.opts.Cluster, "standalone node: no cluster configured"))
	out.HW = mustJSON(panelJSON(s.opts.Hardware, "no hardware configured (status LEDs, watchdog)"))
	out.Update = mustJSON(s.updateJSON())
	out.Bridges = s.bridgesList()
	writeJSON(w, r, http.StatusOK, out)
}

func brokerFigures(st broker.Stats, views []groupView) brokerJSON {
	shared := 0
	for i := range views {
		shared += views[i].GroupStats.Members
	}
	return brokerJSON{
		ClientsConnected: st.ClientsConnected, ClientsParked: st.ClientsParked, Connects: st.Connects,
		Sessions: st.Sessions, Subscriptions: st.Subscriptions, SharedSubscriptions: shared,
		ShareGroups: st.ShareGroups, Retained: st.Retained, PacketsIn: st.PacketsIn,
		MessagesIn: st.MessagesIn, BytesIn: st.BytesIn, MessagesOut: st.MessagesRouted,
		Acknowledged: st.Acknowledged, DuplicateQoS2: st.DuplicateQoS2, DroppedQoS0: st.DroppedQoS0,
		DroppedQueueFull: st.DroppedQueueFull, DroppedTooLarge: st.DroppedTooLarge, Expired: st.Expired,
		ExpiredSessions: st.ExpiredSessions, WillsPublished: st.WillsPublished, StoreErrors: st.StoreErrors,
		AcksHeld: st.AcksHeld, ShareGroupsDiscarded: st.GroupDiscarded,
	}
}

func (s *Server) healthJSON() healthJSON {
	h := healthJSON{State: health.OK, Ready: s.ready.Load(), Checks: []checkJSON{}}
	if s.opts.Health == nil {
		return h
	}
	for _, c := range s.opts.Health.Checks() {
		h.State = max(h.State, c.State)
		h.Checks = append(h.Checks, checkJSON{Name: c.Name, State: c.State, Reason: c.Reason, Since: c.Since, Polled: c.Polled})
	}
	return h
}

// --- panels: storage, cluster, hw ---

type notConfigured struct {
	Configured bool   `json:"configured"`
	Reason     string `json:"reason"`
}

type storageJSON struct {
	Configured bool `json:"configured"`
	StorageStats
	DiskBytesPerMessage float64 `json:"disk_bytes_per_message"`
}

func (s *Server) storageJSON(st broker.Stats) any {
	if s.opts.Storage == nil {
		return notConfigured{Reason: "no store: sessions and retained messages are kept in memory only"}
	}
	out := storageJSON{Configured: true, StorageStats: s.opts.Storage()}
	if st.MessagesIn > 0 {
		out.DiskBytesPerMessage = float64(out.PageBytesWritten) / float64(st.MessagesIn)
	}
	return out
}

// panelJSON is a panel's value with "configured": true added, or the
// not-configured shape when the panel has no source yet.
func panelJSON(f func() any, reason string) any {
	if f == nil {
		return notConfigured{Reason: reason}
	}
	b, err := json.Marshal(f())
	if err != nil {
		return notConfigured{Reason: "panel failed: " + err.Error()}
	}
	b = bytes.TrimSpace(b)
	if len(b) < 2 || b[0] != '{' {
		return map[string]any{"configured": true, "value": json.RawMessage(b)}
	}
	if string(b) == "{}" {
		return json.RawMessage(`{"configured":true}`)
	}
	return json.RawMessage(append([]byte(`{"configured":true,`), b[1:]...))
}

// Rates and ages are rounded for people reading curl output; the
// precision kept is more than any panel or alert needs.
func round2(v float64) float64 { return math.Round(v*100) / 100 }
func round3(v float64) float64 { return math.Round(v*1000) / 1000 }
func round4(v float64) float64 { return math.Round(v*10000) / 10000 }

func roundAll2(v []float64) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = round2(x)
	}
	return out
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(notConfigured{Reason: err.Error()})
	}
	return b
}

// --- /api/v1/clients ---

type clientJSON struct {
	ClientID             string     `json:"client_id"`
	Connected            bool       `json:"connected"`
	Username             string     `json:"username"`
	Address              string     `json:"address"`
	Protocol             string     `json:"protocol"`
	KeepAliveSeconds     float64    `json:"keep_alive_seconds"`
	SessionExpirySeconds uint32     `json:"session_expiry_seconds"`
	ConnectedSince       *time.Time `json:"connected_since"`
	DisconnectedAt       *time.Time `json:"disconnected_at"`
	Subscriptions        int        `json:"subscriptions"`
	InFlight             int        `json:"in_flight"`
	ReceiveMaximum       int        `json:"receive_maximum"`
	Queued               int        `json:"queued"`
	OldestQueuedSeconds  float64    `json:"oldest_queued_seconds"`
	PendingBytes         int        `json:"pending_bytes"`
	Dropped              uint64     `json:"dropped"`
	Disconnects          uint64     `json:"disconnects"`
	Redeliveries         uint64     `json:"redeliveries"`
}

type clientsJSON struct {
	Total   int          `json:"total"`
	Limit   int          `json:"limit"`
	Clients []clientJSON `json:"clients"`
	Next    string       `json:"next"`
}

type clientDetailJSON struct {
	clientJSON
	Filters []subscriptionJSON `json:"filters"`
}

type subscriptionJSON struct {
	Filter            string `json:"filter"`
	QoS               byte   `json:"qos"`
	NoLocal           bool   `json:"no_local"`
	RetainAsPublished bool   `json:"retain_as_published"`
	RetainHandling    byte   `json:"retain_handling"`
	SubscriptionID    uint32 `json:"subscription_id"`
	Group             string `json:"group"`
	Delivered         uint64 `json:"delivered"`
}

// protocolName is how the page names a protocol level.
func protocolName(v packet.Version) string {
	switch v {
	case packet.V31:
		return "3.1"
	case packet.V311:
		return "3.1.1"
	case packet.V5:
		return "5.0"
	}
	return "level " + strconv.Itoa(int(v))
}

func (s *Server) clientJSON(cs broker.ClientStats) clientJSON {
	out := clientJSON{
		ClientID: cs.ClientID, Connected: cs.Connected, Username: cs.Username, Address: cs.RemoteAddr,
		Protocol: protocolName(cs.Version), KeepAliveSeconds: cs.KeepAlive.Seconds(),
		SessionExpirySeconds: cs.ExpiryInterval, Subscriptions: cs.Subscriptions, InFlight: cs.InFlight,
		ReceiveMaximum: cs.ReceiveMaximum, Queued: cs.Queued, OldestQueuedSeconds: round3(cs.OldestQueued.Seconds()),
		PendingBytes: cs.PendingBytes, Dropped: cs.Dropped, Disconnects: cs.Disconnects, Redeliveries: cs.Redeliveries,
	}
	if cs.Connected && !cs.ConnectedAt.IsZero() {
		t := cs.ConnectedAt
		out.ConnectedSince = &t
	}
	if !cs.DisconnectedAt.IsZero() {
		t := cs.DisconnectedAt
		out.DisconnectedAt = &t
	}
	return out
}

// handleClients lists sessions in client id order. ?q keeps those whose
// id, username or address contains it (ignoring case); ?after continues
// after a client id (the previous page's "next"); ?limit sizes the page.
func (s *Server) handleClients(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit := DefaultClientsLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxClientsLimit {
			writeError(w, r, http.StatusBadRequest, "limit must be 1.."+strconv.Itoa(MaxClientsLimit))
			return
		}
		limit = n
	}
	after := q.Get("after")
	search := strings.ToLower(q.Get("q"))

	all := s.b.Clients()
	if search != "" {
		all = slices.DeleteFunc(all, func(c broker.ClientStats) bool {
			return !strings.Contains(strings.ToLower(c.ClientID), search) &&
				!strings.Contains(strings.ToLower(c.Username), search) &&
				!strings.Contains(c.RemoteAddr, search)
		})
	}
	out := clientsJSON{Total: len(all), Limit: limit, Clients: []clientJSON{}}
	start := 0
	if after != "" {
		start, _ = slices.BinarySearchFunc(all, after, func(c broker.ClientStats, id string) int {
			if c.ClientID <= id {
				return -1
			}
			return 1
		})
	}
	end := min(start+limit, len(all))
	for _, cs := range all[start:end] {
		out.Clients = append(out.Clients, s.clientJSON(cs))
	}
	if end < len(all) && end > start {
		out.Next = all[end-1].ClientID
	}
	writeJSON(w, r, http.StatusOK, out)
}

func (s *Server) handleClient(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	cs, subs, ok := s.b.Client(id)
	if !ok {
		writeError(w, r, http.StatusNotFound, "no session with client id "+strconv.Quote(id))
		return
	}
	out := clientDetailJSON{clientJSON: s.clientJSON(cs), Filters: make([]subscriptionJSON, 0, len(subs))}
	for _, sub := range subs {
		out.Filters = append(out.Filters, subscriptionJSON{
			Filter: sub.Filter, QoS: sub.QoS, NoLocal: sub.NoLocal, RetainAsPublished: sub.RetainAsPublished,
			RetainHandling: sub.RetainHandling, SubscriptionID: sub.SubscriptionID, Group: sub.Group,
			Delivered: sub.Delivered,
		})
	}
	writeJSON(w, r, http.StatusOK, out)
}

// --- /api/v1/groups ---

type groupJSON struct {
	Name                string       `json:"name"`
	Filter              string       `json:"filter"`
	Strategy            string       `json:"strategy"`
	State               string       `json:"state"`
	Reasons             []string     `json:"reasons"`
	MemberCount         int          `json:"member_count"`
	MinMembers          int          `json:"min_members"`
	MaxMembers          int          `json:"max_members"`
	MessagesIn          uint64       `json:"messages_in"`
	Delivered           uint64       `json:"delivered"`
	Acknowledged        uint64       `json:"acknowledged"`
	Redispatched        uint64       `json:"redispatched"`
	Dropped             uint64       `json:"dropped"`
	Discarded           uint64       `json:"discarded"`
	Queued              int          `json:"queued"`
	InFlight            int          `json:"in_flight"`
	OldestQueuedSeconds float64      `json:"oldest_queued_seconds"`
	RateIn              float64      `json:"rate_in"`
	RateDelivered       float64      `json:"rate_delivered"`
	Members             []memberJSON `json:"members"`
}

type memberJSON struct {
	ClientID            string   `json:"client_id"`
	Node                string   `json:"node"`
	Connected           bool     `json:"connected"`
	State               string   `json:"state"`
	Reasons             []string `json:"reasons"`
	InFlight            int      `json:"in_flight"`
	SessionInFlight     int      `json:"session_in_flight"`
	ReceiveMaximum      int      `json:"receive_maximum"`
	WindowFullSeconds   float64  `json:"window_full_seconds"`
	Queued              int      `json:"queued"`
	OldestQueuedSeconds float64  `json:"oldest_queued_seconds"`
	Delivered           uint64   `json:"delivered"`
	DeliveredRate       float64  `json:"delivered_rate"`
	Share               *float64 `json:"share"`
	ExpectedShare       *float64 `json:"expected_share"`
	Redeliveries        uint64   `json:"redeliveries"`
	Disconnects         uint64   `json:"disconnects"`
}

func stateName(degraded bool) string {
	if degraded {
		return "degraded"
	}
	return "ok"
}

func groupJSONOf(v *groupView) groupJSON {
	g := groupJSON{
		Name: v.Name, Filter: v.Filter, Strategy: v.Strategy, State: stateName(v.degraded()),
		Reasons: append([]string{}, v.Reasons...), MemberCount: v.GroupStats.Members,
		MinMembers: v.MinMembers, MaxMembers: v.MaxMembers, MessagesIn: v.In, Delivered: v.Delivered,
		Acknowledged: v.Acked, Redispatched: v.Redispatched, Dropped: v.Dropped, Discarded: v.Discarded,
		Queued: v.Queued, InFlight: v.InFlight, OldestQueuedSeconds: round3(v.OldestQueued.Seconds()),
		RateIn: round2(v.RateIn), RateDelivered: round2(v.RateDelivered), Members: make([]memberJSON, 0, len(v.Members)),
	}
	for _, m := range v.Members {
		mj := memberJSON{
			ClientID: m.ClientID, Node: m.Node, Connected: m.Connected, State: stateName(len(m.Reasons) > 0),
			Reasons: append([]string{}, m.Reasons...), InFlight: m.InFlight, SessionInFlight: m.SessionInFlight,
			ReceiveMaximum: m.ReceiveMaximum, WindowFullSeconds: round3(m.WindowFull.Seconds()), Queued: m.Queued,
			OldestQueuedSeconds: round3(m.OldestQueued.Seconds()), Delivered: m.Delivered, DeliveredRate: round2(m.DeliveredRate),
			Redeliveries: m.Redeliveries, Disconnects: m.Disconnects,
		}
		if m.HasShare {
			sh, ex := round4(m.Share), round4(m.ExpectedShare)
			mj.Share, mj.ExpectedShare = &sh, &ex
		}
		g.Members = append(g.Members, mj)
	}
	return g
}

type groupsJSON struct {
	Groups []groupJSON `json:"groups"`
}

func (s *Server) handleGroups(w http.ResponseWriter, r *http.Request) {
	views := s.groupViews(s.clock.Now())
	out := groupsJSON{Groups: make([]groupJSON, 0, len(views))}
	for i := range views {
		out.Groups = append(out.Groups, groupJSONOf(&views[i]))
	}
	writeJSON(w, r, http.StatusOK, out)
}

// handleGroup returns the groups named name: one per filter, as MQTT makes
// "$share/g/a" and "$share/g/b" two groups.
func (s *Server) handleGroup(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	views := s.groupViews(s.clock.Now())
	out := groupsJSON{Groups: []groupJSON{}}
	for i := range views {
		if views[i].Name == name {
			out.Groups = append(out.Groups, groupJSONOf(&views[i]))
		}
	}
	if len(out.Groups) == 0 {
		writeError(w, r, http.StatusNotFound, "no share group named "+strconv.Quote(name))
		return
	}
	writeJSON(w, r, http.StatusOK, out)
}

// --- probes ---

func (s *Server) handleHealthz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Write([]byte("ok\n"))
}

// handleReadyz answers 200 when the gateway set its ready flag and no
// health check failed, 503 otherwise; the body gives the reasons, one per
// line, and lists degraded checks even when ready.
func (s *Server) handleReadyz(w http.ResponseWriter, r *http.Request) {
	ready := s.ready.Load()
	var checks []health.Check
	if s.opts.Health != nil {
		checks = s.opts.Health.Checks()
	}
	healthy := true
	for _, c := range checks {
		healthy = healthy && c.State != health.Failed
	}
	var b strings.Builder
	code := http.StatusOK
	if ready && healthy {
		b.WriteString("ready\n")
	} else {
		code = http.StatusServiceUnavailable
		b.WriteString("not ready\n")
		if !ready {
			b.WriteString("gateway: not started, or shutting down\n")
		}
	}
	// Worst first, as Registry.Healthy orders them.
	slices.SortStableFunc(checks, func(a, b health.Check) int { return int(b.State) - int(a.State) })
	for _, c := range checks {
		if c.State != health.OK {
			fmt.Fprintf(&b, "%s: %s: %s\n", c.Name, c.State, c.Reason)
		}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	w.Write([]byte(b.String()))
}
