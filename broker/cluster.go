package broker

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/linemq/linemq/broker/packet"
	"github.com/linemq/linemq/broker/topic"
)

// Cluster is what the broker needs from the other nodes of a cluster. A nil
// Cluster is a single node. The broker calls it on the publish path, so its
// methods must answer from memory and leave the network to other
// goroutines.
//
// What the broker knows of the other nodes is pushed into it by the
// cluster's glue, from its registry copy: remote members of share groups
// (Server.SetRemoteMember) and the filters of other nodes' ordinary
// subscribers (Server.SetRemoteRoute). What arrives from other nodes comes
// in through Server.ForwardFrom and Server.DeliverFrom.
type Cluster interface {
	// Forward sends m to node, which has ordinary subscribers matching it.
	// It is called at most once per node per message and never for a
	// message that came from another node. Delivery is best effort: a node
	// that is down cannot be replaced.
	Forward(node string, m *Message)

	// Deliver sends m to one member of a share group on another node and
	// calls done exactly once, from any goroutine: nil when that node
	// accepted it (queued to the session, and stored if the session is
	// persistent), or an error (the client is not there, the node is
	// unreachable, no answer in time). On an error the broker picks
	// another member.
	Deliver(to RemoteMember, m *Message, done func(error))

	// Available reports whether node can take deliveries now; the members
	// of a node that cannot are passed over at once. It is called once per
	// remote candidate of a pick, so it must be cheap (an atomic load).
	Available(node string) bool

	// Subscribed and Unsubscribed announce a change of this node's
	// subscriptions (filter as subscribed, $share prefix included). The
	// Registration returned, if not nil, completes once the other nodes
	// can see the change: the SUBACK waits for it, at most
	// ClusterRegisterTimeout.
	Subscribed(clientID, filter string, qos byte) Registration
	Unsubscribed(clientID, filter string) Registration

	// Claim makes this node the owner of clientID's session before its
	// CONNACK, so that two nodes never serve one client; the node that
	// owned it disconnects its connection (Server.Evict). A client
	// resuming (cleanStart false) a session another node holds has it
	// handed across first: the cluster takes it there (Server.HandOver)
	// and installs it here (Server.Adopt). An error refuses the CONNECT
	// with 0x88 Server unavailable rather than serve a client that another
	// node may still be serving, or start empty a session that lives
	// elsewhere. It runs on the connection's reader (nothing else may
	// happen on a connection before its CONNACK), bounded by ctx.
	//
	// will is the connection's will (nil if it has none). The cluster
	// keeps it for the line, so that if this node dies with the
	// connection open another node publishes it; it returns a reference
	// to what it keeps, for TakeWill and DropWill.
	Claim(ctx context.Context, clientID string, cleanStart bool, will *Will) (willRef string, err error)
	// Release gives up the ownership of a session that ended.
	Release(clientID string)

	// TakeWill is asked before this node publishes a will, and reports
	// whether it is still this node's to publish: the line may have
	// published it already, having taken this node for dead (cut off
	// for longer than its lease). ref is Claim's; it is empty for a will
	// restored from the store, which belonged to an earlier run of this
	// node: the line publishes those from what the cluster kept (whoever
	// sees that run gone first), never the restored copy. It may wait
	// for etcd, boundedly; it is never called with a lock held.
	TakeWill(clientID, ref string) bool
	// DropWill says that a connection's will was discarded (a DISCONNECT
	// that did not ask for it): the line must not publish it either.
	DropWill(clientID, ref string)

	// View returns a number that grows with the view of the other nodes
	// this node routes by (the registry revision its routes and sessions
	// reflect), 0 if it has none. A message forwarded carries it: the
	// node a session was adopted on from the replica of another node does
	// not give that session a forward from that node routed by a view
	// older than the adoption (the sender had the session itself then).
	View() uint64

	// Retain sends a retained message published here (or the clear of
	// one: an empty payload) to every other node except those in skip,
	// which had it forwarded already; every node keeps every retained
	// message (Server.RetainFrom). Best effort, like Forward: a node
	// that missed it catches up from a snapshot when it comes back
	// (Server.RetainedSnapshot, Server.MergeRetained).
	Retain(m *Message, skip []string)
}

