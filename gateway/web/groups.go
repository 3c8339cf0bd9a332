package web

import (
	"fmt"
	"strings"
	"time"

	"github.com/linemq/linemq/broker"
)

// groupView is a share group as the API, the page, /metrics and $SYS show
// it: the broker's figures at the moment of the request, the sampler's
// rates, and the verdict of the degraded rules.
type groupView struct {
	broker.GroupStats
	Reasons       []string // why the group is degraded; empty when it is not
	RateIn        float64
	RateDelivered float64
	Members       []memberView
}

func (g *groupView) degraded() bool { return len(g.Reasons) > 0 }

// memberView is one member of a groupView.
type memberView struct {
	broker.MemberStats
	Node            string
	SessionInFlight int // the session's whole in-flight count, all groups and subscriptions
	ReceiveMaximum  int // its send window; 0 while offline
	DeliveredRate   float64
	WindowFull      time.Duration // how long the window has been full; 0 when it is not
	Share           float64       // of the group's deliveries over the share window
	ExpectedShare   float64
	HasShare        bool // Share and ExpectedShare were judged
	Reasons         []string
}

// spreadsEvenly reports whether a strategy spreads messages evenly across
// members, so that a member's share of deliveries can be compared with
// 1/n. The hash and sticky strategies deliberately do not.
func spreadsEvenly(strategy string) bool {
	switch strategy {
	case "round_robin", "random", "prefer_local":
		return true
	}
	return false
}

// groupViews returns every share group with its verdict, in the broker's
// order (name, then filter).
func (s *Server) groupViews(now time.Time) []groupView {
	groups := s.b.ShareGroups()
	clients := s.memberClients(groups)
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]groupView, len(groups))
	for i := range groups {
		out[i] = s.judge(&groups[i], s.sampled.groups[groupKey{groups[i].Name, groups[i].Filter}], clients, now)
	}
	return out
}

// DegradedGroups returns, for each share group the page shows degraded, its
// name and why ("name: reason; reason"), for the gateway's share_groups
// health check: the page, the health badge and /readyz then agree.
func (s *Server) DegradedGroups() []string {
	var out []string
	for _, v := range s.groupViews(s.clock.Now()) {
		if v.degraded() {
			out = append(out, v.Name+": "+strings.Join(v.Reasons, "; "))
		}
	}
	return out
}

// judge applies the degraded rules to one group. tr may be nil for a group
// the sampler has not seen yet. The caller holds s.mu.
func (s *Server) judge(g *broker.GroupStats, tr *groupTrack, clients map[string]broker.ClientStats, now time.Time) groupView {
	th := &s.opts.Degraded
	v := groupView{GroupStats: *g}
	v.MemberStats = nil // they are in Members
	if tr != nil {
		v.RateIn, v.RateDelivered = tr.rateIn, tr.rateDelivered
	}
	if g.Members < g.MinMembers {
		v.Reasons = append(v.Reasons, fmt.Sprintf("%d members, below min_members %d", g.Members, g.MinMembers))
	}
	if th.QueueAge > 0 && g.Queued > 0 && g.OldestQueued >= th.QueueAge {
		v.Reasons = append(v.Reasons, fmt.Sprintf("queue not draining: %d queued, oldest waiting %s (limit %s)",
			g.Queued, roundDur(g.OldestQueued), th.QueueAge))
	}
	shares := s.shares(g, tr, now)
	node := s.opts.NodeID
	if node == "" {
		node = "local"
	}
	for _, m := range g.MemberStats {
		cs := clients[m.ClientID]
		mv := memberView{MemberStats: m, Node: node, SessionInFlight: cs.InFlight, ReceiveMaximum: cs.ReceiveMaximum}
		if m.Node != "" {
			mv.Node = m.Node // another node holds its session
		}
		if tr != nil {
			mv.DeliveredRate = tr.memberRate[m.ClientID]
			if since, ok := tr.fullSince[m.ClientID]; ok && windowFull(cs) {
				mv.WindowFull = max(0, now.Sub(since))
			}
		}
		if !m.Connected {
			mv.Reasons = append(mv.Reasons, "offline")
		}
		if th.WindowFull > 0 && mv.WindowFull >= th.WindowFull {
			mv.Reasons = append(mv.Reasons, fmt.Sprintf("send window full for %s (%d of Receive Maximum %d in flight; limit %s)",
				roundDur(mv.WindowFull), cs.InFlight, cs.ReceiveMaximum, th.WindowFull))
		}
		if sh, ok := shares[m.ClientID]; ok {
			mv.Share, mv.ExpectedShare, mv.HasShare = sh, 1/float64(len(shares)), true
			// Only a share below the expected one marks the member: the
			// members above it are the ones taking up the slack.
			if mv.ExpectedShare-mv.Share > th.ShareTolerance*mv.ExpectedShare {
				mv.Reasons = append(mv.Reasons, fmt.Sprintf("got %.0f%% of the last %s's deliveries, expected %.0f%%",
					100*mv.Share, th.ShareWindow, 100*mv.ExpectedShare))
			}
		}
		for _, r := range mv.Reasons {
			v.Reasons = append(v.Reasons, "member "+m.ClientID+": "+r)
		}
		v.Members = append(v.Members, mv)
	}
	return v
}

// shares returns each member's share of the group's deliveries since the
// sampler's baseline, for the members present at the baseline; nil when
// there is nothing to judge: a strategy that does not spread evenly, fewer
// than two members, a window less than half elapsed, or fewer deliveries
// than ShareMinMessages.
func (s *Server) shares(g *broker.GroupStats, tr *groupTrack, now time.Time) map[string]float64 {
	th := &s.opts.Degraded
	if th.ShareWindow <= 0 || th.ShareTolerance <= 0 || tr == nil || len(tr.samples) == 0 || !spreadsEvenly(g.Strategy) {
		return nil
	}
	base := tr.samples[0]
	if now.Sub(base.t) < th.ShareWindow/2 {
		return nil
	}
	deltas := make(map[string]uint64, len(g.MemberStats))
	var total uint64
	for _, m := range g.MemberStats {
		b, ok := base.members[m.ClientID]
		if !ok || m.Delivered < b {
			continue // joined during the window: its share is not comparable
		}
		deltas[m.ClientID] = m.Delivered - b
		total += m.Delivered - b
	}
	if len(deltas) < 2 || total == 0 || total < uint64(max(th.ShareMinMessages, 0)) {
		return nil
	}
	out := make(map[string]float64, len(deltas))
	for id, d := range deltas {
		out[id] = float64(d) / float64(total)
	}
	return out
}

// roundDur rounds a duration for reasons read by people.
func roundDur(d time.Duration) time.Duration {
	if d >= 10*time.Second {
		return d.Round(time.Second)
	}
	return d.Round(100 * time.Millisecond)
}
