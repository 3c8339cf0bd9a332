package broker

import (
	"slices"
	"strings"
	"time"
)

// GroupStats is a snapshot of one share group, for the status page and
// metrics: how many members it has, what went through it, and where
// messages are waiting.
type GroupStats struct {
	Name     string
	Filter   string
	Strategy string

	Members    int
	MinMembers int  // from the group's policy; 0 when undeclared
	MaxMembers int  // from the group's policy; 0 for no limit
	Degraded   bool // fewer members than MinMembers

	In           uint64 // messages that matched the group
	Delivered    uint64 // messages handed to a member
	Acked        uint64 // QoS 1/2 messages a member acknowledged
	Redispatched uint64 // messages moved to another member after one left
	Dropped      uint64 // messages no member could take
	Discarded    uint64 // messages lost because the group ended

	Queued       int           // messages waiting in members' queues for this group
	InFlight     int           // messages sent to members and not yet acknowledged
	OldestQueued time.Duration // age of the oldest of those queued messages

	MemberStats []MemberStats
}

// MemberStats is one member of a share group.
type MemberStats struct {
	ClientID     string
	Node         string // the node holding the member's session; "" for this node
	Connected    bool
	Delivered    uint64        // messages this group handed to the member
	InFlight     int           // of this group's, unacknowledged
	Queued       int           // of this group's, waiting
	OldestQueued time.Duration // age of the oldest of those
	Disconnects  uint64        // connections of the member's session that ended
	Redeliveries uint64        // messages resent to the member after a reconnect
}

// ShareGroups returns a snapshot of every share group, sorted by name and
// filter. A group declared in the options with an exact name and a minimum
// membership appears even while it has no members, as degraded: an empty
// worker pool is the state an operator most needs to see.
func (srv *Server) ShareGroups() []GroupStats {
	srv.groupsMu.Lock()
	groups := make([]*shareGroup, 0, len(srv.groups))
	for _, g := range srv.groups {
		groups = append(groups, g)
	}
	srv.groupsMu.Unlock()

	now := srv.clock.Now()
	seen := make(map[string]bool)
	out := make([]GroupStats, 0, len(groups))
	for _, g := range groups {
		out = append(out, g.snapshot(now))
		seen[g.key.name] = true
	}
	for _, p := range srv.opts.Shares.Groups {
		if p.MinMembers > 0 && !strings.ContainsAny(p.Name, "*?[\\") && !seen[p.Name] {
			out = append(out, GroupStats{Name: p.Name, MinMembers: p.MinMembers, MaxMembers: p.MaxMembers, Degraded: true})
		}
	}
	slices.SortFunc(out, func(a, b GroupStats) int {
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		return strings.Compare(a.Filter, b.Filter)
	})
	return out
}

func (g *shareGroup) snapshot(now time.Time) GroupStats {
	g.mu.Lock()
	members := g.members.Members()
	strategy := g.members.Options().Strategy.String()
	g.mu.Unlock()
	gs := GroupStats{
		Name: g.key.name, Filter: g.key.filter, Strategy: strategy,
		Members: len(members), MinMembers: g.policy.MinMembers, MaxMembers: g.policy.MaxMembers,
		In: g.in.Load(), Delivered: g.delivered.Load(), Acked: g.acked.Load(),
		Redispatched: g.redispatched.Load(), Dropped: g.dropped.Load(), Discarded: g.discarded.Load(),
	}
	gs.Degraded = len(members) < g.policy.MinMembers
	for _, m := range members {
		sub := m.Value
		var ms MemberStats
		if sub.remote != nil {
			// Another node's: only it knows the member's queues.
			ms = MemberStats{Node: sub.remote.Node, Connected: true}
		} else {
			ms = sub.sess.groupStats(g, now)
		}
		ms.ClientID = m.ID
		ms.Delivered = sub.delivered.Load()
		gs.Queued += ms.Queued
		gs.InFlight += ms.InFlight
		gs.OldestQueued = max(gs.OldestQueued, ms.OldestQueued)
		gs.MemberStats = append(gs.MemberStats, ms)
	}
	return gs
}

// groupStats counts what the session holds for group g.
func (s *session) groupStats(g *shareGroup, now time.Time) MemberStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	ms := MemberStats{Connected: s.conn != nil, Disconnects: s.disconnects, Redeliveries: s.redeliveries}
	for i := 0; i < s.queue.len(); i++ {
		d := s.queue.at(i)
		if d.group != g {
			continue
		}
		if ms.Queued == 0 {
			ms.OldestQueued = now.Sub(d.msg.Created)
		}
		ms.Queued++
	}
	for _, d := range s.inflight {
		if d.group == g {
			ms.InFlight++
		}
	}
	return ms
}