// ClusterInbound is the broker as a cluster's glue drives it: what the
// registry says about the other nodes, what they send, and the sessions
// that move between nodes. *Server implements it.
type ClusterInbound interface {
	// SetRemoteRoute and SetRemoteMember record other nodes' ordinary
	// filters and share-group members.
	SetRemoteRoute(node, filter string, present bool)
	SetRemoteMember(rm RemoteMember, present bool)
	// ForwardFrom, DeliverFrom and RetainFrom take what another node
	// sent: a message for the ordinary subscribers here, one for a member
	// here, a retained message to keep.
	ForwardFrom(node string, m *Message)
	DeliverFrom(from string, to RemoteMember, m *Message, done func(accepted bool, err error))
	RetainFrom(node string, m *Message)
	// RetainedSnapshot and MergeRetained exchange retained messages with
	// a node that joins or comes back.
	RetainedSnapshot() []*Message
	MergeRetained(ms []*Message) int
	// HandOver, Adopt, ConfirmAdopted, Drop, Evict and LetGoTo move a
	// session between nodes; see each.
	HandOver(clientID, to string) (*SessionState, bool)
	Adopt(st *SessionState) error
	Drop(clientID, owner string)
	ConfirmAdopted(clientID string)
	Evict(clientID string)
	LetGoTo(clientID, owner string, movedAt uint64)
	// Clients lists the sessions here, for settling the restored ones
	// with the registry.
	Clients() []ClientStats
	// PublishWill publishes the will of a client whose node died with
	// its connection open, once the cluster has made sure that no other
	// node does.
	PublishWill(m *Message)
	// WillPublishedElsewhere closes clientID's connection here, its
	// session kept: the line published its will while this node was cut
	// off from it (dead to the others), and the client, still connected,
	// does not know. Reconnecting, it gives the line a will again, and a
	// Sparkplug edge node announces itself anew (NBIRTH after the NDEATH
	// the others saw).
	WillPublishedElsewhere(clientID string)
	// ReplicaSnapshot, AdoptReplica, DropReplicated and NodeFailedOver
	// serve the replicas of persistent sessions (replica.go).
	ReplicaSnapshot(clientID string, f func(st *SessionState)) bool
	AdoptReplica(st *SessionState, disconnected time.Time, from string, view uint64) error
	DropReplicated(clientID string, upTo uint64, owner string)
	NodeFailedOver(node string, adopted map[string]string, back []string)
}

var _ ClusterInbound = (*Server)(nil)

// Registration is a change of this node's subscriptions on its way to the
// other nodes.
type Registration interface {
	// Wait blocks until the change is visible to the other nodes or ctx
	// ends.
	Wait(ctx context.Context) error
}

// RemoteMember is a member of a share group whose session is on another
// node.
type RemoteMember struct {
	Node     string
	Group    string // the share name
	Filter   string // the filter inside $share/<group>/
	ClientID string
	QoS      byte // granted QoS
}

// ClusterClaimTimeout bounds how long a CONNECT waits for the cluster to
// hand it its session (what happens past it is the cluster's choice: the
// glue serves from its last copy while etcd is away).
const ClusterClaimTimeout = 2 * time.Second

// Evict disconnects clientID's connection (0x8E Session taken over) and
// ends its session here: another node has claimed it.
func (srv *Server) Evict(clientID string) {
	srv.departureClaimed(clientID, "")
	srv.evict(clientID)
}

// evict is Evict without the departure's new stamp.
func (srv *Server) evict(clientID string) {
	srv.redirectClaimed(clientID)
	srv.mu.Lock()
	sess := srv.sessions[clientID]
	if sess != nil {
		delete(srv.sessions, clientID)
	}
	_, handed := srv.handed[clientID]
	delete(srv.handed, clientID)
	srv.mu.Unlock()
	if handed && srv.opts.Store != nil {
		// Handed over (HandOver) and now owned elsewhere: the records
		// kept until then go.
		srv.storeErr("delete session", clientID, srv.opts.Store.DeleteSession(clientID))
	}
	if sess == nil {
		return
	}
	sess.mu.Lock()
	c := sess.conn
	sess.mu.Unlock()
	if c != nil {
		c.wmu.Lock()
		c.takeover = true
		c.wmu.Unlock()
		c.kick(packet.SessionTakenOver)
	}
	srv.endSession(sess)
}

