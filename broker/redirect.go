package broker

import (
	"context"
	"sync"
	"time"

	"github.com/linemq/linemq/broker/share"
	"github.com/linemq/linemq/broker/topic"
)

// A session handed to another node (HandOver) keeps its ordinary QoS 1 and
// 2 subscriptions here for a while, redirected: what they match is sent to
// the client on its new node, through that node's outbox, instead of being
// missed. The other nodes route by the registry, which learns of the move
// in steps: the new owner adopts the session, claims it, registers its
// routes; this node unregisters its own. Until every node has seen the new
// routes, messages for the client keep arriving here (published here, or
// forwarded by a node whose copy still has this node's route), and without
// the redirect they found no subscription: acknowledged to their
// publishers, never delivered.
//
// So the routes are given up in an order every node sees alike: a
// redirected filter is unregistered only once this node has seen both the
// new owner's claim (Evict; the session is installed there by then) and
// the new owner's route for the filter, and it leaves this node's index
// redirectDrain after the unregistration is written, for the forwards
// already on their way. A redirect lives at most redirectMax; it ends at
// once when the session comes back here (Adopt).
//
// A redirected copy is sent with DUP: the new node may have the message
// already through its own route. It also may arrive after messages
// published later that took the direct way, so DUP tells the subscriber
// what it is.
//
// A share-group membership of the session moves the same way. Its place
// in the group is taken at once by a stand-in: a remote member naming the
// new node, so that what the group picks for the client goes there as a
// directed delivery (and is refused back, and picked again, when the new
// node has no such session after all). Without it the group had a gap for
// as long as the move took: a group whose members were all moving had no
// member on this node, and a message published here was acknowledged for
// the ordinary subscribers it matched and never reached the group
// (fault-suite seed 46 lost 83 so, while the new node's hand-over call
// had timed out and the client came back here). This node's registration
// of the member stays until the new owner's claim and its own
// registration of the member are both seen, for the same reason as a
// route's: the other nodes never see the member missing; directed
// deliveries they send here meanwhile go on to the new node.

// redirectDrain is how long a redirected filter stays in the index after
// its unregistration is written, for the forwards other nodes sent before
// their copies had it.
const redirectDrain = 2 * time.Second

// redirectMax bounds a redirect whose end never comes (the new owner died
// before registering, or the client unsubscribed there).
const redirectMax = 30 * time.Second

// redirect is a session handed to another node whose ordinary
// subscriptions still match here, and whose share-group memberships have
// stand-ins here.
type redirect struct {
	client  string
	node    string
	subs    map[*subscription]bool // in the index, or stand-ins in their groups; true once unregistered (draining)
	claimed bool                   // the new owner's claim has been seen (Evict)
	timer   Timer
}

// redirects are the Server's redirected sessions, by client id.
type redirects struct {
	mu sync.Mutex
	m  map[string]*redirect
}

// startRedirect keeps subs (still in the index or their groups, and
// registered) redirected to node for client, and returns the ones it does
// not keep, which the caller removes as usual. A share-group member kept
// is replaced in its group by a stand-in naming node (standIn).
func (srv *Server) startRedirect(client, node string, subs map[string]*subscription) map[string]*subscription {
	if node == "" || srv.opts.Cluster == nil {
		return subs
	}
	rd := &redirect{client: client, node: node, subs: map[*subscription]bool{}}
	rest := map[string]*subscription{}
	for f, sub := range subs {
		switch {
		case sub.qos == 0:
			rest[f] = sub
		case sub.group != nil:
			if in := srv.standIn(sub, node); in != nil {
				rd.subs[in] = false
			} else {
				rest[f] = sub
			}
		case !srv.opts.Forwards.BestEffort:
			rd.subs[sub] = false
		default:
			rest[f] = sub
		}
	}
	if len(rd.subs) == 0 {
		return subs
	}
	rd.timer = srv.clock.AfterFunc(redirectMax, func() {
		if srv.isStopping() {
			return
		}
		srv.log.Warn("redirect of a moved session ended without its new node's routes", "client", client, "node", node)
		srv.endRedirect(rd, nil)
	})
	srv.redirects.mu.Lock()
	old := srv.redirects.m[client]
	if srv.redirects.m == nil {
		srv.redirects.m = map[string]*redirect{}
	}
	srv.redirects.m[client] = rd
	srv.redirects.mu.Unlock()
	if old != nil {
		// The new redirect holds the registrations of the filters it
		// keeps: ending the old one must not remove them.
		srv.endRedirect(old, func(filter string) bool { _, ok := subs[filter]; return ok })
	}
	return rest
}

