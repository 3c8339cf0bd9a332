package gateway

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/gateway/cluster"
	"github.com/linemq/linemq/gateway/cluster/etcdembed"
	"github.com/linemq/linemq/gateway/cluster/registry"
	"github.com/linemq/linemq/gateway/config"
	"github.com/linemq/linemq/gateway/health"
	"github.com/linemq/linemq/gateway/peer"
	"github.com/linemq/linemq/gateway/web"
)

// clustering is a gateway's part of its cluster (docs/cluster.md): an
// embedded etcd member if configured, the etcd client, the node-to-node
// mesh and its listener, the registry, and the glue the broker calls.
type clustering struct {
	member *etcdembed.Member // nil with external endpoints
	cli    *clientv3.Client
	node   *cluster.Node
	mesh   *peer.Mesh
	tr     *countingTransport // the mesh as the glue's transport, counting outcomes
	ln     net.Listener
	reg    *registry.Registry
	etcd   *etcdStatus        // the status page's cached etcd figures
	stop   context.CancelFunc // ends the retained messages' sync
	synced chan struct{}      // closed when it has ended
}

// openCluster prepares what the broker needs before it is made (its
// Cluster) and what must listen early: the etcd member and the mesh's
// listener. attach finishes the job once the broker exists.
func openCluster(ctx context.Context, cfg *config.Config, dataDir string, log *slog.Logger) (_ *clustering, err error) {
	cc := &cfg.Cluster
	c := &clustering{}
	defer func() {
		if err != nil {
			c.close()
		}
	}()
	endpoints := cc.Etcd.Endpoints
	if cc.Etcd.Embed {
		name := cmp.Or(cc.Etcd.Name, cfg.NodeID)
		c.member, err = etcdembed.Start(etcdembed.Options{
			Name: name, Dir: filepath.Join(dataDir, etcdembed.DirName),
			PeerListen: cc.Etcd.PeerListen, ClientListen: cc.Etcd.ClientListen,
			InitialCluster: cmp.Or(cc.Etcd.InitialCluster, name+"="+cc.Etcd.PeerListen),
			Logger:         log.With("component", "etcd"),
		})
		if err != nil {
			return nil, fmt.Errorf("cluster.etcd: %w", err)
		}
		endpoints = c.member.ClientURLs()
	}
	etcdTLS, err := cc.Etcd.TLS.Load()
	if err != nil {
		return nil, err
	}
	c.cli, err = clientv3.New(clientv3.Config{Endpoints: endpoints, TLS: etcdTLS, DialTimeout: 5 * time.Second, Logger: zap.NewNop(), Context: context.Background()})
	if err != nil {
		return nil, fmt.Errorf("cluster.etcd: %w", err)
	}
	meshTLS, err := cc.TLS.Load()
	if err != nil {
		return nil, err
	}
	c.node = cluster.New(cfg.NodeID, nil, log.With("component", "cluster"))
	c.mesh, err = peer.New(peer.Options{Node: cfg.NodeID, Cluster: cc.Name, Handler: cluster.MeshHandler(c.node), TLS: meshTLS, Logger: log.With("component", "peer")})
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	c.tr = &countingTransport{Transport: cluster.NewMesh(c.mesh)}
	c.node.SetTransport(c.tr)
	var lc net.ListenConfig
	if c.ln, err = lc.Listen(ctx, "tcp", cc.Listen); err != nil {
		return nil, fmt.Errorf("cluster.listen: %w", err)
	}
	return c, nil
}

// attach starts the registry and the mesh for srv, and waits (within ctx)
// until the registry's copy is loaded and this node is registered: only
// then may the MQTT listeners open, so that a client never meets a node
// that does not yet know the others.
func (c *clustering) attach(ctx context.Context, cfg *config.Config, version string, srv *broker.Server, h *health.Registry, log *slog.Logger) error {
	addr := cmp.Or(cfg.Cluster.Advertise, c.ln.Addr().String())
	var err error
	c.reg, err = registry.New(registry.Options{
		Client: c.cli, Node: cfg.NodeID, Cluster: cfg.Cluster.Name, Addr: addr, Version: version,
		OnEvent: c.node.HandleEvent,
		OnState: func(s registry.State, why error) {
			switch s {
			case registry.Healthy:
				h.Set("cluster", health.OK, "registry in step with etcd")
			case registry.Closed:
			default:
				h.Set("cluster", health.Degraded, fmt.Sprintf("registry %v: %v", s, why))
			}
		},
		Logger: log.With("component", "registry"),
	})
	if err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	c.node.Attach(c.reg, srv)
	if err := c.mesh.Start(c.ln); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	if err := h.Poll("cluster_peers", time.Second, time.Second, c.checkPeers); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	if err := c.reg.Start(); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	c.etcd = startEtcdStatus(c.cli)
	log.Info("waiting for the cluster registry", "node", cfg.NodeID, "cluster", cfg.Cluster.Name, "transport", addr)
	select {
	case <-c.reg.Ready():
		c.node.Reconcile(ctx)
		var sctx context.Context
		sctx, c.stop = context.WithCancel(context.Background())
		c.synced = make(chan struct{})
		go func() {
			defer close(c.synced)
			c.node.SyncRetained(sctx, time.Second)
		}()
		return nil
	case <-ctx.Done():
		return fmt.Errorf("cluster: registry not ready: %w", ctx.Err())
	}
}