// LetGoTo is Evict for a session this node restored from its store whose
// client another node, owner, has claimed meanwhile (it moved while this
// node was down, after this node had handed its state over): forwards
// that other nodes kept for this node while it was away, routed before
// they knew of the move (by a view older than movedAt, the revision of
// owner's claim; 0 if unknown), follow the session there (departed.go)
// instead of going to this node's other subscribers alone.
func (srv *Server) LetGoTo(clientID, owner string, movedAt uint64) {
	srv.mu.Lock()
	sess := srv.sessions[clientID]
	srv.mu.Unlock()
	if sess != nil {
		sess.mu.Lock()
		subs := maps.Clone(sess.subs)
		sess.mu.Unlock()
		srv.departedAt(clientID, owner, subs, movedAt)
	}
	srv.evict(clientID)
}

// ClusterRegisterTimeout bounds how long a SUBACK waits for the
// subscription to be registered with the cluster. Past it the SUBACK goes
// out anyway: the subscription works on this node, and the others learn of
// it when the registry does.
const ClusterRegisterTimeout = 2 * time.Second

// remoteRoute is one other node's interest in a filter: a value of the
// remote route index.
type remoteRoute struct{ node, filter string }

// SetRemoteRoute records (present) or forgets that node has ordinary
// subscribers of filter, so that a matching message is forwarded to it.
func (srv *Server) SetRemoteRoute(node, filter string, present bool) {
	key := remoteRoute{node, filter}
	srv.routesMu.Lock()
	rr, ok := srv.routes[key]
	switch {
	case present && !ok:
		rr = &remoteRoute{node, filter}
		srv.routes[key] = rr
		srv.remote.Add(filter, rr)
	case !present && ok:
		delete(srv.routes, key)
		srv.remote.Remove(filter, rr)
	}
	srv.routesMu.Unlock()
	if present {
		srv.redirectRouteSeen(node, filter) // what a session that moved there left redirected here
	}
}

// SetRemoteMember adds (present) or removes a member of a share group on
// another node. The glue calls it in the order its registry gives the
// members (every node agrees on it), so the candidate lists of all nodes
// list the remote members alike; local members come first everywhere.
func (srv *Server) SetRemoteMember(rm RemoteMember, present bool) {
	if present {
		sub := &subscription{filter: "$share/" + rm.Group + "/" + rm.Filter, topicFilter: rm.Filter,
			qos: min(rm.QoS, 2), groupName: rm.Group, remote: &rm}
		if rc := srv.joinGroup(rm.Group, rm.Filter, sub); rc.IsError() {
			srv.log.Warn("remote member refused by its group's contract", "client", rm.ClientID, "node", rm.Node, "group", rm.Group)
			return
		}
		srv.redirectMemberSeen(rm) // a session that moved there from here
		return
	}
	srv.groupsMu.Lock()
	g := srv.groups[groupKey{rm.Group, rm.Filter}]
	srv.groupsMu.Unlock()
	if g == nil {
		return
	}
	g.mu.Lock()
	m, ok := g.members.Get(rm.ClientID)
	g.mu.Unlock()
	if ok && m.Value.remote != nil && m.Value.remote.Node == rm.Node {
		srv.leaveGroup(m.Value)
	}
}

// forwardRemote sends m once to each other node with ordinary interest in
// its topic, and a retained message to every other node. Topics starting
// with '$' stay on their node.
func (r *router) forwardRemote(srv *Server, m *Message) {
	r.nodes = r.nodes[:0]
	if len(m.Topic) > 0 && m.Topic[0] == '$' {
		// $SYS and the like are each node's own [MQTT-4.7.2-1]: another
		// node's subscribers want their own node's figures.
		return
	}
	for _, rr := range srv.remote.Match(m.topicBytes) {
		r.matched = true
		if slices.Contains(r.nodes, rr.node) {
			continue
		}
		if len(r.nodes) == 0 {
			// Read after the local deliveries: a view newer than the
			// one they were made by costs a duplicate at worst, an
			// older one could lose the message (see deliverLocked).
			m.view.Store(srv.opts.Cluster.View())
		}
		r.nodes = append(r.nodes, rr.node)
		srv.stats.clusterForwards.Add(1)
		if m.QoS > 0 && !srv.opts.Forwards.BestEffort {
			// Kept until the node has it; the acknowledgement waits for
			// its answer, or for the record when it is away (outbox.go).
			r.persisted = srv.forwardDurable(rr.node, "", m, r) || r.persisted
			continue
		}
		srv.opts.Cluster.Forward(rr.node, m)
	}
	if m.Retain {
		// The nodes it was forwarded to keep it from the forward.
		srv.opts.Cluster.Retain(m, r.nodes)
	}
}

