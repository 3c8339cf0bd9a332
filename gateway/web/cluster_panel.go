package web

import (
	"time"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/gateway/cluster"
)

// ClusterPanel is the cluster panel of a clustered gateway, as the page
// shows it and /api/v1/cluster returns it (with "configured": true). The
// gateway fills it from the registry, the node-to-node mesh and a cached
// etcd status, so this package imports none of them; Options.Cluster
// returns one.
type ClusterPanel struct {
	Cluster  string             `json:"cluster"` // cluster.name
	Node     string             `json:"node"`    // this node's name
	Nodes    []ClusterNode      `json:"nodes"`   // every registered node, this one included, by name
	Registry ClusterRegistry    `json:"registry"`
	Etcd     cluster.EtcdStatus `json:"etcd"`
	// Forwards are the QoS 1 and 2 messages kept here for other nodes'
	// ordinary subscribers until they have them, one entry per node.
	Forwards []broker.ForwardQueueStats `json:"forwards"`
	// Replicas are the copies of persistent sessions: this gateway's on
	// the others, and the others' kept here.
	Replicas cluster.ReplicaStats `json:"replicas"`
	// Update is the line's update: the gateway updating now, the last
	// update halted, why this gateway waits to start its own.
	Update cluster.LineUpdate `json:"update"`
}

// ClusterNode is one node of the cluster: from the registry (name,
// address, version) and, for another node, this node's stream to it.
type ClusterNode struct {
	Name    string `json:"name"`
	Address string `json:"address"` // its node-to-node transport
	Version string `json:"version"`
	Self    bool   `json:"self"`
	// Missing: the node belongs to the line (it registered once, is an
	// etcd member or is expected by the configuration) but is not
	// registered now; MissingSince is since when.
	Missing      bool       `json:"missing"`
	MissingSince *time.Time `json:"missing_since,omitempty"`
	// Health is "ok", "degraded" or "failed": this node's own health, or
	// for another node whether deliveries can go to it ("degraded" when
	// its stream is down or its breaker not closed); Reason says why.
	Health string `json:"health"`
	Reason string `json:"reason"`
	// The stream to another node (zero for this one and for a node the
	// mesh does not know yet).
	Connected     bool    `json:"connected"`
	Available     bool    `json:"available"`
	Breaker       string  `json:"breaker"` // "closed", "half-open", "open"; "" for this node
	BreakerOpens  uint64  `json:"breaker_opens"`
	RTTSeconds    float64 `json:"rtt_seconds"` // last ping's round trip
	RTTMaxSeconds float64 `json:"rtt_max_seconds"`
	Queued        int     `json:"queued"`
	InFlight      int     `json:"in_flight"`
	LastError     string  `json:"last_error"`
}

// ClusterRegistry is this node's side of the etcd registry.
type ClusterRegistry struct {
	State         string  `json:"state"` // starting, healthy, degraded, closed
	Reason        string  `json:"reason"`
	Revision      int64   `json:"revision"`
	LagSeconds    float64 `json:"lag_seconds"` // of this node's last write
	LagMaxSeconds float64 `json:"lag_max_seconds"`
	QueuedWrites  int     `json:"queued_writes"`
	Nodes         int     `json:"nodes"`
	Routes        int     `json:"routes"`
	Members       int     `json:"members"`
	Sessions      int     `json:"sessions"`
}