// checkPeers is the cluster_peers health check: degraded while another
// node of the registry cannot take deliveries, naming each and why (a
// refused certificate, a refused connection, an open breaker).
func (c *clustering) checkPeers(context.Context) error {
	var down []string
	for _, p := range c.mesh.Stats() {
		if p.Available {
			continue
		}
		why := "no stream yet"
		switch {
		case p.Connected:
			why = "breaker " + p.Breaker.String()
		case p.LastError != "":
			why = p.LastError
		}
		down = append(down, p.Node+": "+why)
	}
	if len(down) > 0 {
		return health.Degrade(fmt.Errorf("cannot reach %s", strings.Join(down, "; ")))
	}
	return nil
}

// close stops the cluster's parts in the reverse order of their start.
func (c *clustering) close() error {
	var errs []error
	if c.stop != nil {
		c.stop()
		<-c.synced
	}
	if c.etcd != nil {
		c.etcd.close()
	}
	if c.reg != nil {
		errs = append(errs, c.reg.Close())
	}
	if c.mesh != nil {
		errs = append(errs, c.mesh.Close())
	}
	if c.ln != nil {
		c.ln.Close()
	}
	if c.cli != nil {
		errs = append(errs, c.cli.Close())
	}
	if c.member != nil {
		c.member.Close()
	}
	return errors.Join(errs...)
}

// clusterMetrics returns the figures behind /metrics' linemq_cluster_*
// families, or nil when the gateway is standalone.
func (g *Gateway) clusterMetrics() func() web.ClusterStats {
	if g.cluster == nil {
		return nil
	}
	return g.cluster.stats
}

// stats gathers the registry's and the mesh's figures for web.
func (c *clustering) stats() web.ClusterStats {
	var out web.ClusterStats
	if c.reg != nil {
		st := c.reg.Stats()
		out.Registry = web.RegistryStats{
			State: st.State.String(), Revision: st.Revision,
			Lag: st.Lag, LagMax: st.LagMax, LagSum: st.LagSum, LagCount: st.LagCount,
			Resyncs: sub1(st.Loads), WatchLost: st.WatchLost, Compacted: st.Compacted,
			Reregistrations: sub1(st.Leases),
			Txns:            st.Txns, TxnOps: st.TxnOps, TxnErrors: st.TxnErrors, Queued: st.Queued,
			Nodes: st.Nodes, Routes: st.Routes, Members: st.Members, Sessions: st.Sessions,
		}
	}
	for _, p := range c.mesh.Stats() {
		d := c.tr.counts(p.Node)
		out.Peers = append(out.Peers, web.PeerStats{
			Node: p.Node, Up: p.Connected, Available: p.Available,
			Breaker: p.Breaker.String(), BreakerOpens: p.Opens,
			RTT: p.RTT, RTTMax: p.RTTMax, PingTimeouts: p.PingTimeouts,
			Streams: p.Streams, DialErrors: p.DialErrors, Queued: p.Queued, InFlight: p.InFlight,
			SentFrames: p.SentFrames, SentRecords: p.SentRecords, SentBytes: p.SentBytes,
			RecvFrames: p.RecvFrames, RecvRecords: p.RecvRecords, RecvBytes: p.RecvBytes,
			Dropped: p.Dropped, Rejected: p.Rejected, Late: p.Late, LateAccepted: p.LateAccepted,
			Deliveries: d.sent.Load(), Accepted: d.accepted.Load(), NotHere: d.notHere.Load(),
			Timeouts: d.timeout.Load(), Broken: d.broken.Load(), Refused: d.refused.Load(),
			RemoteErrors: d.remote.Load(),
		})
	}
	return out
}

// sub1 turns a count that includes the first occurrence into the repeats.
func sub1(n uint64) uint64 { return n - min(n, 1) }

// countingTransport is the glue's transport with the outcome of every
// directed delivery counted per peer, for /metrics. It embeds the
// transport, so everything but Deliver and SetPeer passes straight
// through.
type countingTransport struct {
	cluster.Transport

	mu    sync.Mutex
	peers map[string]*deliveryCounts // by node; dropped with the peer
}

// deliveryCounts are one peer's directed deliveries by outcome.
type deliveryCounts struct {
	sent, accepted, notHere, timeout, broken, refused, remote atomic.Uint64
}

// counts returns node's counters, made on first use.
func (t *countingTransport) counts(node string) *deliveryCounts {
	t.mu.Lock()
	defer t.mu.Unlock()
	d := t.peers[node]
	if d == nil {
		if t.peers == nil {
			t.peers = map[string]*deliveryCounts{}
		}
		d = &deliveryCounts{}
		t.peers[node] = d
	}
	return d
}

// Deliver counts the delivery and its outcome.
func (t *countingTransport) Deliver(to broker.RemoteMember, m *broker.Message, done func(error)) {
	d := t.counts(to.Node)
	d.sent.Add(1)
	t.Transport.Deliver(to, m, func(err error) {
		switch {
		case err == nil:
			d.accepted.Add(1)
		case errors.Is(err, peer.ErrNotHere):
			d.notHere.Add(1)
		case errors.Is(err, peer.ErrTimeout):
			d.timeout.Add(1)
		case errors.Is(err, peer.ErrBroken):
			d.broken.Add(1)
		case errors.Is(err, peer.ErrUnknownPeer), errors.Is(err, peer.ErrUnavailable),
			errors.Is(err, peer.ErrQueueFull), errors.Is(err, peer.ErrClosed):
			d.refused.Add(1)
		default:
			d.remote.Add(1)
		}
		done(err)
	})
}

// SetPeer forgets a departed peer's counters, so the series of nodes
// that left do not accumulate.
func (t *countingTransport) SetPeer(node, addr string) {
	if addr == "" {
		t.mu.Lock()
		delete(t.peers, node)
		t.mu.Unlock()
	}
	t.Transport.SetPeer(node, addr)
}
