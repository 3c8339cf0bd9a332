package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/gateway/cluster/registry"
	"github.com/linemq/linemq/gateway/peer"
)

// Replicas of persistent sessions, the holder's side, and fail-over. A
// node keeps the sessions other nodes replicate to it in one store per
// origin node (ReplicaOptions.Open), applying each batch in order and
// answering once it is durable. When an origin leaves the registry (its
// lease expired: it died, or was cut off for longer than the lease; or it
// stopped), each holder adopts the sessions it keeps for it: it claims
// each in etcd with ClaimReplica, which succeeds only where nobody owns
// the client (so a client that resumed elsewhere meanwhile keeps what it
// has there, and two holders never both adopt one session), and installs
// it in its broker, offline, its messages queued. The holder then tells
// every node it is done; once every registered node is, they forget the
// origin's routes and route again, to the adopted sessions, what they kept
// for its subscribers meanwhile (broker.Server.NodeFailedOver). A CONNECT
// that finds no owner for a session it resumes waits for fail-overs under
// way, so that it does not start empty a session about to be adopted.

// The mesh calls of fail-over.
const (
	callFailedOver = "replica.done" // arg: the origin whose sessions the caller has adopted, "\n", the revision of its adoptions
	// callSettled asks whether the callee is done with the caller's
	// earlier run (arg: the caller's store); answer 1 for done, 0 not yet.
	callSettled = "replica.settled"
)

// failoverFallback is how long after an origin left the nodes wait for
// every holder to say it is done before they go on without.
const failoverFallback = 30 * time.Second

// held keeps the replicas this node holds for other nodes.
type held struct {
	n    *Node
	opts ReplicaOptions

	mu      sync.Mutex
	origins map[string]*origin
	closed  bool // by close: a batch arriving later must not open a store nobody closes
	// gone records the origins that left and are being failed over.
	gone map[string]*departure

	// predecessor is set until every other node has said it is done with
	// this node's earlier run (awaitPeers): while it is, a CONNECT that
	// resumes a session nobody owns waits, since the session may be about
	// to be adopted from a replica elsewhere (this run may have lost its
	// store, or been down past its lease).
	predecessor atomic.Bool

	adopted atomic.Uint64
}

// origin is the store of one other node's sessions kept here.
type origin struct {
	name string

	mu        sync.Mutex
	st        ReplicaStore
	ids       map[string]struct{} // its sessions
	run       uint64              // the origin's run that sent the last batch
	applied   uint64              // that batch's number
	confirmed map[string]struct{} // sessions sent during a resync, while one runs
	failing   bool                // being adopted: batches are refused
	dropped   []string            // sessions the last resync removed, for the log
}

func newHeld(n *Node, o ReplicaOptions) *held {
	h := &held{n: n, opts: o, origins: map[string]*origin{}, gone: map[string]*departure{}}
	h.predecessor.Store(true)
	return h
}

// departure is an origin's fail-over under way.
type departure struct {
	// store is the departed run's store (registry.Node.Store), "" if
	// unknown: a run of the origin registered again with the same store
	// still has its sessions, one with another has lost them.
	store string
	done  map[string]bool // the nodes that have adopted what they held of it
}

// back reports whether origin, failing over, is registered again with the
// store it left with: it has its sessions, and the fail-over is moot.
func (h *held) back(origin, store string) bool {
	info, ok := h.n.reg.NodeInfo(origin)
	return ok && (store == "" || info.Store == store)
}

