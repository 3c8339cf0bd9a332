package gateway

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
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
)

// clustering is a gateway's part of its cluster (docs/cluster.md): an
// embedded etcd member if configured, the etcd client, the node-to-node
// mesh and its listener, the registry, and the glue the broker calls.
type clustering struct {
	member *etcdembed.Member // nil with external endpoints
	cli    *clientv3.Client
	node   *cluster.Node
	mesh   *peer.Mesh
	ln     net.Listener
	reg    *registry.Registry
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
	c.cli, err = clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop(), Context: context.Background()})
	if err != nil {
		return nil, fmt.Errorf("cluster.etcd: %w", err)
	}
	c.node = cluster.New(cfg.NodeID, nil, log.With("component", "cluster"))
	c.mesh, err = peer.New(peer.Options{Node: cfg.NodeID, Cluster: cc.Name, Handler: cluster.MeshHandler(c.node), Logger: log.With("component", "peer")})
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	c.node.SetTransport(cluster.NewMesh(c.mesh))
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
	if err := c.reg.Start(); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	log.Info("waiting for the cluster registry", "node", cfg.NodeID, "cluster", cfg.Cluster.Name, "transport", addr)
	select {
	case <-c.reg.Ready():
		return nil
	case <-ctx.Done():
		return fmt.Errorf("cluster: registry not ready: %w", ctx.Err())
	}
}

// close stops the cluster's parts in the reverse order of their start.
func (c *clustering) close() error {
	var errs []error
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
