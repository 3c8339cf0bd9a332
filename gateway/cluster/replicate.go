package cluster

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/linemq/linemq/broker"
)

// Replicas of persistent sessions, the owner's side. The broker writes a
// persistent session's changes to its Store; the replicator is that Store:
// it passes each write to the node's own store and queues it for the
// session's replicas, the ReplicaOptions.Count other nodes that rendezvous
// hashing on the client id picks from the registered nodes (every node
// computes the same). One sender per replica node sends what is queued as
// one batch per call over the mesh, in order, one call at a time; the
// replica applies the batch to its store of this node's sessions and
// answers once it is durable. Sync, which the broker calls before it
// acknowledges a message a persistent session needs, waits for the local
// commit and for each replica's answer to everything queued before it:
// "acknowledged" means on this node's disk and on the replicas', or
// delivered and acknowledged by its client before its save left the
// queue (absorbLocked: such a message never travels, as it is never
// written by the owner's store when acknowledged within its batch).
//
// A replica that cannot be reached (its node down, cut off, or not
// answering within replicaCallTimeout) is not waited for: Sync answers on
// the local commit alone (counted in ReplicaStats.Unreplicated), and the sessions
// meant for it are below their replica count until the node is back and
// has been sent each of them whole (a resync). A resync is also sent to
// every replica when the registered nodes change, since the hashing may
// then pick other replicas: it is bracketed by two marks, and the replica
// forgets the sessions of this node that the resync did not mention.

// ReplicaStore is a store of the sessions a node keeps for another node.
// One that is also a broker.Committer commits each batch at once (see
// held.apply): a replica batch comes coalesced already, and the owner's
// publishers wait for its commit.
type ReplicaStore interface {
	broker.Store
	Close() error
}

// ReplicaOptions configure the replicas of persistent sessions.
type ReplicaOptions struct {
	// Count is how many other nodes keep a copy of each persistent
	// session (cluster.replicas); 0 keeps none.
	Count int
	// Open opens, creating it if need be, the store of origin's sessions
	// kept on this node.
	Open func(origin string) (ReplicaStore, error)
	// Remove deletes origin's store (closed) once its sessions are
	// adopted or forgotten.
	Remove func(origin string) error
	// List names the origins whose stores exist here, at start.
	List func() ([]string, error)
}

// replicaCallTimeout bounds one batch's call: past it the replica is
// taken for unreachable (and resynced when it answers again).
const replicaCallTimeout = 2 * time.Second

// maxBatchBytes bounds one batch; more waiting goes in the next call.
const maxBatchBytes = 4 << 20

// callReplicaApply is the mesh call that carries a batch.
const callReplicaApply = "replica.apply"

// ReplicaStats are the owner's side's figures.
type ReplicaStats struct {
	Count        int    `json:"count"`         // cluster.replicas
	Sessions     int    `json:"sessions"`      // persistent sessions stored here
	BelowCount   int    `json:"below_count"`   // of them, with fewer replicas in step than Count
	Batches      uint64 `json:"batches"`       // batches a replica accepted
	Bytes        uint64 `json:"bytes"`         // their bytes
	Ops          uint64 `json:"ops"`           // Store writes in them
	Resyncs      uint64 `json:"resyncs"`       // whole resyncs sent
	Unreplicated uint64 `json:"unreplicated"`  // writes given up on: their replica could not be reached
	Absorbed     uint64 `json:"absorbed"`      // writes that never had to travel: a message saved and deleted before its batch went
	Adopted      uint64 `json:"adopted"`       // sessions of dead nodes adopted here from replicas
	HeldOrigins  int    `json:"held_origins"`  // nodes whose sessions this node keeps replicas of
	HeldSessions int    `json:"held_sessions"` // sessions kept here for other nodes
	FailingOver  int    `json:"failing_over"`  // gone nodes whose fail-over is under way here
}

