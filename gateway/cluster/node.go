// Package cluster joins a gateway's broker to the other gateways of a line:
// it implements broker.Cluster over the etcd registry (who holds which
// members and filters) and a node-to-node transport (what carries the
// messages), and feeds what the registry says about the other nodes into
// the broker.
//
// The broker asks the cluster from its publish path, so nothing here waits
// on the network there: the registry is a local copy kept by a watch, and
// the transport queues.
package cluster

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/topic"
	"github.com/linemq/linemq/gateway/cluster/registry"
)

// Transport carries messages between nodes: gateway/peer's, or an
// in-memory one in tests.
type Transport interface {
	// Forward sends m to node for its ordinary subscribers, best effort.
	Forward(node string, m *broker.Message)
	// Deliver sends m to one share-group member on another node and calls
	// done once with that node's answer (nil: accepted).
	Deliver(to broker.RemoteMember, m *broker.Message, done func(error))
	// Available reports whether node can take deliveries now.
	Available(node string) bool
	// SetPeer adds or updates (addr != "") or removes (addr == "") a node.
	SetPeer(node, addr string)
	// HandOver asks node for clientID's session, for the client resuming
	// it here; node closes the client's connection there. It returns nil
	// without an error when node has no such session.
	HandOver(ctx context.Context, node, clientID string) (*broker.SessionState, error)
	// Retain sends a retained message (or a clear) to node to keep, best
	// effort.
	Retain(node string, m *broker.Message)
	// RetainedSnapshot asks node for every retained message it holds and
	// the clears it remembers.
	RetainedSnapshot(ctx context.Context, node string) ([]*broker.Message, error)
}

// Node is the glue between this gateway's broker and the rest of the
// line: it implements broker.Cluster over the registry and a Transport,
// and hands the registry's events and what other nodes send to the broker
// (broker.ClusterInbound). A Cluster makes one over gateway/peer's mesh;
// tests make one over a transport of their own with NewNode.
type Node struct {
	self    string
	reg     *registry.Registry
	tr      Transport
	srv     broker.ClusterInbound // set once by bind, before anything reaches the node
	log     *slog.Logger
	onNodes func([]registry.Node) // told the registered nodes when they change

	// claimed is the revision of this node's latest ownership record of
	// each client it claimed: a claim by another node with a later
	// revision means this node lost the client, whatever the record
	// names as its predecessor (see HandleEvent).
	//
	// claiming counts the claims of each client under way here: a record
	// of another node's seen meanwhile may be the one being taken over.
	//
	// adopting marks the clients whose sessions are being adopted here
	// from a replica, between the claim and the install: a hand-over asked
	// meanwhile waits for the install (HandOver).
	//
	// unconfirmed are the sessions handed over here whose claim etcd did
	// not confirm in time, kept until the line's record says whose they
	// are (see claim), with the revision of the record they were handed
	// over under.
	claimMu     sync.Mutex
	claimed     map[string]int64
	claiming    map[string]int
	adopting    map[string]struct{}
	unconfirmed map[string]int64

	// viewFloor is the least View: the revision of the latest adoption
	// this node let go of, which it can reach before the registry's
	// revision does (letGoAdopted).
	viewFloor atomic.Int64

	// movedOff are, per node, the sessions that left it for another node
	// and when that was seen (HandleEvent): should that node fail over,
	// what the others kept for it is owed to them too (movedOffSince).
	movedMu  sync.Mutex
	movedOff map[string]map[string]time.Time

	// parked are the routes of nodes gone with their lease, still routed
	// to (HandleEvent), by node and filter.
	parkMu sync.Mutex
	parked map[string]map[string]struct{}
	// parkedMembers are the share-group members of nodes gone with their
	// lease, kept in their groups until the line has failed the nodes'
	// sessions over, or the nodes are back (HandleEvent).
	parkedMembers map[string]map[broker.RemoteMember]struct{}

	// wills keeps the line's record of this node's connections' wills
	// and publishes those of dead nodes' clients.
	wills *wills

	// repl sends this node's persistent sessions to their replicas, and
	// held keeps other nodes' (replicate.go, failover.go); both nil
	// without replicas.
	repl *replicator
	held *held

	// ready is closed once the node knows the others and has settled its
	// restored sessions: a CONNECT before then waits for it (Claim).
	ready     chan struct{}
	readyOnce sync.Once

	// peers are the other nodes' addresses as registered. They reach the
	// transport only once this run has registered (meshOpen): before
	// then the others' records of this node are an earlier run's, and a
	// stream between them and this run would let this run answer for
	// that one (a hand-over with nothing to hand, messages forwarded to
	// subscribers it does not have), which a run that lost its store
	// must never do.
	peerMu   sync.Mutex
	peers    map[string]string
	meshOpen bool

	// calls are the mesh calls served for other parts of the gateway
	// (Cluster.Handle), by method; written only before Bind.
	calls map[string]CallHandler
}

// CallHandler answers a mesh call another node (from) made.
type CallHandler func(from string, arg []byte) ([]byte, error)

// NodeOptions configure a Node made with NewNode.
type NodeOptions struct {
	// Registry configures the node's registry; Node is the node's name,
	// and OnEvent is the node's own.
	Registry registry.Options
	// Transport carries messages between nodes.
	Transport Transport
	// Logger receives the node's logs; nil discards them.
	Logger *slog.Logger
}