// standIn replaces sub, a local member of its share group, with a remote
// member of the same client on node, and returns that stand-in; nil when
// sub is no longer the group's member for its client.
func (srv *Server) standIn(sub *subscription, node string) *subscription {
	rm := &RemoteMember{Node: node, Group: sub.groupName, Filter: sub.topicFilter, ClientID: sub.clientID(), QoS: sub.qos}
	in := &subscription{filter: sub.filter, topicFilter: sub.topicFilter, qos: sub.qos, groupName: sub.groupName, remote: rm}
	g := sub.group
	srv.groupsMu.Lock()
	defer srv.groupsMu.Unlock()
	g.mu.Lock()
	defer g.mu.Unlock()
	if m, ok := g.members.Get(rm.ClientID); g.ended || !ok || m.Value != sub {
		return nil
	}
	in.group = g
	g.members.Join(share.Member[*subscription]{ID: rm.ClientID, Value: in})
	return in
}

// isStandIn reports whether sub is a stand-in (standIn) rather than an
// ordinary subscription kept in the index.
func (sub *subscription) isStandIn() bool { return sub.remote != nil }

// memberSeen reports whether in's group lists in's client as a member on
// node by the registry (a remote member other than the stand-in).
func memberSeen(in *subscription, node string) bool {
	g := in.group
	g.mu.Lock()
	defer g.mu.Unlock()
	m, ok := g.members.Get(in.remote.ClientID)
	return ok && m.Value != in && m.Value.remote != nil && m.Value.remote.Node == node
}

// redirectedMember returns the stand-in's member for client's share
// subscription filter, if client's session moved from here and the
// subscription is redirected.
func (srv *Server) redirectedMember(client, filter string) (RemoteMember, bool) {
	srv.redirects.mu.Lock()
	defer srv.redirects.mu.Unlock()
	rd := srv.redirects.m[client]
	if rd == nil {
		return RemoteMember{}, false
	}
	for sub := range rd.subs {
		if sub.isStandIn() && sub.filter == filter {
			return *sub.remote, true
		}
	}
	return RemoteMember{}, false
}

// redirecting reports whether messages for client are redirected to node.
func (srv *Server) redirecting(client, node string) bool {
	srv.redirects.mu.Lock()
	defer srv.redirects.mu.Unlock()
	rd := srv.redirects.m[client]
	return rd != nil && rd.node == node
}

// redirectTo sends m for client to the node its session moved to, if it
// is redirected: kept in that node's outbox (the publisher's
// acknowledgement waits for the node's answer through r, or for the
// record's commit). It reports whether it did.
func (srv *Server) redirectTo(client string, m *Message, r *router) bool {
	srv.redirects.mu.Lock()
	rd := srv.redirects.m[client]
	var node string
	var claimed bool
	if rd != nil {
		node, claimed = rd.node, rd.claimed
	}
	srv.redirects.mu.Unlock()
	if rd == nil {
		return false
	}
	if !m.fromPeer && claimed && srv.routesTo(node, m) {
		// Published here, and the session is installed there: the
		// forward to the node's own route reaches it (forwardRemote).
		return true
	}
	srv.stats.clusterRedirects.Add(1)
	// With DUP: the node may have it through its own route.
	r.persisted = srv.forwardDurable(node, client, m.dupCopy(), r) || r.persisted
	return true
}

// retarget points client's redirect, if it has one, at node to: the
// client resumes the session there after its claim on the node it was
// first handed to failed.
func (srv *Server) retarget(client, to string) {
	srv.redirects.mu.Lock()
	rd := srv.redirects.m[client]
	if rd == nil || rd.node == to {
		srv.redirects.mu.Unlock()
		return
	}
	rd.node, rd.claimed = to, false
	var ins []*subscription
	for sub, draining := range rd.subs {
		if sub.isStandIn() && !draining {
			ins = append(ins, sub)
		}
	}
	srv.redirects.mu.Unlock()
	// A stand-in names its node for good (its member is read without a
	// lock): a new one takes its place.
	for _, old := range ins {
		in := srv.standIn(old, to)
		srv.redirects.mu.Lock()
		if _, ok := rd.subs[old]; ok && in != nil {
			delete(rd.subs, old)
			rd.subs[in] = false
		}
		srv.redirects.mu.Unlock()
	}
}

