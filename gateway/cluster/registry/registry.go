package registry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Errors returned by the registry.
var (
	// ErrClosed is returned for writes made after Close, and completes the
	// writes still queued when Close is called.
	ErrClosed = errors.New("registry: closed")
	// ErrNotHeld is returned by RemoveRoute for a filter this node has no
	// route for: the broker's counting and the registry's disagree.
	ErrNotHeld = errors.New("registry: route not held")
	// ErrContended is returned by ClaimSession when other nodes kept
	// changing the ownership record faster than this node could claim it.
	ErrContended = errors.New("registry: session ownership contended")
	// ErrOwned is returned by ClaimReplica for a client another node
	// owns, and by ResumeConnection for one another node claimed after
	// the caller looked.
	ErrOwned = errors.New("registry: another node owns the session")
)

// Defaults used for the zero values of Options.
const (
	DefaultCluster        = "default"
	DefaultTTL            = 10 * time.Second
	DefaultRequestTimeout = 5 * time.Second
	DefaultWatchCheck     = time.Second
	DefaultWatchTimeout   = 5 * time.Second
	// DefaultMaxTxnOps matches etcd's own default limit (--max-txn-ops),
	// so the registry works against any etcd as configured out of the box.
	DefaultMaxTxnOps = 128
)

// Options configure a Registry. Only Client and Node are required; every
// other zero value means the default named beside it. Options are read
// once, by New.
type Options struct {
	// Client is the etcd client to use; the Registry does not close it.
	Client *clientv3.Client
	// Node is this gateway's name, unique in the cluster.
	Node string
	// Cluster names the cluster; it makes the default prefix. Default
	// DefaultCluster.
	Cluster string
	// Prefix is where the cluster's keys live; it must end in "/".
	// Default DefaultPrefix(Cluster).
	Prefix string
	// Addr is where peers reach this node's transport, published in
	// nodes/<node>.
	Addr string
	// Version is the linemq version, published in nodes/<node>.
	Version string
	// Epoch identifies this run of the process (see Node.Epoch). Default:
	// 63 random bits. Not the time: a board without a real-time clock
	// starts at 1970 until NTP answers, and two such runs could read
	// nearly the same nanoseconds.
	Epoch uint64
	// Store identifies the node's durable storage (bolt's Store.ID), if
	// it has any. A run that finds its node registered by an earlier run
	// with another store (its data directory was lost or replaced, and
	// the earlier run's lease is still live) waits for that registration
	// to end before it registers: the other nodes then see the earlier
	// run leave, and fail its sessions over from their replicas, rather
	// than take this run, which has none of them, for it.
	Store string
	// TTL is the lease's time to live: how long after this node stops
	// refreshing it (a crash, a partition) its keys vanish. Rounded up to
	// whole seconds; etcd raises it to at least 1.5 election timeouts.
	// Default DefaultTTL.
	TTL time.Duration
	// RequestTimeout bounds every etcd request. Default
	// DefaultRequestTimeout.
	RequestTimeout time.Duration
	// WatchCheck is how often the watch is asked for a progress report
	// when nothing else arrives, and WatchTimeout how long it may stay
	// silent before it is given up as lost (the registry then reports
	// Degraded and re-reads). Defaults DefaultWatchCheck and
	// DefaultWatchTimeout.
	WatchCheck   time.Duration
	WatchTimeout time.Duration
	// MaxTxnOps caps the operations in one transaction; it must not
	// exceed the etcd server's --max-txn-ops. Default DefaultMaxTxnOps.
	MaxTxnOps int
	// OnEvent is called for every change to the copy, in revision order,
	// from the one goroutine that maintains the copy. Views called from it
	// already reflect the change. It must return quickly: the copy does
	// not move while it runs. It is called for this node's own keys too.
	OnEvent func(Event)
	// OnState is called when the registry's State changes, with the
	// reason for Degraded (nil otherwise). Calls are serialised; it must
	// return quickly and must not call Close.
	OnState func(State, error)
	// Logger receives the registry's logs; nil discards them.
	Logger *slog.Logger
}