// ForwardFrom routes a message another node forwarded: to this node's
// ordinary subscribers only. It never picks from a share group (the node
// that received the message did) and is never forwarded again.
func (srv *Server) ForwardFrom(node string, m *Message) {
	m.fromPeer, m.sender = true, node
	if m.Retain {
		srv.retainFrom(m)
	}
	srv.routeObserved(m, node)
}

// forwardAcked routes a message another node's outbox handed over to this
// node's ordinary subscribers and answers once it is durable; no (not
// here) when no subscription matches it here; and an error when a
// subscriber's queue refused it (Options.Overload backpressure, a queue
// full while its client is away): the outbox sends it again later, so
// that nothing acknowledged is dropped, the subscribers that took it
// getting the new copy with DUP.
func (srv *Server) forwardAcked(from string, m *Message, done func(accepted bool, err error)) {
	m.sender = from
	if m.Retain {
		srv.retainFrom(m)
	}
	seen, after := srv.observe(m, from)
	if seen == HeldBack {
		if after != nil {
			after()
		}
		done(true, nil) // held back here, as if taken
		return
	}
	var r router
	r.route(srv, m, nil)
	r.flush()
	if after != nil {
		after()
	}
	if srv.passOnDeparted(m, &r) {
		r.matched = true // answered for by the node the session went to
	}
	if !r.matched && !r.refused && seen != Watched {
		// Its subscriber left, or moved to another node with its
		// session: the sender routes it again.
		done(false, nil)
		return
	}
	// What a redirect sent on (a subscriber moving away from here) is
	// answered for by the node it moved to.
	srv.answerRouted(&r, done)
}

// errForwardRefused answers a forward that a subscriber's full queue
// refused here.
var errForwardRefused = errors.New(refusedText)

const refusedText = "broker: a subscriber's queue is full; send it again later"

// refusedError is errForwardRefused naming the clients whose full queues
// refused the forward. The node's other subscribers took it, so the
// sender's outbox sends it again to those clients alone, by name: sent
// again for the node's ordinary subscribers, after the client had moved
// on and its redirect had ended, another subscriber of the topic there
// took it and answered for it, and the client never got it (fault suite:
// 1,949 messages lost for a subscriber whose session went back to its
// gateway while its queue was full). It crosses the mesh as text, each
// client quoted.
type refusedError struct{ clients []string }

func (e *refusedError) Error() string {
	if len(e.clients) == 0 {
		return refusedText
	}
	b := []byte(refusedText + " (for")
	for _, c := range e.clients {
		b = append(b, ' ')
		b = strconv.AppendQuote(b, c)
	}
	return string(append(b, ')'))
}

func (e *refusedError) Is(target error) bool { return target == errForwardRefused }

// refusedClients returns the clients a refusal names, read from its text
// (a refusal from another node arrives as its text).
func refusedClients(err error) []string {
	s := err.Error()
	i := strings.Index(s, refusedText+" (for ")
	if i < 0 {
		return nil
	}
	s = s[i+len(refusedText)+len(" (for "):]
	var out []string
	for {
		q, err := strconv.QuotedPrefix(s)
		if err != nil {
			return out
		}
		c, err := strconv.Unquote(q)
		if err != nil {
			return out
		}
		out = append(out, c)
		s = strings.TrimPrefix(s[len(q):], " ")
	}
}

// RetainFrom keeps a retained message (or a clear) another node published
// and sent with Cluster.Retain, if it is a later write of its topic than
// what this node holds. It is not routed: the node that received it did.
func (srv *Server) RetainFrom(node string, m *Message) {
	m.fromPeer = true
	srv.retainFrom(m)
}

// retainFrom keeps a retained message from another node if it is newer.
func (srv *Server) retainFrom(m *Message) bool {
	if m.expired(srv.clock.Now()) {
		return false
	}
	// Other nodes applied their own limits: this one applies its own
	// too, and counts a refusal like a local one.
	if srv.keepRetained(m) != kept {
		return false
	}
	srv.stats.retainedIn.Add(1)
	return true
}

// RetainedSnapshot returns every retained message this node holds, and the
// clears it remembers (messages with an empty payload), for a node that
// joins the cluster or comes back to it (MergeRetained there).
func (srv *Server) RetainedSnapshot() []*Message {
	return srv.retained.snapshot(srv.clock.Now())
}

// MergeRetained keeps, of a snapshot from another node, each message that
// is a later write of its topic than what this node holds, and returns how
// many it kept.
func (srv *Server) MergeRetained(ms []*Message) int {
	n := 0
	for _, m := range ms {
		m.fromPeer = true
		if srv.retainFrom(m) {
			n++
		}
	}
	return n
}

