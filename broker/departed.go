package broker

import (
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/linemq/linemq/broker/packet"
	"github.com/linemq/linemq/broker/topic"
)

// A session handed to another node (HandOver) leaves forwards behind it:
// messages that other nodes routed here while this node's route was the
// one they knew for the client, and that reach this node late, held up in
// their outboxes (this node was away, or the sending node died after
// writing them and came back; a restored outbox keeps no view). The
// redirect (redirect.go) covers those that come while it lasts. One that
// comes later finds the session gone; another ordinary subscriber of the
// topic here takes it, which answers for it, and the client that moved
// never gets it (fault-suite seed 21 lost 4 and 5 so, in two runs: the
// node that acknowledged them was killed a few milliseconds later and
// came back 15 s after, when the session had moved on twice).
//
// So this node remembers, for a while, where each session it handed over
// went and what it subscribed to, and sends such a forward on to the
// session by name, with DUP. A forward is one of these when it was
// published before the move as this node saw it (the hand-over, then the
// new owner's claim; with the clocks' skew allowed), or routed by a view
// older than that. The record is written to the Store with the hand-over,
// and synced before the state goes: the node may die right after handing
// a session over and come back to the others' outboxes (fault-suite seed
// 27 lost 13 messages so, the node killed 7 ms after the hand-over). A
// node that restarts and finds a restored session claimed elsewhere
// records it too (LetGoTo).

// departuresMax bounds how many moved sessions a node remembers; the
// oldest go first. Each costs its filters' bytes.
const departuresMax = 4096

// departure is a session handed to another node.
type departure struct {
	client  string
	node    string
	filters []departedFilter // its ordinary QoS 1 and 2 subscriptions
	at      time.Time        // the move as this node saw it: its claim seen, or the hand-over
	view    uint64           // this node's Cluster.View then; 0 when restored
	stored  bool             // its record is in the Store
}

// departedPrefix starts the outbox name under which a departure's record
// is kept (outboxPrefix + departedPrefix + node + "\x00" + client): an
// outbox record to the rest of the line, which keeps such records on
// their node (they are not replicated, and no fail-over adopts them).
const departedPrefix = "\x00departed\x00"

func (d *departure) id() string { return outboxPrefix + departedPrefix + d.node + "\x00" + d.client }

// departedRecord splits an outbox name made by departure.id.
func departedRecord(outboxNode string) (node, client string, ok bool) {
	rest, ok := strings.CutPrefix(outboxNode, departedPrefix)
	if !ok {
		return "", "", false
	}
	return strings.Cut(rest, "\x00")
}

type departedFilter struct {
	filter  string
	noLocal bool
}

// departures are the Server's moved sessions, by client id.
type departures struct {
	mu sync.Mutex
	m  map[string]*departure
	// newest is the largest view of any departure, newestAt the latest
	// time of any, and blindAt the latest time of one restored without
	// its view: a forward routed by a view at least newest and published
	// after blindAt, or without a view and published after newestAt, is
	// none of theirs (the common case, read without the lock).
	newest   atomic.Uint64
	newestAt atomic.Int64
	blindAt  atomic.Int64
}

// departed records that client's session went to node with subs, and
// reports whether it wrote the record to the Store (to be synced before
// the move is answered).
func (srv *Server) departed(client, node string, subs map[string]*subscription) bool {
	return srv.departedAt(client, node, subs, 0)
}

// departedAt is departed for a move the line made at view movedAt (0:
// now, as this node sees it).
func (srv *Server) departedAt(client, node string, subs map[string]*subscription, movedAt uint64) bool {
	if node == "" || srv.opts.Cluster == nil || srv.opts.Forwards.BestEffort {
		return false
	}
	d := &departure{client: client, node: node}
	for _, sub := range subs {
		if sub.group == nil && sub.qos > 0 {
			d.filters = append(d.filters, departedFilter{sub.topicFilter, sub.noLocal})
		}
	}
	if len(d.filters) == 0 {
		return false
	}
	ds := &srv.departures
	ds.mu.Lock()
	defer ds.mu.Unlock()
	if ds.m == nil {
		ds.m = map[string]*departure{}
	}
	if old := ds.m[client]; old != nil {
		srv.forgetDepartureLocked(old)
	} else if len(ds.m) >= departuresMax {
		ds.dropOldestLocked(srv)
	}
	ds.m[client] = d
	srv.stampDepartureLocked(d)
	if movedAt != 0 {
		d.view = movedAt // earlier than now: less is passed on
	}
	return srv.storeDepartureLocked(d)
}

// departureClaimed moves client's departure to now, when its new owner's
// claim is seen, or when it is handed on to another node (to).
func (srv *Server) departureClaimed(client, to string) {
	ds := &srv.departures
	ds.mu.Lock()
	defer ds.mu.Unlock()
	d := ds.m[client]
	if d == nil {
		return
	}
	if to != "" && to != d.node {
		srv.forgetDepartureLocked(d) // its record is named for its node
		d.node = to
		ds.m[client] = d
	}
	srv.stampDepartureLocked(d)
	srv.storeDepartureLocked(d)
}

// storeDepartureLocked writes d's record, if there is a Store, and
// reports whether it did.
func (srv *Server) storeDepartureLocked(d *departure) bool {
	store := srv.opts.Store
	if store == nil {
		return false
	}
	id := d.id()
	srv.storeErr("save departure", id, store.SaveSession(&SessionRecord{ClientID: id, Version: packet.V5, ExpiryInterval: neverExpires, Disconnected: d.at}))
	if !d.stored {
		for _, f := range d.filters {
			srv.storeErr("save departure", id, store.SaveSubscription(id, SubscriptionRecord{Filter: f.filter, QoS: 1, NoLocal: f.noLocal}))
		}
	}
	d.stored = true
	return true
}