// NewNode returns a node over o.Transport with its registry made but not
// started: pass it as broker.Options.Cluster, then Bind it to the broker.
func NewNode(o NodeOptions) (*Node, error) {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	n := &Node{self: o.Registry.Node, tr: o.Transport, log: log}
	if err := n.init(o.Registry); err != nil {
		return nil, err
	}
	return n, nil
}

// init makes the node's registry, its events going to the node. Writes
// (the subscriptions the broker restores while it is made) queue until the
// registry starts.
func (n *Node) init(ro registry.Options) error {
	n.claimed = map[string]int64{}
	n.claiming = map[string]int{}
	n.adopting = map[string]struct{}{}
	n.unconfirmed = map[string]int64{}
	n.parked = map[string]map[string]struct{}{}
	n.movedOff = map[string]map[string]time.Time{}
	n.parkedMembers = map[string]map[broker.RemoteMember]struct{}{}
	n.peers = map[string]string{}
	n.ready = make(chan struct{})
	n.wills = newWills(n)
	ro.OnEvent = n.HandleEvent
	reg, err := registry.New(ro)
	if err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	n.reg = reg
	return nil
}

// Registry returns the node's registry.
func (n *Node) Registry() *registry.Registry { return n.reg }

// Bind gives the node the broker it serves and starts the registry; wait
// on Registry().Ready before serving clients. Call it once.
func (n *Node) Bind(srv broker.ClusterInbound) error {
	if err := n.bind(srv); err != nil {
		return err
	}
	if err := n.reg.Start(); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	go func() {
		<-n.reg.Ready()
		n.openMesh()
		n.markReady()
	}()
	return nil
}

// markReady lets CONNECTs through Claim.
func (n *Node) markReady() { n.readyOnce.Do(func() { close(n.ready) }) }

// setPeer records node's address ("" once it left), and passes it to the
// transport once the mesh is open.
func (n *Node) setPeer(node, addr string) {
	n.peerMu.Lock()
	defer n.peerMu.Unlock()
	if addr == "" {
		delete(n.peers, node)
	} else {
		n.peers[node] = addr
	}
	if n.meshOpen {
		n.tr.SetPeer(node, addr)
	}
}

// openMesh lets this node reach the others and be reached by them: call
// it once this run has registered (the registry is Ready).
func (n *Node) openMesh() {
	n.peerMu.Lock()
	defer n.peerMu.Unlock()
	if n.meshOpen {
		return
	}
	n.meshOpen = true
	for node, addr := range n.peers {
		n.tr.SetPeer(node, addr)
	}
}

func (n *Node) bind(srv broker.ClusterInbound) error {
	if n.srv != nil {
		return errors.New("cluster: already bound to a broker")
	}
	n.srv = srv
	// The sessions restored from the store keep their ownership records
	// through the registration that ends the previous run's lease.
	var restored []string
	for _, c := range srv.Clients() {
		restored = append(restored, c.ClientID)
	}
	n.reg.KeepRestored(restored)
	if n.repl != nil {
		snap := srv.ReplicaSnapshot
		n.repl.run = n.reg.Epoch()
		n.repl.snapshot.Store(&snap)
	}
	return nil
}

// CallTransport is a Transport that carries calls: requests that need an
// answer, such as a batch of replica writes.
type CallTransport interface {
	Transport
	Call(ctx context.Context, node, method string, arg []byte) ([]byte, error)
}

// errNoCalls is the error of a call over a transport that has none.
var errNoCalls = errors.New("cluster: the transport carries no calls")

// call makes a call to node, if the transport carries calls.
func (n *Node) call(ctx context.Context, node, method string, arg []byte) ([]byte, error) {
	if t, ok := n.tr.(CallTransport); ok {
		return t.Call(ctx, node, method, arg)
	}
	return nil, errNoCalls
}

// useReplicas makes local the store under the returned one, which sends
// every persistent session's writes to its replicas, and keeps the
// replicas of other nodes' sessions here. Call it before Bind.
func (n *Node) useReplicas(local broker.Store, o ReplicaOptions) broker.Store {
	n.repl = newReplicator(local, o.Count, n.self, n.log.With("part", "replicas"))
	n.repl.call = n.call
	n.repl.available = n.tr.Available
	n.held = newHeld(n, o)
	return n.repl
}

// Forward implements broker.Cluster.
func (n *Node) Forward(node string, m *broker.Message) { n.tr.Forward(node, m) }

// Deliver implements broker.Cluster.
func (n *Node) Deliver(to broker.RemoteMember, m *broker.Message, done func(error)) {
	n.tr.Deliver(to, m, done)
}

// View implements broker.Cluster: the etcd revision up to which the
// registry's events have reached the broker. Revisions are the line's
// one clock, so another node compares it with its own claims' revisions.
func (n *Node) View() uint64 {
	return uint64(max(n.reg.Revision(), n.viewFloor.Load(), 0))
}

// CatchUp implements broker.ClusterCatchUp: it reads etcd's current
// revision (a linearizable read) and waits until the registry has handed
// the broker every event up to it.
func (n *Node) CatchUp(ctx context.Context) error {
	rev, err := n.reg.CurrentRevision(ctx)
	if err != nil {
		return err
	}
	return n.reg.AwaitRevision(ctx, rev)
}