// get returns origin name's store, opening it on first use.
func (h *held) get(name string) (*origin, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if o := h.origins[name]; o != nil {
		return o, nil
	}
	if h.closed {
		return nil, errHeldClosed
	}
	st, err := h.opts.Open(name)
	if err != nil {
		return nil, fmt.Errorf("cluster: opening the replicas of %s: %w", name, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	snap, err := st.Load(ctx)
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("cluster: reading the replicas of %s: %w", name, err)
	}
	o := &origin{name: name, st: st, ids: map[string]struct{}{}}
	for _, s := range snap.Sessions {
		o.ids[s.ClientID] = struct{}{}
	}
	h.origins[name] = o
	return o, nil
}

// errFailingOver refuses a batch from an origin whose sessions are being
// adopted here: it resends them whole once it is back.
var errFailingOver = errors.New("cluster: this node is adopting the sessions it kept for yours")

// apply applies a batch origin from sent, and returns once it is durable.
func (h *held) apply(from string, b []byte) error {
	bt, err := decodeBatch(b)
	if err != nil {
		return err
	}
	if h.failing(from) {
		// A run that lost its store, registered while what it held is
		// still being adopted here: its own sessions wait (resync).
		return errFailingOver
	}
	o, err := h.get(from)
	if err != nil {
		return err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.failing {
		// Checked again under o.mu: adopt marks the store while holding
		// it, so no batch lands after adopt has read the store.
		return errFailingOver
	}
	if bt.run == o.run && bt.seq <= o.applied {
		return nil // a batch sent again after its answer was lost
	}
	for i := range bt.ops {
		if err := o.applyLocked(&bt.ops[i]); err != nil {
			return err
		}
	}
	if len(o.dropped) > 0 {
		// Rare, and what a fail-over will not find: said, so that a
		// session missing from an adoption can be traced.
		h.n.log.Info("a resync from a session's owner removed the replicas it no longer sends", "origin", from, "clients", someClients(o.dropped))
		o.dropped = nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), replicaCallTimeout)
	defer cancel()
	// A replica commits each batch at once rather than at its store's next
	// batch: the owner sends one batch at a time, so waiting would gather
	// nothing more, only stop the link and every publisher behind it. What
	// the interval saves on the owner's own store (a message saved and
	// acknowledged within it costs no write) the owner's queue does for the
	// replica before a batch leaves (replicaLink.absorbLocked). Committing a
	// batch of more than 16 writes at the interval instead, as before, held
	// the replicas fan-in of docs/benchmarks.md to 22k messages/s (77k now).
	durable := o.st.Sync
	if c, ok := o.st.(broker.Committer); ok {
		durable = c.Commit
	}
	if err := durable(ctx); err != nil {
		return err
	}
	o.run, o.applied = bt.run, bt.seq
	return nil
}

func (o *origin) applyLocked(op *replicaOp) error {
	if o.confirmed != nil && op.client != "" {
		o.confirmed[op.client] = struct{}{}
	}
	st := o.st
	switch op.kind {
	case opSaveSession:
		o.ids[op.client] = struct{}{}
		return st.SaveSession(op.session)
	case opDeleteSession:
		delete(o.ids, op.client)
		return st.DeleteSession(op.client)
	case opSaveSub:
		return st.SaveSubscription(op.client, op.sub)
	case opDeleteSub:
		return st.DeleteSubscription(op.client, op.filter)
	case opSaveMsg:
		return st.SaveMessage(op.client, op.msg)
	case opDeleteMsg:
		return st.DeleteMessage(op.client, op.seq)
	case opInbound:
		return st.SetInbound(op.client, op.pid, op.pending)
	case opKeep:
		// Confirmed above: what this copy has of it stays.
	case opResyncBegin:
		o.confirmed = map[string]struct{}{}
	case opResyncEnd:
		for id := range o.ids {
			if _, ok := o.confirmed[id]; !ok {
				delete(o.ids, id)
				o.dropped = append(o.dropped, id)
				if err := st.DeleteSession(id); err != nil {
					return err
				}
			}
		}
		o.confirmed = nil
	}
	return nil
}

// left starts the fail-over of a node that left the registry; store is
// the departed run's (registry.Node.Store), "" if unknown.
func (h *held) left(name, store string) {
	h.mu.Lock()
	if h.gone[name] == nil {
		h.gone[name] = &departure{store: store, done: map[string]bool{}}
	}
	h.mu.Unlock()
	go h.failover(name, store)
	time.AfterFunc(failoverFallback, func() { h.finish(name, true) })
}

// joined forgets the fail-over of a node that is back with the store it
// left with.
func (h *held) joined(name, store string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if d := h.gone[name]; d != nil && (d.store == "" || d.store == store) {
		delete(h.gone, name)
	}
}

// failing reports whether origin is being failed over: its replicas here
// are being adopted, and a new run of it (one that lost its store) must
// wait with its own until they are.
func (h *held) failing(origin string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.gone[origin] != nil
}

// failover adopts the sessions kept here for name, gone, and says so to
// every node.
func (h *held) failover(name, store string) {
	n := h.n
	if h.back(name, store) {
		return // back already: it has its own copy, and resyncs ours
	}
	h.mu.Lock()
	o := h.origins[name]
	h.mu.Unlock()
	if o == nil {
		if names, err := h.opts.List(); err == nil && slices.Contains(names, name) {
			o, _ = h.get(name)
		}
	}
	var rev int64
	if o != nil {
		h.adopt(o)
		// The claims are written; the routes of the adopted sessions were
		// queued as each was installed. A node routes again what it kept
		// for the origin only once its view has them all (markAt): a
		// message it routes from then on finds the adopted sessions where
		// they are now, and carries a view they accept.
		ctx, cancel := context.WithTimeout(context.Background(), viewWait)
		w := n.reg.Barrier()
		if w.Wait(ctx) == nil {
			rev = w.Revision()
		}
		cancel()
	}
	arg := []byte(name + "\n" + strconv.FormatInt(rev, 10))
	for _, p := range n.reg.Nodes() {
		if p.Name == n.self || p.Name == name {
			continue
		}
		go func(peer string) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if _, err := n.call(ctx, peer, callFailedOver, arg); err != nil {
				n.log.Debug("telling a node this one has failed over", "node", peer, "origin", name, "err", err)
			}
		}(p.Name)
	}
	h.markAt(name, n.self, rev)
}