// redirectClaimed records that client's new owner claimed it: the filters
// it already routes are given up here.
func (srv *Server) redirectClaimed(client string) {
	srv.redirects.mu.Lock()
	rd := srv.redirects.m[client]
	if rd == nil {
		srv.redirects.mu.Unlock()
		return
	}
	rd.claimed = true
	var seen []*subscription
	for sub, draining := range rd.subs {
		if draining {
			continue
		}
		if sub.isStandIn() && memberSeen(sub, rd.node) || !sub.isStandIn() && srv.hasRoute(rd.node, sub.filter) {
			rd.subs[sub] = true
			seen = append(seen, sub)
		}
	}
	srv.redirects.mu.Unlock()
	for _, sub := range seen {
		srv.unregisterRedirected(rd, sub)
	}
}

// redirectMemberSeen gives up the stand-in of rm's client in rm's group
// once rm's node, which has claimed the client, registers the member.
func (srv *Server) redirectMemberSeen(rm RemoteMember) {
	filter := "$share/" + rm.Group + "/" + rm.Filter
	var seen []*subscription
	srv.redirects.mu.Lock()
	rd := srv.redirects.m[rm.ClientID]
	if rd != nil && rd.node == rm.Node && rd.claimed {
		for sub, draining := range rd.subs {
			if !draining && sub.isStandIn() && sub.filter == filter {
				rd.subs[sub] = true
				seen = append(seen, sub)
			}
		}
	}
	srv.redirects.mu.Unlock()
	for _, sub := range seen {
		srv.unregisterRedirected(rd, sub)
	}
}

// redirectRouteSeen gives up the redirected filters that node now routes
// for clients it has claimed.
func (srv *Server) redirectRouteSeen(node, filter string) {
	type pending struct {
		rd  *redirect
		sub *subscription
	}
	var seen []pending
	srv.redirects.mu.Lock()
	for _, rd := range srv.redirects.m {
		if rd.node != node || !rd.claimed {
			continue
		}
		for sub, draining := range rd.subs {
			if !draining && !sub.isStandIn() && sub.filter == filter {
				rd.subs[sub] = true
				seen = append(seen, pending{rd, sub})
			}
		}
	}
	srv.redirects.mu.Unlock()
	for _, p := range seen {
		srv.unregisterRedirected(p.rd, p.sub)
	}
}

// routesTo reports whether m is forwarded to node by node's own routes.
func (srv *Server) routesTo(node string, m *Message) bool {
	for _, rr := range srv.remote.Match(m.topicBytes) {
		if rr.node == node {
			return true
		}
	}
	return false
}

// hasRoute reports whether node routes filter, by the registry.
func (srv *Server) hasRoute(node, filter string) bool {
	srv.routesMu.Lock()
	defer srv.routesMu.Unlock()
	_, ok := srv.routes[remoteRoute{node, filter}]
	return ok
}

// unregisterRedirected unregisters sub's filter and takes it out of the
// index redirectDrain after the other nodes can see that.
func (srv *Server) unregisterRedirected(rd *redirect, sub *subscription) {
	reg := srv.opts.Cluster.Unsubscribed(rd.client, sub.filter)
	go func() {
		if reg != nil {
			ctx, cancel := context.WithTimeout(context.Background(), ClusterRegisterTimeout)
			reg.Wait(ctx)
			cancel()
		}
		srv.clock.AfterFunc(redirectDrain, func() {
			if !srv.isStopping() {
				srv.dropRedirected(rd, sub)
			}
		})
	}()
}

// dropRedirected takes sub out of the index and out of rd; rd ends with
// its last.
func (srv *Server) dropRedirected(rd *redirect, sub *subscription) {
	srv.redirects.mu.Lock()
	_, ok := rd.subs[sub]
	delete(rd.subs, sub)
	last := ok && len(rd.subs) == 0
	if last && srv.redirects.m[rd.client] == rd {
		delete(srv.redirects.m, rd.client)
	}
	srv.redirects.mu.Unlock()
	if !ok {
		return
	}
	if sub.isStandIn() {
		srv.leaveGroup(sub) // unless the member's registration replaced it
	} else {
		srv.subs.Remove(sub.topicFilter, sub)
	}
	if last && rd.timer != nil {
		rd.timer.Stop()
	}
}

// endRedirect ends rd now: every filter it still has is unregistered and
// leaves the index, or its group. A share filter that kept reports true
// for is not unregistered: the session (or a newer redirect) that holds
// it here now registered it again, and a member's registration is not
// counted as a route's is.
func (srv *Server) endRedirect(rd *redirect, kept func(filter string) bool) {
	srv.redirects.mu.Lock()
	subs := make(map[*subscription]bool, len(rd.subs))
	for sub, draining := range rd.subs {
		subs[sub] = draining
	}
	srv.redirects.mu.Unlock()
	for sub, draining := range subs {
		if !draining && !(sub.isStandIn() && kept != nil && kept(sub.filter)) {
			srv.opts.Cluster.Unsubscribed(rd.client, sub.filter)
		}
		srv.dropRedirected(rd, sub)
	}
}

