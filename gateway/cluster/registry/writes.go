package registry

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Write is a change queued for the registrar. It completes once the change
// is committed in etcd (or found already there), or fails with ErrClosed.
// A write that is waited on with a deadline that passes is not withdrawn:
// the registrar still makes it, since it describes this node's state.
type Write struct {
	done chan struct{}
	err  error
	rev  int64
}

func newWrite() *Write { return &Write{done: make(chan struct{})} }

// complete is called once, by the registrar (or by Close).
func (w *Write) complete(rev int64, err error) {
	w.rev, w.err = rev, err
	close(w.done)
}

// Done is closed when the write has completed.
func (w *Write) Done() <-chan struct{} { return w.done }

// Err waits for the write to complete and returns its outcome: nil when it
// is committed.
func (w *Write) Err() error {
	<-w.done
	return w.err
}

// Revision waits for the write to complete and returns the etcd revision
// by which it is committed (0 if it failed). Every node whose copy has
// reached this revision sees it.
func (w *Write) Revision() int64 {
	<-w.done
	return w.rev
}

// Wait waits for the write to complete or ctx to end, whichever is first.
// The broker's SUBACK waits here with a bound of a few seconds.
func (w *Write) Wait(ctx context.Context) error {
	select {
	case <-w.done:
		return w.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// opKind is what a queued op asks for.
type opKind uint8

const (
	opAddRoute opKind = iota + 1
	opRemoveRoute
	opAddMember
	opRemoveMember
	opClaim
	opRelease
	opBarrier
)

// op is one queued request. Fields beyond the request belong to the
// registrar.
type op struct {
	kind                  opKind
	group, filter, client string
	qos                   byte
	at                    time.Time
	w                     *Write
	claim                 *claimState // opClaim only

	// The release of a claim whose caller gave up (its connection
	// refused) deletes the will that claim wrote too, and keepRecord keeps
	// the ownership record itself (ResumeHandedOver).
	will       string
	keepRecord bool
}

// claimState is a claim's progress, kept by the registrar, and its outcome
// for ClaimSession (read once the Write is done).
type claimState struct {
	ctx      context.Context // the caller's; a claim not yet sent when it ends is dropped
	sent     bool            // sent at least once: seen through from then on
	seq      uint64          // the claim's number, the same on every attempt
	expect   Owner           // the record the next attempt expects to replace
	attempts int             // attempts that found the record changed
	result   Claim

	// setWill: the claim is a new connection's, and writes its will
	// record (will, or none: the record is deleted) in the same
	// transaction, so that no moment exists when this node owns the
	// client and the line holds another connection's will for it.
	setWill bool
	will    string

	// replicaOf: the claim adopts a gone node's session from a replica
	// (ClaimReplica). It succeeds only where nobody owns the client.
	replicaOf string
	// resume: the claim's session continues the one it takes over, so a
	// record naming the node that session was adopted from (Replica)
	// keeps naming it (ResumeConnection).
	resume bool
	// keep: a claim seen through when its caller gives up is not undone
	// (ResumeHandedOver).
	keep bool
	// seen: the record the caller decided on; another node's record
	// found in its place fails the claim (ResumeConnection).
	seen *Owner
}

// AddRoute records that this node has an ordinary subscriber of filter.
// Routes are counted: the key routes/<node>/<filter> is written on the
// first AddRoute of a filter and deleted on the RemoveRoute that balances
// the last one, so call both once per subscription (client, filter), not
// per SUBSCRIBE packet that merely replaces one. The Write completes when
// the route is committed (at once, in queue order, if it already was).
func (r *Registry) AddRoute(filter string) *Write {
	return r.enqueue(&op{kind: opAddRoute, filter: filter})
}

// RemoveRoute balances an AddRoute of filter (see AddRoute).
func (r *Registry) RemoveRoute(filter string) *Write {
	return r.enqueue(&op{kind: opRemoveRoute, filter: filter})
}

// AddMember records that client, whose session this node holds, is a
// member of the share group (group, filter) with the granted QoS. Adding a
// member already registered with the same QoS writes nothing; a new QoS
// rewrites the value and keeps the member's place in the order.
func (r *Registry) AddMember(group, filter, client string, qos byte) *Write {
	return r.enqueue(&op{kind: opAddMember, group: group, filter: filter, client: client, qos: qos, at: time.Now().UTC()})
}

// RemoveMember records that client left the group (UNSUBSCRIBE, or its
// session ended).
func (r *Registry) RemoveMember(group, filter, client string) *Write {
	return r.enqueue(&op{kind: opRemoveMember, group: group, filter: filter, client: client})
}

// Barrier completes once the writes of routes and members queued before
// it are committed (claims complete on their own); its Revision is then
// at least theirs, so a node whose copy has reached it has seen them.
func (r *Registry) Barrier() *Write {
	return r.enqueue(&op{kind: opBarrier})
}

// ClaimSession makes this node the owner of client's session, taking it
// over from whoever owned it, and returns whom from. It compares on the
// ownership record's mod revision, so two nodes claiming at once are
// ordered: each claim takes over from exactly one predecessor and no two
// nodes ever own the client together. The claim lasts until
// ReleaseSession, until another node claims the client, or until this
// node's lease ends.
//
// If ctx ends first, ClaimSession returns its error and undoes the claim
// if it was made after all (a release is queued behind it).
func (r *Registry) ClaimSession(ctx context.Context, client string) (Claim, error) {
	return r.claim(ctx, client, &claimState{ctx: ctx})
}

// ClaimConnection is ClaimSession for a client connecting here: in the same
// transaction it records the connection's will (a value of the caller's
// making), or deletes the record of an earlier connection's
// will when will is empty. The record is bound to no lease: it outlives
// this node, so that the line can publish the will if this node dies with
// the connection open (Wills, TakeWill).
func (r *Registry) ClaimConnection(ctx context.Context, client, will string) (Claim, error) {
	return r.claim(ctx, client, &claimState{ctx: ctx, setWill: true, will: will})
}

// ResumeConnection is ClaimConnection for a client resuming its session
// (clean start 0). Where the record it replaces names a node the session
// was adopted from (Owner.ReplicaOf), the new record names it too: the
// state still descends from that node's replica, and that node, coming
// back with messages only it had (it was cut off, not dead), must hand
// them on to the session rather than drop them as for a client that left
// it (fault-suite seed 12: 344 acknowledged messages lost when the client
// had resumed its adopted session on the adopter before the old owner
// healed).
//
// seen is the record the caller decided on (zero: it found none): the
// claim replaces that record, or one of this node's own, and fails with
// ErrOwned when another node has claimed the client since, so that the
// caller asks that node for the session rather than take it over empty.
// Taking it over anyway, a gateway that had just run again after a stall
// started a fresh session over the one another gateway had adopted a few
// milliseconds earlier with 1,120 queued messages (fault-suite seed 44).
func (r *Registry) ResumeConnection(ctx context.Context, client, will string, seen Owner) (Claim, error) {
	return r.claim(ctx, client, &claimState{ctx: ctx, setWill: true, will: will, resume: true, seen: &seen})
}

// ResumeHandedOver is ResumeConnection for a session another node has just
// handed over to this one, seen being that node's record the hand-over
// was asked under: once sent, the claim is kept even if the caller gives
// up waiting for it (only the will it wrote goes: its connection was
// refused). Undone, it would leave the line with no copy: the node that
// handed the session over lets go of its own as soon as it sees the claim,
// and the release after it names nobody to ask. Like ResumeConnection, it
// lands only over seen (or a record of this node's, or none): over a later
// claim (the client gone back to that node, or on to another, while this
// claim waited for etcd) it took the session from the node that has it
// for this one, which had let its copy go on seeing that claim, and the
// client resuming here got a new session (fault suite, seed 2).
func (r *Registry) ResumeHandedOver(ctx context.Context, client, will string, seen Owner) (Claim, error) {
	return r.claim(ctx, client, &claimState{ctx: ctx, setWill: true, will: will, resume: true, keep: true, seen: &seen})
}

// ClaimReplica makes this node the owner of client's session, adopted
// from the replica it kept of node's session, node being gone: only if
// nobody owns the client now (node's record went with its lease). It
// fails with ErrOwned when another node owns it: its client resumed
// there, or another replica was adopted first. The record names node, so
// that node, should it come back, knows its copy lives on here.
func (r *Registry) ClaimReplica(ctx context.Context, client, node string) (Claim, error) {
	return r.claim(ctx, client, &claimState{ctx: ctx, replicaOf: node})
}

func (r *Registry) claim(ctx context.Context, client string, cs *claimState) (Claim, error) {
	w := r.enqueue(&op{kind: opClaim, client: client, claim: cs})
	if err := w.Wait(ctx); err != nil {
		if ctx.Err() != nil {
			r.enqueue(&op{kind: opRelease, client: client, will: cs.will, keepRecord: cs.keep})
		}
		return Claim{}, err
	}
	return cs.result, nil
}

// ReleaseSession gives up this node's ownership of client's session, if it
// still has it (a session another node has claimed since is left alone).
func (r *Registry) ReleaseSession(ctx context.Context, client string) error {
	return r.enqueue(&op{kind: opRelease, client: client}).Wait(ctx)
}

// enqueue hands an op to the registrar without blocking: the queue is
// unbounded, bounded in practice by the rate of subscribes and connects.
func (r *Registry) enqueue(o *op) *Write {
	o.w = newWrite()
	r.qmu.Lock()
	if r.qclose {
		r.qmu.Unlock()
		o.w.complete(0, ErrClosed)
		return o.w
	}
	r.queue = append(r.queue, o)
	r.qmu.Unlock()
	select {
	case r.qsig <- struct{}{}:
	default: // already signalled
	}
	return o.w
}

// takeQueue returns the queued ops and empties the queue.
func (r *Registry) takeQueue() []*op {
	r.qmu.Lock()
	defer r.qmu.Unlock()
	q := r.queue
	r.queue = nil
	return q
}

// failQueued completes every op still queued with err.
func (r *Registry) failQueued(err error) {
	for _, o := range r.takeQueue() {
		o.w.complete(0, err)
	}
}

// LookupSession reads the owner of client's session from etcd itself (a
// linearizable read) rather than from the copy, for a decision the copy
// may be a moment late for: a client resuming here a session that another
// node took only just now, whose record the watch has not brought yet.
func (r *Registry) LookupSession(ctx context.Context, client string) (Owner, bool, error) {
	o, ok, _, err := r.LookupSessionAt(ctx, client)
	return o, ok, err
}

// LookupSessionAt is LookupSession that also returns the etcd revision the
// record was read at: a caller that finds no owner can wait for its copy
// to reach it (AwaitRevision), and so for the events that came with the
// record's deletion (a node's lease ending takes its node and its
// sessions' records in one revision).
func (r *Registry) LookupSessionAt(ctx context.Context, client string) (Owner, bool, int64, error) {
	resp, err := r.opts.Client.Get(ctx, r.keys.session(client))
	if err != nil {
		return Owner{}, false, 0, err
	}
	rev := resp.Header.Revision
	if len(resp.Kvs) == 0 {
		return Owner{}, false, rev, nil
	}
	var v sessionValue
	if err := json.Unmarshal(resp.Kvs[0].Value, &v); err != nil {
		return Owner{}, false, rev, fmt.Errorf("registry: session record of %q: %w", client, err)
	}
	o := v.owner()
	o.Revision = resp.Kvs[0].ModRevision
	return o, true, rev, nil
}

// CurrentRevision returns etcd's revision now, by a linearizable read: a
// caller that waits for it (AwaitRevision) has then seen every change made
// in the line before the call. The registrar catches up so before it
// registers again; a broker after a stall (cluster.Node.CatchUp).
func (r *Registry) CurrentRevision(ctx context.Context) (int64, error) {
	resp, err := r.cli.Get(ctx, r.keys.prefix, clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	return resp.Header.Revision, nil
}

// AwaitRevision waits until this node's copy has delivered every event up
// to rev, or ctx ends (its error).
func (r *Registry) AwaitRevision(ctx context.Context, rev int64) error {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for r.delivered.Load() < rev {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}
