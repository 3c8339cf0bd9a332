package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// errLeaseLost is the reason reported while the lease is being renewed.
var errLeaseLost = errors.New("registry: lease lost; registering again")

// maxClaimAttempts bounds how often one claim retries against records
// that other nodes keep changing.
const maxClaimAttempts = 16

// heldSession is an ownership record this node wrote and believes it holds.
type heldSession struct {
	value string
	rev   int64
}

// registrar is the state of the one goroutine that writes this node's keys.
// Nothing else touches it, so it has no lock.
type registrar struct {
	r *Registry

	sess      *concurrency.Session // nil while there is no lease
	oldLeases []clientv3.LeaseID   // leases lost, to revoke once registered again
	lostLease bool                 // a lease was lost: catch up before registering again

	// What this node holds: the truth every (re-)registration writes out.
	held     map[string]string      // own-range key -> value (node, routes, members)
	routes   map[string]int         // filter -> subscriptions counted by AddRoute
	sessions map[string]heldSession // client -> ownership record written

	dirty    []string            // held keys changed since last written, in order
	dirtySet map[string]struct{} // the same, for lookups
	waiting  []*op               // key ops completed once dirty is written
	claims   []*op               // session ops, in arrival order
	seq      uint64              // claim numbers (Owner.Seq)
	lastRev  int64               // revision of the last transaction committed

	backoff time.Duration
}

func (r *Registry) runRegistrar() {
	defer r.wg.Done()
	g := &registrar{
		r:        r,
		held:     map[string]string{},
		routes:   map[string]int{},
		sessions: map[string]heldSession{},
		dirtySet: map[string]struct{}{},
	}
	g.held[r.keys.node(r.opts.Node)] = mustJSON(nodeValue{Addr: r.opts.Addr, Version: r.opts.Version, Epoch: r.opts.Epoch, Store: r.opts.Store})
	defer g.shutdown()
	if !g.awaitPredecessor() {
		return
	}

	for r.ctx.Err() == nil {
		if g.sess == nil {
			// What is queued (the subscriptions a restarted gateway
			// restored) is held before registering: the registration
			// writes it in the transaction that clears an earlier run's
			// keys, so the other nodes never see those routes and
			// members go and come back.
			var err error
			if g.lostLease {
				err = g.catchUp()
			}
			if err == nil {
				g.take()
				err = g.register()
			}
			if err != nil {
				if r.ctx.Err() != nil {
					return
				}
				r.log.Warn("registering failed; retrying", "err", err)
				r.health.set(sourceWriter, err)
				g.sleep()
				continue
			}
			g.backoff = 0
			r.health.set(sourceWriter, nil)
			r.setReady(false, true)
		}
		g.take()
		if g.idle() {
			select {
			case <-r.qsig:
			case <-g.sess.Done():
				g.lost()
			case <-r.ctx.Done():
			}
			continue
		}
		if err := g.flush(); err != nil {
			if r.ctx.Err() != nil {
				return
			}
			if errors.Is(err, rpctypes.ErrLeaseNotFound) || isDone(g.sess.Done()) {
				g.lost()
				continue
			}
			r.log.Warn("registry write failed; retrying", "err", err)
			r.health.set(sourceWriter, err)
			g.sleep()
			continue
		}
		g.backoff = 0
		r.health.set(sourceWriter, nil)
	}
}

// errAwaitingPredecessor is the reason reported while awaitPredecessor
// waits.
var errAwaitingPredecessor = errors.New("registry: new storage: waiting for the earlier run's lease to end before registering")

// predecessorPoll is how often a run waiting for its predecessor's
// registration to end looks again.
const predecessorPoll = 200 * time.Millisecond

