package gateway

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/gateway/certs"
	"github.com/linemq/linemq/gateway/cluster"
	"github.com/linemq/linemq/gateway/config"
	"github.com/linemq/linemq/gateway/health"
	"github.com/linemq/linemq/gateway/web"
	"github.com/linemq/linemq/storage/bolt"
)

// startCluster starts the gateway's part of its line from the cluster
// section (docs/cluster.md): what must exist before the broker, whose
// Options.Cluster is the result's Hooks.
func startCluster(ctx context.Context, cfg *config.Config, dataDir, storeID, version string, log *slog.Logger) (*cluster.Cluster, error) {
	cc := &cfg.Cluster
	var etcdTLS *tls.Config
	var memberTLS certs.Files
	var err error
	if cc.Etcd.Embed {
		memberTLS = cc.Etcd.TLS.Files()
	} else if etcdTLS, err = cc.Etcd.TLS.Load(); err != nil {
		return nil, err
	}
	var meshTLS *certs.Mutual
	if cc.TLS.Set() {
		if meshTLS, err = certs.LoadMutual(cc.TLS.Files()); err != nil {
			return nil, fmt.Errorf("cluster.tls: %w", err)
		}
	}
	return cluster.Start(ctx, cluster.Options{
		Node: cfg.NodeID, Name: cc.Name, Listen: cc.Listen, Advertise: cc.Advertise,
		MeshTLS: meshTLS, MeshServerName: cc.TLS.ServerName,
		Etcd: cluster.EtcdOptions{
			Embed: cc.Etcd.Embed, Name: cc.Etcd.Name, PeerListen: cc.Etcd.PeerListen,
			ClientListen: cc.Etcd.ClientListen, InitialCluster: cc.Etcd.InitialCluster,
			Endpoints: cc.Etcd.Endpoints, TLS: etcdTLS, MemberTLS: memberTLS, Existing: cc.Etcd.InitialClusterState == "existing",
		},
		ExpectedNodes: cc.ExpectedNodes,
		Replicas:      replicaStores(cfg, dataDir, log),
		Version:       version,
		DataDir:       dataDir,
		StoreID:       storeID,
		Logger:        log,
	})
}

// The broker's group commit, and the replicas' stores for a small batch,
// commit at once rather than at the next batch interval (broker.Committer).
var _ broker.Committer = (*bolt.Store)(nil)

// ReplicaDir is the directory, in the data directory, of the stores of
// other gateways' sessions kept here: one bbolt file per gateway.
const ReplicaDir = "replicas"

// replicaStores opens the stores of the sessions other gateways replicate
// here, in DataDir/replicas/<node>.db.
func replicaStores(cfg *config.Config, dataDir string, log *slog.Logger) cluster.ReplicaOptions {
	dir := filepath.Join(dataDir, ReplicaDir)
	path := func(origin string) string { return filepath.Join(dir, origin+".db") }
	return cluster.ReplicaOptions{
		Count: *cfg.WithDefaults().Cluster.Replicas,
		Open: func(origin string) (cluster.ReplicaStore, error) {
			if err := os.MkdirAll(dir, 0o750); err != nil {
				return nil, err
			}
			return bolt.Open(path(origin), &bolt.Options{
				Sync:          bolt.SyncMode(cfg.Storage.Sync),
				BatchInterval: time.Duration(cfg.Storage.BatchInterval),
				Logger:        log.With("component", "storage", "replicas_of", origin),
			})
		},
		Remove: func(origin string) error { return os.Remove(path(origin)) },
		List: func() ([]string, error) {
			files, err := filepath.Glob(filepath.Join(dir, "*.db"))
			var names []string
			for _, f := range files {
				names = append(names, strings.TrimSuffix(filepath.Base(f), ".db"))
			}
			return names, err
		},
	}
}

// clusterChecks registers the cluster's health checks: "cluster" (the
// registry in step with etcd, and no gateway of the line missing) and
// "cluster_peers" (every other node can take deliveries).
func clusterChecks(c *cluster.Cluster, h *health.Registry) error {
	degrade := func(check func(context.Context) error) func(context.Context) error {
		return func(ctx context.Context) error {
			if err := check(ctx); err != nil {
				return health.Degrade(err)
			}
			return nil
		}
	}
	if err := h.Poll("cluster", time.Second, time.Second, degrade(c.Check)); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	if err := h.Poll("cluster_peers", time.Second, time.Second, degrade(c.CheckPeers)); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	return nil
}

// clusterMetrics returns the figures behind /metrics' linemq_cluster_*
// families, or nil when the gateway is standalone.
func (g *Gateway) clusterMetrics() func() web.ClusterStats {
	if g.cluster == nil {
		return nil
	}
	return func() web.ClusterStats { return clusterStats(g.cluster) }
}

// clusterStats gathers the registry's and the mesh's figures for web.
func clusterStats(c *cluster.Cluster) web.ClusterStats {
	var out web.ClusterStats
	cs := c.Stats()
	st := cs.Registry
	out.Registry = web.RegistryStats{
		State: st.State.String(), Revision: st.Revision,
		Lag: st.Lag, LagMax: st.LagMax, LagSum: st.LagSum, LagCount: st.LagCount,
		Resyncs: sub1(st.Loads), WatchLost: st.WatchLost, Compacted: st.Compacted,
		Reregistrations: sub1(st.Leases),
		Txns:            st.Txns, TxnOps: st.TxnOps, TxnErrors: st.TxnErrors, Queued: st.Queued,
		Nodes: st.Nodes, Routes: st.Routes, Members: st.Members, Sessions: st.Sessions,
	}
	for _, n := range cs.Nodes {
		if n.Missing {
			out.Missing++
		} else {
			out.Up++
		}
	}
	out.Peers = cs.Peers
	out.Wills = web.WillStats{Published: cs.Wills.Published, Waiting: cs.Wills.Waiting, Cancelled: cs.Wills.Cancelled}
	out.Replicas = cs.Replicas
	return out
}

// sub1 turns a count that includes the first occurrence into the repeats.
func sub1(n uint64) uint64 { return n - min(n, 1) }
