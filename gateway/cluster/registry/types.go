package registry

import (
	"encoding/json"
	"fmt"
	"time"
)

// Node is a gateway of the cluster as registered under nodes/<name>.
type Node struct {
	Name    string // the node's name, unique in the cluster
	Addr    string // where peers reach its node-to-node transport
	Version string // the linemq version it runs
	// Epoch changes every time the node's process starts (it defaults
	// to a random number), so peers can tell a restarted
	// node, whose sessions and streams are gone, from one that merely
	// reconnected to etcd.
	Epoch uint64
	// Store is the identity of the node's durable storage (Options.Store):
	// a run with another than its predecessor's lost what that one held.
	Store string
	// CreateRevision is the etcd revision that created the key: it
	// changes when the node registers anew after its lease was lost.
	CreateRevision int64
}

// Member is one client's membership of one share group, registered under
// members/<node>/<group>/<filter>/<client> by the node holding its session.
type Member struct {
	Node   string
	Group  string // the share name, without "$share/"
	Filter string // the topic filter after the share name
	Client string // the member's client id
	QoS    byte   // the maximum QoS granted on the subscription
	// Since is when the node registered the membership, by its clock.
	Since time.Time
	// CreateRevision orders a group's members the same way on every
	// node: by creation revision, ties (members written in one
	// transaction) broken by node name then client id.
	CreateRevision int64
}

// less is the cluster-wide member order (see Member.CreateRevision).
func (m *Member) less(o *Member) bool {
	if m.CreateRevision != o.CreateRevision {
		return m.CreateRevision < o.CreateRevision
	}
	if m.Node != o.Node {
		return m.Node < o.Node
	}
	return m.Client < o.Client
}

// GroupKey identifies a share group: the same share name with two different
// filters is two groups.
type GroupKey struct {
	Group  string
	Filter string
}

// Owner is a node's ownership of a client's session, recorded under
// sessions/<client>. The zero Owner (Node == "") means nobody.
type Owner struct {
	Node  string
	Epoch uint64 // the owning node's Epoch when it claimed the session
	// Seq numbers the node's claims, so a claim whose reply was lost can
	// recognise its own record when it retries.
	Seq uint64
	// Revision is the etcd revision of the ownership record; each claim
	// writes a new one.
	Revision int64
	// ReplicaOf names the node whose session this owner adopted from its
	// replica once that node was gone (ClaimReplica); empty otherwise.
	ReplicaOf string
}

// Claim is the result of a successful ClaimSession.
type Claim struct {
	// Prev is the owner this claim took the session over from; zero if
	// nobody owned it. When Prev.Node is another node, that node will see
	// the change (SessionOwned) and must let go of the client; when it is
	// this node, the client reconnected here.
	Prev Owner
	// Revision is the revision of the new ownership record.
	Revision int64
}

// EventKind says what changed.
type EventKind uint8

// The changes the mirror reports. Each is reported once, in revision
// order; changes found by a re-read after the watch was lost are reported
// as the difference between the old copy and the new one.
const (
	NodeJoined      EventKind = iota + 1 // a node registered (Event.NodeInfo)
	NodeUpdated                          // its address, version or epoch changed
	NodeLeft                             // its key is gone: shut down, or its lease expired
	RouteAdded                           // a node has ordinary interest in Event.Filter
	RouteRemoved                         // ... and no longer has
	MemberJoined                         // Event.Member joined group (Group, Filter)
	MemberUpdated                        // its granted QoS changed; its place in the order did not
	MemberLeft                           // it left the group (or its node is gone)
	SessionOwned                         // Event.Owner now owns Event.Client (Event.Prev did)
	SessionReleased                      // nobody owns Event.Client any more (Event.Prev did)
)

var kindNames = [...]string{
	NodeJoined: "NodeJoined", NodeUpdated: "NodeUpdated", NodeLeft: "NodeLeft",
	RouteAdded: "RouteAdded", RouteRemoved: "RouteRemoved",
	MemberJoined: "MemberJoined", MemberUpdated: "MemberUpdated", MemberLeft: "MemberLeft",
	SessionOwned: "SessionOwned", SessionReleased: "SessionReleased",
}

func (k EventKind) String() string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return fmt.Sprintf("EventKind(%d)", k)
}