// ErrNotHere wraps a directed delivery's error when the other node
// answered that it has no taker: the member is not there, or (for a
// message from an outbox) no ordinary subscription matches there any
// more. A Cluster wraps its transport's answer with it.
var ErrNotHere = errors.New("broker: not here")

// DeliverFrom hands a message another node (from) picked for one of this node's
// share-group members to that member's session, without matching its
// topic again. done reports whether the session took it (and, for a
// persistent session, the Store made it durable), or an error when the
// node could not take it now; it is called exactly once, possibly on
// another goroutine, and must not block (a persistent session's answer is
// given from the group commit's goroutine).
//
// A RemoteMember with no ClientID stands for this node's ordinary
// subscribers: m is routed to them, as ForwardFrom does, and done reports
// once it is stored for the persistent ones (another node's outbox sent it).
// One with a ClientID and no Group is a client whose session moved here
// from the sending node: m goes to its ordinary subscriptions (redirect.go).
func (srv *Server) DeliverFrom(from string, to RemoteMember, m *Message, done func(accepted bool, err error)) {
	m.fromPeer = true
	switch {
	case to.ClientID == "":
		srv.forwardAcked(from, m, done)
		return
	case to.Group == "":
		srv.deliverMoved(to.ClientID, m, done)
		return
	}
	srv.mu.Lock()
	sess := srv.sessions[to.ClientID]
	srv.mu.Unlock()
	var sub *subscription
	if sess != nil {
		sess.mu.Lock()
		sub = sess.subs["$share/"+to.Group+"/"+to.Filter]
		sess.mu.Unlock()
	}
	if sub == nil || sub.group == nil {
		if rm, ok := srv.redirectedMember(to.ClientID, "$share/"+to.Group+"/"+to.Filter); ok && rm.Node != from {
			// The member moved on from here, and the sender has not
			// seen it yet: on to its new node, answered from there.
			srv.stats.clusterRedirects.Add(1)
			srv.opts.Cluster.Deliver(rm, m, func(err error) {
				switch {
				case err == nil:
					done(true, nil)
				case errors.Is(err, ErrNotHere):
					srv.notHere(done)
				default:
					done(false, err)
				}
			})
			return
		}
		srv.notHere(done)
		return
	}
	var ids subIDs
	ids.add(sub.id)
	res := sess.deliver(m, min(m.QoS, sub.qos), m.Retain && sub.retainAsPublished, &ids, sub.group)
	if !res.ok {
		done(false, nil) // the sender picks another member
		return
	}
	sub.group.delivered.Add(1)
	sub.delivered.Add(1)
	if res.conn != nil {
		res.conn.signal()
	}
	if !res.persisted {
		done(true, nil)
		return
	}
	srv.afterSync(func(err error) { done(err == nil, nil) })
}

// ErrMaybeDelivered wraps a directed delivery's error when the other node
// may have delivered the message all the same (no answer in time, the
// stream broken before the answer): the copy picked for another member is
// then sent with DUP. A Cluster wraps its transport's errors with it.
var ErrMaybeDelivered = errors.New("broker: the other node may have delivered it")

// maybeDelivered returns m, or when an earlier copy may have reached a
// member (maybe), a copy marked to be sent with DUP everywhere. The copy
// leaves the original, which other subscribers may be sending, untouched.
func (srv *Server) maybeDelivered(m *Message, maybe bool) *Message {
	if !maybe || m.redelivery {
		return m
	}
	srv.stats.maybeDelivered.Add(1)
	return m.dupCopy()
}

// remoteWait is what a publisher's acknowledgement waits for on other
// nodes: the directed deliveries of its message still unanswered.
type remoteWait struct {
	mu      sync.Mutex
	pending int
	refused bool        // a delivery found no taker after a full pass
	p       *pendingAck // the acknowledgement, once queued and waiting
	// settling: the message is a departed member's, being placed again
	// (settle); a pass with no taker is tried again later, not counted
	// dropped, and onDone is told the outcome.
	settling bool
	onDone   func(refused bool)
}

func (w *remoteWait) add() {
	w.mu.Lock()
	w.pending++
	w.mu.Unlock()
}