// Interface guard: without CatchUp, a gateway that was stopped would write
// to its clients before learning which of their sessions it lost.
var _ broker.ClusterCatchUp = (*Node)(nil)

// Available implements broker.Cluster: the node is registered and its
// transport can take deliveries.
func (n *Node) Available(node string) bool { return n.tr.Available(node) }

// Subscribed implements broker.Cluster: a member of a share group or an
// ordinary filter is registered; the SUBACK waits for the write.
func (n *Node) Subscribed(clientID, filter string, qos byte) broker.Registration {
	group, tf, shared, err := topic.ParseShare(filter)
	switch {
	case err != nil:
		return nil
	case shared:
		return n.reg.AddMember(group, tf, clientID, qos)
	default:
		return n.reg.AddRoute(filter)
	}
}

// Unsubscribed implements broker.Cluster.
func (n *Node) Unsubscribed(clientID, filter string) broker.Registration {
	group, tf, shared, err := topic.ParseShare(filter)
	switch {
	case err != nil:
		return nil
	case shared:
		return n.reg.RemoveMember(group, tf, clientID)
	default:
		return routeRemoval{n.reg.RemoveRoute(filter)}
	}
}

// routeRemoval is the Registration of a route's removal. It does not
// wait for the registrar when made: Unsubscribed runs inside the
// registry's own event handlers (a session let go removes its routes),
// and a handler waiting for the registrar stalls the registrar waiting
// for the watcher. A route this node never counted (a restored
// session's) is nothing to wait for, so ErrNotHeld completes it.
type routeRemoval struct{ w *registry.Write }

// Wait implements broker.Registration.
func (r routeRemoval) Wait(ctx context.Context) error {
	if err := r.w.Wait(ctx); err != nil && !errors.Is(err, registry.ErrNotHeld) {
		return err
	}
	return nil
}

// Claim implements broker.Cluster: this node becomes the owner of the
// client's session. A client resuming (clean start = false) a session
// another node holds gets it handed across first: its state is stored
// here before the claim is written, so that a failure between the two
// loses nothing (the old node keeps its records until it sees the claim).
// If the old node cannot hand it over, the CONNECT is refused (0x88)
// rather than served an empty session.
//
// The connection's will is recorded in the same transaction as the claim
// (see wills.go); the reference returned is its record.
func (n *Node) Claim(ctx context.Context, clientID string, cleanStart bool, will *broker.Will) (string, error) {
	select {
	case <-n.ready:
	case <-ctx.Done():
		// The listeners accept before the node is ready, so that a
		// CONNECT is answered (0x88, try again) rather than left
		// waiting in the kernel's backlog for as long as the start takes.
		return "", errNotReady
	}
	ref := ""
	if will != nil {
		var err error
		if ref, err = n.wills.record(will); err != nil {
			return "", err
		}
	}
	for attempt := 1; ; attempt++ {
		err := n.claim(ctx, clientID, cleanStart, ref)
		if !errors.Is(err, registry.ErrOwned) || attempt == maxResumeAttempts || ctx.Err() != nil {
			return ref, err
		}
		// Another node claimed the client while this one looked (it
		// adopted the session from a replica, or the client resumed
		// there): that node has the session now, and hands it over.
	}
}

// maxResumeAttempts bounds how often a resuming CONNECT looks for its
// session again after another node claimed it meanwhile.
const maxResumeAttempts = 3