// viewWait bounds how long a node waits for its copy of the registry to
// reach a revision another node wrote (markAt): past it, with etcd slow or
// away, the fail-over goes on as if it had.
const viewWait = 10 * time.Second

// markAt is mark once this node's copy of the registry has reached rev,
// the revision by which node had written its adoptions (0: at once).
func (h *held) markAt(origin, node string, rev int64) {
	reg := h.n.reg
	if reg.Revision() >= rev {
		h.mark(origin, node)
		return
	}
	go func() {
		// It ends with the node too: a closed registry's copy moves no
		// more, and nothing is to be routed again.
		reached := pollUntil(viewWait, func() bool { return reg.Revision() >= rev || h.isClosed() })
		if h.isClosed() {
			return
		}
		if !reached {
			h.n.log.Warn("routing again what was kept for a node that failed over before this node's view has its adoptions",
				"origin", origin, "adopter", node, "revision", rev, "view", reg.Revision())
		}
		h.mark(origin, node)
	}()
}

// parseFailedOver reads callFailedOver's argument: the origin, and the
// revision by which the caller had written its adoptions (absent from a
// node that predates it: 0).
func parseFailedOver(arg []byte) (origin string, rev int64) {
	origin, r, _ := strings.Cut(string(arg), "\n")
	rev, _ = strconv.ParseInt(r, 10, 64)
	return origin, max(rev, 0)
}