// awaitPredecessor waits, before the first registration, while this node
// is registered by an earlier run that had another store (Options.Store).
// It reports false if the registry closed meanwhile.
func (g *registrar) awaitPredecessor() bool {
	r := g.r
	if r.opts.Store == "" {
		return true
	}
	logged := false
	for {
		ctx, cancel := context.WithTimeout(r.ctx, r.opts.RequestTimeout)
		resp, err := r.cli.Get(ctx, r.keys.node(r.opts.Node))
		cancel()
		if err == nil {
			var v nodeValue
			if len(resp.Kvs) == 0 || json.Unmarshal(resp.Kvs[0].Value, &v) != nil || v.Store == "" || v.Store == r.opts.Store {
				if logged {
					r.log.Info("the earlier run's registration has ended; registering")
				}
				return true
			}
			if !logged {
				logged = true
				r.log.Warn("this node's storage is not the one its earlier run registered (data directory lost or replaced): "+
					"waiting for that run's lease to end, so that the line fails its sessions over from their replicas",
					"earlier-epoch", v.Epoch, "earlier-store", v.Store, "store", r.opts.Store, "ttl", time.Duration(r.ttl)*time.Second)
				r.health.set(sourceWriter, errAwaitingPredecessor)
			}
		} else if r.ctx.Err() == nil {
			r.health.set(sourceWriter, err)
		}
		t := time.NewTimer(predecessorPoll)
		select {
		case <-t.C:
		case <-r.ctx.Done():
			t.Stop()
			return false
		}
	}
}

func isDone(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// maxRetryBackoff caps the retries' backoff: a gateway back from a
// partition learns what changed meanwhile (a client taken over elsewhere)
// within about a second, while three to five gateways retrying once a
// second cost etcd nothing.
const maxRetryBackoff = time.Second

// sleep waits before a retry, backing off exponentially from 100 ms to 1 s
// with jitter, so gateways that lost etcd together do not return in step.
// It ends early on Close or when the lease is lost.
func (g *registrar) sleep() {
	g.backoff = min(max(2*g.backoff, 100*time.Millisecond), maxRetryBackoff)
	d := g.backoff/2 + rand.N(g.backoff/2+1)
	t := time.NewTimer(d)
	defer t.Stop()
	var lost <-chan struct{}
	if g.sess != nil {
		lost = g.sess.Done()
	}
	select {
	case <-t.C:
	case <-lost:
	case <-g.r.ctx.Done():
	}
}

// lost forgets a lease that ended while the process lives; the next turn
// of the loop takes a new one and writes everything held again.
func (g *registrar) lost() {
	r := g.r
	r.log.Warn("lease lost; registering again", "lease", fmt.Sprintf("%x", g.sess.Lease()))
	r.health.set(sourceWriter, errLeaseLost)
	g.sess.Orphan()
	g.oldLeases = append(g.oldLeases, g.sess.Lease())
	g.sess = nil
	g.lostLease = true
	r.lease.Store(0)
}

// catchUp waits, before this node registers again after losing its
// lease, until its copy has delivered (OnEvent) every change etcd had when
// asked: the sessions other nodes took meanwhile are let go first, and
// with them their routes (queued for take), so the other nodes, seeing
// this node registered, forward nothing here for clients it no longer has.
// Registering first, a gateway back from a cut was sent a message for an
// ordinary subscriber still connected to it, whose session another
// gateway had adopted and queued older messages in; it delivered the
// newer one, and the adopted session came back with the older ones after
// it, without DUP (fault-suite seed 5). The wait is bounded by
// RequestTimeout: a copy that cannot catch up must not keep the node from
// registering. When etcd does not answer the revision's read, catchUp
// fails and the registration waits for the next try: registering anyway,
// as etcd came back between the two requests, a gateway registered 20 ms
// before its copy's re-read let the adopted session go (fault-suite seed
// 5 again, two messages out of order).
func (g *registrar) catchUp() error {
	r := g.r
	ctx, cancel := context.WithTimeout(r.ctx, r.opts.RequestTimeout)
	defer cancel()
	rev, err := r.CurrentRevision(ctx)
	if err != nil {
		return fmt.Errorf("registry: reading the revision to catch up to: %w", err)
	}
	if err := r.AwaitRevision(ctx, rev); err != nil && r.ctx.Err() == nil {
		r.log.Warn("registering again before this node's copy of the registry caught up",
			"revision", rev, "delivered", r.delivered.Load(), "err", err)
	}
	return nil
}

// register takes a new lease and writes everything this node holds under
// it: the first registration and every one after a lost lease.
func (g *registrar) register() error {
	r := g.r
	ctx, cancel := context.WithTimeout(r.ctx, r.opts.RequestTimeout)
	grant, err := r.cli.Grant(ctx, r.ttl)
	cancel()
	if err != nil {
		return fmt.Errorf("registry: lease: %w", err)
	}
	// The session keeps the lease alive until r.ctx ends; it is told the
	// lease rather than granting one so the grant above is bounded.
	sess, err := concurrency.NewSession(r.cli, concurrency.WithLease(grant.ID), concurrency.WithContext(r.ctx))
	if err != nil {
		g.revoke(grant.ID)
		return fmt.Errorf("registry: keep lease alive: %w", err)
	}
	g.sess = sess
	r.stats.leases.Add(1)
	if err := g.syncAll(); err != nil {
		sess.Orphan()
		g.sess = nil
		g.revoke(grant.ID)
		return err
	}
	r.lease.Store(int64(grant.ID))
	g.lostLease = false
	for _, id := range g.oldLeases {
		g.revoke(id)
	}
	g.oldLeases = nil
	r.log.Info("registered", "lease", fmt.Sprintf("%x", grant.ID), "keys", len(g.held), "sessions", len(g.sessions))
	return nil
}

// revoke revokes a lease, best effort: an unreachable etcd lets it expire.
func (g *registrar) revoke(id clientv3.LeaseID) { g.revokeWithin(id, g.r.opts.RequestTimeout) }

// shutdownRevokeTimeout bounds the revocation of the lease when the
// registry closes.
const shutdownRevokeTimeout = time.Second

// revokeWithin revokes a lease, giving up after d.
func (g *registrar) revokeWithin(id clientv3.LeaseID, d time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), min(d, g.r.opts.RequestTimeout))
	defer cancel()
	if _, err := g.r.cli.Revoke(ctx, id); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		g.r.log.Debug("revoking lease failed; it will expire", "lease", fmt.Sprintf("%x", id), "err", err)
	}
}

