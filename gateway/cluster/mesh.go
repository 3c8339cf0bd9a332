package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/gateway/peer"
)

// Mesh adapts gateway/peer's Mesh, the gRPC transport between nodes, to
// the glue's Transport.
type Mesh struct {
	m      *peer.Mesh
	counts deliveryCounts
}

var (
	_ Transport          = (*Mesh)(nil)
	_ peer.Handler       = meshHandler{}
	_ peer.Caller        = meshHandler{}
	_ peer.RetainHandler = meshHandler{}
)

// Forward implements Transport: best effort, counted by the mesh when it
// cannot be sent.
func (t *Mesh) Forward(node string, m *broker.Message) { _ = t.m.Send(node, m) }

// Deliver implements Transport: done is called once, also when the mesh
// refuses at once (queue full, peer unknown or unavailable). The outcome
// is counted per peer.
func (t *Mesh) Deliver(to broker.RemoteMember, m *broker.Message, done func(error)) {
	d := t.counts.of(to.Node)
	d.Sent.Add(1)
	counted := func(err error) {
		d.count(err)
		if errors.Is(err, peer.ErrTimeout) || errors.Is(err, peer.ErrBroken) {
			// The other node may have it: the copy picked next says DUP.
			err = fmt.Errorf("%w: %w", broker.ErrMaybeDelivered, err)
		}
		done(err)
	}
	err := t.m.Deliver(context.Background(), to.Node, peer.Target{Group: to.Group, Filter: to.Filter, Client: to.ClientID}, m, counted)
	if err != nil {
		counted(err)
	}
}

// Available implements Transport.
func (t *Mesh) Available(node string) bool { return t.m.Available(node) }

// SetPeer implements Transport. A departed peer's counts go with it, so
// the series of nodes that left do not accumulate.
func (t *Mesh) SetPeer(node, addr string) {
	if addr == "" {
		t.counts.forget(node)
	}
	t.m.SetPeer(node, addr)
}

// The mesh calls a node answers: a session's hand-over, and its retained
// messages.
const (
	callHandOver = "handover"
	callRetained = "retained"
)

// Retain implements Transport: best effort, counted by the mesh when it
// cannot be sent.
func (t *Mesh) Retain(node string, m *broker.Message) { _ = t.m.SendRetained(node, m) }

// RetainedSnapshot implements Transport.
func (t *Mesh) RetainedSnapshot(ctx context.Context, node string) ([]*broker.Message, error) {
	b, err := t.m.Call(ctx, node, callRetained, nil)
	if err != nil {
		return nil, err
	}
	return parseRetained(b)
}

// HandOver implements Transport.
func (t *Mesh) HandOver(ctx context.Context, node, clientID string) (*broker.SessionState, error) {
	b, err := t.m.Call(ctx, node, callHandOver, []byte(clientID))
	if err != nil || len(b) == 0 {
		return nil, err
	}
	return broker.UnmarshalSessionState(b)
}

// meshHandler hands what other nodes send over the mesh to n's broker.
type meshHandler struct{ n *Node }

// Forward reaches this node's ordinary subscribers only.
func (h meshHandler) Forward(from string, m *broker.Message) { h.n.srv.ForwardFrom(from, m) }

// Call answers the mesh's calls: a session's hand-over.
func (h meshHandler) Call(from, method string, arg []byte) ([]byte, error) {
	switch method {
	case callHandOver:
		return h.n.HandOver(string(arg)), nil
	case callRetained:
		return appendRetained(nil, h.n.srv.RetainedSnapshot()), nil
	}
	return nil, fmt.Errorf("cluster: unknown call %q", method)
}

// Retained keeps a retained message another node published.
func (h meshHandler) Retained(from string, m *broker.Message) { h.n.srv.RetainFrom(from, m) }

// Deliver queues m to the member's session and answers once it is there
// (and stored, for a persistent session).
func (h meshHandler) Deliver(from string, to peer.Target, m *broker.Message, r peer.Reply) {
	h.n.srv.DeliverFrom(broker.RemoteMember{Node: h.n.self, Group: to.Group, Filter: to.Filter, ClientID: to.Client}, m,
		func(accepted bool) { r.Done(accepted, nil) })
}

// DeliveryCounts are the directed deliveries to one peer by outcome.
type DeliveryCounts struct {
	Sent, Accepted, NotHere, Timeouts, Broken, Refused, RemoteErrors atomic.Uint64
}

func (d *DeliveryCounts) count(err error) {
	switch {
	case err == nil:
		d.Accepted.Add(1)
	case errors.Is(err, peer.ErrNotHere):
		d.NotHere.Add(1)
	case errors.Is(err, peer.ErrTimeout):
		d.Timeouts.Add(1)
	case errors.Is(err, peer.ErrBroken):
		d.Broken.Add(1)
	case errors.Is(err, peer.ErrUnknownPeer), errors.Is(err, peer.ErrUnavailable),
		errors.Is(err, peer.ErrQueueFull), errors.Is(err, peer.ErrClosed):
		d.Refused.Add(1)
	default:
		d.RemoteErrors.Add(1)
	}
}

// deliveryCounts are every peer's DeliveryCounts, made on first use.
type deliveryCounts struct {
	mu    sync.Mutex
	peers map[string]*DeliveryCounts
}

func (c *deliveryCounts) of(node string) *DeliveryCounts {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := c.peers[node]
	if d == nil {
		if c.peers == nil {
			c.peers = map[string]*DeliveryCounts{}
		}
		d = &DeliveryCounts{}
		c.peers[node] = d
	}
	return d
}

func (c *deliveryCounts) forget(node string) {
	c.mu.Lock()
	delete(c.peers, node)
	c.mu.Unlock()
}