// adopt claims and installs every session of o, then deletes o's store.
func (h *held) adopt(o *origin) {
	n := h.n
	o.mu.Lock()
	o.failing = true
	o.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	snap, err := o.st.Load(ctx)
	if err != nil {
		n.log.Error("reading the replicas of a node that is gone; its sessions are not adopted", "node", o.name, "err", err)
		return
	}
	var (
		wg             sync.WaitGroup
		sem            = make(chan struct{}, 64)
		adopted, owned atomic.Int64
	)
	for _, rec := range snap.Sessions {
		if _, fwd := broker.ForwardQueueOf(rec.ClientID); fwd {
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			id := rec.ClientID
			n.startAdoption(id)
			defer n.endAdoption(id)
			claim, err := n.reg.ClaimReplica(ctx, id, o.name)
			if errors.Is(err, registry.ErrOwned) {
				owned.Add(1) // resumed elsewhere meanwhile: that copy stands
				return
			}
			if err != nil {
				n.log.Warn("adopting a session from its replica: not claimed", "client", id, "origin", o.name, "err", err)
				return
			}
			n.setClaimed(id, claim.Revision)
			st := &broker.SessionState{Session: *rec, Messages: snap.Messages[id], Inbound: snap.Inbound[id]}
			st.Session.Will = nil // the line keeps wills (wills.go)
			if err := n.srv.AdoptReplica(st, rec.Disconnected, o.name, uint64(claim.Revision)); err != nil {
				n.log.Error("adopting a session from its replica", "client", id, "origin", o.name, "err", err)
				return
			}
			adopted.Add(1)
		})
	}
	wg.Wait()
	h.adopted.Add(uint64(adopted.Load()))
	kept := make([]string, 0, len(snap.Sessions))
	for _, rec := range snap.Sessions {
		kept = append(kept, rec.ClientID)
	}
	n.log.Info("adopted the sessions of a gateway that is gone from their replicas",
		"node", o.name, "adopted", adopted.Load(), "resumed_elsewhere", owned.Load(), "kept", len(snap.Sessions), "clients", someClients(kept))
	h.mu.Lock()
	delete(h.origins, o.name)
	h.mu.Unlock()
	o.st.Close()
	if err := h.opts.Remove(o.name); err != nil {
		n.log.Warn("deleting the replicas of a gateway that is gone", "node", o.name, "err", err)
	}
}

// mark records that node has adopted what it kept of origin.
func (h *held) mark(origin, node string) {
	h.mu.Lock()
	d := h.gone[origin]
	if d == nil {
		h.mu.Unlock()
		return // not (or no longer) failing over here
	}
	d.done[node] = true
	h.mu.Unlock()
	h.finish(origin, false)
}

// finish ends origin's fail-over once every registered node has adopted
// its part (or anyway, when force is set: the fallback).
func (h *held) finish(origin string, force bool) {
	n := h.n
	h.mu.Lock()
	d := h.gone[origin]
	if d == nil {
		h.mu.Unlock()
		return
	}
	store := d.store
	h.mu.Unlock()
	if h.back(origin, store) {
		return
	}
	h.mu.Lock()
	if d = h.gone[origin]; d == nil {
		h.mu.Unlock()
		return
	}
	if !force {
		for _, p := range n.reg.Nodes() {
			if p.Name != origin && !d.done[p.Name] {
				h.mu.Unlock()
				return
			}
		}
	}
	delete(h.gone, origin)
	h.mu.Unlock()
	n.parkMu.Lock()
	delete(n.parked, origin)
	n.parkMu.Unlock()
	adopted := n.reg.AdoptedFrom(origin)
	for client, owner := range n.movedOffSince(origin) {
		if _, ok := adopted[client]; !ok {
			adopted[client] = owner
		}
	}
	for client, owner := range adopted {
		if owner == n.self {
			adopted[client] = "" // the broker's name for itself
		}
	}
	var back []string // a new run of origin registered meanwhile: its routes
	if n.registered(origin) {
		back = n.reg.Routes(origin)
		if back == nil {
			back = []string{}
		}
	}
	n.srv.NodeFailedOver(origin, adopted, back)
	n.dropParkedMembers(origin, nil)
	n.log.Info("the sessions of a gateway that is gone live on the others now", "node", origin, "waited_for_all", !force)
}