// syncAll makes etcd hold exactly what this node holds, under the current
// lease: it reads the node's own range, puts every held key (a key that
// survived keeps its create revision, so its place in the order), deletes
// keys left from an earlier lease or an earlier run, and rewrites the
// ownership records it still holds. Leases seen on the old keys are
// revoked afterwards, taking with them whatever else they carried.
func (g *registrar) syncAll() error {
	r := g.r
	me := r.opts.Node
	lease := g.sess.Lease()
	ctx, cancel := context.WithTimeout(r.ctx, r.opts.RequestTimeout)
	resp, err := r.cli.Txn(ctx).Then(
		clientv3.OpGet(r.keys.node(me)),
		clientv3.OpGet(r.keys.routesOf(me), clientv3.WithPrefix(), clientv3.WithKeysOnly()),
		clientv3.OpGet(r.keys.membersOf(me), clientv3.WithPrefix(), clientv3.WithKeysOnly()),
	).Commit()
	cancel()
	if err != nil {
		return fmt.Errorf("registry: read own keys: %w", err)
	}
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 {
		var v nodeValue
		if json.Unmarshal(kvs[0].Value, &v) == nil && v.Epoch != r.opts.Epoch {
			// Normally this node's previous run, crashed less than a TTL
			// ago. If that run is in fact alive, two gateways share one
			// name and will keep revoking each other's leases: say so.
			r.log.Warn("taking over the registration of an earlier run of this node; if that run is still alive, two gateways share the name",
				"earlier-epoch", v.Epoch, "earlier-addr", v.Addr)
		}
	}
	found := map[string]bool{}
	for _, rr := range resp.Responses {
		for _, kv := range rr.GetResponseRange().Kvs {
			found[string(kv.Key)] = true
			if id := clientv3.LeaseID(kv.Lease); id != clientv3.NoLease && id != lease && !slices.Contains(g.oldLeases, id) {
				g.oldLeases = append(g.oldLeases, id) // an earlier run's
			}
		}
	}

	nodeKey := r.keys.node(me)
	items := []item{{op: clientv3.OpPut(nodeKey, g.held[nodeKey], clientv3.WithLease(lease))}}
	keys := make([]string, 0, len(g.held))
	for k := range g.held {
		if k != nodeKey {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		items = append(items, item{op: clientv3.OpPut(k, g.held[k], clientv3.WithLease(lease))})
	}
	stale := make([]string, 0)
	for k := range found {
		if _, ok := g.held[k]; !ok {
			stale = append(stale, k)
		}
	}
	slices.Sort(stale)
	for _, k := range stale {
		items = append(items, item{op: clientv3.OpDelete(k)})
	}
	if err := g.keepRestored(lease); err != nil {
		return err
	}
	clients := make([]string, 0, len(g.sessions))
	for c := range g.sessions {
		clients = append(clients, c)
	}
	slices.Sort(clients)
	for _, c := range clients {
		items = append(items, g.restoreItem(c, lease))
	}
	if err := g.commitItems(items); err != nil {
		return err
	}
	// Everything held is written: what was dirty and waiting is done.
	g.dirty, g.dirtySet = g.dirty[:0], map[string]struct{}{}
	g.completeWaiting()
	return nil
}

// keepRestored, at the first registration, counts the ownership records
// an earlier run of this node left for the sessions this run restored
// (KeepRestored) among the records this node holds, so that syncAll
// rewrites them under the new lease before the earlier one is revoked. A
// record another node wrote since, or none, is left as it is.
func (g *registrar) keepRestored(lease clientv3.LeaseID) error {
	r := g.r
	for len(r.restored) > 0 {
		n := min(len(r.restored), r.opts.MaxTxnOps)
		ops := make([]clientv3.Op, 0, n)
		for _, c := range r.restored[:n] {
			ops = append(ops, clientv3.OpGet(r.keys.session(c)))
		}
		ctx, cancel := context.WithTimeout(r.ctx, r.opts.RequestTimeout)
		resp, err := r.cli.Txn(ctx).Then(ops...).Commit()
		cancel()
		if err != nil {
			return fmt.Errorf("registry: read the restored sessions' records: %w", err)
		}
		for i, c := range r.restored[:n] {
			kvs := resp.Responses[i].GetResponseRange().Kvs
			if len(kvs) != 1 {
				continue
			}
			var v sessionValue
			if json.Unmarshal(kvs[0].Value, &v) != nil || v.Node != r.opts.Node {
				continue
			}
			if _, ok := g.sessions[c]; !ok {
				g.sessions[c] = heldSession{value: string(kvs[0].Value), rev: kvs[0].ModRevision}
			}
			if id := clientv3.LeaseID(kvs[0].Lease); id != clientv3.NoLease && id != lease && !slices.Contains(g.oldLeases, id) {
				g.oldLeases = append(g.oldLeases, id)
			}
		}
		r.restored = r.restored[n:]
	}
	return nil
}

// item is one operation of a transaction with what to do with its result.
type item struct {
	op    clientv3.Op
	dirty string // a held key written by this op, re-marked dirty if it fails
	// result, if set, receives the op's own response (for the
	// conditional transactions of session ops) and the revision of the
	// transaction that carried it.
	result func(tr *pb.TxnResponse, rev int64)
}

// maxTxnBytes keeps a transaction under etcd's default request size limit
// (1.5 MiB, --max-request-bytes) with room to spare: 128 members with
// filters and client ids near MQTT's 64 KiB limits would exceed it.
const maxTxnBytes = 1 << 20

// opSize estimates an op's share of a request: its keys and values.
func opSize(op clientv3.Op) int {
	n := len(op.KeyBytes()) + len(op.ValueBytes()) + 16
	if op.IsTxn() {
		cmps, thens, elses := op.Txn()
		for i := range cmps {
			n += len(cmps[i].KeyBytes()) + 16
		}
		for _, o := range thens {
			n += opSize(o)
		}
		for _, o := range elses {
			n += opSize(o)
		}
	}
	return n
}

// commitItems commits items in order, in transactions of at most
// MaxTxnOps ops and maxTxnBytes. On error the items not committed are left
// as they were: dirty keys are marked dirty again and session ops stay
// queued.
func (g *registrar) commitItems(items []item) error {
	for len(items) > 0 {
		n, size := 0, 0
		for n < len(items) && n < g.r.opts.MaxTxnOps {
			size += opSize(items[n].op)
			if n > 0 && size > maxTxnBytes {
				break
			}
			n++
		}
		chunk := items[:n]
		ops := make([]clientv3.Op, n)
		for i := range chunk {
			ops[i] = chunk[i].op
		}
		resp, err := g.commit(ops)
		if err != nil {
			for _, it := range items {
				if it.dirty != "" {
					g.markDirty(it.dirty)
				}
			}
			return err
		}
		for i := range chunk {
			if f := chunk[i].result; f != nil {
				f(resp.Responses[i].GetResponseTxn(), resp.Header.Revision)
			}
		}
		items = items[n:]
	}
	return nil
}

// commit runs one transaction of unconditional ops (each may itself be a
// conditional transaction) within the request timeout.
func (g *registrar) commit(ops []clientv3.Op) (*clientv3.TxnResponse, error) {
	r := g.r
	ctx, cancel := context.WithTimeout(r.ctx, r.opts.RequestTimeout)
	defer cancel()
	sent := time.Now()
	resp, err := r.cli.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		r.stats.txnErrors.Add(1)
		return nil, err
	}
	r.stats.txns.Add(1)
	r.stats.txnOps.Add(uint64(len(ops)))
	if rev := resp.Header.Revision; rev > g.lastRev {
		g.lastRev = rev
		r.lag.committed(rev, sent)
	}
	return resp, nil
}