// Registry is this node's view of, and its writes to, the cluster registry
// in etcd. Its methods may be called concurrently. See the package
// documentation for the model.
type Registry struct {
	opts Options // defaults filled in
	cli  *clientv3.Client
	keys keyspace
	log  *slog.Logger
	ttl  int64 // seconds

	// The copy: written by the watcher goroutine under mu, read by views.
	mu   sync.RWMutex
	copy *mirror

	// The queue: appended by write calls, drained by the registrar.
	qmu    sync.Mutex
	queue  []*op
	qclose bool          // set by Close: no more writes
	qsig   chan struct{} // capacity 1: "the queue is not empty"

	// Readiness: both halves set once, then ready is closed.
	readyMu    sync.Mutex
	loaded     bool
	registered bool
	ready      chan struct{}

	health health
	lag    lagTracker
	stats  counters
	lease  atomic.Int64 // the current lease id, 0 while none
	// delivered is the revision of the copy whose events have all been
	// handed to OnEvent; the copy itself may be a response ahead.
	delivered atomic.Int64

	// restored: the sessions this run restored from its store, whose
	// ownership records its first registration carries over (KeepRestored).
	// Set before Start, read by the registrar after.
	restored []string

	// Lifetime.
	ctx       context.Context // cancelled by Close; ends every goroutine
	cancel    context.CancelFunc
	started   atomic.Bool
	closeOnce sync.Once
	wg        sync.WaitGroup
}

// counters are the Stats counters, updated without locks.
type counters struct {
	txns, txnOps, txnErrors             atomic.Uint64
	leases, loads, compacted, watchLost atomic.Uint64
}

// New checks the options and returns a Registry that is not running yet:
// call Start. Nothing touches etcd before Start.
func New(o Options) (*Registry, error) {
	if o.Client == nil {
		return nil, errors.New("registry: an etcd client is required")
	}
	if o.Node == "" {
		return nil, errors.New("registry: a node name is required")
	}
	if o.Cluster == "" {
		o.Cluster = DefaultCluster
	}
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix(o.Cluster)
	}
	if o.Prefix[len(o.Prefix)-1] != '/' {
		return nil, fmt.Errorf("registry: prefix %q must end in /", o.Prefix)
	}
	for o.Epoch == 0 {
		o.Epoch = rand.Uint64() >> 1 // math/rand/v2: seeded from the system's entropy
	}
	o.TTL = orDur(o.TTL, DefaultTTL)
	o.RequestTimeout = orDur(o.RequestTimeout, DefaultRequestTimeout)
	o.WatchCheck = orDur(o.WatchCheck, DefaultWatchCheck)
	o.WatchTimeout = orDur(o.WatchTimeout, DefaultWatchTimeout)
	if o.WatchTimeout < o.WatchCheck {
		return nil, fmt.Errorf("registry: watch timeout %v is shorter than the watch check %v", o.WatchTimeout, o.WatchCheck)
	}
	if o.MaxTxnOps <= 0 {
		o.MaxTxnOps = DefaultMaxTxnOps
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ks := keyspace{prefix: o.Prefix}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Registry{
		opts:   o,
		cli:    o.Client,
		keys:   ks,
		log:    log.With("component", "registry", "node", o.Node),
		ttl:    int64((o.TTL + time.Second - 1) / time.Second),
		copy:   newMirror(ks),
		qsig:   make(chan struct{}, 1),
		ready:  make(chan struct{}),
		ctx:    ctx,
		cancel: cancel,
	}
	r.health.init(o.OnState)
	return r, nil
}

// Start launches the registrar (which takes a lease and registers this
// node) and the watcher (which loads the copy and follows it). It returns
// at once: etcd may not be reachable yet, and both keep retrying. Wait on
// Ready before serving clients.
func (r *Registry) Start() error {
	if r.ctx.Err() != nil {
		return ErrClosed
	}
	if !r.started.CompareAndSwap(false, true) {
		return errors.New("registry: already started")
	}
	r.wg.Add(2)
	go r.runRegistrar()
	go r.runWatcher()
	return nil
}

// KeepRestored names the sessions this run restored from its store. The
// first registration rewrites their ownership records left by an earlier
// run of this node under the new lease, in the transactions that write
// the rest of what the node holds and before the earlier run's lease is
// revoked: revoked first, the records would vanish, and for the moment
// until the gateway claimed them again another gateway would take a
// client resuming there for a new one (Session Present 0, fault-suite
// seed 12). Records another node wrote since are left alone. Call
// it before Start; after, it has no effect.
func (r *Registry) KeepRestored(clients []string) {
	if r.started.Load() {
		r.log.Warn("registry: the restored sessions were named after the start; their records may vanish for a moment")
		return
	}
	r.restored = slices.Clone(clients)
}

// Ready is closed once the first full copy of the registry is loaded and
// this node's own key is committed: from then on the views are complete
// and peers can find this node. MQTT listeners should open only then.
func (r *Registry) Ready() <-chan struct{} { return r.ready }

func (r *Registry) setReady(loaded, registered bool) {
	r.readyMu.Lock()
	defer r.readyMu.Unlock()
	r.loaded = r.loaded || loaded
	r.registered = r.registered || registered
	if r.loaded && r.registered {
		select {
		case <-r.ready:
		default:
			close(r.ready)
			r.health.setReady()
		}
	}
}

