package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/gateway/peer"
)

// A gateway that dies takes its clients' connections with it, and MQTT
// says their wills must then be published; for a Sparkplug edge node
// behind that gateway the will is its NDEATH, without which SCADA keeps
// showing its last values as good. The gateway itself cannot do it, so
// the line does:
//
//   - every connection's claim records its will in etcd, in the same
//     transaction (registry.ClaimConnection), under a key bound to no
//     lease, so that it outlives its node;
//   - the node that holds the connection deletes the record when it
//     publishes the will itself or the client discards it;
//   - every node sweeps the records when another node leaves the registry
//     (its lease expired, or a restart revoked it), at start, and every
//     willSweepEvery: a record whose node is gone, or is a later run of
//     it, is an orphan. Its will is due its delay (or the session's
//     expiry, if shorter) after the dead node was last heard from; then
//     each node that found it tries to take the record (a transaction
//     comparing its revision) and the one that succeeds publishes it.
//     A client that connects again meanwhile, anywhere, rewrites or
//     deletes the record, and its will is not published [MQTT-3.1.3-9];
//   - a node that comes back (restarted on its data, or back from a
//     partition longer than its lease) never publishes the wills of its
//     earlier run or of a connection whose record the line took
//     (Node.TakeWill); back from a partition, it closes the connections
//     whose wills the line published meanwhile (their clients, still
//     connected, would never know: a Sparkplug edge node would never send
//     its birth again after the death the others saw);
//   - a node that comes back before an orphan's will is due is alive
//     after all: the will is not published.

// willSweepEvery bounds how long an orphaned record can wait for a sweep
// when the event that should have started one was missed (this node was
// cut off from etcd when the other died).
const willSweepEvery = 30 * time.Second

// recheckAgain is when, after a new lease, this node's records are checked
// a second time; leaseWait how often they wait for one.
const (
	recheckAgain = 5 * time.Second
	leaseWait    = 200 * time.Millisecond
)

// maxWillRecord bounds a will record (etcd's requests are limited to
// 1.5 MiB by default, and every claim transaction carries its record).
const maxWillRecord = 256 << 10

// willValue is a will record's value.
type willValue struct {
	Node  string `json:"node"`
	Epoch uint64 `json:"epoch"`
	// Lease is the writer's lease at the claim: while it lasts, no other
	// node can have taken the record (see TakeWill).
	Lease int64  `json:"lease"`
	N     uint64 `json:"n"` // makes every connection's record distinct

	Delay         uint32 `json:"delay,omitempty"`
	SessionExpiry uint32 `json:"session_expiry"`
	Expiry        uint32 `json:"expiry,omitempty"`
	HasExpiry     bool   `json:"has_expiry,omitempty"`
	Message       []byte `json:"message"` // broker.Message's binary form
}

func (v *willValue) will() (*broker.Will, error) {
	m, err := broker.UnmarshalMessage(v.Message)
	if err != nil {
		return nil, err
	}
	return &broker.Will{Message: m, Delay: v.Delay, SessionExpiry: v.SessionExpiry, Expiry: v.Expiry, HasExpiry: v.HasExpiry}, nil
}

// WillStats counts what the line did with the wills of dead gateways'
// clients, as seen from this node.
type WillStats struct {
	Published uint64 `json:"published"` // wills of dead gateways' clients published by this node
	Waiting   int    `json:"waiting"`   // orphaned wills waiting out their delay here
	Cancelled uint64 `json:"cancelled"` // taken by another node, or the client came back first
}

// wills is a node's side of the line's wills.
type wills struct {
	n     *Node
	seq   atomic.Uint64
	sweep chan struct{} // a sweep is wanted
	// relook asks for a recheck of this node's own records, on its own
	// goroutine: a sweep may be waiting out an unreachable etcd, and a
	// node back from a cut-off must close its clients at once.
	relook chan struct{}

	mu      sync.Mutex
	heard   map[string]time.Time     // nodes that left: when last heard from
	pending map[string]*orphanedWill // by client
	drops   map[string]string        // records to delete that could not be: client → value
	held    map[string]string        // this node's connections' records: client → value
	lease   int64                    // the lease the held records were last checked against
	again   bool                     // a second pass after a new lease is scheduled or done

	published, cancelled atomic.Uint64
}

// orphanedWill is a dead node's client's will, waiting out its delay.
type orphanedWill struct {
	rev   int64
	node  string
	epoch uint64
	will  *broker.Will
	timer *time.Timer
}

func newWills(n *Node) *wills {
	return &wills{
		n: n, sweep: make(chan struct{}, 1), relook: make(chan struct{}, 1),
		heard: map[string]time.Time{}, pending: map[string]*orphanedWill{}, drops: map[string]string{},
		held: map[string]string{},
	}
}