func (g *registrar) markDirty(k string) {
	if _, ok := g.dirtySet[k]; ok {
		return
	}
	g.dirtySet[k] = struct{}{}
	g.dirty = append(g.dirty, k)
}

func (g *registrar) completeWaiting() {
	for _, o := range g.waiting {
		o.w.complete(g.lastRev, nil)
	}
	g.waiting = g.waiting[:0]
}

func (g *registrar) idle() bool {
	return len(g.dirty) == 0 && len(g.waiting) == 0 && len(g.claims) == 0
}

// take moves the queued ops into the registrar's state: key ops change
// what is held and mark keys dirty (many changes to one key before it is
// written cost one write), session ops join the claims.
func (g *registrar) take() {
	r := g.r
	me := r.opts.Node
	for _, o := range r.takeQueue() {
		switch o.kind {
		case opAddRoute:
			k := r.keys.route(me, o.filter)
			if g.routes[o.filter]++; g.routes[o.filter] == 1 {
				g.held[k] = ""
				g.markDirty(k)
			}
		case opRemoveRoute:
			k := r.keys.route(me, o.filter)
			switch g.routes[o.filter] {
			case 0:
				o.w.complete(0, fmt.Errorf("%w: %q", ErrNotHeld, o.filter))
				continue
			case 1:
				delete(g.routes, o.filter)
				delete(g.held, k)
				g.markDirty(k)
			default:
				g.routes[o.filter]--
			}
		case opAddMember:
			k := r.keys.member(me, o.group, o.filter, o.client)
			v := memberValue{QoS: o.qos, Since: o.at}
			if old, ok := g.held[k]; ok {
				var ov memberValue
				if json.Unmarshal([]byte(old), &ov) == nil {
					if ov.QoS == o.qos {
						break // already held as asked: nothing to write
					}
					v.Since = ov.Since // a new QoS does not make it a new member
				}
			}
			g.held[k] = mustJSON(v)
			g.markDirty(k)
		case opRemoveMember:
			k := r.keys.member(me, o.group, o.filter, o.client)
			if _, ok := g.held[k]; ok {
				delete(g.held, k)
				g.markDirty(k)
			}
		case opClaim, opRelease:
			g.claims = append(g.claims, o)
			continue
		case opBarrier:
			// Changes nothing: it completes with what is dirty now.
		}
		g.waiting = append(g.waiting, o)
	}
}

