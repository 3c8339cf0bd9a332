package broker

import "sync/atomic"

// counters are the broker's running totals, updated with atomics on the
// hot path and read by Stats.
type counters struct {
	connected         atomic.Int64
	connects          atomic.Uint64
	packetsIn         atomic.Uint64
	msgsIn            atomic.Uint64
	bytesIn           atomic.Uint64
	msgsRouted        atomic.Uint64
	acked             atomic.Uint64
	dupQoS2           atomic.Uint64
	droppedQoS0       atomic.Uint64
	droppedQueueFull  atomic.Uint64
	refusedQueueFull  atomic.Uint64
	clusterForwards   atomic.Uint64
	clusterDelivers   atomic.Uint64
	clusterRepicks    atomic.Uint64
	maybeDelivered    atomic.Uint64
	clusterNotHere    atomic.Uint64
	clusterRedirects  atomic.Uint64
	passedOn          atomic.Uint64
	stallRedeliveries atomic.Uint64
	staleForwards     atomic.Uint64
	handedOver        atomic.Uint64
	adopted           atomic.Uint64
	retainedStale     atomic.Uint64
	retainedIn        atomic.Uint64
	publishDenied     atomic.Uint64
	readDenied        atomic.Uint64
	droppedTooLarge   atomic.Uint64
	expired           atomic.Uint64
	expiredSessions   atomic.Uint64
	willsPublished    atomic.Uint64
	storeErrors       atomic.Uint64
	acksHeld          atomic.Uint64
	groupDiscarded    atomic.Uint64
	lookedBack        atomic.Uint64
}

// Stats is a snapshot of the broker's counters and sizes.
type Stats struct {
	ClientsConnected int64  // connections with an accepted CONNECT
	ClientsParked    int    // idle connections parked without a goroutine
	PendingBytes     int64  // encoded bytes waiting to be written to all connections
	Queued           int64  // messages queued in all sessions
	Connects         uint64 // CONNECTs accepted since start
	Sessions         int    // sessions, connected or not
	Subscriptions    int    // ordinary subscriptions
	ShareGroups      int    // share groups with at least one member
	Retained         int    // retained messages
	PacketsIn        uint64 // packets received
	MessagesIn       uint64 // PUBLISH packets received
	BytesIn          uint64 // payload bytes received
	MessagesRouted   uint64 // deliveries to sessions
	Acknowledged     uint64 // QoS 1/2 deliveries acknowledged by subscribers
	DuplicateQoS2    uint64 // QoS 2 resends recognised and not routed again
	DroppedQoS0      uint64 // QoS 0 messages dropped for a slow or absent client
	DroppedQueueFull uint64 // messages dropped from a full session queue (drop_oldest, QoS 0)
	RefusedQueueFull uint64 // messages refused for a session whose queue was full (backpressure)
	ClusterForwards  uint64 // messages forwarded to other nodes' ordinary subscribers (one per node)
	ClusterDelivers  uint64 // directed deliveries to share-group members on other nodes
	ClusterRepicks   uint64 // directed deliveries that failed and were picked again
	// RepicksMaybeDelivered counts the messages picked again whose
	// earlier delivery may have reached its member (no answer in time, a
	// stream broken) and the messages a departed member held, handed to
	// another: their new copy carries DUP.
	RepicksMaybeDelivered uint64
	ClusterNotHere        uint64 // directed deliveries from other nodes for a client not here
	ClusterRedirects      uint64 // messages sent on to the node a session moved to, while the other nodes learnt of the move
	ClusterPassedOn       uint64 // forwards held up past a session's move, sent on to it by name (departed.go)
	Stalls                uint64 // times this node found it had not run for over a second; deliveries waited for the line (stall.go)
	StallRedeliveries     uint64 // QoS 1 and 2 publishes read while deliveries waited after a stall, routed with DUP (stall.go)
	ClusterStaleForwards  uint64 // forwards not given to a session adopted from a replica: sent by the node it came from before that node saw the adoption
	SessionsHandedOver    uint64 // sessions given to another node where their client resumed them
	SessionsAdopted       uint64 // sessions taken from another node for a client resuming here
	RetainedFromPeers     uint64 // retained messages (and clears) other nodes sent that were newer than this node's
	RetainedStale         uint64 // retained writes not kept: the topic held a later write from another node
	PublishesDenied       uint64 // PUBLISH packets the Authenticator refused (v5: 0x87; 3.1.1: dropped)
	DeliveriesDenied      uint64 // messages not sent to a client that may not read their topic (ReadChecker)
	DroppedTooLarge       uint64 // messages larger than the client's Maximum Packet Size
	Expired               uint64 // messages whose expiry passed before delivery
	ExpiredSessions       uint64 // sessions ended by their expiry interval
	WillsPublished        uint64 // will messages published
	StoreErrors           uint64 // failed Store writes and syncs
	AcksHeld              uint64 // publisher acknowledgements held back by share-group backpressure
	GroupDiscarded        uint64 // messages discarded because their share group ended
	LookedBack            uint64 // messages a new subscription got that arrived after its SUBSCRIBE but were routed before it was handled (arrival.go)
	// UnroutedWaiting and UnroutedDropped count the messages an outbox
	// routed again (their subscriber moved or left) that matched no
	// subscription anywhere: kept and routed again now, and dropped after
	// 15 s of that (their subscriber left). See unrouted.go.
	UnroutedWaiting int
	UnroutedDropped uint64
}

