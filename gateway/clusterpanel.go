package gateway

import (
	"cmp"
	"slices"
	"strings"

	"github.com/linemq/linemq/gateway/cluster"
	"github.com/linemq/linemq/gateway/health"
	"github.com/linemq/linemq/gateway/web"
)

// clusterStatus returns the cluster panel of the status page, or nil when
// the gateway is standalone (the panel then says so).
func (g *Gateway) clusterStatus() func() any {
	if g.cluster == nil {
		return nil
	}
	return func() any { return g.clusterPanel() }
}

// clusterPanel is the status page's cluster panel: every gateway of the
// line (missing ones included) with this node's stream to each, the
// registry's state and lag, and every etcd member. Everything it reads is
// in memory.
func (g *Gateway) clusterPanel() web.ClusterPanel {
	cs := g.cluster.Stats()
	p := web.ClusterPanel{Cluster: cs.Cluster, Node: cs.Node, Etcd: cs.Etcd}
	st := cs.Registry
	p.Registry = web.ClusterRegistry{
		State: st.State.String(), Reason: cs.Reason, Revision: st.Revision,
		LagSeconds: st.Lag.Seconds(), LagMaxSeconds: st.LagMax.Seconds(), QueuedWrites: st.Queued,
		Nodes: st.Nodes, Routes: st.Routes, Members: st.Members, Sessions: st.Sessions,
	}
	seen := map[string]bool{}
	for _, n := range cs.Known {
		seen[n.Name] = true
		cn := web.ClusterNode{Name: n.Name, Address: n.Addr, Version: n.Version, Self: n.Name == cs.Node}
		if cn.Self {
			cn.Health, cn.Reason = g.selfHealth()
		} else if i := slices.IndexFunc(cs.Peers, func(p cluster.PeerStats) bool { return p.Node == n.Name }); i < 0 {
			cn.Health, cn.Reason = health.Degraded.String(), "no stream yet"
		} else {
			peerNode(&cn, cs.Peers[i])
		}
		p.Nodes = append(p.Nodes, cn)
	}
	for _, n := range cs.Nodes { // the line's gateways that are not registered
		if seen[n.Name] || !n.Missing {
			continue
		}
		seen[n.Name] = true
		since := n.Since
		p.Nodes = append(p.Nodes, web.ClusterNode{Name: n.Name, Missing: true, MissingSince: &since,
			Health: health.Failed.String(), Reason: "missing: not registered (" + n.From + ")"})
	}
	for _, ps := range cs.Peers { // known to the mesh, gone from the registry
		if !seen[ps.Node] {
			cn := web.ClusterNode{Name: ps.Node, Address: ps.Addr}
			peerNode(&cn, ps)
			p.Nodes = append(p.Nodes, cn)
		}
	}
	slices.SortFunc(p.Nodes, func(a, b web.ClusterNode) int { return strings.Compare(a.Name, b.Name) })
	p.Forwards = g.srv.ForwardQueues()
	p.Replicas = cs.Replicas
	p.Update = cs.Update
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
func peerNode(cn *web.ClusterNode, p cluster.PeerStats) {
	cn.Connected, cn.Available = p.Connected, p.Available
	cn.Breaker, cn.BreakerOpens = p.Breaker.String(), p.Opens
	cn.RTTSeconds, cn.RTTMaxSeconds = p.RTT.Seconds(), p.RTTMax.Seconds()
	cn.Queued, cn.InFlight, cn.LastError = p.Queued, p.InFlight, p.LastError
	switch {
	case p.Available:
		cn.Health = health.OK.String()
	default:
		// In words; the raw error stays in LastError, for the detail.
		cn.Health, cn.Reason = health.Degraded.String(), cmp.Or(p.Problem, p.LastError, "no stream")
	}
}