// flush writes the dirty keys and the session ops that can go now (the
// first per client; later ones for the same client wait for its outcome)
// in as few transactions as the size limit allows.
func (g *registrar) flush() error {
	lease := g.sess.Lease()
	items := make([]item, 0, len(g.dirty)+len(g.claims))
	for _, k := range g.dirty {
		if v, ok := g.held[k]; ok {
			items = append(items, item{op: clientv3.OpPut(k, v, clientv3.WithLease(lease)), dirty: k})
		} else {
			items = append(items, item{op: clientv3.OpDelete(k), dirty: k})
		}
	}
	g.dirty, g.dirtySet = g.dirty[:0], map[string]struct{}{}

	var (
		later []*op // session ops that wait for an earlier one for the same client
		busy  = map[string]bool{}
	)
	for _, o := range g.claims {
		if busy[o.client] {
			later = append(later, o)
			continue
		}
		busy[o.client] = true
		it, ok := g.sessionItem(o, lease)
		if !ok {
			continue // completed without a write
		}
		items = append(items, it)
	}
	sent := g.claims
	g.claims = later
	err := g.commitItems(items)
	// Session ops not completed (their transaction failed, or they retry)
	// go back to the front, in their original order.
	var retry []*op
	for _, o := range sent {
		if !isDone(o.w.done) && !slices.Contains(later, o) {
			retry = append(retry, o)
		}
	}
	g.claims = append(retry, later...)
	if err != nil {
		return err
	}
	if len(g.dirty) == 0 {
		g.completeWaiting()
	}
	return nil
}

