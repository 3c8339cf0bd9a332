package cluster

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/gateway/certs"
	"github.com/linemq/linemq/gateway/cluster/etcdembed"
	"github.com/linemq/linemq/gateway/cluster/internal/zaplog"
	"github.com/linemq/linemq/gateway/cluster/registry"
	"github.com/linemq/linemq/gateway/peer"
)

// Options configure a Cluster: everything a gateway's part of a line needs,
// in the terms of the cluster rather than of a configuration file. Node and
// Listen are required, and either Etcd.Embed, Etcd.Endpoints or Etcd.Client.
type Options struct {
	// Node is this gateway's name, unique in the cluster.
	Node string
	// Name names the cluster (its etcd prefix is /linemq/<name>/).
	// Default registry.DefaultCluster.
	Name string
	// Listen is the node-to-node transport's host:port, and Advertise the
	// address other nodes dial (default: the address Listen got).
	Listen, Advertise string
	// MeshTLS makes the transport mutual TLS; nil is plain TCP. Its
	// material may be reloaded while the cluster runs: new streams use it.
	MeshTLS *certs.Mutual
	// MeshServerName, when every gateway's certificate carries this one
	// name rather than its node's, is that name (cluster.tls.server_name).
	MeshServerName string
	// Etcd is where the registry lives.
	Etcd EtcdOptions
	// ExpectedNodes are the gateways that belong to the line besides those
	// etcd's member list names (embedded) and those ever registered: a
	// node among them that is not registered is reported missing.
	ExpectedNodes []string
	// Version is this build's version, published in the registry.
	Version string
	// DataDir holds the embedded member's data, in DataDir/etcd.
	DataDir string
	// StoreID identifies the local store (bolt's Store.ID). With
	// replicas, a node whose store is not the one its earlier run had
	// (a lost data directory) registers only once that run's lease has
	// ended, so that the others fail its sessions over first.
	StoreID string
	// Logger receives the cluster's logs, etcd's included; nil discards
	// them.
	Logger *slog.Logger

	// Replicas configure the copies of persistent sessions on other
	// nodes; Replicas.Count 0 keeps none (see replicate.go).
	Replicas ReplicaOptions

	// Registry and Mesh tune the registry's and the mesh's timings (tests
	// shorten them); zero values are the defaults. What names the node,
	// the cluster and their callbacks is the Cluster's own and is
	// overwritten.
	Registry registry.Options
	Mesh     peer.Options
}

// EtcdOptions say where the cluster's etcd is: a member run in this
// process (Embed), external Endpoints, or a client the caller owns.
type EtcdOptions struct {
	Embed                                    bool
	Name                                     string // the member's name; default the node's
	PeerListen, ClientListen, InitialCluster string
	// Existing joins the embedded member to a cluster that runs already
	// (a replacement, after ReplaceMember).
	Existing  bool
	Endpoints []string
	TLS       *tls.Config // to external endpoints
	// MemberTLS, with Embed and its Cert set, makes the member's peer and
	// client traffic mutual TLS with these files; this gateway's own
	// client presents the same certificate. etcd reads the certificate,
	// key and CRL at each handshake, the CA at start.
	MemberTLS certs.Files
	// Client, when set, is used as it is (tests share one etcd); the
	// Cluster does not close it. Prefix then overrides the key prefix.
	Client *clientv3.Client
	Prefix string
}

// Cluster is a gateway's part of a line: the etcd client (or an embedded
// member), the registry, the node-to-node mesh and its listener, the glue
// the broker calls, and the status of all of them. Make it with Start
// before the broker (its Hooks go into broker.Options), Bind it to the
// broker once that exists, and serve clients once Ready is closed.
type Cluster struct {
	opts   Options
	log    *slog.Logger
	member *etcdembed.Member // nil with external endpoints
	cli    *clientv3.Client
	ownCli bool
	ln     net.Listener
	mesh   *peer.Mesh
	tr     *Mesh
	node   *Node
	etcd   *etcdStatus
	nodes  *lineNodes
	upd    updateLock // this gateway's side of the line's update lock

	ready   chan struct{}
	stop    context.CancelFunc
	wg      sync.WaitGroup
	closeMu sync.Once
}