// Event is one change to the registry copy. Fields that do not apply to
// its Kind are zero.
type Event struct {
	Kind EventKind
	// Revision is the etcd revision of the change; all the keys of a
	// node whose lease ended go in one revision. For a change found by a
	// re-read it is the revision of the read.
	Revision int64
	// Resync is true for a change found by a re-read after the watch was
	// lost or compacted, rather than delivered by the watch.
	Resync bool

	// Node is the node the key belongs to: for sessions, the new owner
	// (SessionOwned) or the last one (SessionReleased).
	Node   string
	Group  string // member events
	Filter string // route and member events
	Client string // member and session events

	NodeInfo Node   // node events: the node as registered (as last seen, for NodeLeft)
	Member   Member // member events: the member (as last seen, for MemberLeft)
	Owner    Owner  // SessionOwned: the new owner
	Prev     Owner  // session events: the previous owner, zero if none
}

// State is the registry's health as a health check reads it.
type State uint8

const (
	// Starting: the first copy of the registry is not loaded yet, or this
	// node is not registered yet (Ready is still open).
	Starting State = iota
	// Healthy: the copy follows etcd and this node's writes commit.
	Healthy
	// Degraded: etcd cannot be reached, the watch was lost, or the node's
	// lease was lost and is being renewed. The copy is the last one seen;
	// writes are queued and retried.
	Degraded
	// Closed: Close was called.
	Closed
)

func (s State) String() string {
	switch s {
	case Starting:
		return "starting"
	case Healthy:
		return "healthy"
	case Degraded:
		return "degraded"
	case Closed:
		return "closed"
	}
	return fmt.Sprintf("State(%d)", s)
}

// Stats are counters and figures for metrics and the status page.
type Stats struct {
	State    State
	Revision int64 // the revision the copy reflects

	// Lag is the registry lag of the last write this node made: from the
	// registrar sending it to this node's watch delivering it, that is
	// the commit plus the watch's delay. LagMax and LagSum/LagCount
	// summarise all writes measured so far.
	Lag, LagMax, LagSum time.Duration
	LagCount            uint64

	Txns      uint64 // transactions the registrar committed
	TxnOps    uint64 // operations in them (batching: TxnOps/Txns)
	TxnErrors uint64 // transactions that failed (and were retried)
	Queued    int    // writes waiting for the registrar

	Leases    uint64 // leases granted (1 + times the lease was lost and renewed)
	Loads     uint64 // full reads of the registry (1 + re-reads)
	Compacted uint64 // watches ended because the history they needed was compacted
	WatchLost uint64 // watches given up as stalled, closed or cancelled

	// The size of the copy: registered nodes (this one included), route
	// keys (a node's filter with ordinary subscribers), share-group
	// members and session ownership records, of every node.
	Nodes, Routes, Members, Sessions int
}

// The values stored under the keys, as JSON so `etcdctl get` shows them
// readably. Routes have an empty value: their presence is the fact.
type (
	nodeValue struct {
		Addr    string `json:"addr"`
		Version string `json:"version,omitempty"`
		Epoch   uint64 `json:"epoch"`
		Store   string `json:"store,omitempty"`
	}
	memberValue struct {
		QoS   byte      `json:"qos"`
		Since time.Time `json:"since"`
	}
	ownerRef struct {
		Node     string `json:"node"`
		Epoch    uint64 `json:"epoch"`
		Seq      uint64 `json:"seq"`
		Revision int64  `json:"rev,omitempty"`
	}
	sessionValue struct {
		ownerRef
		// Prev records whom the claim took over from, so a claim whose
		// reply was lost learns it when it finds its own record.
		Prev *ownerRef `json:"prev,omitempty"`
		// Replica names the node whose session the claimant adopted
		// from its replica, that node being gone (ClaimReplica).
		Replica string `json:"replica,omitempty"`
	}
)

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // plain structs of strings and numbers always encode
	}
	return string(b)
}

func (v sessionValue) owner() Owner {
	o := v.ownerRef.owner()
	o.ReplicaOf = v.Replica
	return o
}

func (o ownerRef) owner() Owner {
	return Owner{Node: o.Node, Epoch: o.Epoch, Seq: o.Seq, Revision: o.Revision}
}

func refOf(o Owner) *ownerRef {
	if o.Node == "" {
		return nil
	}
	return &ownerRef{Node: o.Node, Epoch: o.Epoch, Seq: o.Seq, Revision: o.Revision}
}