// sessionItem builds the conditional transaction for a claim or release.
// It reports false when the op completed without one.
func (g *registrar) sessionItem(o *op, lease clientv3.LeaseID) (item, bool) {
	r := g.r
	k := r.keys.session(o.client)
	if o.kind == opRelease {
		h, ok := g.sessions[o.client]
		if !ok {
			o.w.complete(g.lastRev, nil) // not ours (any more): nothing to release
			return item{}, false
		}
		var then []clientv3.Op
		if !o.keepRecord {
			then = append(then, clientv3.OpDelete(k))
		}
		if o.will != "" {
			// The will of a connection that was refused, if still there.
			wk := r.keys.will(o.client)
			then = append(then, clientv3.OpTxn(
				[]clientv3.Cmp{clientv3.Compare(clientv3.Value(wk), "=", o.will)},
				[]clientv3.Op{clientv3.OpDelete(wk)}, nil))
		}
		if len(then) == 0 {
			o.w.complete(g.lastRev, nil)
			return item{}, false
		}
		return item{
			op: clientv3.OpTxn(
				[]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(k), "=", h.rev)},
				then,
				nil,
			),
			result: func(tr *pb.TxnResponse, rev int64) {
				// Deleted, or already taken over by another node: either way
				// this node no longer owns it (unless the record was kept,
				// and is still this node's).
				if !o.keepRecord || !tr.Succeeded {
					delete(g.sessions, o.client)
				}
				o.w.complete(rev, nil)
			},
		}, true
	}

	cs := o.claim
	if !cs.sent {
		if err := cs.ctx.Err(); err != nil {
			o.w.complete(0, err) // the caller gave up before anything was sent
			return item{}, false
		}
		// Once sent, a claim is seen through even if its caller gives
		// up: its reply may be lost while it took effect, and only by
		// resolving it does the release queued behind it know to undo it.
		cs.sent = true
		g.seq++
		cs.seq = g.seq
		cs.expect = g.expected(o.client)
		switch {
		case cs.replicaOf != "":
			cs.expect = Owner{} // only a record that is gone
		case cs.seen != nil && (cs.expect.Node != r.opts.Node || cs.seen.Revision > cs.expect.Revision):
			// What the caller looked at, not the copy's later news; this
			// node's own record only if it is the later one (the one it
			// held before another node took the client is not).
			cs.expect = *cs.seen
		}
	}
	expect := cs.expect
	replica := cs.replicaOf
	if cs.resume && expect.ReplicaOf != r.opts.Node {
		replica = expect.ReplicaOf // the state descends from that node's replica still
	}
	value := mustJSON(sessionValue{
		ownerRef: ownerRef{Node: r.opts.Node, Epoch: r.opts.Epoch, Seq: cs.seq},
		Prev:     refOf(expect),
		Replica:  replica,
	})
	then := []clientv3.Op{clientv3.OpPut(k, value, clientv3.WithLease(lease))}
	if cs.setWill {
		if cs.will != "" {
			then = append(then, clientv3.OpPut(r.keys.will(o.client), cs.will))
		} else {
			then = append(then, clientv3.OpDelete(r.keys.will(o.client)))
		}
	}
	return item{
		op: clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(k), "=", expect.Revision)},
			then,
			[]clientv3.Op{clientv3.OpGet(k)},
		),
		result: func(tr *pb.TxnResponse, rev int64) {
			if tr.Succeeded {
				g.claimed(o, value, rev, expect)
				return
			}
			// Someone changed the record since we looked. If it is our own
			// record (a retry after a reply was lost), the claim is done;
			// otherwise retry against what is there now.
			cur := Owner{}
			var v sessionValue
			kvs := tr.Responses[0].GetResponseRange().Kvs
			if len(kvs) == 1 {
				_ = json.Unmarshal(kvs[0].Value, &v)
				cur = v.owner()
				cur.Revision = kvs[0].ModRevision
			}
			if cur.Node == r.opts.Node && cur.Epoch == r.opts.Epoch && cur.Seq == cs.seq {
				prev := Owner{}
				if v.Prev != nil {
					prev = v.Prev.owner()
				}
				g.claimed(o, string(kvs[0].Value), cur.Revision, prev)
				return
			}
			if cs.replicaOf != "" || cs.seen != nil && cur.Node != "" && cur.Node != r.opts.Node {
				o.w.complete(0, fmt.Errorf("%w: %q (%s)", ErrOwned, o.client, cur.Node))
				return
			}
			if cs.attempts++; cs.attempts >= maxClaimAttempts {
				o.w.complete(0, fmt.Errorf("%w: %q", ErrContended, o.client))
				return
			}
			cs.expect = cur
		},
	}, true
}