// replicator is the Store the broker writes to on a node with replicas.
type replicator struct {
	local     broker.Store
	count     int
	self      string
	call      func(ctx context.Context, node, method string, arg []byte) ([]byte, error)
	available func(node string) bool
	log       *slog.Logger

	// snapshot is the broker's ReplicaSnapshot, set once bound.
	snapshot atomic.Pointer[func(id string, f func(*broker.SessionState)) bool]
	run      uint64 // this run's number (the registry epoch)

	mu    sync.RWMutex
	peers []string // the other registered nodes
	links map[string]*replicaLink

	sessMu   sync.Mutex
	sessions map[string]struct{} // persistent sessions stored here

	batches, bytes, ops, resyncs, unreplicated, absorbed atomic.Uint64

	// batchSeq numbers the batches of this run, for every link alike. A
	// replica takes a batch numbered at or below the last it applied from
	// this run for one sent again after its answer was lost, and answers
	// it without applying it; numbered per link, a link made anew (its
	// node gone and back, as after a cut) started again from 1, and the
	// replica dropped its resync and what followed, unseen: a gateway whose
	// card was lost then had sessions the line could not adopt (fault
	// suite, seed 5: a member resumed with Session Present 0).
	batchSeq atomic.Uint64

	stop chan struct{}
	wg   sync.WaitGroup
}

var _ broker.Store = (*replicator)(nil)

func newReplicator(local broker.Store, count int, self string, log *slog.Logger) *replicator {
	return &replicator{local: local, count: count, self: self, log: log,
		links: map[string]*replicaLink{}, sessions: map[string]struct{}{}, stop: make(chan struct{})}
}

// replicaLink is the queue of writes for one replica node and its sender.
type replicaLink struct {
	r    *replicator
	node string

	mu      sync.Mutex
	ops     []replicaOp
	enq     uint64            // ops queued, ever
	acked   uint64            // ops the replica has durably, or that were given up on
	changed chan struct{}     // closed when acked moves
	inStep  bool              // every op so far reached the replica (no gap since the last resync)
	stepAt  uint64            // the last resync's end mark (ops queued up to it): in step once acked reaches it; 0 if none waits
	resync  bool              // a resync is due once the node is available
	again   bool              // the last resync kept sessions in transition: another is due at the next poll
	seqs    map[string]uint64 // per client, the last message seq the replica has durably
	// fresh and top let a message delivered and acknowledged while its
	// save still waits here never travel (absorbLocked): fresh holds the
	// messages none of whose saves has left the queue, each with the
	// number of its latest save (ops[n-(enq-len(ops))]); top is each
	// client's highest message seq queued, above which a save is a first.
	fresh map[msgKey]uint64
	top   map[string]uint64
	// absorbFrom is when the first save of a message sent to its client
	// was queued (zero if none is): the batch holding it leaves no sooner
	// than absorbWait after, for the client's acknowledgement may absorb
	// it.
	absorbFrom time.Time
	gone       bool
	wake       chan struct{}
	// pauseUntil holds the link back after a batch the replica refused
	// or did not take: until then what is queued is given up on, and the
	// resync waits. Without it a replica that kept refusing (a node still
	// failing over this node's earlier run) was sent a resync thousands
	// of times a second.
	pauseUntil time.Time
}

// targets returns the replica nodes of client: the count highest
// rendezvous scores among the peers.
func (r *replicator) targetsLocked(client string, out []string) []string {
	out = out[:0]
	for range min(r.count, len(r.peers)) {
		best, bestScore := "", uint64(0)
		for _, p := range r.peers {
			if slices.Contains(out, p) {
				continue
			}
			if s := rendezvous(p, client); best == "" || s > bestScore {
				best, bestScore = p, s
			}
		}
		out = append(out, best)
	}
	return out
}

// rendezvous scores node for client: FNV-1a of both, mixed.
func rendezvous(node, client string) uint64 {
	const offset, prime = 14695981039346656037, 1099511628211
	h := uint64(offset)
	for i := 0; i < len(node); i++ {
		h = (h ^ uint64(node[i])) * prime
	}
	h = (h ^ 0xff) * prime
	for i := 0; i < len(client); i++ {
		h = (h ^ uint64(client[i])) * prime
	}
	// A final mix (splitmix64's) so that nearby inputs spread.
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	return h ^ h>>31
}

