// Package registry is a gateway's part of the cluster registry in etcd: it
// writes what this node holds (its address, its ordinary routes, its share
// group members, the sessions it owns) and keeps a local copy of what every
// node holds, so the broker's publish path never waits on etcd.
//
// # Keys
//
// Everything lives under one prefix, by default "/linemq/<cluster>/", and
// every variable segment is escaped with url.PathEscape (filters and client
// ids contain "/"):
//
//	nodes/<node>                              {"addr","version","epoch"}
//	routes/<node>/<filter>                    (empty: present while the node has
//	                                           an ordinary subscriber of filter)
//	members/<node>/<group>/<filter>/<client>  {"qos","since"}
//	sessions/<client>                         {"node","epoch","seq","prev"}
//
// # Model
//
// Each node writes only its own keys (nodes/, routes/ and members/ below
// its name, and the sessions it owns), from one goroutine, the registrar,
// deciding from its own state and never from the copy. Every key it writes
// is bound to its lease (a concurrency.Session): when the node dies or is
// cut off for longer than the TTL, all its keys vanish in one revision and
// every copy sees it leave; nobody else cleans up after it.
//
// Writes are queued without blocking (AddRoute, RemoveRoute, AddMember,
// RemoveMember) and return a [Write] that completes once committed; the
// registrar folds whatever queued up meanwhile into one transaction (up to
// Options.MaxTxnOps operations), so a burst of subscribes costs a few
// round trips rather than one each. The broker's SUBACK waits on the Write,
// bounded: a client that got its SUBACK is routable from every node once
// their watches deliver the revision the Write reports.
//
// Session ownership is claimed and released by transactions that compare
// the record's mod revision ([Registry.ClaimSession]), so concurrent
// claims are ordered, each takes over from exactly one predecessor, and no
// two nodes ever own one client.
//
// The copy comes from one Get of the prefix and a Watch from the read's
// revision with progress notifications. Its views ([Registry.Nodes],
// [Registry.Routes], [Registry.Members], [Registry.MembersLocalFirst],
// [Registry.SessionOwner]) and its events ([Options.OnEvent]) order a
// group's members the same way on every node: by etcd create revision,
// ties broken by node name then client id.
//
// # Guarantees
//
//   - [Registry.Ready] closes once the first full copy is loaded and this
//     node's key is committed.
//   - Events are delivered once per change, in revision order, from one
//     goroutine; a view called from OnEvent already reflects the change,
//     and [Registry.Revision] reaches a revision only once every event up
//     to it has been delivered.
//   - After a compaction or a lost watch the copy is re-read and only the
//     difference is reported (Event.Resync); members whose keys were not
//     recreated keep their place.
//   - After the lease is lost while the process lives, a new lease is
//     taken and everything this node holds is written again; keys that
//     survived keep their create revision and so their place. Ownership
//     records are rewritten only where no other node has claimed the
//     client since.
//   - While etcd cannot be reached the copy stays as last seen, the State
//     is Degraded with the reason ([Options.OnState]), writes queue up and
//     are retried with backoff, and everything reconciles on return.
//
// # Caveats
//
// A Write whose wait times out is not withdrawn: it still describes this
// node, and the registrar commits it when it can.
//
// Node names must be unique: a node registering finds keys of its name
// from another epoch, takes them for its own previous run's and revokes
// their lease. Two live gateways sharing a name therefore keep unseating
// each other; the registry logs a warning each time.
//
// Events and views include this node's own keys; the broker holds its own
// members directly and uses the registry for the other nodes'.
//
// After a lost lease, keys that had already vanished are created anew:
// their members move to the end of their groups' order, on every node
// alike.
//
// # Locking
//
// The copy is guarded by one RWMutex, taken by the watcher to apply changes
// and by the views to read; OnEvent runs outside it. The write queue has
// its own mutex, held only to append or to drain. The registrar's state
// belongs to its goroutine and has no lock.
package registry