// endRedirectOf ends client's redirect, if it has one: its session is
// back here, with subs (nil when it ended instead).
func (srv *Server) endRedirectOf(client string, subs map[string]*subscription) {
	srv.redirects.mu.Lock()
	rd := srv.redirects.m[client]
	srv.redirects.mu.Unlock()
	if rd != nil {
		srv.endRedirect(rd, func(filter string) bool { _, ok := subs[filter]; return ok })
	}
}

// deliverMoved takes a message another node redirected to client, whose
// session moved here from there (or through here, further on): it goes to
// the session's matching ordinary subscriptions only. done answers as a
// forward's: not here when this node has no such session yet, or has one
// whose claim is still being written (the sender tries again while its
// redirect lasts: were the claim to fail, what was taken meanwhile would
// be lost with the session, Drop).
func (srv *Server) deliverMoved(client string, m *Message, done func(accepted bool, err error)) {
	srv.mu.Lock()
	sess := srv.sessions[client]
	srv.mu.Unlock()
	if sess == nil {
		srv.redirectOn(client, m, done) // handed on meanwhile, or not here yet
		return
	}
	var t target
	sess.mu.Lock()
	unclaimed, ended := sess.unclaimed, sess.ended
	for _, sub := range sess.subs {
		if sub.group != nil || !topic.Match(sub.topicFilter, m.Topic) || (sub.noLocal && m.Origin == client) {
			continue
		}
		t.sess = sess
		t.add(sub, m)
	}
	sess.mu.Unlock()
	switch {
	case unclaimed:
		srv.notHere(done)
		return
	case ended:
		srv.redirectOn(client, m, done)
		return
	case t.sess == nil:
		done(true, nil) // unsubscribed since: nothing is owed
		return
	}
	res := sess.deliver(m, t.qos, t.retain, &t.ids, nil)
	if res.conn != nil {
		res.conn.signal()
	}
	switch {
	case res.ok:
		srv.stats.msgsRouted.Add(1)
		srv.answerRouted(&router{persisted: res.persisted}, done)
	case res.refused:
		done(false, errForwardRefused)
	case res.moved:
		srv.redirectOn(client, m, done)
	case t.qos == 0:
		done(true, nil) // a QoS 0 subscription of a client away: nothing is queued
	default:
		srv.notHere(done)
	}
}

// redirectOn sends a redirected message on to the node client's session
// went to from here, or answers not here.
func (srv *Server) redirectOn(client string, m *Message, done func(accepted bool, err error)) {
	var r router
	if m.QoS > 0 && srv.redirectTo(client, m, &r) {
		srv.answerRouted(&r, done)
		return
	}
	srv.notHere(done)
}

// notHere answers a directed delivery for a client this node does not
// have.
func (srv *Server) notHere(done func(accepted bool, err error)) {
	srv.stats.clusterNotHere.Add(1)
	done(false, nil)
}

// answerRouted answers a message another node handed over once what
// routing it here started is done: what went on to other nodes answered
// (r.remote), what was written committed.
func (srv *Server) answerRouted(r *router, done func(accepted bool, err error)) {
	if r.refused {
		done(false, &refusedError{clients: r.refusedBy})
		return
	}
	persisted := r.persisted
	after := func(refused bool) {
		switch {
		case refused:
			done(false, errForwardRefused)
		case !persisted:
			done(true, nil)
		default:
			srv.afterSync(func(err error) { done(err == nil, err) })
		}
	}
	if r.remote == nil {
		after(false)
		return
	}
	r.remote.whenDone(after)
}

// isStopping reports whether Shutdown has started: late timers of a
// redirect then leave the cluster alone.
func (srv *Server) isStopping() bool {
	select {
	case <-srv.stopping:
		return true
	default:
		return false
	}
}

// moveSkew is how far the clocks of two gateways may disagree about when a
// message was published and when a session moved (session.dupBefore): the
// line's clocks are kept by NTP.
const moveSkew = time.Second

// claimed records that client's claim is written: a session adopted for it
// takes redirected messages from now on.
func (srv *Server) claimed(client string) {
	srv.mu.Lock()
	sess := srv.sessions[client]
	srv.mu.Unlock()
	if sess != nil {
		sess.mu.Lock()
		sess.unclaimed = false
		sess.mu.Unlock()
	}
}
