package peer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/linemq/linemq/broker"
)

// Errors. Those Send and Deliver return at once, and those a Deliver's done
// receives for a delivery that did not reach its client, all mean the same
// to the share-group pick: pass the member over and take the next. Only
// ErrTimeout and ErrBroken leave it open whether the other node got it.
var (
	// ErrUnknownPeer: the node is not among the peers given to SetPeers.
	ErrUnknownPeer = errors.New("peer: unknown node")
	// ErrUnavailable: the peer has no working stream or its breaker is
	// not closed.
	ErrUnavailable = errors.New("peer: node unavailable")
	// ErrQueueFull: the peer's queue (MaxQueued) or its window of
	// deliveries awaiting an answer (MaxInFlight) is full.
	ErrQueueFull = errors.New("peer: queue full")
	// ErrTimeout: no answer within DeliverTimeout. The other node may
	// still have delivered the message.
	ErrTimeout = errors.New("peer: no answer in time")
	// ErrBroken: the stream ended before the answer came (the peer shut
	// down, died, was removed, or the connection broke). The other node
	// may have delivered the message.
	ErrBroken = errors.New("peer: stream broken")
	// ErrNotHere: the other node answered that the client is not there
	// (it left the group, or its session moved).
	ErrNotHere = errors.New("peer: client not here")
	// ErrClosed: the Mesh is closed.
	ErrClosed = errors.New("peer: closed")
	// ErrExpired: the other node received the delivery too late to
	// answer it within DeliverTimeout (it was stopped, or far behind)
	// and did not deliver it. Unlike ErrTimeout, it is certain the
	// message did not reach the client there.
	ErrExpired = errors.New("peer: expired before the other node could deliver it")
)

// RemoteError is the other node's own error for a directed delivery: it
// has the client but could not take the message.
type RemoteError struct {
	Node string // the node that answered
	Msg  string // its error's text
}

// Error names the node and gives its text.
func (e *RemoteError) Error() string { return "peer: " + e.Node + ": " + e.Msg }

// Target is the client of a directed delivery: one member of one share
// group on the receiving node.
type Target struct {
	Group  string // the share name, without "$share/"
	Filter string // the group's topic filter
	Client string // the member's client id
}

// Handler receives what peers send. Its methods are called on the stream's
// reader goroutine, one record at a time in the order the peer sent them,
// so they must not block: a node whose reader is stuck looks hung to its
// peer (its pongs stop) and is passed over.
type Handler interface {
	// Forward hands over a message for this node's ordinary subscribers
	// only: it must never pick from a share group, nor be forwarded
	// again.
	Forward(from string, m *broker.Message)
	// Deliver hands over a message for one client of one share group,
	// delivered without matching its topic again. The handler calls
	// r.Done exactly once, on any goroutine, when it knows the outcome:
	// when the message is queued to the session (and synced if the
	// session is persistent), or the client is not here, or it failed.
	Deliver(from string, to Target, m *broker.Message, r Reply)
}

// Reply answers one directed delivery on the stream it came on. It is a
// small value; copy it freely.
type Reply struct {
	s   *session
	seq uint64
}

// Done sends the answer: err != nil reports an error (the sender gets a
// *RemoteError), otherwise accepted says whether the message was queued to
// the client (false: the client is not here). An answer for a stream that
// has ended since is dropped: the sender has already completed the
// delivery with ErrBroken.
func (r Reply) Done(accepted bool, err error) {
	if r.s == nil {
		return
	}
	rec := outRec{kind: kindAnswer, seq: r.seq, status: statusNotHere}
	switch {
	case err != nil:
		rec.status, rec.text = statusError, err.Error()
	case accepted:
		rec.status = statusAccepted
	}
	r.s.l.control(r.s, rec)
}

// expire answers that the delivery came too late and was not delivered.
func (r Reply) expire() {
	r.s.l.control(r.s, outRec{kind: kindAnswer, seq: r.seq, status: statusExpired})
}