// record queues op for client's replicas.
func (r *replicator) record(op replicaOp) {
	if _, fwd := broker.ForwardQueueOf(op.client); fwd {
		return // a node's outbox, not a session: it dies with its node
	}
	switch op.kind {
	case opSaveSession:
		r.sessMu.Lock()
		r.sessions[op.client] = struct{}{}
		r.sessMu.Unlock()
	case opDeleteSession:
		r.sessMu.Lock()
		delete(r.sessions, op.client)
		r.sessMu.Unlock()
	}
	var buf [4]string
	r.mu.RLock()
	ts := r.targetsLocked(op.client, buf[:0])
	for _, t := range ts {
		r.links[t].queue(op)
	}
	r.mu.RUnlock()
}

func (l *replicaLink) queue(op replicaOp) {
	l.mu.Lock()
	if l.absorbLocked(&op) {
		l.mu.Unlock()
		l.r.absorbed.Add(2) // the delete, and the save it took back
		return
	}
	if op.kind == opSaveMsg && op.msg.Sent && l.absorbFrom.IsZero() {
		l.absorbFrom = time.Now()
	}
	l.ops = append(l.ops, op)
	l.enq++
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// msgKey names one stored message of a session.
type msgKey struct {
	client string
	seq    uint64
}

// absorbLocked keeps the queue from carrying what the replica would undo
// within the same wait: a message saved and then deleted (delivered and
// acknowledged) before any save of it left the queue is taken out, its
// saves blanked in place and the delete never queued, which it reports.
// A blank keeps its place, so that the numbering a Sync waits by stays
// true (a Sync with only blanks left to wait for goes at once:
// blankBeforeLocked). Only a message the replica cannot have is absorbed,
// which the seqs tell: a session's seqs only grow, and a DeleteSession
// (queued before any later save) clears the client on the replica.
//
// Under a steady load most deliveries are acknowledged within the time a
// batch is on its way, so most messages cost the replica nothing, as
// they cost the owner's store nothing when acknowledged within its own
// batch (docs/benchmarks.md, replicas).
func (l *replicaLink) absorbLocked(op *replicaOp) bool {
	switch op.kind {
	case opSaveMsg:
		k := msgKey{op.client, op.msg.Seq}
		if at, ok := l.fresh[k]; ok {
			l.ops[at-l.takenLocked()] = replicaOp{} // superseded
			l.fresh[k] = l.enq
		} else if op.msg.Seq > l.top[op.client] {
			l.fresh[k] = l.enq
		}
		l.top[op.client] = max(l.top[op.client], op.msg.Seq)
	case opDeleteMsg:
		k := msgKey{op.client, op.seq}
		if at, ok := l.fresh[k]; ok {
			delete(l.fresh, k)
			taken := l.takenLocked()
			l.ops[at-taken] = replicaOp{}
			if l.acked == taken {
				// Nothing on its way: a Sync waiting for blanks alone
				// may go (wait).
				l.ackLocked(0)
			}
			return true
		}
	case opDeleteSession:
		delete(l.top, op.client)
	}
	return false
}

// takenLocked is the number of ops that have left the queue, ever: the
// number of ops[0].
func (l *replicaLink) takenLocked() uint64 { return l.enq - uint64(len(l.ops)) }

// takeLocked removes the first n ops from the queue and returns them, with
// how many of them are not blanks; a message whose save leaves is no
// longer fresh.
func (l *replicaLink) takeLocked(n int) (ops []replicaOp, live int) {
	first := l.takenLocked()
	ops = slices.Clone(l.ops[:n])
	for i := range ops {
		switch ops[i].kind {
		case 0:
			continue
		case opSaveMsg:
			k := msgKey{ops[i].client, ops[i].msg.Seq}
			if at, ok := l.fresh[k]; ok && at == first+uint64(i) {
				delete(l.fresh, k)
			}
		}
		live++
	}
	l.ops = slices.Delete(l.ops, 0, n)
	l.absorbFrom = time.Time{}
	return ops, live
}

// countBlank counts the ops absorbLocked blanked.
func countBlank(ops []replicaOp) int {
	n := 0
	for i := range ops {
		if ops[i].kind == 0 {
			n++
		}
	}
	return n
}

// dropQueuedLocked empties the queue (given up on or closed) and reports
// how many ops were in it.
func (l *replicaLink) dropQueuedLocked() int {
	n := len(l.ops)
	l.ops = l.ops[:0]
	l.absorbFrom = time.Time{}
	clear(l.fresh)
	return n
}

// The broker.Store methods: the local write, then the replicas'.

func (r *replicator) Load(ctx context.Context) (*broker.Snapshot, error) {
	snap, err := r.local.Load(ctx)
	if err == nil {
		r.sessMu.Lock()
		for _, s := range snap.Sessions {
			if _, fwd := broker.ForwardQueueOf(s.ClientID); !fwd {
				r.sessions[s.ClientID] = struct{}{}
			}
		}
		r.sessMu.Unlock()
	}
	return snap, err
}

func (r *replicator) SaveSession(s *broker.SessionRecord) error {
	err := r.local.SaveSession(s)
	rec := *s
	rec.Subscriptions = nil
	r.record(replicaOp{kind: opSaveSession, client: s.ClientID, session: &rec})
	return err
}

func (r *replicator) DeleteSession(clientID string) error {
	err := r.local.DeleteSession(clientID)
	r.record(replicaOp{kind: opDeleteSession, client: clientID})
	return err
}

func (r *replicator) SaveSubscription(clientID string, sub broker.SubscriptionRecord) error {
	err := r.local.SaveSubscription(clientID, sub)
	r.record(replicaOp{kind: opSaveSub, client: clientID, sub: sub})
	return err
}

func (r *replicator) DeleteSubscription(clientID, filter string) error {
	err := r.local.DeleteSubscription(clientID, filter)
	r.record(replicaOp{kind: opDeleteSub, client: clientID, filter: filter})
	return err
}

func (r *replicator) SaveMessage(clientID string, m *broker.MessageRecord) error {
	err := r.local.SaveMessage(clientID, m)
	r.record(replicaOp{kind: opSaveMsg, client: clientID, msg: m})
	return err
}

func (r *replicator) DeleteMessage(clientID string, seq uint64) error {
	err := r.local.DeleteMessage(clientID, seq)
	r.record(replicaOp{kind: opDeleteMsg, client: clientID, seq: seq})
	return err
}

func (r *replicator) SetInbound(clientID string, packetID uint16, pending bool) error {
	err := r.local.SetInbound(clientID, packetID, pending)
	r.record(replicaOp{kind: opInbound, client: clientID, pid: packetID, pending: pending})
	return err
}

// SaveRetained is the local store's alone: every node keeps every retained
// message already.
func (r *replicator) SaveRetained(m *broker.Message) error { return r.local.SaveRetained(m) }

// Sync waits for the local commit and for every reachable replica to have
// what was queued for it before the call.
func (r *replicator) Sync(ctx context.Context) error {
	type want struct {
		l  *replicaLink
		at uint64
	}
	var wants [4]want
	ws := wants[:0]
	r.mu.RLock()
	for _, l := range r.links {
		l.mu.Lock()
		if l.enq > l.acked {
			ws = append(ws, want{l, l.enq})
		}
		l.mu.Unlock()
	}
	r.mu.RUnlock()
	err := r.local.Sync(ctx)
	for _, w := range ws {
		if werr := w.l.wait(ctx, w.at); werr != nil && err == nil {
			err = werr
		}
	}
	return err
}

// Commit implements broker.Committer: the broker's publishers are waiting
// and sending nothing more, so the local store commits at once when it can
// (a replica commits each batch as it comes; Sync waits for both).
func (r *replicator) Commit(ctx context.Context) error {
	if c, ok := r.local.(broker.Committer); ok {
		return c.Commit(ctx)
	}
	return r.local.Sync(ctx)
}

var _ broker.Committer = (*replicator)(nil)

// wait blocks until the replica has the first at ops, or they were given
// up on (the replica unreachable), or ctx ends.
func (l *replicaLink) wait(ctx context.Context, at uint64) error {
	for {
		l.mu.Lock()
		if l.acked >= at || l.blankBeforeLocked(at) {
			l.mu.Unlock()
			return nil
		}
		ch := l.changed
		l.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// blankBeforeLocked reports whether the ops before at that the replica
// does not have yet are all blanks (absorbed): none on its way, and none
// queued but blanks. A Sync then has nothing to wait for: a message its
// subscriber acknowledged before its batch left needs no copy.
func (l *replicaLink) blankBeforeLocked(at uint64) bool {
	taken := l.takenLocked()
	if l.acked < taken {
		return false
	}
	return countBlank(l.ops[:at-taken]) == int(at-taken)
}

// setPeers is told the other registered nodes: links are made for new
// ones, and every replica is resynced, since the hashing may pick others
// now.
func (r *replicator) setPeers(peers []string) {
	peers = slices.DeleteFunc(slices.Clone(peers), func(p string) bool { return p == r.self })
	slices.Sort(peers)
	r.mu.Lock()
	if slices.Equal(peers, r.peers) {
		r.mu.Unlock()
		return
	}
	r.peers = peers
	for name, l := range r.links {
		if !slices.Contains(peers, name) {
			delete(r.links, name)
			l.close()
		}
	}
	for _, p := range peers {
		l := r.links[p]
		if l == nil {
			l = newReplicaLink(r, p)
			r.links[p] = l
			r.wg.Go(l.send)
		}
		l.mu.Lock()
		l.resync, l.inStep, l.stepAt = true, false, 0
		l.mu.Unlock()
		l.signal()
	}
	r.mu.Unlock()
}

// newReplicaLink makes the (not yet started) link to node.
func newReplicaLink(r *replicator, node string) *replicaLink {
	return &replicaLink{r: r, node: node, changed: make(chan struct{}), wake: make(chan struct{}, 1),
		seqs: map[string]uint64{}, fresh: map[msgKey]uint64{}, top: map[string]uint64{}}
}

func (l *replicaLink) signal() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// close ends the link: whoever waits for it is released (the node is gone).
func (l *replicaLink) close() {
	l.mu.Lock()
	l.gone = true
	l.acked = l.enq
	l.dropQueuedLocked()
	close(l.changed)
	l.changed = make(chan struct{})
	l.mu.Unlock()
	l.signal()
}

// send is the link's sender: it sends what is queued, one batch at a
// time, and a resync when one is due and the node is available. It looks
// again every resyncPoll for a node that was unreachable.
func (l *replicaLink) send() {
	t := time.NewTicker(resyncPoll)
	defer t.Stop()
	var enc batchEncoder
	for {
		select {
		case <-l.wake:
		case <-t.C:
			l.mu.Lock()
			if l.again {
				l.again, l.resync = false, true
			}
			l.mu.Unlock()
		case <-l.r.stop:
			return
		}
		if !l.drain(&enc) {
			return
		}
	}
}

// absorbWait is how long a batch holding the save of a message just sent
// to its client waits, so that the client's acknowledgement can absorb
// the message (absorbLocked) before it travels. A message queued for an
// offline session is not waited for: nothing will absorb it soon.
const absorbWait = 2 * time.Millisecond

// resyncPoll is how often a link whose node was unreachable looks again.
const resyncPoll = 250 * time.Millisecond

// drain sends what is queued until nothing is, or the node cannot be
// reached; it reports false once the link is closed.
func (l *replicaLink) drain(enc *batchEncoder) bool {
	r := l.r
	for {
		l.mu.Lock()
		switch {
		case l.gone:
			l.mu.Unlock()
			return false
		case !r.available(l.node) || time.Now().Before(l.pauseUntil):
			// Nobody waits for a replica that cannot answer: what is
			// queued is given up on, and sent whole later (resync), at
			// the next poll.
			if n := l.dropQueuedLocked(); n > 0 {
				l.giveUpLocked(n)
			}
			l.mu.Unlock()
			return true
		case l.resync && r.snapshot.Load() != nil:
			l.resync = false
			l.mu.Unlock()
			l.startResync()
			continue
		case len(l.ops) == 0:
			l.mu.Unlock()
			return true
		case !l.absorbFrom.IsZero() && time.Since(l.absorbFrom) < absorbWait:
			d := absorbWait - time.Since(l.absorbFrom)
			l.mu.Unlock()
			time.Sleep(d)
			continue
		}
		n, size := 0, 0
		for n < len(l.ops) && size < maxBatchBytes {
			size += opSize(&l.ops[n])
			n++
		}
		ops, live := l.takeLocked(n)
		l.mu.Unlock()

		ok := true
		if live > 0 {
			enc.reset(r.run, r.batchSeq.Add(1))
			for i := range ops {
				if ops[i].kind != 0 {
					enc.add(&ops[i])
				}
			}
			ok = l.deliver(enc.buf)
		}
		l.mu.Lock()
		if !ok {
			l.giveUpLocked(n)
			l.pauseUntil = time.Now().Add(resyncPoll)
			l.mu.Unlock()
			return true
		}
		for _, op := range ops {
			switch op.kind {
			case opSaveMsg:
				l.seqs[op.client] = max(l.seqs[op.client], op.msg.Seq)
			case opDeleteSession:
				delete(l.seqs, op.client)
			}
		}
		l.ackLocked(uint64(n))
		l.mu.Unlock()
		if live > 0 {
			r.batches.Add(1)
			r.bytes.Add(uint64(len(enc.buf)))
			r.ops.Add(uint64(live))
		}
	}
}

// ackLocked records n more ops done with and wakes whoever waits. The
// replica is in step once it has the last resync's end mark, and no gap
// has opened since (a resync is not due).
func (l *replicaLink) ackLocked(n uint64) {
	l.acked += n
	if l.stepAt != 0 && l.acked >= l.stepAt && !l.resync {
		l.inStep, l.stepAt = true, 0
	}
	close(l.changed)
	l.changed = make(chan struct{})
}

// giveUpLocked counts n ops that did not reach the replica as done with:
// the replica misses them, so it is sent everything whole once it answers
// again.
func (l *replicaLink) giveUpLocked(n int) {
	l.inStep, l.resync, l.stepAt = false, true, 0
	l.r.unreplicated.Add(uint64(n))
	l.ackLocked(uint64(n))
}

// deliver sends one batch, again while the node is available and the
// stream breaks under it; it reports whether the replica has it.
func (l *replicaLink) deliver(batch []byte) bool {
	r := l.r
	for attempt := 0; attempt < 3; attempt++ {
		if !r.available(l.node) {
			return false
		}
		ctx, cancel := context.WithTimeout(context.Background(), replicaCallTimeout)
		stop := l.cancelWhenUnavailable(cancel)
		_, err := r.call(ctx, l.node, callReplicaApply, batch)
		stop()
		cancel()
		if err != nil && !r.available(l.node) {
			return false // frozen or cut off: taken for down by the mesh
		}
		if err == nil {
			return true
		}
		if errors.Is(err, context.DeadlineExceeded) {
			r.log.Warn("a replica did not answer in time; its sessions are resent whole when it does", "replica", l.node)
			return false
		}
		r.log.Debug("sending to a replica", "replica", l.node, "err", err)
	}
	return false
}

// cancelWhenUnavailable calls cancel as soon as the mesh takes the link's
// node for down (a missed ping: within 1.5 s of a freeze or a cut), so that
// an acknowledgement waits for an unreachable replica no longer than a
// share-group delivery waits for an unreachable member. The returned stop
// ends the watch.
func (l *replicaLink) cancelWhenUnavailable(cancel context.CancelFunc) (stop func()) {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(availabilityPoll)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if !l.r.available(l.node) {
					cancel()
					return
				}
			}
		}
	}()
	return func() { close(done) }
}