// record encodes a connection's will as its record.
func (w *wills) record(cw *broker.Will) (string, error) {
	reg := w.n.reg
	v := willValue{
		Node: w.n.self, Epoch: reg.Epoch(), Lease: int64(reg.Lease()), N: w.seq.Add(1),
		Delay: cw.Delay, SessionExpiry: cw.SessionExpiry, Expiry: cw.Expiry, HasExpiry: cw.HasExpiry,
		Message: cw.Message.AppendBinary(nil),
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	if len(b) > maxWillRecord {
		return "", fmt.Errorf("cluster: a will of %d bytes is too large for the line to keep (at most %d)", len(cw.Message.Payload), maxWillRecord)
	}
	return string(b), nil
}

// claimed notes the record a claim of client wrote (ref), or that it wrote
// none (ref empty).
func (w *wills) claimed(client, ref string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ref == "" {
		delete(w.held, client)
	} else {
		w.held[client] = ref
	}
}

// released forgets client's record ref, once published or discarded here.
func (w *wills) released(client, ref string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.held[client] == ref {
		delete(w.held, client)
	}
}

// recheck runs when this node's lease changed: it lost its lease (cut off
// from etcd for longer than it) and has a new one. Every record of a
// connection here that the line took meanwhile was published as a will:
// that connection is closed, so that its client connects again.
func (w *wills) recheck(ctx context.Context) {
	reg := w.n.reg
	lease := int64(reg.Lease())
	if lease == 0 {
		// Between leases: the registry is taking a new one. Look again
		// shortly rather than wait for an event that has come already.
		if ctx.Err() == nil {
			time.AfterFunc(leaseWait, w.leaseChanged)
		}
		return
	}
	w.mu.Lock()
	if lease == w.lease {
		w.mu.Unlock()
		return
	}
	first := w.lease == 0
	w.lease = lease
	held := maps.Clone(w.held)
	again := !first && !w.again
	w.again = again
	w.mu.Unlock()
	if first {
		return // this run's first lease: nothing can have been taken
	}
	if again {
		// Once more a little later: another node whose copy had not yet
		// seen this one back may have taken a record just after this pass.
		time.AfterFunc(recheckAgain, func() {
			w.mu.Lock()
			w.lease = -1
			w.mu.Unlock()
			w.leaseChanged()
		})
	}
	for client, ref := range held {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		rec, ok, err := reg.Will(rctx, client)
		cancel()
		switch {
		case err != nil:
			w.mu.Lock()
			w.lease = -1 // check again at the next sweep
			w.mu.Unlock()
			return
		case ok && string(rec.Value) == ref:
			continue // still this connection's: nobody took it
		}
		w.released(client, ref)
		w.n.srv.WillPublishedElsewhere(client)
	}
}

// left notes that node left the registry, last heard from at heard, and
// asks for a sweep.
func (w *wills) left(node string, heard time.Time) {
	if heard.IsZero() {
		heard = time.Now()
	}
	w.mu.Lock()
	w.heard[node] = heard
	w.mu.Unlock()
	w.wake()
}

func (w *wills) wake() { signal(w.sweep) }

// leaseChanged asks for a recheck of this node's records: it may be back
// with a new lease.
func (w *wills) leaseChanged() { signal(w.relook) }

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// run sweeps at once, then whenever asked and every willSweepEvery, until
// ctx ends; and rechecks this node's own records whenever its lease may
// have changed.
func (w *wills) run(ctx context.Context) {
	t := time.NewTicker(willSweepEvery)
	defer t.Stop()
	defer w.stopAll()
	done := make(chan struct{})
	defer func() { <-done }()
	go func() {
		defer close(done)
		for {
			w.recheck(ctx)
			select {
			case <-ctx.Done():
				return
			case <-w.relook:
			}
		}
	}()
	for {
		w.sweepOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-w.sweep:
		case <-t.C:
			w.leaseChanged()
		}
	}
}

// sweepOnce reads the records and schedules the orphans not scheduled yet.
func (w *wills) sweepOnce(ctx context.Context) {
	w.retryDrops(ctx)
	reg := w.n.reg
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	recs, _, err := reg.Wills(rctx)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			w.n.log.Warn("reading the line's wills", "err", err)
			time.AfterFunc(time.Second, w.wake)
		}
		return
	}
	// A record is judged against the copy only once the copy has seen it
	// written: its writer registered before it claimed, so a node absent
	// from such a copy is really gone.
	seen := reg.Revision()
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, rec := range recs {
		if rec.ModRevision > seen {
			continue
		}
		var v willValue
		if err := json.Unmarshal(rec.Value, &v); err != nil {
			continue // another version's; its own nodes handle it
		}
		if v.Node == w.n.self && v.Epoch == reg.Epoch() {
			continue // a connection here
		}
		if info, ok := reg.NodeInfo(v.Node); ok && info.Epoch == v.Epoch {
			continue // its node is alive
		}
		if p := w.pending[rec.Client]; p != nil {
			if p.rev == rec.ModRevision {
				continue
			}
			p.timer.Stop()
		}
		cw, err := v.will()
		if err != nil {
			w.n.log.Warn("a dead gateway's client's will cannot be read", "client", rec.Client, "node", v.Node, "err", err)
			continue
		}
		heard, ok := w.heard[v.Node]
		if !ok {
			heard = now // found without seeing it go: counted from now
		}
		// The node was alive until it missed a ping: the delay counts from
		// then at the earliest, so a will is never early.
		due := time.Until(heard.Add(peer.DefaultPingInterval + cw.Due()))
		p := &orphanedWill{rev: rec.ModRevision, node: v.Node, epoch: v.Epoch, will: cw}
		client := rec.Client
		p.timer = time.AfterFunc(max(due, 0), func() { w.publish(ctx, client, p) })
		w.pending[client] = p
	}
}

