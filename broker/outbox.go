package broker

import (
	"cmp"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/linemq/linemq/broker/packet"
)

// A QoS 1 or 2 message for the ordinary subscribers of another node is not
// sent and forgotten: it goes into that node's outbox here, which hands
// its messages to the node in order, each kept until the node answers
// that it has routed it (and stored it for its persistent subscribers).
// While the node is available, the publisher's acknowledgement waits for
// that answer, as for a share-group member on another node; the message
// is only in memory meanwhile (were this node to die, the publisher, not
// acknowledged, would send it again). A message for a node that is away
// (frozen, restarting, cut off), or whose answer does not come, is written
// to the Store, and the acknowledgement waits for that commit instead. A
// node that is back gets what it missed in order, with DUP (it may come
// after messages published later that took another way); one that
// answered nothing in time gets it again with DUP, as a QoS 1 resend does. The
// outbox is bounded in bytes and in age (ForwardOptions); what a bound
// drops is counted.
//
// The records live in the Store under a client id no MQTT client can have
// (it holds U+0000 [MQTT-1.5.4-2]), so the Store needs nothing new.

// outboxPrefix starts the Store client id of a node's outbox.
const outboxPrefix = "\x00forward\x00"

// ForwardQueueOf reports whether a client id of the Store's records is a
// node's outbox rather than a client's session, and which node's.
func ForwardQueueOf(clientID string) (node string, ok bool) {
	return strings.CutPrefix(clientID, outboxPrefix)
}

// outboxWindow is how many messages of one outbox are sent and not yet
// answered at most.
const outboxWindow = 256

// outboxRetryMin and outboxRetryMax bound the wait before sending again to
// a node that failed or is unavailable.
const (
	outboxRetryMin = 50 * time.Millisecond
	outboxRetryMax = time.Second
)

// ForwardOptions bound the messages kept for other nodes' ordinary
// subscribers (the outboxes). The zero value means the defaults.
type ForwardOptions struct {
	// MaxBytes bounds the payload and topic bytes kept for one node;
	// beyond it the oldest are dropped (counted). Default 64 MiB.
	MaxBytes int64
	// MaxAge drops messages kept longer than this for a node that does
	// not come back (counted). Default 24 hours.
	MaxAge time.Duration
	// BestEffort forwards QoS 1 and 2 messages as QoS 0 ones are: sent
	// once, not kept, the publisher's acknowledgement not waiting. A node
	// that is away loses them for its subscribers.
	BestEffort bool
}

func (o ForwardOptions) maxBytes() int64 {
	if o.MaxBytes <= 0 {
		return 64 << 20
	}
	return o.MaxBytes
}

func (o ForwardOptions) maxAge() time.Duration {
	if o.MaxAge <= 0 {
		return 24 * time.Hour
	}
	return o.MaxAge
}

// outboxes are the Server's outboxes, one per node with messages to hand.
type outboxes struct {
	mu sync.RWMutex // read on every forwarded publish; written once per node
	m  map[string]*outbox
}

// outbox holds the messages kept for one node's ordinary subscribers.
type outbox struct {
	srv  *Server
	node string
	id   string // the Store client id of its records

	mu        sync.Mutex
	rerouteMu sync.Mutex     // orders what is routed again (answer)
	entries   []*outboxEntry // in the order they are to arrive
	next      int            // the next entry to send
	inflight  int            // sent in this generation, not answered
	gen       uint64         // a failure starts a new one: everything unanswered goes again
	retry     time.Duration  // the wait before the next attempt after a failure
	retryAt   time.Time
	bytes     int64
	seq       uint64
	stored    bool // its session record is written
	running   bool // the sender goroutine runs
	wake      chan struct{}

	sent, resent, handed, rerouted, dropped, expired uint64
}

type outboxEntry struct {
	seq     uint64
	msg     *Message
	client  string // for this client's session only (redirect.go), or "" for the node's subscribers
	size    int64
	at      time.Time
	sent    bool   // sent at least once: a resend carries DUP
	gen     uint64 // the generation it was last sent in
	acked   bool
	notHere bool // answered: no subscription matches there (answer)
	stored  bool
	held    bool // kept back (to be written to the Store) before it was sent: it goes with DUP
	// wait is the publisher's acknowledgement waiting for the node's
	// answer, or for the record's commit if the answer does not come.
	wait *remoteWait
}

