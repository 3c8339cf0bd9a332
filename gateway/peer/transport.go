package peer

import (
	"context"
	"net"
)

// Hello introduces one end of a stream to the other: the dialer sends its
// own with the request, the acceptor answers with its own once it has
// accepted the stream.
type Hello struct {
	// Cluster names the cluster; a stream between two clusters is
	// refused, so two lines sharing a network cannot mix their traffic.
	Cluster string
	// Node is the sender's node name, as registered.
	Node string
	// Version is the newest frame version the sender reads. 0, from an
	// older node or a transport that does not carry it, means 1: the
	// other end then writes version 1 frames only.
	Version int
}

// Stream is one long-lived bidirectional stream between two nodes, carrying
// frames (opaque byte strings) in order in each direction.
//
// Send and Recv may be called at the same time from two goroutines, but
// each from one goroutine at a time. Close may be called from any
// goroutine, more than once.
type Stream interface {
	// Send queues one frame to the other end. It may block while the
	// transport's flow control holds it back (a peer that does not read),
	// until Close or until the connection is found dead. The stream does
	// not keep frame after Send returns: the caller may reuse it.
	Send(frame []byte) error
	// Recv returns the next frame from the other end. The frame is valid
	// until the next call to Recv; the caller copies what it keeps. After
	// any error the stream is finished.
	Recv() ([]byte, error)
	// Close ends the stream in both directions and releases its
	// connection. It does not wait: a Send or Recv in progress returns
	// with an error as soon as the transport lets go of it (at once,
	// unless a peer that stopped reading holds a Send until the
	// connection's keep alive gives up on it).
	Close() error
}

// Acceptor decides on a stream another node opened: it returns nil to take
// it (the transport then answers with this node's Hello and the stream is
// the acceptor's until it calls Close) or an error to refuse it (the
// dialer's Dial fails with that error's text).
type Acceptor func(remote Hello, s Stream) error

// Transport opens and accepts Streams. The [Mesh] uses one; [GRPC] is the
// default, and a test or another wire can supply its own.
type Transport interface {
	// Dial opens a stream to node at addr, sending self, and returns once
	// the other end has accepted it, with the other end's Hello. ctx
	// bounds the whole handshake, not the stream's life.
	Dial(ctx context.Context, node, addr string, self Hello) (Stream, Hello, error)
	// Serve accepts streams on l until Close, handing each to accept
	// along with the dialer's Hello, and answering accepted ones with
	// self. It blocks; it returns nil after Close.
	Serve(l net.Listener, self Hello, accept Acceptor) error
	// Close stops Serve, closes every accepted stream and connection,
	// and returns once every goroutine of the transport's has ended.
	// Streams from Dial are the dialer's to close.
	Close() error
}