// publish takes a due orphaned will's record and, if this node got it,
// publishes the will.
func (w *wills) publish(ctx context.Context, client string, p *orphanedWill) {
	if info, ok := w.n.reg.NodeInfo(p.node); ok && info.Epoch == p.epoch {
		// Back (it was cut off from etcd for a moment, not dead): its
		// client is still connected to it, and the will is its own again.
		w.unpend(client, p)
		w.cancelled.Add(1)
		return
	}
	tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	took, err := w.n.reg.TakeWill(tctx, client, p.rev)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			w.n.log.Warn("taking a dead gateway's client's will; trying again", "client", client, "node", p.node, "err", err)
			w.mu.Lock()
			if w.pending[client] == p {
				p.timer = time.AfterFunc(time.Second, func() { w.publish(ctx, client, p) })
			}
			w.mu.Unlock()
		}
		return
	}
	w.unpend(client, p)
	if !took {
		w.cancelled.Add(1)
		return
	}
	w.published.Add(1)
	w.n.log.Info("published the will of a client whose gateway died", "client", client, "node", p.node, "topic", p.will.Message.Topic)
	w.n.srv.PublishWill(p.will.At(time.Now()))
}

// unpend forgets p, client's orphaned will, unless a later record of the
// client's replaced it meanwhile.
func (w *wills) unpend(client string, p *orphanedWill) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.pending[client] == p {
		delete(w.pending, client)
	}
}

// stopAll stops the timers of the wills waiting here: another node
// publishes them.
func (w *wills) stopAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for c, p := range w.pending {
		p.timer.Stop()
		delete(w.pending, c)
	}
}

// take decides whether this node may publish a will of its own (see
// Node.TakeWill).
func (w *wills) take(client, ref string) bool {
	if ref == "" {
		return false // an earlier run's: the line publishes it from its record
	}
	w.released(client, ref)
	var v willValue
	if err := json.Unmarshal([]byte(ref), &v); err != nil {
		return true
	}
	reg := w.n.reg
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if v.Lease != 0 && v.Lease == int64(reg.Lease()) {
		// This node's lease has lasted since the claim: to every other
		// node it has been alive, and none has taken the record.
		if _, err := reg.DropWill(ctx, client, ref); err != nil {
			w.dropLater(client, ref)
		}
		return true
	}
	// The lease ended since (cut off from etcd for longer than it): the
	// others may have taken this node for dead and published the will.
	rec, ok, err := reg.Will(ctx, client)
	if err != nil {
		w.n.log.Warn("will published without knowing whether the line did already: etcd did not answer", "client", client, "err", err)
		return true
	}
	if !ok || string(rec.Value) != ref {
		return false
	}
	took, err := reg.TakeWill(ctx, client, rec.ModRevision)
	return took || err != nil
}

// drop deletes the record of a will its client discarded.
func (w *wills) drop(client, ref string) {
	if ref == "" {
		return
	}
	w.released(client, ref)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := w.n.reg.DropWill(ctx, client, ref); err != nil {
			w.dropLater(client, ref)
		}
	}()
}

// dropLater keeps a record that could not be deleted for the next sweep:
// left in place, it would be published by the line once this run ends.
func (w *wills) dropLater(client, ref string) {
	w.mu.Lock()
	w.drops[client] = ref
	w.mu.Unlock()
	w.n.log.Warn("a will's record could not be deleted; trying again later", "client", client)
}

func (w *wills) retryDrops(ctx context.Context) {
	w.mu.Lock()
	drops := w.drops
	w.drops = map[string]string{}
	w.mu.Unlock()
	for client, ref := range drops {
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := w.n.reg.DropWill(dctx, client, ref)
		cancel()
		if err != nil && !errors.Is(err, context.Canceled) {
			w.mu.Lock()
			if _, again := w.drops[client]; !again {
				w.drops[client] = ref
			}
			w.mu.Unlock()
		}
	}
}

func (w *wills) stats() WillStats {
	w.mu.Lock()
	waiting := len(w.pending)
	w.mu.Unlock()
	return WillStats{Published: w.published.Load(), Waiting: waiting, Cancelled: w.cancelled.Load()}
}