// outbox returns node's outbox, made on first use.
func (srv *Server) outbox(node string) *outbox {
	srv.forwards.mu.RLock()
	o := srv.forwards.m[node]
	srv.forwards.mu.RUnlock()
	if o != nil {
		return o
	}
	srv.forwards.mu.Lock()
	defer srv.forwards.mu.Unlock()
	o = srv.forwards.m[node]
	if o == nil {
		if srv.forwards.m == nil {
			srv.forwards.m = make(map[string]*outbox)
		}
		o = &outbox{srv: srv, node: node, id: outboxPrefix + node, wake: make(chan struct{}, 1), retry: outboxRetryMin}
		srv.forwards.m[node] = o
	}
	return o
}

// forwardDurable keeps m for node's ordinary subscribers, or for client's
// session only when client is not empty (redirect.go). With a router
// (a publish being routed) and the node available, the publisher's
// acknowledgement waits for the node's answer (r.remote); otherwise m is
// written to the Store and forwardDurable reports true: the
// acknowledgement waits for the commit.
func (srv *Server) forwardDurable(node, client string, m *Message, r *router) bool {
	o := srv.outbox(node)
	now := srv.clock.Now()
	o.mu.Lock()
	o.seq++
	e := &outboxEntry{seq: o.seq, msg: m, client: client, size: int64(len(m.Topic) + len(m.Payload)), at: now}
	// The answer is waited for only when it can come soon: the node is
	// available, not being retried, and nothing kept for it waits to be
	// sent (a backlog after an outage would hold the acknowledgement for
	// as long as it takes to drain).
	direct := r != nil && o.next >= len(o.entries) && !now.Before(o.retryAt) && srv.opts.Cluster.Available(node)
	o.entries = append(o.entries, e)
	o.bytes += e.size
	stored := false
	if direct {
		if r.remote == nil {
			r.remote = &remoteWait{}
		}
		r.remote.add()
		e.wait = r.remote
	} else {
		stored = o.storeLocked(e)
	}
	dropped := o.boundLocked(now)
	start := !o.running
	o.running = true
	o.mu.Unlock()
	for _, w := range dropped {
		w.finish(true)
	}
	if start {
		go o.run()
	} else {
		o.signal()
	}
	return stored
}

// storeLocked writes e's record, if there is a Store, and reports whether
// it did. Either way e is held back from now on: it goes with DUP.
func (o *outbox) storeLocked(e *outboxEntry) bool {
	e.held = true
	store := o.srv.opts.Store
	if store == nil || e.stored {
		return false
	}
	if !o.stored {
		o.stored = true
		o.srv.storeErr("save forward queue", o.id, store.SaveSession(&SessionRecord{ClientID: o.id, Version: packet.V5, ExpiryInterval: neverExpires}))
	}
	e.stored = true
	o.srv.storeErr("save forward", o.id, store.SaveMessage(o.id, &MessageRecord{Seq: e.seq, MessageID: e.msg.storeID(&o.srv.msgIDs), Message: e.msg, QoS: e.msg.QoS, GroupName: e.client}))
	return true
}