// Mesh is this node's side of the node-to-node data path: one stream to
// each peer, a queue and a writer per peer, the directed deliveries
// awaiting their answers, and a circuit breaker per peer. Its methods may
// be called concurrently. See the package documentation for the model.
type Mesh struct {
	opts  Options
	hello Hello
	tr    Transport
	log   *slog.Logger

	// links is the current set of peers: replaced whole by SetPeers (under
	// mu), read without locks by the publish path.
	links atomic.Pointer[map[string]*link]

	mu      sync.Mutex // serialises SetPeers, Start and Close
	started bool
	closed  bool

	closeOnce sync.Once
	wg        sync.WaitGroup // every goroutine of the mesh's
}

// New makes a Mesh. It does nothing on the network until Start and
// SetPeers.
func New(o Options) (*Mesh, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	m := &Mesh{
		opts:  o,
		hello: Hello{Cluster: o.Cluster, Node: o.Node, Version: frameVersion},
		tr:    o.Transport,
		log:   o.Logger.With("node", o.Node),
	}
	m.links.Store(&map[string]*link{})
	return m, nil
}

// Start accepts peers' streams on l until Close. It returns at once.
func (m *Mesh) Start(l net.Listener) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.closed:
		return ErrClosed
	case m.started:
		return errors.New("peer: already started")
	}
	m.started = true
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		if err := m.tr.Serve(l, m.hello, m.accept); err != nil {
			m.log.Error("peer transport stopped serving", "err", err)
		}
	}()
	return nil
}

// SetPeers sets the nodes of the cluster, node name to transport address,
// as the registry lists them (this node's own entry is ignored). New peers
// are connected, a peer whose address changed is reconnected, and a peer
// no longer listed is disconnected: its pending deliveries complete with
// ErrBroken, and Send and Deliver to it fail with ErrUnknownPeer.
func (m *Mesh) SetPeers(peers map[string]string) {
	m.update(func(map[string]*link) map[string]string {
		next := make(map[string]string, len(peers))
		for name, addr := range peers {
			if addr != "" {
				next[name] = addr
			}
		}
		return next
	})
}

// SetPeer adds node at addr, or records its new addr, or (addr == "")
// removes it, as SetPeers does for the whole set: the registry's
// NodeJoined, NodeUpdated and NodeLeft events one at a time.
func (m *Mesh) SetPeer(node, addr string) {
	m.update(func(cur map[string]*link) map[string]string {
		next := make(map[string]string, len(cur)+1)
		for name, l := range cur {
			next[name] = l.address()
		}
		if addr == "" {
			delete(next, node)
		} else {
			next[node] = addr
		}
		return next
	})
}

// update replaces the set of peers with the one want derives from the
// current links. Links are made and their addresses set under m.mu, so
// concurrent updates apply in order; streams are ended after it, since
// ending one completes pending deliveries, whose callbacks may call back
// into the Mesh.
func (m *Mesh) update(want func(cur map[string]*link) map[string]string) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	cur := *m.links.Load()
	peers := want(cur)
	next := make(map[string]*link, len(peers))
	var stale []*session
	for name, addr := range peers {
		if name == m.opts.Node || name == "" {
			continue
		}
		if l := cur[name]; l != nil {
			if s := l.setAddr(addr); s != nil {
				stale = append(stale, s)
			}
			next[name] = l
			continue
		}
		next[name] = m.newLink(name, addr)
	}
	m.links.Store(&next)
	m.mu.Unlock()
	for _, s := range stale {
		s.l.end(s, fmt.Errorf("%w: address changed", ErrBroken))
	}
	for name, l := range cur {
		if next[name] == nil {
			l.close(fmt.Errorf("%w: node %s left the cluster", ErrBroken, name))
		}
	}
}

// Available reports whether peer can take traffic now: it has a stream
// that answered a ping and its breaker is closed. It is one map lookup
// and one atomic load, for the share-group pick to pass over the members
// of a peer that is down without waiting.
func (m *Mesh) Available(peer string) bool {
	l := (*m.links.Load())[peer]
	return l != nil && l.available()
}

