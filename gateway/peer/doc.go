// Package peer is the node-to-node data path of a linemq cluster: the
// messages one gateway hands to another, over one long-lived stream per
// pair of nodes. It knows nothing of the broker's internals beyond
// broker.Message's binary form; the gateway glues it to the broker and to
// the registry (which supplies the peers' addresses through SetPeers or,
// one node at a time, SetPeer).
//
// # Model
//
// A [Mesh] holds one link per peer. Of each pair of nodes, the one whose
// name sorts first dials and the other accepts, so a pair shares exactly
// one bidirectional stream, and each side's sends, answers and pings
// travel on it. The stream carries frames; a frame carries a batch of
// records:
//
//   - forward: a message for the receiving node's ordinary subscribers
//     ([Mesh.Send]; no answer);
//   - deliver: a message for one client of one share group, named by share
//     name, filter and client id ([Mesh.Deliver]), numbered by a
//     per-link sequence number;
//   - answer: the receiving node's outcome for a deliver (accepted, not
//     here, an error, or expired), carrying its sequence number;
//   - ping and pong: liveness and round trip time.
//
// Messages travel in broker.Message's binary form (AppendBinary,
// UnmarshalMessage). Every record carries its length, so a receiver skips
// kinds it does not know. Frame version 2 adds clock readings: the
// frame's write time, a deliver's send time and timeout, a ping's send
// time and the sender's ping timeout. Version 3 adds the sender's view to
// forwards and delivers (broker.Message.View). Each end's [Hello] names
// the newest version it reads, and a node writes a version only to a peer
// that reads it.
//
// Send and Deliver never block on the network: they append to the peer's
// bounded queue under a mutex and wake its writer, or fail at once
// (ErrUnavailable, ErrQueueFull, ErrUnknownPeer) so the share-group pick
// moves on to the next member. One writer goroutine per peer takes
// whatever is queued and sends it as one frame (splitting at 256 KiB), so
// records arriving while a frame is on its way go out together in the next;
// answers, pings and pongs go ahead of the data queued before them.
// A delivery's done callback is called exactly once, with the answer,
// ErrTimeout, ErrBroken or ErrClosed.
//
// The receiving side calls its [Handler] on the stream's reader
// goroutine: Forward for a forward, Deliver for a delivery with a [Reply]
// the handler completes, on any goroutine, once the message is queued to
// the session (and synced, if the session is persistent) or it knows the
// client is not there. Answers go back on the same stream.
//
// # Deadlines and failures
//
// Each peer has one clock goroutine. Its pending deliveries sit in a ring
// ordered by sequence number, which (one timeout for all) is also the
// order of their deadlines: the clock's one timer is set for the oldest,
// and a delivery unanswered DeliverTimeout after Deliver completes with
// ErrTimeout. The clock pings the peer every PingInterval.
//
// Each peer has a circuit breaker (sony/gobreaker/v2, two-step). It opens
// when FailureThreshold deliveries in a row time out, and at once when the
// stream breaks or a ping goes unanswered for PingTimeout. While it is
// open, or the peer has no stream that has answered a ping, [Mesh.Available]
// is false; it reads one atomic word, so the share-group pick can skip a
// down peer's members without a lock or a wait, and Send and Deliver fail
// at once. After OpenTimeout the next ping is the breaker's half-open
// probe: a pong closes it, a miss opens it again. Real messages never
// probe: they are refused until the breaker is closed.
//
// A clock goroutine that wakes far (100 ms) past its deadline has not
// been running: this process was stopped or starved. It waits 50 ms for
// the reader to hand over the answers and pongs that came meanwhile before
// it times anything out (PeerStats.Stalls), so a node that resumes does
// not re-pick what its peer answered in time.
//
// # Deliveries that come too late
//
// A node that was frozen (SIGSTOP, a stuck reader) reads, when it goes
// on, deliveries its peer has already completed with ErrTimeout and
// re-picked. It does not hand those to its Handler: it answers "expired"
// (PeerStats.Expired; the sender counts the late answer in LateExpired,
// never in LateAccepted). Without any clock sync: the receiver keeps per
// stream the minimum over the last 10 to 20 s of (its clock on reading a
// frame − the sender's clock on writing it), which absorbs the clocks'
// offset and the fastest transit, and a delivery's age is how much longer
// than that it has taken. Clocks are each node's monotonic clock. A
// delivery is expired when its age passes its timeout less a quarter
// (the quarter keeps room for the handler and the answer's way back),
// when it was sent before the deadline of a ping this node read too late
// for the pong to count, or when its frame waited at this node longer
// than the sender's ping timeout less a quarter (the sender has taken
// this node for hung and given up on everything it waited for). An
// "expired" that reaches the sender in time completes the delivery with
// ErrExpired: certain not delivered. Deliveries from a version 1 node
// carry no clock readings and are never expired.
//
// A broken stream (the peer closed it, its process died, the connection
// was reset) completes every pending delivery with ErrBroken at once and
// drops queued forwards (counted). The dialling side redials with backoff
// (50 ms doubling to ReconnectMax, jittered); the peer is available again
// one pong after its breaker lets a probe through.
//
// # Bounds
//
// With the defaults (PingInterval 0.5 s, PingTimeout 1 s, DeliverTimeout
// 2 s, OpenTimeout 1 s):
//
//   - closed connection: Available turns false, and pending deliveries
//     complete with ErrBroken, as soon as the stream's reader sees the end
//     (one round trip, milliseconds on a LAN);
//   - silent hang (SIGSTOP, a pulled cable, a reader stuck in a handler):
//     Available turns false within PingInterval + PingTimeout = 1.5 s of
//     the hang starting, within the 3 s the cluster design asks for;
//     deliveries already sent complete with ErrTimeout at the same moment
//     (the missed pong), or DeliverTimeout after they were queued if that
//     comes first; gRPC's keep alive tears the connection
//     down after 10 s + 5 s of silence (KeepaliveTime, KeepaliveTimeout);
//   - recovery: a peer back on the same stream is available again within
//     OpenTimeout + PingInterval + one round trip of answering; a peer
//     that restarted, after the redial (at most ReconnectMax) and a probe.
//
// # Guarantees and limits
//
// Forwards and deliveries to one peer arrive in the order they were
// queued (answers and pings may overtake them). A directed delivery's
// outcome is exact when the answer arrives; ErrTimeout and ErrBroken leave
// it open whether the other node delivered it, so a caller that re-picks
// may cause a duplicate (an answer arriving after its timeout is counted in
// PeerStats.LateAccepted when it accepted). A node that comes back from a
// freeze does not cause one (see above), unless handling the delivery (a
// persistent session's sync) outlasts the quarter of the timeout kept in
// hand. ErrBroken stays open: a stream that breaks after the peer
// delivered but before its answer came. A forward has no answer: one
// queued or in flight when a stream breaks is lost, and a peer that is
// down cannot be replaced.
//
// Liveness is judged by pongs, which the peer's reader sends once it has
// handled every record before the ping: a node so overloaded that it
// cannot work through PingTimeout's worth of backlog is passed over like a
// hung one, until it answers a probe. That is also the backpressure a
// flood meets.
//
// # Transport
//
// [Transport] and [Stream] are the seam to the wire. [GRPC] is the
// default: a hand-registered gRPC service with one bidirectional streaming
// method and a raw-bytes codec (no protoc), gRPC keep alive, and mutual
// TLS when configured, where certificates name their node. A Hello in the
// stream's metadata names the dialler's cluster and node; the acceptor
// refuses nodes it does not know and other clusters.
//
// # Locking
//
// Mesh.mu serialises SetPeers, SetPeer, Start and Close; the set of peers
// is an atomic pointer to an immutable map, so the publish path never
// takes it. Each link's mutex guards its queue, its pending ring, its ping
// and its current session; it is held only to append, take or swap, never
// across I/O, a breaker call or a callback. Mesh.mu may be held while a
// link's is taken, never the other way round. The breaker has its own lock,
// never taken with a link's held, and its state-change hook only stores to
// atomics. Callbacks (done, Handler) run with no lock of the package held.
package peer