// forgetDepartureLocked takes d out of the map and the Store.
func (srv *Server) forgetDepartureLocked(d *departure) {
	ds := &srv.departures
	if ds.m[d.client] == d {
		delete(ds.m, d.client)
	}
	if d.stored && srv.opts.Store != nil {
		srv.storeErr("delete departure", d.id(), srv.opts.Store.DeleteSession(d.id()))
		d.stored = false
	}
}

// restoreDeparture rebuilds a departure from its record at start. Its
// view is not kept: what was published before it is what follows it.
func (srv *Server) restoreDeparture(node, client string, rec *SessionRecord) {
	d := &departure{client: client, node: node, at: rec.Disconnected, stored: true}
	for _, sr := range rec.Subscriptions {
		d.filters = append(d.filters, departedFilter{sr.Filter, sr.NoLocal})
	}
	ds := &srv.departures
	ds.mu.Lock()
	defer ds.mu.Unlock()
	if ds.m == nil {
		ds.m = map[string]*departure{}
	}
	ds.m[client] = d
	for _, at := range []*atomic.Int64{&ds.newestAt, &ds.blindAt} {
		if t := d.at.UnixNano(); t > at.Load() {
			at.Store(t)
		}
	}
}

// stampDepartureLocked sets d's time and view to now.
func (srv *Server) stampDepartureLocked(d *departure) {
	ds := &srv.departures
	d.at, d.view = srv.clock.Now(), srv.opts.Cluster.View()
	if d.view > ds.newest.Load() {
		ds.newest.Store(d.view)
	}
	if t := d.at.UnixNano(); t > ds.newestAt.Load() {
		ds.newestAt.Store(t)
	}
}

// returned forgets client's departure: its session is here again.
func (srv *Server) returned(client string) {
	ds := &srv.departures
	ds.mu.Lock()
	if d := ds.m[client]; d != nil {
		srv.forgetDepartureLocked(d)
	}
	ds.mu.Unlock()
}

// dropOldestLocked forgets the departure seen longest ago.
func (ds *departures) dropOldestLocked(srv *Server) {
	var oldest *departure
	for _, d := range ds.m {
		if oldest == nil || d.at.Before(oldest.at) {
			oldest = d
		}
	}
	if oldest != nil {
		srv.forgetDepartureLocked(oldest)
	}
}

// routedBefore reports whether a message routed by view, published at
// created, may have been sent here for a session that left at (at, v): by
// a view that did not have the move, when both views are known; else
// published before it (the clocks' skew allowed). The time alone would
// also pass on what was published before the move and routed after it,
// straight to the session's new node too: a gateway's backlog handed over
// after a restart sent every subscriber of its topics thousands of second
// copies (fault-suite seed 30: 13,172 duplicates, all with DUP, where the
// view alone gives 165).
func routedBefore(view uint64, created time.Time, at time.Time, v uint64) bool {
	if view != 0 && v != 0 {
		return view < v
	}
	return created.Before(at.Add(moveSkew))
}

// noneBefore reports, without the lock, that a forward routed by view and
// published at created was routed after every move recorded here, by
// routedBefore's rule: with a view, no later than the newest move recorded
// with one, nor published before the newest recorded without; without a
// view, published after the newest move of all.
func (ds *departures) noneBefore(view uint64, created time.Time) bool {
	if view == 0 {
		return !routedBefore(0, created, time.Unix(0, ds.newestAt.Load()), 0)
	}
	return view >= ds.newest.Load() && !routedBefore(0, created, time.Unix(0, ds.blindAt.Load()), 0)
}

// passOnDeparted sends m, forwarded here by another node for this node's
// ordinary subscribers, on to each session that moved away from here
// before the sender could know and that it matches: kept in that node's
// outbox, by name, with DUP, its answer joining r's. It reports whether
// it sent any.
func (srv *Server) passOnDeparted(m *Message, r *router) bool {
	ds := &srv.departures
	view := m.view.Load()
	if ds.noneBefore(view, m.Created) {
		return false
	}
	type target struct{ client, node string }
	var to []target
	maxAge := srv.opts.Forwards.maxAge()
	now := srv.clock.Now()
	ds.mu.Lock()
	for _, d := range ds.m {
		if now.Sub(d.at) > maxAge {
			srv.forgetDepartureLocked(d) // every outbox has let go of what it kept for it
			continue
		}
		if !routedBefore(view, m.Created, d.at, d.view) || d.node == m.sender {
			continue
		}
		for _, f := range d.filters {
			if topic.Match(f.filter, m.Topic) && !(f.noLocal && m.Origin == d.client) {
				to = append(to, target{d.client, d.node})
				break
			}
		}
	}
	ds.mu.Unlock()
	sent := false
	for _, t := range to {
		srv.mu.Lock()
		_, here := srv.sessions[t.client]
		srv.mu.Unlock()
		if here || srv.redirecting(t.client, t.node) {
			continue // back here, or its redirect still matches here
		}
		srv.stats.passedOn.Add(1)
		r.persisted = srv.forwardDurable(t.node, t.client, m.dupCopy(), r) || r.persisted
		sent = true
	}
	return sent
}