// claim is Claim once the will's record is made.
func (n *Node) claim(ctx context.Context, clientID string, cleanStart bool, will string) error {
	n.startClaim(clientID)
	defer n.endClaim(clientID)
	adopted := false
	o, ok := n.reg.SessionOwner(clientID)
	if !cleanStart {
		// The copy may not show yet a claim another node made a moment
		// ago; claiming on its word would take the session over empty.
		// One read from etcd settles it (when etcd answers).
		if lo, lok, rev, err := n.reg.LookupSessionAt(ctx, clientID); err == nil {
			o, ok = lo, lok
			if !ok && n.held != nil {
				// Nobody owns it in etcd: perhaps its owner's lease has
				// just ended (a gateway stopping for an update, or dead),
				// which this copy may not have delivered yet. Once it
				// has, the fail-over that adopts the session is known
				// below (held.pending) rather than missed, and the
				// session not started empty (TestRollingUpgrade saw a
				// member resume with Session Present 0 so once in CI).
				wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				n.reg.AwaitRevision(wctx, rev)
				cancel()
			}
		}
	}
	if !ok && !cleanStart && n.held != nil && n.held.pending() {
		// A gateway is gone and its sessions are being adopted from their
		// replicas: this one may be among them. Claimed now, it would
		// start empty.
		if err := n.held.waitFailovers(ctx); err != nil {
			return fmt.Errorf("cluster: waiting for a gone gateway's sessions to be adopted: %w", err)
		}
		if lo, lok, err := n.reg.LookupSession(ctx, clientID); err == nil {
			o, ok = lo, lok
		}
	}
	if ok && o.Node != n.self && !cleanStart {
		st, err := n.tr.HandOver(ctx, o.Node, clientID)
		if err != nil {
			return fmt.Errorf("cluster: handing the session over from %s: %w", o.Node, err)
		}
		if st != nil {
			if err := n.srv.Adopt(st); err != nil {
				n.srv.Drop(clientID, "")
				return fmt.Errorf("cluster: storing the session handed over from %s: %w", o.Node, err)
			}
			adopted = true
		}
	}
	claimConnection := n.reg.ClaimConnection
	switch {
	case adopted:
		// Only over the record of the node that handed it over.
		from := o
		claimConnection = func(ctx context.Context, client, will string) (registry.Claim, error) {
			return n.reg.ResumeHandedOver(ctx, client, will, from)
		}
	case !cleanStart:
		// Only over the record looked at (or this node's own): one another
		// node wrote since is its session, to be handed over (ErrOwned:
		// Claim asks again).
		seen := o
		if !ok {
			seen = registry.Owner{}
		}
		claimConnection = func(ctx context.Context, client, will string) (registry.Claim, error) {
			return n.reg.ResumeConnection(ctx, client, will, seen)
		}
	}
	claim, err := claimConnection(ctx, clientID, will)
	if err == nil {
		n.setClaimed(clientID, claim.Revision)
		n.wills.claimed(clientID, will)
		n.confirmed(clientID)
	}
	if err != nil && adopted && ctx.Err() == nil {
		// Another node claimed the client meanwhile: the state stays with
		// the node that handed it over, which gives it again to whoever
		// wins.
		n.srv.Drop(clientID, "")
	}
	if err != nil && ctx.Err() != nil {
		// etcd did not answer in time (an election, a partition, a
		// starved machine). Serving the client from the last copy would
		// leave any other copy of its session (a restarted node's restored
		// one) a member of its groups, taking the client's share of
		// messages that are acknowledged and never delivered: the CONNECT
		// is refused (0x88) and the client tries again.
		//
		// A copy handed over is kept, though, and so is its claim, once
		// sent (ResumeHandedOver): the node that handed the session over
		// lets go of its own copy as soon as it sees the claim (fault-suite
		// seeds 2 and 12 lost 600 and 724 messages when this copy was
		// dropped and the claim undone). The record decides (HandleEvent):
		// naming this node, the copy is the session; naming another (the
		// claim was not sent, or lost to another), the copy goes, and what
		// it took meanwhile with it to that node.
		if adopted && n.unconfirm(clientID, o.Revision) {
			n.srv.ConfirmAdopted(clientID) // written already: the record came first
		} else if adopted {
			n.log.Warn("session handed over, its claim not confirmed by etcd in time: kept until the line's record says whose it is", "client", clientID, "from", o.Node)
		}
		n.log.Warn("session not claimed: etcd did not answer in time; CONNECT refused", "client", clientID, "err", err)
		return fmt.Errorf("cluster: claiming the session: etcd did not answer in time: %w", err)
	}
	return err
}

// unconfirm notes that client's session, handed over here under the
// ownership record of revision rev, is kept without a confirmed claim. It
// reports true, noting nothing, when a later record naming this node has
// been seen already: the claim was written.
func (n *Node) unconfirm(client string, rev int64) bool {
	n.claimMu.Lock()
	defer n.claimMu.Unlock()
	if n.claimed[client] > rev {
		return true
	}
	n.unconfirmed[client] = rev
	return false
}

// confirmed forgets that client's session was unconfirmed: it is claimed
// here, or handed on.
func (n *Node) confirmed(client string) {
	n.claimMu.Lock()
	delete(n.unconfirmed, client)
	n.claimMu.Unlock()
}

// settleUnconfirmed says what a record of client's ownership means for
// a copy kept unconfirmed here: mine when the record names this node (the
// claim was written after all), gone when it names another node and is
// later than the record the copy was handed over under. It reports
// whether there was such a copy that the record settles.
func (n *Node) settleUnconfirmed(ev registry.Event) (mine, gone bool) {
	n.claimMu.Lock()
	defer n.claimMu.Unlock()
	rev, ok := n.unconfirmed[ev.Client]
	switch {
	case !ok || ev.Owner.Revision <= rev:
		return false, false
	case ev.Owner.Node == n.self:
		delete(n.unconfirmed, ev.Client)
		return true, false
	default:
		delete(n.unconfirmed, ev.Client)
		return false, true
	}
}

// errNotReady refuses a CONNECT that came before the node was ready.
var errNotReady = errors.New("cluster: this gateway is still joining its line")

// Reconcile settles the sessions the broker restored from its store with
// what the registry says once it is loaded: a session another node owns
// now (its client moved while this node was down) is let go (letGoMoved),
// and every other one is claimed, so that a client resuming it elsewhere
// is handed it from here. A record naming this node is claimed again too:
// it is the previous run's, which goes with that run's lease (revoked as
// this run registers, or expiring), and a session held here without a
// claim of this run's would stay a member of its groups after its client
// resumed elsewhere. Call it once the registry is Ready.
func (n *Node) Reconcile(ctx context.Context) {
	n.letGoMoved()
	// Claims go many at a time: the registrar commits them in batches,
	// so thousands of restored sessions cost a few round trips to etcd.
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for _, c := range n.srv.Clients() {
		if c.Connected {
			continue // its connection claimed it
		}
		if o, owned := n.reg.SessionOwner(c.ClientID); owned && o.Node != n.self {
			continue // let go; claimed elsewhere since
		}
		sem <- struct{}{}
		wg.Add(1)
		n.startClaim(c.ClientID)
		go func(id string) {
			defer func() { <-sem; wg.Done(); n.endClaim(id) }()
			claim, err := n.reg.ClaimSession(ctx, id)
			if err != nil {
				n.log.Warn("claiming a restored session", "client", id, "err", err)
				return
			}
			n.setClaimed(id, claim.Revision)
		}(c.ClientID)
	}
	wg.Wait()
}