// pending reports whether a fail-over is under way, or may be for this
// node's earlier run.
func (h *held) pending() bool {
	if h.predecessor.Load() {
		return true
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.gone) > 0
}

// settled answers callSettled: whether this node is done with origin's
// earlier run. It is once it has seen origin's current registration (with
// store), and so every change before it, its predecessor's leaving
// included, and is not failing that one over.
func (h *held) settled(origin, store string) bool {
	info, ok := h.n.reg.NodeInfo(origin)
	return ok && info.Store == store && !h.failing(origin)
}

// settlePoll is how often awaitPeers asks again.
const settlePoll = 100 * time.Millisecond

// settleReach is how long awaitPeers waits for a registered node it has
// no stream to yet: streams come up within milliseconds of both ends
// being registered, so one still missing after this is taken for down
// (it cannot be failing anything over).
const settleReach = 5 * time.Second

// awaitPeers asks every other node until each has said it is done with
// this node's earlier run, or cannot be reached, then clears predecessor.
// It gives up after failoverFallback, as the fail-over itself does.
func (h *held) awaitPeers(ctx context.Context) {
	n := h.n
	defer h.predecessor.Store(false)
	store := []byte(n.reg.Store())
	start := time.Now()
	deadline := start.Add(failoverFallback)
	for time.Now().Before(deadline) {
		waiting := 0
		for _, p := range n.reg.Nodes() {
			if p.Name == n.self {
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			ans, err := n.call(cctx, p.Name, callSettled, store)
			cancel()
			switch {
			case err == nil && len(ans) == 1 && ans[0] == 0:
				waiting++ // not done yet
			case (errors.Is(err, peer.ErrUnavailable) || errors.Is(err, peer.ErrUnknownPeer)) && time.Since(start) < settleReach:
				waiting++ // no stream to it yet
			}
		}
		if waiting == 0 {
			return
		}
		t := time.NewTimer(settlePoll)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
	}
	n.log.Warn("gave up waiting for the other gateways to finish failing over this one's earlier run", "after", failoverFallback)
}

// waitFailovers waits, until ctx ends, for the fail-overs under way.
func (h *held) waitFailovers(ctx context.Context) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for h.pending() {
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// stats fills the holder's side of ReplicaStats.
func (h *held) stats(st *ReplicaStats) {
	h.mu.Lock()
	defer h.mu.Unlock()
	st.Adopted = h.adopted.Load()
	st.HeldOrigins = len(h.origins)
	st.FailingOver = len(h.gone)
	for _, o := range h.origins {
		o.mu.Lock()
		st.HeldSessions += len(o.ids)
		o.mu.Unlock()
	}
}

// startup fails over the origins whose stores are here and who are not
// registered (they died while this node was down), and waits for the
// others to be done with this node's earlier run.
func (h *held) startup(ctx context.Context) {
	go h.awaitPeers(ctx)
	names, err := h.opts.List()
	if err != nil {
		h.n.log.Warn("listing the replicas kept here", "err", err)
		return
	}
	for _, name := range names {
		if name != h.n.self && !h.n.registered(name) {
			h.left(name, "")
		}
	}
}

// errHeldClosed refuses a batch that arrives while the cluster closes.
var errHeldClosed = errors.New("cluster: closing")

// isClosed reports whether close has run.
func (h *held) isClosed() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.closed
}

// close closes the stores; none opens after it.
func (h *held) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for name, o := range h.origins {
		o.mu.Lock()
		o.st.Close()
		o.mu.Unlock()
		delete(h.origins, name)
	}
}

// someClients names at most 20 of ids, sorted, for a log line.
func someClients(ids []string) string {
	ids = slices.Sorted(slices.Values(ids))
	if len(ids) > 20 {
		return strings.Join(ids[:20], " ") + fmt.Sprintf(" and %d more", len(ids)-20)
	}
	return strings.Join(ids, " ")
}