// claimed records a successful claim and completes it.
func (g *registrar) claimed(o *op, value string, rev int64, prev Owner) {
	g.sessions[o.client] = heldSession{value: value, rev: rev}
	o.claim.result = Claim{Prev: prev, Revision: rev}
	o.w.complete(rev, nil)
}

// expected is the ownership record a claim expects to replace: the one this
// node wrote if it holds the client (its copy may not show it yet), else
// the copy's.
func (g *registrar) expected(client string) Owner {
	if h, ok := g.sessions[client]; ok {
		var v sessionValue
		_ = json.Unmarshal([]byte(h.value), &v)
		o := v.owner()
		o.Revision = h.rev
		return o
	}
	g.r.mu.RLock()
	defer g.r.mu.RUnlock()
	return g.r.copy.sessions[client]
}

// restoreItem rewrites an ownership record this node holds under a new
// lease: if it is unchanged since written, or gone (it went with the old
// lease), it is written again; if another node has claimed the client
// since, this node has lost it (the copy reports that as SessionOwned to
// the broker, which lets the client go).
func (g *registrar) restoreItem(client string, lease clientv3.LeaseID) item {
	k := g.r.keys.session(client)
	h := g.sessions[client]
	put := clientv3.OpPut(k, h.value, clientv3.WithLease(lease))
	return item{
		op: clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(k), "=", h.rev)},
			[]clientv3.Op{put},
			[]clientv3.Op{clientv3.OpTxn(
				[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(k), "=", 0)},
				[]clientv3.Op{put},
				[]clientv3.Op{clientv3.OpGet(k)},
			)},
		),
		result: func(tr *pb.TxnResponse, rev int64) {
			if tr.Succeeded || tr.Responses[0].GetResponseTxn().Succeeded {
				g.sessions[client] = heldSession{value: h.value, rev: rev}
				return
			}
			kvs := tr.Responses[0].GetResponseTxn().Responses[0].GetResponseRange().Kvs
			if len(kvs) == 1 && string(kvs[0].Value) == h.value {
				g.sessions[client] = heldSession{value: h.value, rev: kvs[0].ModRevision} // our own earlier rewrite
				return
			}
			delete(g.sessions, client)
		},
	}
}

// shutdown ends the registrar on Close: what is pending fails, and the
// lease is revoked so this node's keys vanish at once.
func (g *registrar) shutdown() {
	// What is still queued fails now, not after Close has waited for the
	// watcher: an OnEvent handler that queued a write and waits for it
	// (a session let go, its route removed) would hold the watcher, and
	// Close with it, for ever. Close sets qclose before it cancels, so
	// nothing is queued after this.
	g.r.failQueued(ErrClosed)
	for _, o := range g.waiting {
		o.w.complete(0, ErrClosed)
	}
	for _, o := range g.claims {
		o.w.complete(0, ErrClosed)
	}
	g.waiting, g.claims = nil, nil
	// Bounded: with the quorum gone (a whole line stopping together) the
	// revocation cannot succeed, and the lease expires by itself.
	if g.sess != nil {
		g.sess.Orphan()
		g.revokeWithin(g.sess.Lease(), shutdownRevokeTimeout)
		g.sess = nil
	}
	for _, id := range g.oldLeases {
		g.revokeWithin(id, shutdownRevokeTimeout)
	}
	g.r.lease.Store(0)
}
