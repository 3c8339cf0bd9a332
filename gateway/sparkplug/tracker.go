package sparkplug

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/linemq/linemq/broker"
)

// DefaultMaxEdgeNodes bounds the edge nodes a Tracker keeps state for.
const DefaultMaxEdgeNodes = 10_000

// Options configure a Tracker.
type Options struct {
	// Node is this gateway's name on its line; "" on a single gateway.
	Node string
	// Publish routes a message of the server's own (broker.Server.Publish):
	// certificates and rebirth commands.
	Publish func(*broker.Message)
	// Reachable reports whether another gateway of the line is up and
	// reachable now (the cluster's view of its link). An edge node's
	// messages that enter anywhere but where its birth did are its
	// previous session's while that gateway is reachable, and the line's
	// publication of its will when it is not. Nil: every gateway is.
	Reachable func(node string) bool
	// Retained returns the retained messages matching a filter
	// (broker.Server.RetainedMatching): on a new NBIRTH the previous
	// session's DBIRTH certificates are found there, also those written
	// before a restart. Nil: only those this Tracker wrote are cleared.
	Retained func(filter string) []*broker.Message
	// Line tells the other gateways of a line what only this one knows:
	// the NDEATH will an edge node's connection here registered, for the
	// bdSeq check everywhere. Nil on a single gateway.
	Line Line
	// MaxEdgeNodes bounds the edge nodes kept; past it an offline one is
	// forgotten for each new one, and when none is offline new ones are
	// not tracked (their messages pass, counted as untracked). Default
	// DefaultMaxEdgeNodes.
	MaxEdgeNodes int
	// Logger receives notable events (bdSeq mismatches, stale messages
	// held back). Nil discards them.
	Logger *slog.Logger
}

// Line is the part of a line of gateways a Tracker talks to: a best-effort
// mesh call to every other gateway, answered there by Tracker.HandleWill.
type Line interface {
	Broadcast(method string, arg []byte)
}

// WillCall is the mesh call that carries an edge node's will to the other
// gateways.
const WillCall = "sparkplug.will"

// willNote is WillCall's argument.
type willNote struct {
	Group  string `json:"group"`
	Edge   string `json:"edge_node"`
	Client string `json:"client"`
	BdSeq  int64  `json:"bdseq"`
}

// Tracker is a broker.Observer that keeps the state of every Sparkplug edge
// node and primary host it sees and republishes births as certificates.
// Its methods are safe for concurrent use.
type Tracker struct {
	opts Options
	self string // opts.Node, or "local"

	mu    sync.RWMutex
	edges map[edgeKey]*edge
	hosts map[string]*host

	notSparkplug atomic.Uint64 // payloads or topics under the namespace that are not Sparkplug
	heldBack     atomic.Uint64 // stale messages kept from subscribers
	untracked    atomic.Uint64 // messages of edge nodes past MaxEdgeNodes
	certificates atomic.Uint64 // certificates published
	rebirths     atomic.Uint64 // rebirth commands sent
}

var _ broker.Observer = (*Tracker)(nil)

type edgeKey struct{ group, edge string }

// edge is one edge node's state; mu guards it.
type edge struct {
	mu     sync.Mutex
	unlock func() // mu.Unlock, made once: Observe returns it for every message

	online    bool
	birthFrom string // the gateway its current birth entered at
	client    string // the client id that published its birth
	bdSeq     int64  // of its last NBIRTH; -1 unknown
	// earlier holds the bdSeqs of the births before the last one, the
	// most recent first: an NDEATH carrying one of them is an earlier
	// session's, late (on a line, a gateway lets a connection go only
	// when it learns that another took it over).
	earlier   [recentBirths]int64
	nEarlier  int       // entries of earlier in use
	bornAt    time.Time // when this gateway judged the current birth
	missed    uint64    // births this gateway missed (staleWindow)
	willBdSeq int64     // of the NDEATH its connection registered as will; -1 unknown
	willFrom  string    // the client that registered it
	mismatch  bool      // the birth's bdSeq is not its will's

	seq                                                       int // last sequence number seen; -1 none
	births, deaths, gaps, outOfOrder, messages, invalid, held uint64
	lastSeen, since                                           time.Time

	devices map[string]bool // device id -> online

	// messages per second: cur counts second sec, prev the one before.
	sec       int64
	cur, prev uint32
}