// Close stops the registry: queued writes fail with ErrClosed, the lease
// is revoked (so every key of this node vanishes at once and peers see it
// leave without waiting for the TTL), and every goroutine has ended when
// it returns. With etcd out of reach the revocation gives up after
// RequestTimeout and the keys go when the lease expires. It is safe to
// call more than once.
func (r *Registry) Close() error {
	r.closeOnce.Do(func() {
		r.qmu.Lock()
		r.qclose = true
		r.qmu.Unlock()
		r.cancel()
		r.wg.Wait()
		r.failQueued(ErrClosed)
		r.health.set(sourceClosed, nil)
	})
	return nil
}

// Node returns this node's name.
func (r *Registry) Node() string { return r.opts.Node }

// Store returns the identity of this node's storage (Options.Store).
func (r *Registry) Store() string { return r.opts.Store }

// Epoch returns this run's epoch (Options.Epoch).
func (r *Registry) Epoch() uint64 { return r.opts.Epoch }

// Lease returns the lease this node's keys are bound to, 0 while it has
// none.
func (r *Registry) Lease() clientv3.LeaseID { return clientv3.LeaseID(r.lease.Load()) }

// State returns the registry's health and, when Degraded, why.
func (r *Registry) State() (State, error) { return r.health.get() }

// Stats returns the current counters and figures.
func (r *Registry) Stats() Stats {
	st, _ := r.health.get()
	lag, lagMax, lagSum, lagN := r.lag.figures()
	r.qmu.Lock()
	queued := len(r.queue)
	r.qmu.Unlock()
	r.mu.RLock()
	nodes, routes, members, sessions := r.copy.sizes()
	r.mu.RUnlock()
	return Stats{
		State:     st,
		Revision:  r.Revision(),
		Lag:       lag,
		LagMax:    lagMax,
		LagSum:    lagSum,
		LagCount:  lagN,
		Txns:      r.stats.txns.Load(),
		TxnOps:    r.stats.txnOps.Load(),
		TxnErrors: r.stats.txnErrors.Load(),
		Queued:    queued,
		Leases:    r.stats.leases.Load(),
		Loads:     r.stats.loads.Load(),
		Compacted: r.stats.compacted.Load(),
		WatchLost: r.stats.watchLost.Load(),
		Nodes:     nodes,
		Routes:    routes,
		Members:   members,
		Sessions:  sessions,
	}
}

// Views. Each reads the copy as of one revision and returns a copy of its
// own: the caller may keep and change it.

// Revision returns the etcd revision the copy reflects, once every event
// up to it has been handed to OnEvent: a node whose Revision has reached a
// Write's Revision has seen the write and told the broker.
func (r *Registry) Revision() int64 { return r.delivered.Load() }

// Nodes returns the registered nodes, this one included, by name.
func (r *Registry) Nodes() []Node {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.copy.nodeList()
}

// NodeInfo returns a registered node.
func (r *Registry) NodeInfo(name string) (Node, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	n, ok := r.copy.nodes[name]
	return n, ok
}

// Routes returns the filters node has ordinary subscribers for, sorted.
func (r *Registry) Routes(node string) []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.copy.routesOf(node)
}

// RouteNodes returns the nodes with ordinary interest in exactly filter,
// sorted.
func (r *Registry) RouteNodes(filter string) []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.copy.routeNodes(filter)
}

// Groups returns every share group with at least one member, sorted by
// share name then filter.
func (r *Registry) Groups() []GroupKey {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.copy.groupKeys()
}

// Members returns a group's members in cluster order: by creation
// revision, ties broken by node then client id. Every node with the same
// copy returns the same list.
func (r *Registry) Members(group, filter string) []Member {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.copy.members(GroupKey{group, filter})
}

// MembersLocalFirst returns a group's members with this node's first, then
// the other nodes', each part in cluster order: the candidate order of
// the round robin (seed 000: "always its own members first, then the
// rest").
func (r *Registry) MembersLocalFirst(group, filter string) []Member {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.copy.membersLocalFirst(GroupKey{group, filter}, r.opts.Node)
}

// AdoptedFrom returns the clients whose sessions the copy shows adopted
// from node's replicas (Owner.ReplicaOf), each with the node that owns it
// now.
func (r *Registry) AdoptedFrom(node string) map[string]string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := map[string]string{}
	for client, o := range r.copy.sessions {
		if o.ReplicaOf == node && o.Node != "" {
			out[client] = o.Node
		}
	}
	return out
}

// SessionOwner returns the owner of client's session as the copy has it.
func (r *Registry) SessionOwner(client string) (Owner, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	o, ok := r.copy.sessions[client]
	return o, ok
}

func orDur(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}
