// Package chaos is linemq's cluster fault suite: it runs a seeded sequence
// of faults against three real linemq processes under load and checks,
// from what the clients saw, that the cluster kept its promises.
//
// # The model
//
// A run is three linemq processes, each hosting an embedded etcd member,
// either on loopback or, when a fault needs the network itself (a
// partition), each in a network namespace of its own (see [Topology]).
// Clients are raw MQTT 5 connections (package broker/packet), so that the
// harness sees every DUP flag, CONNACK Session Present and DISCONNECT
// reason code:
//
//   - on every node one persistent subscriber (clean start = false,
//     session expiry 3600) of each subscription kind ([SubKind]); by
//     default the one kind is the share group $share/g/chaos/#;
//   - QoS 1 publishers on two or three nodes, one publish in flight each,
//     every payload "<publisher>/<sequence>".
//
// A client whose node goes away (connection closed, or silent for longer
// than its bound: a frozen node) reconnects, to its home node first and
// otherwise to the others in turn. A connection a client gives up on
// without closing it (a silent node, an abrupt move) is left open and still
// read: that is how the harness sees whether the node closes it once the
// session was taken up elsewhere, and what it still delivers.
//
// A [Plan], derived from the seed alone, says which faults happen when and
// to which node: SIGKILL and restart on the same data directory, SIGSTOP
// then SIGCONT, SIGKILL of the node hosting the etcd leader, a persistent
// subscriber moving to another node, a node's link to the others taken
// down, the whole line killed at once, a node killed with its data
// directory deleted and replaced by a blank one (linemq cluster replace). Faults run one after the other, so
// at most one node is lost at a time except in the whole-line fault. The
// same seed gives the same plan; the cluster's timing still varies from run
// to run, so a failure is reproduced by running its seed again, often a
// few times.
//
// # The invariants
//
// The checker ([Check]) looks only at the client-side record ([Record]):
//
//  1. no acknowledged message lost: every publish whose PUBACK said 0x00
//     reaches what its subscription kind requires ([Need]): one member of
//     a share group, or every ordinary subscriber;
//  2. no session open on two nodes: when a client id's session is taken up
//     by a newer connection, the older one is closed (DISCONNECT 0x8E, or
//     the connection closed) within [Options.TakeoverBound] of the newer
//     CONNACK, or of the moment the older one's node could speak again if
//     it was frozen or cut off then;
//  3. every duplicate carries DUP: of the copies of one message that one
//     delivery unit received (a share group as a whole, or one ordinary
//     subscriber), at most one lacks the DUP flag;
//  4. per-publisher order within a subscriber: ignoring DUP copies, the
//     sequence numbers of one publisher arrive increasing;
//  5. a session moved between two healthy nodes is found there (CONNACK
//     Session Present 1);
//  6. a subscriber's session, once made, is found whenever it connects
//     again, on any node (Session Present 1): one node, or one node's
//     card, is lost at a time, with every session's replica in step
//     before each fault.
//
// Alongside, it reports figures: acknowledged, delivered, duplicates,
// refused (PUBACK reason >= 0x80, by code), publishes left without a
// PUBACK, and the PUBACK latency (p50, p99, max) of the publishes sent
// during each fault: how long the cluster held them.
package chaos