// Start opens what must exist before the broker: the embedded etcd member
// (if any) and the etcd client, the transport's listener, the mesh and the
// registry (not started). Nothing is served to other nodes before Bind.
// On an error everything opened is closed again.
func Start(ctx context.Context, o Options) (_ *Cluster, err error) {
	if o.Node == "" || o.Listen == "" {
		return nil, errors.New("cluster: a node name and a transport address are required")
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Cluster{opts: o, log: log, ready: make(chan struct{})}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	endpoints := o.Etcd.Endpoints
	if o.Etcd.Embed {
		name := cmp.Or(o.Etcd.Name, o.Node)
		eo := etcdembed.Options{
			Name: name, Dir: filepath.Join(o.DataDir, etcdembed.DirName),
			PeerListen: o.Etcd.PeerListen, ClientListen: o.Etcd.ClientListen,
			InitialCluster: cmp.Or(o.Etcd.InitialCluster, name+"="+o.Etcd.PeerListen),
			Existing:       o.Etcd.Existing,
			Logger:         log.With("component", "etcd"),
		}
		eo.TLS = o.Etcd.MemberTLS
		c.member, err = etcdembed.Start(eo)
		if err != nil {
			return nil, fmt.Errorf("cluster.etcd: %w", err)
		}
		endpoints = c.member.ClientURLs()
	}
	if c.cli = o.Etcd.Client; c.cli == nil {
		clientTLS := o.Etcd.TLS
		if f := o.Etcd.MemberTLS; o.Etcd.Embed && f.Cert != "" {
			info := transport.TLSInfo{CertFile: f.Cert, KeyFile: f.Key, TrustedCAFile: f.CA}
			if clientTLS, err = info.ClientConfig(); err != nil {
				return nil, fmt.Errorf("cluster.etcd.tls: %w", err)
			}
		}
		c.cli, err = clientv3.New(clientv3.Config{
			Endpoints: endpoints, TLS: clientTLS, DialTimeout: 5 * time.Second,
			Logger: etcdLogger(log), Context: context.Background(),
		})
		if err != nil {
			return nil, fmt.Errorf("cluster.etcd: %w", err)
		}
		c.ownCli = true
	}
	var lc net.ListenConfig
	if c.ln, err = lc.Listen(ctx, "tcp", o.Listen); err != nil {
		return nil, fmt.Errorf("cluster.listen: %w", err)
	}
	n := &Node{self: o.Node, log: log.With("component", "cluster")}
	mo := o.Mesh
	mo.Node, mo.Cluster, mo.Handler, mo.Logger = o.Node, cmp.Or(o.Name, registry.DefaultCluster), meshHandler{n}, log.With("component", "peer")
	if o.MeshTLS != nil {
		mo.Identity = meshIdentity{o.MeshTLS, o.MeshServerName}
	}
	if c.mesh, err = peer.New(mo); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	c.tr = &Mesh{m: c.mesh}
	n.tr = c.tr
	ro := o.Registry
	ro.Client, ro.Node, ro.Cluster, ro.Prefix = c.cli, o.Node, o.Name, o.Etcd.Prefix
	ro.Addr, ro.Version = cmp.Or(o.Advertise, c.ln.Addr().String()), o.Version
	if o.Replicas.Count > 0 {
		ro.Store = o.StoreID
	}
	ro.Logger = log.With("component", "registry")
	if err := n.init(ro); err != nil {
		return nil, err
	}
	c.node = n
	c.nodes = newLineNodes(o.Node, o.ExpectedNodes)
	n.onNodes = c.nodes.update
	return c, nil
}

// Store returns the Store the broker is to write to: local itself, or,
// with replicas, one that also sends each persistent session's writes to
// its replicas and whose Sync waits for them. Call it once, before
// broker.New.
func (c *Cluster) Store(local broker.Store) broker.Store {
	if c.opts.Replicas.Count <= 0 || local == nil {
		return local
	}
	return c.node.useReplicas(local, c.opts.Replicas)
}

// Hooks is the cluster as the broker calls it: pass it as
// broker.Options.Cluster.
func (c *Cluster) Hooks() broker.Cluster { return c.node }

// Watch asks the other nodes to forward every message matching filter to
// this node, as they do for its subscribers' filters: for a broker
// Observer that must see the whole line's traffic on some topics (the
// Sparkplug tracker). It lasts as long as the node; call it before Bind.
func (c *Cluster) Watch(filter string) { c.node.reg.AddRoute(filter) }

// Handle makes this node answer the mesh call method with f, for a part of
// the gateway that shares something of its own with the other nodes (the
// Sparkplug tracker). The cluster's own calls cannot be replaced. Call it
// before Bind.
func (c *Cluster) Handle(method string, f CallHandler) error {
	switch method {
	case callHandOver, callRetained, callReplicaApply, callFailedOver, callSettled:
		return fmt.Errorf("cluster: mesh call %q is the cluster's own", method)
	}
	if c.node.srv != nil {
		return errors.New("cluster: Handle after Bind")
	}
	if c.node.calls == nil {
		c.node.calls = make(map[string]CallHandler)
	}
	c.node.calls[method] = f
	return nil
}

// broadcastTimeout bounds each call of a Broadcast.
const broadcastTimeout = 2 * time.Second

// Broadcast makes the mesh call method with arg on every other node that
// is reachable now, each in its own goroutine, and returns at once: best
// effort, for what a node that misses it learns again later (or can do
// without). Failures are logged at debug level.
func (c *Cluster) Broadcast(method string, arg []byte) {
	c.node.peerMu.Lock()
	nodes := make([]string, 0, len(c.node.peers))
	for node := range c.node.peers {
		nodes = append(nodes, node)
	}
	open := c.node.meshOpen
	c.node.peerMu.Unlock()
	ct, ok := c.node.tr.(CallTransport)
	if !open || !ok {
		return
	}
	for _, node := range nodes {
		if !c.node.tr.Available(node) {
			continue
		}
		c.wg.Go(func() { // Close waits for it
			ctx, cancel := context.WithTimeout(context.Background(), broadcastTimeout)
			defer cancel()
			if _, err := ct.Call(ctx, node, method, arg); err != nil {
				c.log.Debug("mesh broadcast not delivered", "method", method, "node", node, "err", err)
			}
		})
	}
}

// Addr is the transport's listening address.
func (c *Cluster) Addr() net.Addr { return c.ln.Addr() }

// Bind hands the cluster the broker it serves, and starts the mesh, the
// registry and the status poller. Ready is closed once this node knows the
// others and has settled the sessions the broker restored; the rest runs
// until Close. Call it once.
func (c *Cluster) Bind(srv broker.ClusterInbound) error {
	if err := c.node.bind(srv); err != nil {
		return err
	}
	if err := c.mesh.Start(c.ln); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	if err := c.node.reg.Start(); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	prefix := c.keyPrefix()
	// An embedded member's name is a gateway's node id unless
	// cluster.etcd.name says otherwise; only then do the member names
	// name the line's gateways.
	membersAreNodes := c.member != nil && cmp.Or(c.opts.Etcd.Name, c.opts.Node) == c.opts.Node
	c.etcd = startEtcdStatus(c.cli, prefix, membersAreNodes, c.nodes)
	c.log.Info("waiting for the cluster registry", "node", c.opts.Node, "cluster", cmp.Or(c.opts.Name, registry.DefaultCluster), "transport", c.ln.Addr().String())
	ctx, cancel := context.WithCancel(context.Background())
	c.stop = cancel
	if m := c.opts.MeshTLS; m != nil {
		w := certs.NewWatcher(m.Files().List(), 0, func() { c.ReloadTLS() })
		c.wg.Go(func() { w.Run(ctx) })
	}
	c.wg.Go(func() {
		select {
		case <-c.node.reg.Ready():
		case <-ctx.Done():
			return
		}
		c.node.letGoMoved()
		c.node.openMesh()
		c.node.Reconcile(ctx)
		c.node.markReady()
		// This gateway belongs to the line from now on, also when it is
		// down: the others list it as missing until it is forgotten.
		mctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if err := markInLine(mctx, c.cli, prefix, c.opts.Node); err != nil {
			c.log.Warn("recording this gateway in the line", "err", err)
		}
		cancel()
		close(c.ready)
		if c.node.held != nil {
			c.node.held.startup(ctx)
		}
		c.wg.Go(func() { c.node.KeepWills(ctx) })
		c.node.SyncRetained(ctx, time.Second)
	})
	return nil
}

// meshIdentity is the mesh's rotating identity, with the shared name every
// gateway's certificate carries when cluster.tls.server_name is set.
type meshIdentity struct {
	*certs.Mutual
	serverName string
}

func (m meshIdentity) ClientConfig() *tls.Config {
	c := m.Mutual.ClientConfig()
	c.ServerName = m.serverName
	return c
}

// ReloadTLS reads the mesh's certificate, key, CA and CRL files again (the
// cluster does so by itself when they change, and the gateway on SIGHUP).
// Streams already open stay; new ones use the new material. On an error
// the material in force stays, and the error is logged and returned.
func (c *Cluster) ReloadTLS() error {
	m := c.opts.MeshTLS
	if m == nil {
		return nil // the embedded etcd member reads its files at each handshake itself
	}
	if err := m.Reload(); err != nil {
		c.log.Error("cluster.tls: reloading certificates failed; the previous ones stay in force", "err", err)
		return fmt.Errorf("cluster.tls: %w", err)
	}
	c.log.Info("cluster.tls: certificates reloaded", "cert_file", m.Files().Cert)
	return nil
}

// Ready is closed once the registry's copy is loaded, this node is
// registered and its restored sessions are settled: only then may the
// MQTT listeners serve, so that a client never meets a node that does not
// know the others.
func (c *Cluster) Ready() <-chan struct{} { return c.ready }

// Close leaves the cluster: the registry revokes this node's lease (its
// keys vanish at once for the others), the mesh and the listener close,
// then the etcd client and the embedded member, each step bounded so that
// a line stopping together still stops within a few seconds. Call it after
// the broker's shutdown, which releases sessions through the registry. It
// is safe to call more than once.
func (c *Cluster) Close() error {
	var errs []error
	c.closeMu.Do(func() {
		if c.stop != nil {
			c.stop()
		}
		c.wg.Wait()
		c.stopUpdateKeepAlive()
		if c.etcd != nil {
			c.etcd.close()
		}
		if c.node != nil && c.node.repl != nil {
			c.node.repl.close()
		}
		if c.node != nil && c.node.reg != nil {
			errs = append(errs, c.node.reg.Close())
		}
		if c.node != nil && c.node.held != nil {
			c.node.held.close()
		}
		if c.mesh != nil {
			errs = append(errs, c.mesh.Close())
		}
		if c.ln != nil {
			c.ln.Close()
		}
		if c.ownCli && c.cli != nil {
			errs = append(errs, c.cli.Close())
		}
		if c.member != nil {
			c.member.Close()
		}
	})
	return errors.Join(errs...)
}

// CheckPeers is the cluster_peers health check: degraded while another
// registered node cannot take deliveries, naming each and why.
func (c *Cluster) CheckPeers(context.Context) error {
	var down []string
	for _, p := range c.mesh.Stats() {
		if p.Available {
			continue
		}
		down = append(down, p.Node+": "+cmp.Or(p.Problem, p.LastError, "no stream yet"))
	}
	if len(down) > 0 {
		return fmt.Errorf("cannot reach %s", strings.Join(down, "; "))
	}
	return nil
}

// Check is the cluster health check: failing-soft (an error) while the
// registry is not in step with etcd, or while a gateway of the line is
// missing, naming it and since when.
func (c *Cluster) Check(context.Context) error {
	if st, why := c.node.reg.State(); st != registry.Healthy {
		if why != nil {
			return fmt.Errorf("registry %v: %v", st, why)
		}
		return fmt.Errorf("registry %v", st)
	}
	var missing []string
	for _, n := range c.Missing() {
		missing = append(missing, fmt.Sprintf("%s missing since %s (%s)", n.Name,
			n.Since.UTC().Format(time.RFC3339), time.Since(n.Since).Round(time.Second)))
	}
	if len(missing) > 0 {
		return errors.New(strings.Join(missing, "; "))
	}
	return nil
}

// Missing returns the gateways of the line that are not registered now,
// with the time each was last seen (or first expected), by name.
func (c *Cluster) Missing() []NodeStatus {
	var out []NodeStatus
	for _, n := range c.nodes.list() {
		if n.Missing {
			out = append(out, n)
		}
	}
	return out
}

// PeerStats are the figures of this node's stream to another node.
type PeerStats = peer.PeerStats

// Stats are the cluster's figures for the status page and /metrics.
type Stats struct {
	Node     string           `json:"node"`
	Cluster  string           `json:"cluster"`
	Registry registry.Stats   `json:"registry"`
	Reason   string           `json:"reason"` // why the registry is degraded
	Peers    []peer.PeerStats `json:"peers"`
	Nodes    []NodeStatus     `json:"nodes"` // every gateway of the line, missing ones included
	Known    []registry.Node  `json:"registered"`
	Etcd     EtcdStatus       `json:"etcd"`
	// Wills: the wills of dead gateways' clients (see wills.go).
	Wills WillStats `json:"wills"`
	// Replicas: the copies of persistent sessions (replicate.go).
	Replicas ReplicaStats `json:"replicas"`
	// Update: the line's update lock (updatelock.go), as last polled.
	Update LineUpdate `json:"update"`
}

// Stats returns the registry's, the mesh's and etcd's figures, all from
// memory (etcd's are polled in the background).
func (c *Cluster) Stats() Stats {
	st := Stats{Node: c.opts.Node, Cluster: cmp.Or(c.opts.Name, registry.DefaultCluster)}
	st.Registry = c.node.reg.Stats()
	if _, why := c.node.reg.State(); why != nil {
		st.Reason = why.Error()
	}
	st.Peers = c.mesh.Stats()
	st.Known = c.node.reg.Nodes()
	st.Nodes = c.nodes.list()
	st.Wills = c.node.WillStats()
	if c.node.repl != nil {
		c.node.repl.stats(&st.Replicas)
		c.node.held.stats(&st.Replicas)
	}
	if c.etcd != nil {
		st.Etcd = c.etcd.get()
		if u := c.etcd.update.Load(); u != nil {
			st.Update = *u
		}
	}
	st.Update.Waiting = c.UpdateWaiting()
	return st
}

// Registry returns the cluster's registry, for reading its views.
func (c *Cluster) Registry() *registry.Registry { return c.node.reg }

// LeadsEtcd reports whether this gateway's embedded etcd member is the
// etcd leader (false with external etcd).
func (c *Cluster) LeadsEtcd() bool { return c.member != nil && c.member.IsLeader() }

// etcdLogger sends the etcd client's warnings and errors to log (they
// used to be discarded): a client that cannot reach any endpoint says so.
// Its informational chatter stays out.
func etcdLogger(log *slog.Logger) *zap.Logger {
	return zaplog.New(log, "etcd-client").WithOptions(zap.IncreaseLevel(zapcore.WarnLevel))
}