// availabilityPoll is how often a call to a replica checks that the mesh
// still takes the replica for up.
const availabilityPoll = 25 * time.Millisecond

// startResync queues the begin mark, every session meant for the link's
// node whole (each taken under its lock, in its place among the writes),
// and the end mark.
func (l *replicaLink) startResync() {
	r := l.r
	snap := *r.snapshot.Load()
	r.resyncs.Add(1)
	l.queue(replicaOp{kind: opResyncBegin})
	r.sessMu.Lock()
	all := make([]string, 0, len(r.sessions))
	for id := range r.sessions {
		all = append(all, id)
	}
	r.sessMu.Unlock()
	ids := all[:0]
	var buf [4]string
	r.mu.RLock()
	for _, id := range all {
		if slices.Contains(r.targetsLocked(id, buf[:0]), l.node) {
			ids = append(ids, id)
		}
	}
	r.mu.RUnlock()
	kept := 0
	for _, id := range ids {
		ok := snap(id, func(st *broker.SessionState) {
			l.queue(replicaOp{kind: opDeleteSession, client: id})
			rec := st.Session
			rec.Subscriptions = nil
			l.queue(replicaOp{kind: opSaveSession, client: id, session: &rec})
			for _, sub := range st.Session.Subscriptions {
				l.queue(replicaOp{kind: opSaveSub, client: id, sub: sub})
			}
			for _, m := range st.Messages {
				l.queue(replicaOp{kind: opSaveMsg, client: id, msg: m})
			}
			for _, pid := range st.Inbound {
				l.queue(replicaOp{kind: opInbound, client: id, pid: pid, pending: true})
			}
		})
		if !ok {
			// Recorded as saved, but not in the broker at this instant:
			// being installed (a hand-over, an adoption: its records are
			// written before it is published) or let go. Its writes are
			// queued in order around this resync; the replica keeps what
			// they made of it rather than forget it at the end mark, and
			// it is sent whole at the next resync, shortly.
			l.queue(replicaOp{kind: opKeep, client: id})
			kept++
		}
	}
	l.queue(replicaOp{kind: opResyncEnd})
	l.mu.Lock()
	if !l.resync {
		// In step once the replica has everything up to the end mark
		// (ackLocked), unless a gap opens before (then resync is set).
		// Marked at once, as before, a session counted as in step while
		// its copy was still in this queue or on its way: the page's
		// sessions below their replica count, and the fault suite's wait
		// for the line to be at rest before it destroys a card, passed
		// with a replica that did not have it yet.
		l.stepAt = l.enq
	}
	if kept > 0 {
		l.again = true
	}
	l.mu.Unlock()
	r.log.Info("sessions sent whole to their replica", "replica", l.node, "sessions", len(ids)-kept, "kept_in_transition", kept, "clients", someClients(ids))
}