// LastHeard returns when peer was last heard from: its last pong, or the
// start of its stream; zero if this node never had one with it. A peer
// that died did so within a ping interval of then.
func (m *Mesh) LastHeard(peer string) time.Time {
	l := (*m.links.Load())[peer]
	if l == nil {
		return time.Time{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lastPong.After(l.up) {
		return l.lastPong
	}
	return l.up
}

// Send queues m for peer's ordinary subscribers. It never blocks: it
// fails at once with ErrUnknownPeer, ErrUnavailable or ErrQueueFull. A
// queued forward has no answer; it is lost (and counted in
// PeerStats.Dropped) if the stream breaks before it is written.
func (m *Mesh) Send(peer string, msg *broker.Message) error {
	l := (*m.links.Load())[peer]
	if l == nil {
		return ErrUnknownPeer
	}
	return l.send(kindForward, msg)
}

// SendRetained queues a retained message (or the clear of one) for peer
// to keep, as Send does: best effort, never blocking. The peer's Handler
// gets it if it is a RetainHandler.
func (m *Mesh) SendRetained(peer string, msg *broker.Message) error {
	l := (*m.links.Load())[peer]
	if l == nil {
		return ErrUnknownPeer
	}
	return l.send(kindRetain, msg)
}

// RetainHandler is what a Handler may also implement to keep the retained
// messages peers publish (SendRetained). It is called on the stream's
// reader, like Forward, and must not block.
type RetainHandler interface {
	Retained(from string, m *broker.Message)
}

// Deliver queues msg for one client of one share group on peer, and
// calls done exactly once with the outcome: nil when the other node
// accepted it, ErrNotHere, a *RemoteError, ErrTimeout after
// DeliverTimeout, ErrBroken when the stream ends first, ErrClosed when the
// Mesh closes, or ctx's error when ctx ends first.
//
// It never blocks. When it returns an error (ErrUnknownPeer,
// ErrUnavailable, ErrQueueFull, or ctx's), nothing was queued and done is
// not called: the caller picks another member at once.
//
// done runs on one of the Mesh's goroutines (or, when the peer is removed
// or the Mesh closed, on the goroutine calling SetPeers or Close) and
// must not block; it may call Deliver again.
func (m *Mesh) Deliver(ctx context.Context, peer string, to Target, msg *broker.Message, done func(error)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	l := (*m.links.Load())[peer]
	if l == nil {
		return ErrUnknownPeer
	}
	return l.deliver(ctx, to, msg, done)
}

// Stats returns the figures of every peer, sorted by node name.
func (m *Mesh) Stats() []PeerStats {
	links := *m.links.Load()
	out := make([]PeerStats, 0, len(links))
	for _, l := range links {
		out = append(out, l.stats())
	}
	slices.SortFunc(out, func(a, b PeerStats) int { return cmp.Compare(a.Node, b.Node) })
	return out
}

// Close disconnects every peer (pending deliveries complete with
// ErrClosed), stops accepting, closes the transport, and returns once
// every goroutine of the Mesh has ended. It is safe to call more than
// once.
func (m *Mesh) Close() error {
	m.closeOnce.Do(func() {
		m.mu.Lock()
		m.closed = true
		cur := *m.links.Load()
		m.links.Store(&map[string]*link{})
		m.mu.Unlock()
		for _, l := range cur {
			l.close(ErrClosed)
		}
		m.tr.Close()
		m.wg.Wait()
	})
	return nil
}

// accept takes a stream a peer opened (the Transport's Acceptor).
func (m *Mesh) accept(remote Hello, s Stream) error {
	if remote.Cluster != m.hello.Cluster {
		return fmt.Errorf("node %s is of cluster %q, this one is %q", remote.Node, remote.Cluster, m.hello.Cluster)
	}
	l := (*m.links.Load())[remote.Node]
	switch {
	case l == nil:
		return fmt.Errorf("node %s is not a peer of %s", remote.Node, m.opts.Node)
	case l.dial:
		return fmt.Errorf("node %s dials %s, not the other way round", m.opts.Node, remote.Node)
	}
	_, err := l.attach(s, remote)
	return err
}