// Stats returns a snapshot of the broker's counters.
func (srv *Server) Stats() Stats {
	srv.mu.Lock()
	sessions := len(srv.sessions)
	srv.mu.Unlock()
	srv.groupsMu.Lock()
	groups := len(srv.groups)
	srv.groupsMu.Unlock()
	c := &srv.stats
	un := srv.Unrouted()
	return Stats{
		ClientsConnected:      c.connected.Load(),
		ClientsParked:         srv.parker.count(),
		PendingBytes:          srv.pending.Load(),
		Queued:                srv.queued.Load(),
		Connects:              c.connects.Load(),
		Sessions:              sessions,
		Subscriptions:         srv.subs.Len() - int(srv.probe.subs.Load()),
		ShareGroups:           groups,
		Retained:              srv.retained.len(),
		PacketsIn:             c.packetsIn.Load(),
		MessagesIn:            c.msgsIn.Load(),
		BytesIn:               c.bytesIn.Load(),
		MessagesRouted:        c.msgsRouted.Load(),
		Acknowledged:          c.acked.Load(),
		DuplicateQoS2:         c.dupQoS2.Load(),
		DroppedQoS0:           c.droppedQoS0.Load(),
		DroppedQueueFull:      c.droppedQueueFull.Load(),
		RefusedQueueFull:      c.refusedQueueFull.Load(),
		ClusterForwards:       c.clusterForwards.Load(),
		ClusterDelivers:       c.clusterDelivers.Load(),
		ClusterRepicks:        c.clusterRepicks.Load(),
		RepicksMaybeDelivered: c.maybeDelivered.Load(),
		ClusterNotHere:        c.clusterNotHere.Load(),
		ClusterRedirects:      c.clusterRedirects.Load(),
		ClusterPassedOn:       c.passedOn.Load(),
		Stalls:                srv.stall.stalls.Load(),
		StallRedeliveries:     c.stallRedeliveries.Load(),
		ClusterStaleForwards:  c.staleForwards.Load(),
		SessionsHandedOver:    c.handedOver.Load(),
		SessionsAdopted:       c.adopted.Load(),
		RetainedFromPeers:     c.retainedIn.Load(),
		RetainedStale:         c.retainedStale.Load(),
		PublishesDenied:       c.publishDenied.Load(),
		DeliveriesDenied:      c.readDenied.Load(),
		DroppedTooLarge:       c.droppedTooLarge.Load(),
		Expired:               c.expired.Load(),
		ExpiredSessions:       c.expiredSessions.Load(),
		WillsPublished:        c.willsPublished.Load(),
		StoreErrors:           c.storeErrors.Load(),
		AcksHeld:              c.acksHeld.Load(),
		GroupDiscarded:        c.groupDiscarded.Load(),
		LookedBack:            c.lookedBack.Load(),
		UnroutedWaiting:       un.Waiting,
		UnroutedDropped:       un.Dropped,
	}
}