// letGoMoved lets go of the restored sessions that another node owns now.
// It runs before this node opens its streams to the others too: a forward
// they kept for it while it was away must not find such a session still
// here, to be dropped with it.
func (n *Node) letGoMoved() {
	for _, c := range n.srv.Clients() {
		if c.Connected {
			continue // its connection claimed it
		}
		o, owned := n.reg.SessionOwner(c.ClientID)
		switch {
		case owned && o.Node != n.self && o.ReplicaOf == n.self:
			// Adopted from its replica while this node was gone. The
			// replica has what this node acknowledged while it could be
			// reached, but not what it acknowledged on its own commit
			// while it could not (ReplicaStats.Unreplicated), and which that was is
			// not known after a restart: everything queued goes on to the
			// owner with DUP, as letGoAdopted does for the same event.
			n.log.Info("letting go of a restored session the line adopted from its replica", "client", c.ClientID, "owner", o.Node, "queued", c.Queued)
			n.srv.DropReplicated(c.ClientID, n.replicatedUpTo(c.ClientID), o.Node)
		case owned && o.Node != n.self:
			// Its client moved while this node was down: forwards the
			// others kept for it here follow it (LetGoTo).
			n.log.Info("letting go of a restored session another node owns now", "client", c.ClientID, "owner", o.Node, "queued", c.Queued)
			n.srv.LetGoTo(c.ClientID, o.Node, uint64(max(o.Revision, 0)))
		}
	}
}

// Retain implements broker.Cluster: the message goes to every other node
// of the registry but those in skip.
func (n *Node) Retain(m *broker.Message, skip []string) {
	for _, node := range n.reg.Nodes() {
		if node.Name != n.self && !slices.Contains(skip, node.Name) {
			n.tr.Retain(node.Name, m)
		}
	}
}

