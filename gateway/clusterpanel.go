package gateway

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/linemq/linemq/gateway/health"
	"github.com/linemq/linemq/gateway/peer"
	"github.com/linemq/linemq/gateway/web"
)

// etcdPollInterval and etcdPollTimeout: how often the status page's etcd
// figures are refreshed, and how long one endpoint may take to answer.
const (
	etcdPollInterval = 5 * time.Second
	etcdPollTimeout  = 2 * time.Second
)

// etcdStatus keeps the etcd cluster's status (each endpoint's Status and
// the leader's name) fresh in the background, so that the status page
// reads a cached copy and never waits for etcd.
type etcdStatus struct {
	cli  *clientv3.Client
	last atomic.Pointer[web.EtcdStatus]
	stop chan struct{}
	done chan struct{}
}

// startEtcdStatus polls cli every etcdPollInterval until close.
func startEtcdStatus(cli *clientv3.Client) *etcdStatus {
	e := &etcdStatus{cli: cli, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(e.done)
		t := time.NewTicker(etcdPollInterval)
		defer t.Stop()
		for {
			e.poll()
			select {
			case <-e.stop:
				return
			case <-t.C:
			}
		}
	}()
	return e
}

// get returns the last status; before the first poll, a zero one.
func (e *etcdStatus) get() web.EtcdStatus {
	if s := e.last.Load(); s != nil {
		return *s
	}
	return web.EtcdStatus{Error: "not polled yet"}
}

func (e *etcdStatus) close() {
	close(e.stop)
	<-e.done
}

// poll asks the member list for the names, then every endpoint for its
// Status at once, each step within etcdPollTimeout.
func (e *etcdStatus) poll() {
	base, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { // the poll ends with close, not up to 4 s later
		select {
		case <-e.stop:
			cancel()
		case <-base.Done():
		}
	}()
	out := &web.EtcdStatus{Checked: time.Now().UTC()}
	names := map[uint64]string{}
	ctx, cancelList := context.WithTimeout(base, etcdPollTimeout)
	ml, err := e.cli.MemberList(ctx)
	cancelList()
	if err != nil {
		out.Error = "member list: " + err.Error()
	} else {
		for _, m := range ml.Members {
			names[m.ID] = m.Name
		}
	}
	ctx, cancelStatus := context.WithTimeout(base, etcdPollTimeout)
	defer cancelStatus()
	eps := e.cli.Endpoints()
	out.Endpoints = make([]web.EtcdEndpoint, len(eps))
	leaders := make([]uint64, len(eps))
	var wg sync.WaitGroup
	for i, ep := range eps {
		wg.Go(func() {
			start := time.Now()
			st, err := e.cli.Status(ctx, ep)
			r := &out.Endpoints[i]
			r.Endpoint = ep
			r.RTTSeconds = time.Since(start).Seconds()
			if err != nil {
				r.Error = err.Error()
				return
			}
			r.Member = names[st.Header.MemberId]
			r.Leader = st.Leader != 0 && st.Leader == st.Header.MemberId
			r.Version, r.DBSizeBytes, r.RaftTerm, r.RaftIndex = st.Version, st.DbSize, st.RaftTerm, st.RaftIndex
			r.Error = strings.Join(st.Errors, "; ")
			leaders[i] = st.Leader
		})
	}
	wg.Wait()
	out.Healthy = out.Error == "" && len(eps) > 0
	for i, r := range out.Endpoints {
		if r.Error != "" || leaders[i] == 0 || leaders[i] != leaders[0] {
			out.Healthy = false
		}
		if leaders[i] != 0 && out.Leader == "" {
			out.Leader = names[leaders[i]]
		}
	}
	e.last.Store(out)
}

// clusterPanel is the status page's cluster panel: the registered nodes
// with this node's stream to each, the registry's state and lag, and the
// cached etcd status. Everything it reads is in memory.
func (g *Gateway) clusterPanel() web.ClusterPanel {
	c := g.cluster
	p := web.ClusterPanel{Cluster: g.cfg.Cluster.Name, Node: g.cfg.NodeID}
	if c.etcd != nil {
		p.Etcd = c.etcd.get()
	}
	if c.reg == nil {
		return p
	}
	st := c.reg.Stats()
	_, why := c.reg.State()
	p.Registry = web.ClusterRegistry{
		State: st.State.String(), Revision: st.Revision,
		LagSeconds: st.Lag.Seconds(), LagMaxSeconds: st.LagMax.Seconds(), QueuedWrites: st.Queued,
		Nodes: st.Nodes, Routes: st.Routes, Members: st.Members, Sessions: st.Sessions,
	}
	if why != nil {
		p.Registry.Reason = why.Error()
	}
	peers := c.mesh.Stats()
	seen := map[string]bool{}
	for _, n := range c.reg.Nodes() {
		seen[n.Name] = true
		cn := web.ClusterNode{Name: n.Name, Address: n.Addr, Version: n.Version, Self: n.Name == g.cfg.NodeID}
		if cn.Self {
			cn.Health, cn.Reason = g.selfHealth()
		} else {
			i := slices.IndexFunc(peers, func(p peer.PeerStats) bool { return p.Node == n.Name })
			if i < 0 {
				cn.Health, cn.Reason = health.Degraded.String(), "no stream yet"
			} else {
				peerNode(&cn, peers[i])
			}
		}
		p.Nodes = append(p.Nodes, cn)
	}
	for _, ps := range peers { // known to the mesh, gone from the registry
		if !seen[ps.Node] {
			cn := web.ClusterNode{Name: ps.Node, Address: ps.Addr}
			peerNode(&cn, ps)
			p.Nodes = append(p.Nodes, cn)
		}
	}
	slices.SortFunc(p.Nodes, func(a, b web.ClusterNode) int { return strings.Compare(a.Name, b.Name) })
	return p
}

// selfHealth is this node's overall health and its worst check's reason.
func (g *Gateway) selfHealth() (string, string) {
	overall := g.health.Overall()
	var reasons []string
	for _, c := range g.health.Checks() {
		if c.State == overall && c.State != health.OK && c.Reason != "" {
			reasons = append(reasons, c.Name+": "+c.Reason)
		}
	}
	return overall.String(), strings.Join(reasons, "; ")
}

// peerNode fills a node's stream figures and health from the mesh's.
func peerNode(cn *web.ClusterNode, p peer.PeerStats) {
	cn.Connected, cn.Available = p.Connected, p.Available
	cn.Breaker, cn.BreakerOpens = p.Breaker.String(), p.Opens
	cn.RTTSeconds, cn.RTTMaxSeconds = p.RTT.Seconds(), p.RTTMax.Seconds()
	cn.Queued, cn.InFlight, cn.LastError = p.Queued, p.InFlight, p.LastError
	switch {
	case p.Available:
		cn.Health = health.OK.String()
	case p.Connected:
		cn.Health, cn.Reason = health.Degraded.String(), "breaker "+p.Breaker.String()
	default:
		cn.Health, cn.Reason = health.Degraded.String(), cmp.Or(p.LastError, "no stream")
	}
}
