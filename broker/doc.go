// Package broker is linemq's MQTT 3.1.1 and 5.0 broker core: connections,
// sessions, QoS state, retained messages, wills, keep alive, flow control,
// routing to ordinary subscribers and share groups.
//
// It knows nothing of etcd, bbolt or GPIO. It defines the small interfaces it
// consumes (Store, Authenticator, Events, Clock, Cluster) and the one it
// offers a cluster's glue (ClusterInbound, which *Server implements); the
// outer packages implement the others; nil means the in-memory, single-node
// default.
//
// # Data path
//
// Each connection has a reader goroutine that frames packets in place over
// its read buffer (package packet), and a writer goroutine. A PUBLISH is
// decoded into a struct the connection reuses, materialised once as an
// immutable Message, matched against the subscription index (package topic),
// and handed to each matching session and to one member of each matching
// share group (package share). Deliveries append encoded packets to the
// target connection's output buffer; the reader wakes each target's writer
// once per read, not once per message, and the writer writes everything
// appended since its last write in one syscall.
//
// # The acknowledgement path
//
// A PUBACK (or PUBREC) is a promise: what it acknowledges will reach every
// subscriber entitled to it, whatever fails next. So it leaves only once
// everything it stands for is done, and the order of a connection's
// acknowledgements is the order of its publishes [MQTT-4.6.0-2]. The path,
// in the order a publish travels it:
//
//  1. Route. The reader routes the message (router.route): ordinary
//     sessions and one member per share group. The router's result says
//     what the acknowledgement must wait for: persisted (a delivery wrote
//     to the Store), congested (a member past its high-water mark, under
//     backpressure), remote (directed deliveries to members on other
//     nodes), refused (a queue was full: 0x97 for a v5 publisher, never an
//     acknowledgement for something dropped).
//  2. Held. The acknowledgement is appended to the connection's held list
//     (heldAck) with those waits; nothing is written yet. The reader goes
//     on with the other packets of the same read.
//  3. Group commit. At the end of the read (releaseAcks), if anything was
//     written to the Store, the read's acknowledgements go to the syncer as
//     one batch; one goroutine calls Store.Sync for every batch that
//     arrived since its last call and then lets them go. A connection
//     whose batch is in the syncer queues later acknowledgements behind
//     it, even those that need no sync.
//  4. Remote waits. An acknowledgement whose message went to a member on
//     another node waits for that node's answer (remoteWait): accepted
//     means queued to the member's session there, and stored and synced if
//     the session is persistent. A failed delivery is picked again within
//     the same pass (repick) without moving the group's cursor; when the
//     other node may have delivered it all the same (no answer in time, a
//     broken stream: ErrMaybeDelivered), the new copy is marked to be sent
//     with DUP. Only a pass with no member able to take it refuses the
//     message (0x97).
//  5. Ack order. A waiting acknowledgement (pendingAck) sits in the
//     connection's acknowledgement queue, and those after it wait behind
//     it; the writer sends each once it is unblocked. A client's own
//     message (No Local aside) is held back until the acknowledgement of
//     its publish has been written (echo), so a client never sees its
//     message before its PUBACK.
//
// A member that leaves its group, a session that ends or is taken over by
// another node, hands the group messages it still holds to the other
// members (settle): each stays in the departed session's stored records
// until another member has it, and one that nobody can take now is tried
// again with backoff rather than dropped. The acknowledgement already sent
// for it stays true.
//
// # Locks
//
// Lock order, outermost first:
//
//	Server.mu -> session.mu -> conn.wmu
//	Server.groupsMu -> shareGroup.mu -> session.mu -> conn.wmu
//
// The topic index and the retained store have their own internal locks and
// call nothing while holding them. Events methods and the Store are called
// without any broker lock held, except Store writes for a session, which are
// made under that session's mu so that they stay in order.
package broker