// SyncRetained keeps this node's retained messages in step with the other
// nodes' until ctx ends: whenever another node becomes reachable (it
// joined, this node started, a partition healed), its snapshot is merged
// here, the later write of each topic winning. Each side pulls from the
// other, so both end up with the union.
func (n *Node) SyncRetained(ctx context.Context, every time.Duration) {
	synced := map[string]bool{}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		seen := map[string]bool{}
		for _, node := range n.reg.Nodes() {
			name := node.Name
			if name == n.self {
				continue
			}
			seen[name] = true
			if !n.tr.Available(name) {
				synced[name] = false
				continue
			}
			if synced[name] {
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			ms, err := n.tr.RetainedSnapshot(cctx, name)
			cancel()
			if err != nil {
				n.log.Warn("pulling the retained messages of a node", "node", name, "err", err)
				continue // again at the next tick
			}
			kept := n.srv.MergeRetained(ms)
			synced[name] = true
			n.log.Info("retained messages merged from a node", "node", name, "received", len(ms), "kept", kept)
		}
		for name := range synced {
			if !seen[name] {
				delete(synced, name)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// appendRetained encodes a retained snapshot: each message's binary form
// behind its length.
func appendRetained(dst []byte, ms []*broker.Message) []byte {
	var body []byte
	for _, m := range ms {
		body = m.AppendBinary(body[:0])
		dst = binary.AppendUvarint(dst, uint64(len(body)))
		dst = append(dst, body...)
	}
	return dst
}

// parseRetained decodes what appendRetained made.
func parseRetained(b []byte) ([]*broker.Message, error) {
	var out []*broker.Message
	for len(b) > 0 {
		l, n := binary.Uvarint(b)
		if n <= 0 || l > uint64(len(b)-n) {
			return nil, errors.New("cluster: malformed retained snapshot")
		}
		m, err := broker.UnmarshalMessage(b[n : n+int(l)])
		if err != nil {
			return nil, fmt.Errorf("cluster: retained snapshot: %w", err)
		}
		out = append(out, m)
		b = b[n+int(l):]
	}
	return out, nil
}

// HandOver gives a session this node holds to node to, where its client
// is resuming it, in its binary form; nil when there is none here.
func (n *Node) HandOver(to, clientID string) []byte {
	n.awaitAdoption(clientID)
	st, ok := n.srv.HandOver(clientID, to)
	if !ok {
		return nil
	}
	n.confirmed(clientID) // handed on: the record will name to, or take it back
	return st.AppendBinary(nil)
}

// adoptionWait bounds how long a hand-over waits for an adoption of the
// same client under way here (awaitAdoption); the claimant's own bound on
// a CONNECT is 2 s.
const adoptionWait = time.Second

// awaitAdoption waits, at most adoptionWait, while the session of client
// is being adopted here from a replica: claimed, not yet installed.
// Answered in that moment, a hand-over would find no session here, and the
// client would start empty on the node that asked (TestClusterOwnerAndReplicaLost
// failed so once in CI: the client resumed on the survivor 13 ms before
// the replica's node installed the session it had claimed, and its 500
// messages went with the copy that then lost).
func (n *Node) awaitAdoption(client string) {
	pollUntil(adoptionWait, func() bool {
		n.claimMu.Lock()
		defer n.claimMu.Unlock()
		_, busy := n.adopting[client]
		return !busy
	})
}

// pollUntil checks cond every 10 ms until it holds, at most d; it reports
// whether it held. For waits on state that changes without telling (the
// registry's revision, an adoption's end), rare and short.
func pollUntil(d time.Duration, cond func() bool) bool {
	if cond() {
		return true
	}
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			if cond() {
				return true
			}
		case <-deadline.C:
			return cond()
		}
	}
}

// Release implements broker.Cluster.
func (n *Node) Release(clientID string) {
	n.claimMu.Lock()
	delete(n.claimed, clientID)
	n.claimMu.Unlock()
	reg := n.reg
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := reg.ReleaseSession(ctx, clientID); err != nil {
			n.log.Debug("releasing a session", "client", clientID, "err", err)
		}
	}()
}

// TakeWill implements broker.Cluster (see wills.go).
func (n *Node) TakeWill(clientID, ref string) bool { return n.wills.take(clientID, ref) }

// DropWill implements broker.Cluster.
func (n *Node) DropWill(clientID, ref string) { n.wills.drop(clientID, ref) }

// KeepWills publishes the wills of the clients of nodes that die, until
// ctx ends; start it once the node is ready.
func (n *Node) KeepWills(ctx context.Context) { n.wills.run(ctx) }

// WillStats reports what this node did with dead nodes' clients' wills.
func (n *Node) WillStats() WillStats { return n.wills.stats() }

// HeardTransport is a Transport that knows when it last heard from each
// node (gateway/peer's pings): the wills of a dead node's clients count
// their delay from then. Without it, from when the node's death is seen.
type HeardTransport interface {
	Transport
	LastHeard(node string) time.Time
}

// lastHeard reports when node was last heard from, if the transport knows.
func (n *Node) lastHeard(node string) time.Time {
	if t, ok := n.tr.(HeardTransport); ok {
		return t.LastHeard(node)
	}
	return time.Time{}
}

// HandleEvent feeds the registry's events about other nodes into the
// broker and the transport. It is the registry's OnEvent.
func (n *Node) HandleEvent(ev registry.Event) {
	if ev.Node == n.self {
		if ev.Kind == registry.NodeJoined || ev.Kind == registry.NodeLeft {
			n.nodesChanged()
		}
		if ev.Kind == registry.NodeJoined {
			n.wills.leaseChanged() // perhaps back with a new lease: see wills.recheck
		}
		return // the broker holds its own members and routes itself
	}
	switch ev.Kind {
	case registry.NodeJoined, registry.NodeUpdated:
		if ev.Kind == registry.NodeUpdated {
			// Perhaps a new run: the previous one's clients' wills are due.
			n.wills.left(ev.Node, n.lastHeard(ev.Node))
		}
		n.setPeer(ev.Node, ev.NodeInfo.Addr)
		n.nodesChanged()
		if ev.Kind == registry.NodeJoined {
			n.unparkLater(ev.Node)
			if n.held != nil {
				n.held.joined(ev.Node, ev.NodeInfo.Store)
			}
		}
	case registry.NodeLeft:
		n.wills.left(ev.Node, n.lastHeard(ev.Node)) // before its link goes
		n.setPeer(ev.Node, "")
		n.nodesChanged()
		if n.held != nil {
			n.held.left(ev.Node, ev.NodeInfo.Store)
		}
	case registry.RouteAdded:
		n.unpark(ev.Node, ev.Filter)
		n.srv.SetRemoteRoute(ev.Node, ev.Filter, true)
	case registry.RouteRemoved:
		if !n.registered(ev.Node) {
			// Gone with the node's lease (stopped, killed, cut off), not
			// unsubscribed: its persistent subscribers are still its
			// own, so QoS 1 and 2 messages for them keep going to its
			// outbox here until it is back (broker/outbox.go).
			n.park(ev.Node, ev.Filter)
			return
		}
		n.unpark(ev.Node, ev.Filter)
		n.srv.SetRemoteRoute(ev.Node, ev.Filter, false)
	case registry.MemberJoined, registry.MemberUpdated:
		n.unparkMember(remoteMember(ev))
		n.srv.SetRemoteMember(remoteMember(ev), true)
	case registry.MemberLeft:
		if n.held != nil && !n.registered(ev.Node) {
			// Gone with the node's lease: its member's session is about
			// to be adopted from its replica, and its adopter's
			// registration takes this one's place. Until then it stays:
			// a group whose members were all on that node would have
			// none here, and a publish matching ordinary subscribers
			// too would be acknowledged for a group that got nothing
			// (fault-suite seed 40). Picked meanwhile, it is passed
			// over (its node is unavailable): another member takes the
			// message, or the publisher is told 0x97.
			n.parkMember(remoteMember(ev))
			return
		}
		n.unparkMember(remoteMember(ev))
		n.srv.SetRemoteMember(remoteMember(ev), false)
	case registry.SessionOwned:
		if from := ev.Prev.Node; from != "" && from != ev.Owner.Node && ev.Owner.Node != "" {
			n.noteMovedOff(from, ev.Client)
		}
		switch mine, gone := n.settleUnconfirmed(ev); {
		case mine:
			n.log.Info("the claim of a session kept unconfirmed was written: the session is this node's", "client", ev.Client)
			n.srv.ConfirmAdopted(ev.Client)
		case gone:
			// Resumed elsewhere (or where it was handed over from): the
			// copy goes, and what it took since its adoption goes on to
			// the owner (share-group messages to the other members).
			// lost() forgets this node's claim as for any loss (only if
			// the event is behind it), and Evict then settles the rest
			// this node keeps of the client (a redirect, a hand-over's
			// records).
			n.lost(ev)
			n.log.Info("letting go of a session kept unconfirmed: its client resumed on another node", "client", ev.Client, "owner", ev.Owner.Node)
			n.srv.Drop(ev.Client, ev.Owner.Node)
			n.srv.Evict(ev.Client)
			return
		}
		if !n.lost(ev) {
			break
		}
		if ev.Owner.ReplicaOf == n.self && n.repl != nil {
			n.letGoAdopted(ev)
			break
		}
		n.srv.Evict(ev.Client) // another node took the client over
	}
}

// letGoAdopted lets go of a session the line adopted elsewhere from its
// replica while this node was taken for dead: what the replica has goes
// with that copy, and only what this node took alone is handed on.
//
// The node's view is raised to the adoption's revision first. The adopted
// session passes over forwards from here routed by a view older than its
// claim, taking them for messages this node delivered itself (deliverLocked);
// but from this moment the session is not here, so a message published
// here now goes to the adopter alone. Routed by the registry's revision,
// which moves only once every event of a re-read has been handled, such a
// message carried the older view and was passed over there too: lost
// (fault-suite seeds 7 and 13, one message each, published on a gateway
// just back from a cut while it let go of its ordinary subscriber's
// session). A message routed in the instant before the session ends may
// now reach the client twice, the cost the forward's view accepts
// (forwardRemote).
func (n *Node) letGoAdopted(ev registry.Event) {
	for {
		cur := n.viewFloor.Load()
		if ev.Revision <= cur || n.viewFloor.CompareAndSwap(cur, ev.Revision) {
			break
		}
	}
	n.srv.DropReplicated(ev.Client, n.replicatedUpTo(ev.Client), ev.Owner.Node)
}

// replicatedUpTo is the highest message seq of client that this run knows
// its replicas have durably: 0 after a restart, or without replicas.
func (n *Node) replicatedUpTo(client string) uint64 {
	if n.repl == nil {
		return 0
	}
	return n.repl.replicated(client)
}

// movedOffKeep is how long a session's move off a node is remembered:
// past the node's lease and the longest wait for its fail-over to end
// (failoverFallback), the time in which what was kept for the node can
// still be routed again.
const movedOffKeep = 2 * time.Minute

// maxMovedOff bounds the moves remembered per node; past it, moves older
// than movedOffKeep are forgotten first, then new ones are not noted.
const maxMovedOff = 4096

// noteMovedOff remembers that client's session left node from.
func (n *Node) noteMovedOff(from, client string) {
	now := time.Now()
	n.movedMu.Lock()
	defer n.movedMu.Unlock()
	m := n.movedOff[from]
	if m == nil {
		m = map[string]time.Time{}
		n.movedOff[from] = m
	}
	if _, ok := m[client]; !ok && len(m) >= maxMovedOff {
		for c, at := range m {
			if now.Sub(at) > movedOffKeep {
				delete(m, c)
			}
		}
		if len(m) >= maxMovedOff {
			return
		}
	}
	m[client] = now
}

// movedOffSince returns, and forgets, the sessions that left node within
// movedOffKeep, each with the node that owns it now. A gateway routes a
// message for a node's ordinary subscribers by its view, which may still
// show a session there that has just been handed over elsewhere; kept for
// that node when it fails, such a message went by name only to the
// sessions adopted from its replicas, and the session that had left by
// hand-over a moment before never got it (fault suite, seed 2: 7
// messages lost, the session handed over 20 ms before its gateway was cut
// off). Given to the moved session too, it arrives with DUP, and once
// more where the session had it already.
func (n *Node) movedOffSince(node string) map[string]string {
	n.movedMu.Lock()
	m := n.movedOff[node]
	delete(n.movedOff, node)
	n.movedMu.Unlock()
	out := map[string]string{}
	for client, at := range m {
		if time.Since(at) > movedOffKeep {
			continue
		}
		if o, owned := n.reg.SessionOwner(client); owned && o.Node != node && o.Node != "" {
			out[client] = o.Node
		}
	}
	return out
}

// setClaimed records this node's latest ownership record of client.
func (n *Node) setClaimed(client string, rev int64) {
	n.claimMu.Lock()
	if rev > n.claimed[client] {
		n.claimed[client] = rev
	}
	n.claimMu.Unlock()
}

// startClaim and endClaim bracket a claim of client made here.
func (n *Node) startClaim(client string) {
	n.claimMu.Lock()
	n.claiming[client]++
	n.claimMu.Unlock()
}

func (n *Node) endClaim(client string) {
	n.claimMu.Lock()
	if n.claiming[client]--; n.claiming[client] <= 0 {
		delete(n.claiming, client)
	}
	n.claimMu.Unlock()
}

// startAdoption and endAdoption bracket the adoption here of client's
// session from a replica, from its claim to its install: a claim
// (startClaim) that a hand-over asked meanwhile waits out (awaitAdoption).
func (n *Node) startAdoption(client string) {
	n.startClaim(client)
	n.claimMu.Lock()
	n.adopting[client] = struct{}{}
	n.claimMu.Unlock()
}

func (n *Node) endAdoption(client string) {
	n.claimMu.Lock()
	delete(n.adopting, client)
	n.claimMu.Unlock()
	n.endClaim(client)
}

// lost reports whether a SessionOwned event by another node means this
// node no longer owns the client: the new record is later than this
// node's own claim. Its predecessor alone does not tell: when this node's
// record went with its lease (it was cut off from etcd for longer than the
// TTL) and another node claimed the client afterwards, the new record
// names no predecessor, yet this node may still have the client connected.
// A claim older than this node's own is one this node took over from.
//
// With no claim of this run's (a restored session whose claim failed, a
// session handed over from here), another node's record means the client
// is served there: whatever this node holds of it goes, unless a claim is
// under way here, which takes over from that very record.
func (n *Node) lost(ev registry.Event) bool {
	n.claimMu.Lock()
	defer n.claimMu.Unlock()
	if ev.Owner.Node == n.self {
		n.claimed[ev.Client] = max(n.claimed[ev.Client], ev.Owner.Revision)
		return false
	}
	mine, ok := n.claimed[ev.Client]
	if ev.Prev.Node == n.self || (ok && ev.Owner.Revision > mine) || (!ok && n.claiming[ev.Client] == 0) {
		delete(n.claimed, ev.Client)
		return true
	}
	return false
}

// registered reports whether node is registered in the copy now.
func (n *Node) registered(node string) bool {
	return slices.ContainsFunc(n.reg.Nodes(), func(r registry.Node) bool { return r.Name == node })
}

// park keeps a departed node's route in the broker.
func (n *Node) park(node, filter string) {
	n.parkMu.Lock()
	defer n.parkMu.Unlock()
	if n.parked[node] == nil {
		n.parked[node] = map[string]struct{}{}
	}
	n.parked[node][filter] = struct{}{}
}

// unpark forgets that a route was parked.
func (n *Node) unpark(node, filter string) {
	n.parkMu.Lock()
	defer n.parkMu.Unlock()
	delete(n.parked[node], filter)
}

// parkMember keeps a departed node's share-group member in its group.
func (n *Node) parkMember(rm broker.RemoteMember) {
	rm.QoS = 0 // the key is the membership, whatever its QoS
	n.parkMu.Lock()
	defer n.parkMu.Unlock()
	if n.parkedMembers[rm.Node] == nil {
		n.parkedMembers[rm.Node] = map[broker.RemoteMember]struct{}{}
	}
	n.parkedMembers[rm.Node][rm] = struct{}{}
}

// unparkMember forgets that a member was parked.
func (n *Node) unparkMember(rm broker.RemoteMember) {
	rm.QoS = 0
	n.parkMu.Lock()
	defer n.parkMu.Unlock()
	delete(n.parkedMembers[rm.Node], rm)
}

// dropParkedMembers takes node's parked members out of their groups,
// where no other node's registration has replaced them: the line has
// failed node's sessions over, and a member that no adopter registered
// had no session left to adopt. With still, only those node has not
// registered again (it is back).
func (n *Node) dropParkedMembers(node string, still func(broker.RemoteMember) bool) {
	n.parkMu.Lock()
	parked := n.parkedMembers[node]
	delete(n.parkedMembers, node)
	n.parkMu.Unlock()
	for rm := range parked {
		if still == nil || !still(rm) {
			n.srv.SetRemoteMember(rm, false) // only while the group's entry is still node's
		}
	}
}

// unparkWait is how long after a node's return its parked routes that it
// has not registered again are removed: long enough for a registration in
// several transactions to be complete.
const unparkWait = 10 * time.Second

// unparkLater removes, unparkWait after node's return, the routes parked
// for it that it did not register again (its subscriber went while it was
// away), unless it has left again meanwhile.
func (n *Node) unparkLater(node string) {
	n.parkMu.Lock()
	has := len(n.parked[node]) > 0 || len(n.parkedMembers[node]) > 0
	n.parkMu.Unlock()
	if !has {
		return
	}
	time.AfterFunc(unparkWait, func() {
		if !n.registered(node) {
			return
		}
		n.dropParkedMembers(node, func(rm broker.RemoteMember) bool {
			return slices.ContainsFunc(n.reg.Members(rm.Group, rm.Filter), func(m registry.Member) bool {
				return m.Node == node && m.Client == rm.ClientID
			})
		})
		now := n.reg.Routes(node)
		n.parkMu.Lock()
		var stale []string
		for f := range n.parked[node] {
			if !slices.Contains(now, f) {
				stale = append(stale, f)
			}
		}
		delete(n.parked, node)
		n.parkMu.Unlock()
		for _, f := range stale {
			n.srv.SetRemoteRoute(node, f, false)
		}
	})
}

// nodesChanged tells onNodes and the replicas the registered nodes.
func (n *Node) nodesChanged() {
	nodes := n.reg.Nodes()
	if n.onNodes != nil {
		n.onNodes(nodes)
	}
	if n.repl != nil {
		names := make([]string, 0, len(nodes))
		for _, r := range nodes {
			names = append(names, r.Name)
		}
		n.repl.setPeers(names)
	}
}

func remoteMember(ev registry.Event) broker.RemoteMember {
	return broker.RemoteMember{Node: ev.Node, Group: ev.Group, Filter: ev.Filter, ClientID: ev.Client, QoS: ev.Member.QoS}
}