// opSize estimates an op's bytes in a batch.
func opSize(op *replicaOp) int {
	n := 16 + len(op.client)
	if op.msg != nil && op.msg.Message != nil {
		n += len(op.msg.Message.Topic) + len(op.msg.Message.Payload) + 32
	}
	return n
}

// replicated reports the highest message seq of client that its replicas
// all have durably (for letting go of a copy adopted elsewhere).
func (r *replicator) replicated(client string) uint64 {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var buf [4]string
	upTo, first := uint64(0), true
	for _, t := range r.targetsLocked(client, buf[:0]) {
		l := r.links[t]
		l.mu.Lock()
		s := l.seqs[client]
		l.mu.Unlock()
		if first || s < upTo {
			upTo, first = s, false
		}
	}
	return upTo
}

// stats fills the owner's side of ReplicaStats.
func (r *replicator) stats(st *ReplicaStats) {
	r.sessMu.Lock()
	all := make([]string, 0, len(r.sessions))
	for id := range r.sessions {
		all = append(all, id)
	}
	r.sessMu.Unlock()
	r.mu.RLock()
	defer r.mu.RUnlock()
	st.Count = r.count
	st.Sessions = len(all)
	st.Batches, st.Bytes, st.Ops = r.batches.Load(), r.bytes.Load(), r.ops.Load()
	st.Resyncs, st.Unreplicated, st.Absorbed = r.resyncs.Load(), r.unreplicated.Load(), r.absorbed.Load()
	want := min(r.count, len(r.peers))
	var buf [4]string
	for _, id := range all {
		inStep := 0
		for _, t := range r.targetsLocked(id, buf[:0]) {
			l := r.links[t]
			l.mu.Lock()
			if l.inStep && r.available(t) {
				inStep++
			}
			l.mu.Unlock()
		}
		if inStep < r.count || inStep < want {
			st.BelowCount++
		}
	}
}

// close stops the senders, after a last Sync has had its chance.
func (r *replicator) close() {
	select {
	case <-r.stop:
		return
	default:
	}
	close(r.stop)
	r.mu.Lock()
	for _, l := range r.links {
		l.close()
	}
	r.mu.Unlock()
	r.wg.Wait()
}