// finish records the end of one delivery and releases the acknowledgement
// after the last.
func (w *remoteWait) finish(refused bool) {
	w.mu.Lock()
	w.pending--
	w.refused = w.refused || refused
	var p *pendingAck
	if w.pending == 0 && w.p != nil {
		p, w.p = w.p, nil
		w.refuseLocked(p)
	}
	var done func(bool)
	if w.pending == 0 && w.onDone != nil {
		done, w.onDone = w.onDone, nil
	}
	refused = w.refused
	w.mu.Unlock()
	if p != nil {
		p.unblock()
	}
	if done != nil {
		done(refused)
	}
}

// whenDone calls f with the outcome once no delivery is unanswered: at
// once if none is.
func (w *remoteWait) whenDone(f func(refused bool)) {
	w.mu.Lock()
	if w.pending > 0 {
		w.onDone = f
		w.mu.Unlock()
		return
	}
	refused := w.refused
	w.mu.Unlock()
	f(refused)
}

// hold makes p wait for the deliveries still unanswered; it reports false
// when there are none (p may go at once).
func (w *remoteWait) hold(p *pendingAck) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.pending == 0 {
		w.refuseLocked(p)
		return false
	}
	w.p = p
	p.blocked.Add(1)
	return true
}

// refuseLocked turns p into a refusal when a delivery found no taker (a
// 3.1.1 publisher cannot be refused: counted only).
func (w *remoteWait) refuseLocked(p *pendingAck) {
	if w.refused && !p.a.rc.IsError() && p.c.version >= packet.V5 {
		p.a.rc = packet.QuotaExceeded
	}
}

// deliverRemote sends m to the remote member sub picked in group g; on
// failure it picks again within the same pass, skipping the members tried.
func (g *shareGroup) deliverRemote(m *Message, sub *subscription, w *remoteWait, tried []string) {
	srv := g.srv
	srv.stats.clusterDelivers.Add(1)
	var sent atomic.Bool // Deliver returned: an answer now comes from the other node
	srv.opts.Cluster.Deliver(*sub.remote, m, func(err error) {
		if err == nil {
			w.finish(false)
			return
		}
		// Counted as delivered when it was sent; it was not, or not for
		// sure.
		g.delivered.Add(^uint64(0))
		sub.delivered.Add(^uint64(0))
		srv.stats.clusterRepicks.Add(1)
		// Refused at once, the message is picked again before anything
		// later is: its order holds. Answered later (not here, expired,
		// an error, or no answer at all), messages picked after it may
		// have reached the next member first: its copy carries DUP, as a
		// message handed on, so that it is not taken for one out of
		// order; and where the first delivery may have arrived, it may be
		// a duplicate too.
		handedOn := sent.Load() || errors.Is(err, ErrMaybeDelivered)
		g.repick(srv.maybeDelivered(m, handedOn), w, append(tried, sub.remote.ClientID))
	})
	sent.Store(true)
}

// repick finds another member for a message whose directed delivery
// failed, without advancing the group's cursor, and delivers it; a full
// pass with no taker refuses it.
func (g *shareGroup) repick(m *Message, w *remoteWait, tried []string) {
	for {
		g.mu.Lock()
		if g.ended {
			g.mu.Unlock()
			if !w.settling {
				g.discarded.Add(1)
			}
			w.finish(true)
			return
		}
		g.qos, g.exclude = m.QoS, tried
		mem, ok := g.members.Repick(shareKey(m), g.accept)
		g.exclude = nil
		g.mu.Unlock()
		if !ok {
			if !w.settling {
				g.dropped.Add(1)
			}
			w.finish(true)
			return
		}
		sub := mem.Value
		if sub.remote != nil {
			g.delivered.Add(1)
			sub.delivered.Add(1)
			g.deliverRemote(m, sub, w, tried)
			return
		}
		var ids subIDs
		ids.add(sub.id)
		res := sub.sess.deliver(m, min(m.QoS, sub.qos), m.Retain && sub.retainAsPublished, &ids, g)
		if !res.ok {
			tried = append(tried, mem.ID)
			continue
		}
		g.delivered.Add(1)
		sub.delivered.Add(1)
		if res.conn != nil {
			res.conn.signal()
		}
		// Off the reader: this runs on the cluster's goroutine.
		w.finish(res.persisted && g.srv.syncStore() != nil)
		return
	}
}

// clusterState is the Server's part of the cluster hooks.
type clusterState struct {
	routesMu sync.Mutex
	routes   map[remoteRoute]*remoteRoute
	remote   *topic.Index[*remoteRoute] // other nodes' ordinary filters

	handed handedOver // under Server.mu; made on first use
}
