// Package broker is linemq's MQTT 3.1.1 and 5.0 broker core: connections,
// sessions, QoS state, retained messages, wills, keep alive, flow control,
// routing to ordinary subscribers and share groups.
//
// It knows nothing of etcd, bbolt or GPIO. It defines the small interfaces it
// consumes (Store, Authenticator, Events, Clock; the cluster's hooks come
// with the cluster) and the outer
// packages implement them; nil means the in-memory, single-node default.
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