func (o *outbox) signal() {
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// boundLocked drops the oldest messages past the byte bound or the age
// bound, and returns the acknowledgements that waited for them (refused:
// a v5 publisher is told 0x97). A message dropped while in flight may
// still arrive.
func (o *outbox) boundLocked(now time.Time) []*remoteWait {
	maxBytes, maxAge := o.srv.opts.Forwards.maxBytes(), o.srv.opts.Forwards.maxAge()
	var waits []*remoteWait
	n := 0
	for ; n < len(o.entries); n++ {
		e := o.entries[n]
		if o.bytes > maxBytes {
			o.dropped++
		} else if now.Sub(e.at) > maxAge {
			o.expired++
		} else {
			break
		}
		o.bytes -= e.size
		o.forgetLocked(e)
		if e.wait != nil {
			waits = append(waits, e.wait)
			e.wait = nil
		}
	}
	if n > 0 {
		o.srv.log.Warn("messages kept for another node's subscribers dropped: past cluster.forwards.max_bytes or max_age",
			"node", o.node, "dropped", n, "kept", len(o.entries)-n)
		o.trimLocked(n)
	}
	return waits
}

// nameLocked makes e, kept for the node's ordinary subscribers, an entry
// for clients[0] alone, and adds one for each other client at the end;
// their records are written again with the name.
func (o *outbox) nameLocked(e *outboxEntry, clients []string) {
	e.client = clients[0]
	if e.stored {
		e.stored = false
		o.storeLocked(e)
	}
	for _, c := range clients[1:] {
		o.seq++
		n := &outboxEntry{seq: o.seq, msg: e.msg, client: c, size: e.size, at: e.at}
		o.storeLocked(n)
		o.entries = append(o.entries, n)
		o.bytes += n.size
	}
}

// trimLocked removes the first n entries.
func (o *outbox) trimLocked(n int) {
	clear(o.entries[:n])
	o.entries = o.entries[n:]
	o.next = max(o.next-n, 0)
}

// forgetLocked deletes e's record.
func (o *outbox) forgetLocked(e *outboxEntry) {
	if e.stored {
		e.stored = false
		o.srv.storeErr("delete forward", o.id, o.srv.opts.Store.DeleteMessage(o.id, e.seq))
	}
}

// run sends the outbox's messages until it is empty or the broker stops.
func (o *outbox) run() {
	cl := o.srv.opts.Cluster
	for {
		o.mu.Lock()
		now := o.srv.clock.Now()
		if dropped := o.boundLocked(now); len(dropped) > 0 {
			o.mu.Unlock()
			for _, w := range dropped {
				w.finish(true)
			}
			continue
		}
		if len(o.entries) == 0 {
			o.running = false
			o.mu.Unlock()
			return
		}
		for o.next < len(o.entries) && o.entries[o.next].acked {
			o.next++
		}
		var e *outboxEntry
		available := !now.Before(o.retryAt) && cl.Available(o.node)
		if o.next < len(o.entries) && o.inflight < outboxWindow && available {
			e = o.entries[o.next]
			o.next++
			o.inflight++
			e.gen = o.gen
		}
		var waits []*remoteWait
		written := false
		if !available {
			// The node went away between a message's arrival and its
			// sending: what waits in memory for an answer that will not
			// come soon is written, and its publisher acknowledged once
			// it is on disk, not when the node is back.
			for _, d := range o.entries[o.next:] {
				if d.wait != nil {
					written = o.storeLocked(d) || written
					waits = append(waits, d.wait)
					d.wait = nil
				}
			}
		}
		var wait time.Duration
		if e == nil {
			wait = max(o.retryAt.Sub(now), outboxRetryMin)
		}
		o.mu.Unlock()
		if len(waits) > 0 {
			go o.release(waits, written)
		}
		if e != nil {
			o.send(cl, e)
			continue
		}
		t := time.NewTimer(wait)
		select {
		case <-o.srv.stopping:
			t.Stop()
			o.mu.Lock()
			o.running = false
			o.mu.Unlock()
			return
		case <-o.wake:
			t.Stop()
		case <-t.C:
		}
	}
}

// send hands e to the node. A message sent before goes as a redelivery,
// and so does one that was kept on disk before its first send (the node
// was away, or a backlog was ahead of it): it can reach a subscriber
// after messages published later that took a direct way, through
// another gateway when their publisher moved, and DUP tells the
// subscriber what it is, as for a redirected copy (fault suite: 78 such
// messages without DUP after a newer one, once the publisher's gateway
// came back).
func (o *outbox) send(cl Cluster, e *outboxEntry) {
	o.mu.Lock()
	m := e.msg
	if e.sent {
		o.resent++
	}
	if (e.sent || e.held) && !m.redelivery {
		m = m.dupCopy()
		e.msg = m
	}
	e.sent = true
	o.sent++
	gen := e.gen
	o.mu.Unlock()
	cl.Deliver(RemoteMember{Node: o.node, ClientID: e.client}, m, func(err error) { o.answer(e, gen, err) })
}

// answer records the node's answer to e, sent in generation gen.
func (o *outbox) answer(e *outboxEntry, gen uint64, err error) {
	notHere := errors.Is(err, ErrNotHere)
	if notHere && e.client != "" && o.srv.redirecting(e.client, o.node) {
		// The session on its way there is not installed yet: sent
		// again after a wait, as after no answer.
		notHere, err = false, errNotAdopted
	}
	o.mu.Lock()
	if gen == o.gen {
		o.inflight--
	}
	if err != nil && e.client == "" && !e.acked {
		// Refused by these clients' full queues: the node's other
		// subscribers have it; it goes again to these alone, by name.
		if cs := refusedClients(err); len(cs) > 0 {
			o.nameLocked(e, cs)
		}
	}
	var (
		again   []*Message    // to route again, in the outbox's order
		waits   []*remoteWait // acknowledgements that may go now
		written bool          // ... once what was written is committed
	)
	switch {
	case err == nil || notHere:
		if !e.acked {
			e.acked, e.notHere = true, notHere
			if notHere {
				o.rerouted++
			} else {
				o.handed++
			}
		}
		if e.wait != nil {
			waits = append(waits, e.wait)
			e.wait = nil
			written = notHere // its new copies are written (reroute)
		}
		n := 0
		for n < len(o.entries) && o.entries[n].acked {
			d := o.entries[n]
			if d.notHere {
				again = append(again, d.msg)
			}
			o.bytes -= d.size
			o.forgetLocked(d)
			n++
		}
		if n > 0 {
			o.trimLocked(n)
		}
		o.retry = outboxRetryMin
	case gen == o.gen:
		// Everything unanswered goes again, in order, after a wait: the
		// node may have some of it (a reply lost, a timeout), so each
		// goes with DUP. What was kept in memory for an answer is
		// written now, and its publisher acknowledged once it is on disk.
		o.gen++
		o.inflight = 0
		o.next = 0
		o.retryAt = o.srv.clock.Now().Add(o.retry)
		o.retry = min(2*o.retry, outboxRetryMax)
		for _, d := range o.entries {
			if d.wait != nil {
				written = o.storeLocked(d) || written
				waits = append(waits, d.wait)
				d.wait = nil
			}
		}
	}
	if len(again) > 0 {
		// Taken before o.mu is let go, so that what two answers trim
		// is routed again in the order it was kept; never held with
		// another outbox's mu.
		o.rerouteMu.Lock()
		defer o.rerouteMu.Unlock()
	}
	o.mu.Unlock()
	o.signal()
	for _, m := range again {
		o.srv.reroute(o.node, m)
	}
	if len(waits) == 0 {
		return
	}
	if !written {
		o.release(waits, false)
		return
	}
	// Off the answering goroutine: a commit may take a while.
	go o.release(waits, true)
}

// errNotAdopted answers a redirected message that reached its client's new
// node before the session did.
var errNotAdopted = errors.New("broker: the session is not on that node yet")

// release lets the acknowledgements of waits go, once what was written for
// them (written) is committed; a commit that fails refuses them.
func (o *outbox) release(waits []*remoteWait, written bool) {
	refused := written && o.srv.opts.Store != nil && o.srv.syncStore() != nil
	for _, w := range waits {
		w.finish(refused)
	}
}

// reroute gives a message that no subscription matched on the node it was
// kept for (its subscriber moved to another node with its session, or
// left) to the subscriptions that match it now, here and on the nodes
// whose routes match, with DUP: a subscriber that had it already gets it
// again, marked. (A session that moved here while the message was on its
// way to its old node is one of them.) One that matches nothing anywhere
// is kept and routed again later (unrouted.go).
func (srv *Server) reroute(from string, m *Message) {
	c := m.dupCopy()
	c.view.Store(0)   // routed again now, by this node's view of the adoptions
	c.fromPeer = true // here: ordinary subscribers only, as a forward
	c.owed = true     // the outbox lets it go: a full queue here must take it
	if !srv.routeAgain(from, c) {
		srv.keepUnrouted(c)
	}
}

// routeAgain routes c, a copy made by reroute, to the subscriptions here
// and to the nodes other than from whose routes match it, and reports
// whether anything matched.
func (srv *Server) routeAgain(from string, c *Message) bool {
	var r router
	r.route(srv, c, nil)
	r.flush()
	var nodes []string
	for _, rr := range srv.remote.Match(c.topicBytes) {
		if rr.node != from && !slices.Contains(nodes, rr.node) {
			nodes = append(nodes, rr.node)
			srv.forwardDurable(rr.node, "", c, nil)
		}
	}
	return r.matched || len(nodes) > 0
}

// restoreOutbox rebuilds a node's outbox from its stored records at start;
// every message in it goes again with DUP, since the node may have had it.
func (srv *Server) restoreOutbox(rec *SessionRecord, msgs []*MessageRecord) {
	node, _ := ForwardQueueOf(rec.ClientID)
	if node == unroutedNode {
		srv.restoreUnrouted(msgs)
		return
	}
	if to, client, ok := departedRecord(node); ok {
		srv.restoreDeparture(to, client, rec)
		return
	}
	o := srv.outbox(node)
	now := srv.clock.Now()
	slices.SortFunc(msgs, func(a, b *MessageRecord) int { return cmp.Compare(a.Seq, b.Seq) })
	o.mu.Lock()
	o.stored = true
	for _, mr := range msgs {
		srv.restoreMessageID(mr)
		e := &outboxEntry{seq: mr.Seq, msg: mr.Message, client: mr.GroupName, size: int64(len(mr.Message.Topic) + len(mr.Message.Payload)),
			at: now, sent: true, stored: true}
		o.entries = append(o.entries, e)
		o.bytes += e.size
		o.seq = max(o.seq, mr.Seq)
	}
	start := len(o.entries) > 0 && !o.running
	o.running = o.running || start
	o.mu.Unlock()
	if start {
		go o.run()
	}
}

// ForwardQueueStats are the figures of the messages kept for one other
// node's ordinary subscribers.
type ForwardQueueStats struct {
	Node     string `json:"node"`
	Queued   int    `json:"queued"`    // kept, not yet answered
	Bytes    int64  `json:"bytes"`     // their topic and payload bytes
	Sent     uint64 `json:"sent"`      // sends, resends included
	Resent   uint64 `json:"resent"`    // sent again (with DUP) after no answer
	Handed   uint64 `json:"handed"`    // answered: the node has them
	Rerouted uint64 `json:"rerouted"`  // answered "no subscriber here" (it moved or left): routed again
	Dropped  uint64 `json:"dropped"`   // dropped past the byte bound
	Expired  uint64 `json:"expired"`   // dropped past the age bound
	OldestMs int64  `json:"oldest_ms"` // age of the oldest kept, in milliseconds
}

// ForwardQueues returns the figures of every node's outbox, by node name.
func (srv *Server) ForwardQueues() []ForwardQueueStats {
	srv.forwards.mu.RLock()
	os := make([]*outbox, 0, len(srv.forwards.m))
	for _, o := range srv.forwards.m {
		os = append(os, o)
	}
	srv.forwards.mu.RUnlock()
	now := srv.clock.Now()
	out := make([]ForwardQueueStats, 0, len(os))
	for _, o := range os {
		o.mu.Lock()
		st := ForwardQueueStats{Node: o.node, Queued: len(o.entries), Bytes: o.bytes, Sent: o.sent, Resent: o.resent,
			Handed: o.handed, Rerouted: o.rerouted, Dropped: o.dropped, Expired: o.expired}
		if len(o.entries) > 0 {
			st.OldestMs = now.Sub(o.entries[0].at).Milliseconds()
		}
		o.mu.Unlock()
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b ForwardQueueStats) int { return cmp.Compare(a.Node, b.Node) })
	return out
}