// host is a primary host application's STATE.
type host struct {
	online bool
	since  time.Time
}

// NewTracker returns a Tracker.
func NewTracker(opts Options) *Tracker {
	if opts.MaxEdgeNodes <= 0 {
		opts.MaxEdgeNodes = DefaultMaxEdgeNodes
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	self := opts.Node
	if self == "" {
		self = "local"
	}
	return &Tracker{opts: opts, self: self, edges: make(map[edgeKey]*edge), hosts: make(map[string]*host)}
}

// watched reports whether topic may be Sparkplug's: a quick test made for
// every message the broker routes.
func watched(topic string) bool {
	return strings.HasPrefix(topic, Namespace+"/") || strings.HasPrefix(topic, "STATE/")
}

// Observe implements broker.Observer. A message of an edge node is
// judged, and routed, under that edge node's lock (after releases it):
// two of its messages arriving at once from two gateways reach this
// node's subscribers in the order they were judged in.
func (t *Tracker) Observe(m *broker.Message, from string) (broker.Observation, func()) {
	if !watched(m.Topic) {
		return broker.Ignored, nil
	}
	tp, ok := ParseTopic(m.Topic)
	if !ok {
		if strings.HasPrefix(m.Topic, Namespace+"/") {
			t.notSparkplug.Add(1)
			return broker.Watched, nil
		}
		return broker.Ignored, nil // STATE/a/b: not 2.2's STATE either
	}
	if from == "" {
		from = t.self
	}
	switch tp.Kind {
	case STATE:
		t.observeState(tp.Host, m)
		return broker.Watched, nil
	case NCMD, DCMD:
		return broker.Watched, nil
	}
	p, err := Decode(m.Payload, tp.Kind == NBIRTH || tp.Kind == NDEATH)
	valid := err == nil && (p.HasSeq || tp.Kind == NDEATH) && p.Seq <= 255
	if !valid {
		t.notSparkplug.Add(1)
	}
	e := t.edge(edgeKey{tp.Group, tp.Edge}, tp.Kind == NBIRTH)
	if e == nil {
		t.untracked.Add(1)
		return broker.Watched, nil
	}
	e.mu.Lock()
	var clears []*broker.Message
	if valid && tp.Kind == NBIRTH {
		// A new session: its devices are born again after it, and until
		// then the previous session's DBIRTH certificates would describe
		// devices that may be gone, and reach a new subscriber before
		// anything of the new session's. They are cleared: those in the
		// retained store (written before a restart too), else those this
		// Tracker knows of.
		if t.opts.Retained != nil {
			for _, c := range t.opts.Retained(certificateTopic(Topic{Kind: DBIRTH, Group: tp.Group, Edge: tp.Edge, Device: "+"})) {
				clears = append(clears, broker.NewMessage(c.Topic, nil, 1, true))
			}
		} else {
			for d := range e.devices {
				tp := Topic{Kind: DBIRTH, Group: tp.Group, Edge: tp.Edge, Device: d}
				clears = append(clears, broker.NewMessage(certificateTopic(tp), nil, 1, true))
			}
		}
	}
	verdict := e.observe(t, tp, &p, valid, m, from)
	if verdict == broker.HeldBack {
		e.mu.Unlock()
		t.heldBack.Add(1)
		t.opts.Logger.Debug("sparkplug: held back a stale message of an earlier session", "topic", m.Topic, "from", from)
		return verdict, nil
	}
	if t.opts.Publish != nil {
		// Published under the lock (their topics are not the Tracker's):
		// the certificates change in the order the births were judged.
		for _, c := range clears {
			t.opts.Publish(c)
		}
		if valid && (tp.Kind == NBIRTH || tp.Kind == DBIRTH) {
			t.certificates.Add(1)
			t.opts.Publish(broker.NewMessage(certificateTopic(tp), m.Payload, 1, true))
		}
	}
	return verdict, e.unlock
}

// observe applies one message of the edge node; e.mu is held.
func (e *edge) observe(t *Tracker, tp Topic, p *Payload, valid bool, m *broker.Message, from string) broker.Observation {
	if !valid {
		e.invalid++
		e.count(m.Created)
		return broker.Watched
	}
	if tp.Kind == NBIRTH {
		e.online, e.birthFrom, e.client, e.since = true, from, m.Origin, m.Created
		e.births++
		e.bornAt = time.Now()
		if e.bdSeq >= 0 {
			copy(e.earlier[1:], e.earlier[:])
			e.earlier[0] = e.bdSeq
			e.nEarlier = min(e.nEarlier+1, recentBirths)
		}
		e.bdSeq = -1
		if p.HasBdSeq {
			e.bdSeq = int64(p.BdSeq & (1<<63 - 1))
		}
		e.mismatch = e.willBdSeq >= 0 && e.bdSeq >= 0 && e.willFrom == m.Origin && e.willBdSeq != e.bdSeq
		if e.mismatch {
			t.opts.Logger.Warn("sparkplug: NBIRTH bdSeq differs from the NDEATH registered as will",
				"group", tp.Group, "edge", tp.Edge, "birth_bdseq", e.bdSeq, "will_bdseq", e.willBdSeq)
		}
		e.seq = int(p.Seq)
		clear(e.devices)
		e.count(m.Created)
		return broker.Watched
	}
	if tp.Kind == NDEATH {
		if (e.online && e.staleDeath(t, p, from)) || (!e.online && e.earlierSession(p)) {
			e.held++
			return broker.HeldBack
		}
		if e.online {
			e.since = m.Created
		}
		e.online = false
		e.deaths++
		for d := range e.devices {
			e.devices[d] = false
		}
		e.count(m.Created)
		return broker.Watched
	}
	if e.online && from != e.birthFrom && from != broker.FromLine {
		if time.Since(e.bornAt) < staleWindow {
			// The edge node's current session was born at another
			// gateway a moment ago: this is its previous session's,
			// still on its way.
			e.held++
			return broker.HeldBack
		}
		// Long after the birth: this gateway missed the edge node's
		// newer birth (a QoS 0 forward lost with its link). Its data
		// passes, so that a host notices and asks for a rebirth.
		e.birthFrom = from
		e.missed++
	}
	e.checkSeq(int(p.Seq))
	switch tp.Kind {
	case DBIRTH:
		if e.devices == nil {
			e.devices = make(map[string]bool)
		}
		if len(e.devices) < maxDevices || e.devices[tp.Device] {
			e.devices[strings.Clone(tp.Device)] = true
		}
	case DDEATH:
		if _, ok := e.devices[tp.Device]; ok {
			e.devices[tp.Device] = false
		}
	}
	e.count(m.Created)
	return broker.Watched
}

// maxDevices bounds the devices remembered per edge node.
const maxDevices = 1024

// recentBirths is how many earlier births' bdSeqs an edge node remembers.
const recentBirths = 8

// staleWindow is how long after an edge node's birth at one gateway its
// messages entering at another are taken for its previous session's: the
// time the previous gateway needs to learn of the takeover and let the
// connection go (an etcd watch event, milliseconds on a healthy line).
// Past it, they are taken for a newer session whose birth this gateway
// missed.
const staleWindow = 5 * time.Second

// staleDeath reports whether an NDEATH belongs to a session before the
// current birth: its bdSeq is one of the recent earlier births' (and not
// the current one's), or it entered at another gateway than the birth
// while that gateway is reachable (a will the line publishes for a gateway
// that died enters elsewhere, and is not stale). An NDEATH with a bdSeq
// not seen before is not judged stale: it may be a session's whose birth
// is still on its way.
func (e *edge) staleDeath(t *Tracker, p *Payload, from string) bool {
	if p.HasBdSeq && e.bdSeq >= 0 && int64(p.BdSeq&(1<<63-1)) != e.bdSeq {
		return e.earlierSession(p)
	}
	return from != e.birthFrom && from != broker.FromLine && e.birthFrom != t.self &&
		time.Since(e.bornAt) < staleWindow && t.reachable(e.birthFrom)
}

// earlierSession reports whether a payload's bdSeq is that of one of the
// births before the last one. For an edge node already offline, such an
// NDEATH is an earlier session's that came late (its gateway learned of
// the takeover after the session that took over had died too: TestSparkplugLine
// saw session 16's NDEATH reach a host after session 17's).
func (e *edge) earlierSession(p *Payload) bool {
	if !p.HasBdSeq || e.bdSeq < 0 {
		return false
	}
	b := int64(p.BdSeq & (1<<63 - 1))
	return b != e.bdSeq && slices.Contains(e.earlier[:e.nEarlier], b)
}

func (t *Tracker) reachable(node string) bool {
	return t.opts.Reachable == nil || t.opts.Reachable(node)
}

// checkSeq counts a gap (messages missing) or an out-of-order message
// (one that comes after a later one), modulo 256.
func (e *edge) checkSeq(seq int) {
	if e.seq < 0 {
		e.seq = seq
		return
	}
	want := (e.seq + 1) & 255
	if seq == want {
		e.seq = seq
		return
	}
	if d := (seq - want) & 255; d < 128 {
		e.gaps += uint64(d)
		e.seq = seq
		return
	}
	e.outOfOrder++
}

// count records a message at t for the rates and last seen.
func (e *edge) count(t time.Time) {
	e.messages++
	e.lastSeen = t
	s := t.Unix()
	switch s {
	case e.sec:
		e.cur++
	case e.sec + 1:
		e.prev, e.cur, e.sec = e.cur, 1, s
	default:
		if s > e.sec {
			e.prev, e.cur, e.sec = 0, 1, s
		} else {
			e.cur++ // a late message from another gateway: counted now
		}
	}
}

// rate is the messages of the last whole second before now.
func (e *edge) rate(now time.Time) uint32 {
	switch now.Unix() {
	case e.sec:
		return e.prev
	case e.sec + 1:
		return e.cur
	}
	return 0
}

// edge returns the state of k; if there is none, one made when create and
// there is room (only a birth or a will makes one: any other message naming
// a new edge node would let a client fill the table with junk names).
func (t *Tracker) edge(k edgeKey, create bool) *edge {
	t.mu.RLock()
	e := t.edges[k]
	t.mu.RUnlock()
	if e != nil || !create {
		return e
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if e = t.edges[k]; e != nil {
		return e
	}
	if len(t.edges) >= t.opts.MaxEdgeNodes && !t.forgetOfflineLocked() {
		return nil
	}
	e = &edge{bdSeq: -1, willBdSeq: -1, seq: -1}
	e.unlock = e.mu.Unlock
	t.edges[edgeKey{strings.Clone(k.group), strings.Clone(k.edge)}] = e
	return e
}

// forgetOfflineLocked forgets the edge node offline the longest, to make
// room; it reports whether it found one.
func (t *Tracker) forgetOfflineLocked() bool {
	var oldest *edgeKey
	var at time.Time
	for k, e := range t.edges {
		e.mu.Lock()
		off, seen := !e.online, e.lastSeen
		e.mu.Unlock()
		if off && (oldest == nil || seen.Before(at)) {
			k := k
			oldest, at = &k, seen
		}
	}
	if oldest == nil {
		return false
	}
	delete(t.edges, *oldest)
	return true
}

// WillSet implements broker.Observer: a connection's NDEATH will tells
// the bdSeq its next NBIRTH must carry.
func (t *Tracker) WillSet(c broker.ClientInfo, will *broker.Message) {
	tp, ok := ParseTopic(will.Topic)
	if !ok || tp.Kind != NDEATH {
		return
	}
	p, err := Decode(will.Payload, true)
	if err != nil || !p.HasBdSeq {
		return
	}
	e := t.edge(edgeKey{tp.Group, tp.Edge}, true)
	if e == nil {
		return
	}
	bd := int64(p.BdSeq & (1<<63 - 1))
	e.setWill(bd, c.ClientID)
	if t.opts.Line != nil {
		arg, _ := json.Marshal(willNote{Group: tp.Group, Edge: tp.Edge, Client: c.ClientID, BdSeq: bd})
		t.opts.Line.Broadcast(WillCall, arg)
	}
}

// setWill records the will's bdSeq and checks the current birth against it
// (a will announced by another gateway may come after the birth).
func (e *edge) setWill(bdSeq int64, client string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.willBdSeq, e.willFrom = bdSeq, client
	if e.online && e.client == client && e.bdSeq >= 0 {
		e.mismatch = e.bdSeq != bdSeq
	}
}

// HandleWill takes another gateway's WillCall: the will an edge node's
// connection there registered.
func (t *Tracker) HandleWill(from string, arg []byte) ([]byte, error) {
	var n willNote
	if err := json.Unmarshal(arg, &n); err != nil {
		return nil, fmt.Errorf("sparkplug: will from %s: %w", from, err)
	}
	if n.Group == "" || n.Edge == "" || n.BdSeq < 0 {
		return nil, fmt.Errorf("sparkplug: will from %s: incomplete", from)
	}
	if e := t.edge(edgeKey{n.Group, n.Edge}, true); e != nil {
		e.setWill(n.BdSeq, n.Client)
	}
	return nil, nil
}

// observeState records a primary host's STATE: Sparkplug 3.0's JSON
// ({"online":true,...}) or 2.2's ONLINE/OFFLINE.
func (t *Tracker) observeState(name string, m *broker.Message) {
	online, ok := stateOnline(m.Payload)
	if !ok {
		t.notSparkplug.Add(1)
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	h := t.hosts[name]
	if h == nil {
		if len(t.hosts) >= maxHosts {
			return
		}
		h = &host{}
		t.hosts[strings.Clone(name)] = h
	}
	if h.online != online || h.since.IsZero() {
		h.online, h.since = online, m.Created
	}
}

// maxHosts bounds the primary hosts remembered.
const maxHosts = 256

// stateOnline reads a STATE payload: Sparkplug 3.0's JSON
// ({"online": true, "timestamp": ...}) or 2.2's ONLINE/OFFLINE. STATE
// messages are rare (a host's birth and death), so the JSON decoder's
// allocations do not matter.
func stateOnline(b []byte) (online, ok bool) {
	switch s := strings.TrimSpace(string(b)); s {
	case "ONLINE":
		return true, true
	case "OFFLINE":
		return false, true
	}
	var st struct {
		Online *bool `json:"online"`
	}
	if json.Unmarshal(b, &st) != nil || st.Online == nil {
		return false, false
	}
	return *st.Online, true
}

// ErrUnknownEdgeNode is returned for a rebirth request naming an edge node
// the Tracker has not seen.
var ErrUnknownEdgeNode = errors.New("sparkplug: no such edge node")

// Rebirth sends the edge node an NCMD with Node Control/Rebirth = true
// (routed on the line like any message, to wherever the edge node is).
func (t *Tracker) Rebirth(group, edgeNode string, now time.Time) error {
	t.mu.RLock()
	_, ok := t.edges[edgeKey{group, edgeNode}]
	t.mu.RUnlock()
	if !ok {
		return ErrUnknownEdgeNode
	}
	if t.opts.Publish == nil {
		return errors.New("sparkplug: this tracker cannot publish")
	}
	t.rebirths.Add(1)
	t.opts.Publish(broker.NewMessage(Namespace+"/"+group+"/NCMD/"+edgeNode, RebirthCommand(now), 0, false))
	return nil
}

// EdgeNode is one edge node's state, as the API shows it.
type EdgeNode struct {
	Group      string    `json:"group"`
	EdgeNode   string    `json:"edge_node"`
	Online     bool      `json:"online"`
	Since      time.Time `json:"since"`             // of its last birth or death
	Gateway    string    `json:"gateway,omitempty"` // where its current birth entered the line
	Client     string    `json:"client,omitempty"`  // the client id that published its birth
	BdSeq      int64     `json:"bdseq"`             // of its last NBIRTH; -1 unknown
	WillBdSeq  int64     `json:"will_bdseq"`        // of the NDEATH registered as its will, where known; -1 unknown
	Mismatch   bool      `json:"bdseq_mismatch"`    // the two differ
	Births     uint64    `json:"births"`
	Deaths     uint64    `json:"deaths"`
	Messages   uint64    `json:"messages"`
	SeqGaps    uint64    `json:"seq_gaps"`      // messages missing from the sequence
	OutOfOrder uint64    `json:"out_of_order"`  // messages that came after a later one
	Invalid    uint64    `json:"invalid"`       // payloads that were not Sparkplug
	HeldBack   uint64    `json:"held_back"`     // stale messages kept from subscribers
	Missed     uint64    `json:"births_missed"` // newer births this gateway did not see (their data passed)
	LastSeen   time.Time `json:"last_seen"`
	Devices    int       `json:"devices"`
	DevicesOn  int       `json:"devices_online"`
	Rate       uint32    `json:"messages_per_second"`
}

// Host is a primary host application's STATE.
type Host struct {
	Host   string    `json:"host"`
	Online bool      `json:"online"`
	Since  time.Time `json:"since"`
}

// Group sums a Sparkplug group's edge nodes.
type Group struct {
	Group     string `json:"group"`
	EdgeNodes int    `json:"edge_nodes"`
	Online    int    `json:"online"`
	Messages  uint64 `json:"messages"`
	SeqGaps   uint64 `json:"seq_gaps"`
	Births    uint64 `json:"births"`
	Deaths    uint64 `json:"deaths"`
	Mismatch  int    `json:"bdseq_mismatches"`
	Rate      uint32 `json:"messages_per_second"`
}

// Stats is the Tracker's state: what /api/v1/sparkplug serves.
type Stats struct {
	Groups       []Group    `json:"groups"`
	EdgeNodes    []EdgeNode `json:"edge_nodes"`
	Hosts        []Host     `json:"hosts"`
	NotSparkplug uint64     `json:"not_sparkplug"` // messages under spBv1.0/ that were not Sparkplug
	HeldBack     uint64     `json:"held_back"`
	Untracked    uint64     `json:"untracked"` // messages of edge nodes without state here: not born since this gateway started, or past max_edge_nodes
	Certificates uint64     `json:"certificates_published"`
	Rebirths     uint64     `json:"rebirths_requested"`
}

// Stats returns a snapshot, edge nodes sorted by group and name.
func (t *Tracker) Stats(now time.Time) Stats {
	s := Stats{
		NotSparkplug: t.notSparkplug.Load(), HeldBack: t.heldBack.Load(), Untracked: t.untracked.Load(),
		Certificates: t.certificates.Load(), Rebirths: t.rebirths.Load(),
		EdgeNodes: []EdgeNode{}, Groups: []Group{}, Hosts: []Host{},
	}
	t.mu.RLock()
	for k, e := range t.edges {
		e.mu.Lock()
		n := EdgeNode{Group: k.group, EdgeNode: k.edge, Online: e.online, Since: e.since, Client: e.client,
			BdSeq: e.bdSeq, WillBdSeq: e.willBdSeq, Mismatch: e.mismatch, Births: e.births, Deaths: e.deaths,
			Messages: e.messages, SeqGaps: e.gaps, OutOfOrder: e.outOfOrder, Invalid: e.invalid, HeldBack: e.held, Missed: e.missed,
			LastSeen: e.lastSeen, Devices: len(e.devices), Rate: e.rate(now)}
		if e.online {
			n.Gateway = e.birthFrom
		}
		for _, on := range e.devices {
			if on {
				n.DevicesOn++
			}
		}
		e.mu.Unlock()
		s.EdgeNodes = append(s.EdgeNodes, n)
	}
	for name, h := range t.hosts {
		s.Hosts = append(s.Hosts, Host{Host: name, Online: h.online, Since: h.since})
	}
	t.mu.RUnlock()
	slices.SortFunc(s.EdgeNodes, func(a, b EdgeNode) int {
		return cmp.Or(cmp.Compare(a.Group, b.Group), cmp.Compare(a.EdgeNode, b.EdgeNode))
	})
	slices.SortFunc(s.Hosts, func(a, b Host) int { return cmp.Compare(a.Host, b.Host) })
	for _, n := range s.EdgeNodes {
		if len(s.Groups) == 0 || s.Groups[len(s.Groups)-1].Group != n.Group {
			s.Groups = append(s.Groups, Group{Group: n.Group})
		}
		g := &s.Groups[len(s.Groups)-1]
		g.EdgeNodes++
		if n.Online {
			g.Online++
		}
		if n.Mismatch {
			g.Mismatch++
		}
		g.Messages += n.Messages
		g.SeqGaps += n.SeqGaps
		g.Births += n.Births
		g.Deaths += n.Deaths
		g.Rate += n.Rate
	}
	return s
}
