package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/gateway/peer"
)

// Mesh adapts gateway/peer's Mesh, the gRPC transport between nodes, to
// the glue's Transport.
type Mesh struct{ m *peer.Mesh }

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
// refuses at once (queue full, peer unknown or unavailable). The mesh
// counts the outcome per peer (peer.PeerStats).
func (t *Mesh) Deliver(to broker.RemoteMember, m *broker.Message, done func(error)) {
	counted := func(err error) {
		switch {
		case errors.Is(err, peer.ErrTimeout) || errors.Is(err, peer.ErrBroken):
			// The other node may have it: the copy picked next says DUP.
			err = fmt.Errorf("%w: %w", broker.ErrMaybeDelivered, err)
		case errors.Is(err, peer.ErrNotHere):
			err = fmt.Errorf("%w: %w", broker.ErrNotHere, err)
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

// Call implements CallTransport.
func (t *Mesh) Call(ctx context.Context, node, method string, arg []byte) ([]byte, error) {
	return t.m.Call(ctx, node, method, arg)
}

// LastHeard reports when node was last heard from (see peer.Mesh.LastHeard).
func (t *Mesh) LastHeard(node string) time.Time { return t.m.LastHeard(node) }

// SetPeer implements Transport.
func (t *Mesh) SetPeer(node, addr string) { t.m.SetPeer(node, addr) }

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

// Call answers the mesh's calls: a session's hand-over, retained messages,
// replica writes and fail-overs done.
func (h meshHandler) Call(from, method string, arg []byte) ([]byte, error) {
	switch method {
	case callHandOver:
		return h.n.HandOver(from, string(arg)), nil
	case callRetained:
		return appendRetained(nil, h.n.srv.RetainedSnapshot()), nil
	case callReplicaApply, callFailedOver, callSettled:
		if h.n.held == nil {
			return nil, errors.New("cluster: this node keeps no replicas (cluster.replicas is 0)")
		}
		switch method {
		case callFailedOver:
			origin, rev := parseFailedOver(arg)
			h.n.held.markAt(origin, from, rev)
			return nil, nil
		case callSettled:
			if h.n.held.settled(from, string(arg)) {
				return []byte{1}, nil
			}
			return []byte{0}, nil
		}
		return nil, h.n.held.apply(from, arg)
	}
	if f := h.n.calls[method]; f != nil {
		return f(from, arg)
	}
	return nil, fmt.Errorf("cluster: unknown call %q", method)
}

// Retained keeps a retained message another node published.
func (h meshHandler) Retained(from string, m *broker.Message) { h.n.srv.RetainFrom(from, m) }

// Deliver queues m to the member's session and answers once it is there
// (and stored, for a persistent session).
func (h meshHandler) Deliver(from string, to peer.Target, m *broker.Message, r peer.Reply) {
	h.n.srv.DeliverFrom(from, broker.RemoteMember{Node: h.n.self, Group: to.Group, Filter: to.Filter, ClientID: to.Client}, m,
		func(accepted bool, err error) { r.Done(accepted, err) })
}

// Interface guard: the wills of a dead node's clients count from the last
// ping answered (node.go), which a renamed method would silently lose.
var _ HeardTransport = (*Mesh)(nil)

// Interface guard: without calls, replicas would silently stop.
var _ CallTransport = (*Mesh)(nil)
