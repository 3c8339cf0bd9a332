package web

import (
	"time"

	"github.com/linemq/linemq/broker"
)

// samplerState is what the sampler keeps between samples; Server.mu guards
// it. Its size is bounded by the number of groups and members, and the
// history by HistoryLength.
type samplerState struct {
	last      time.Time // when the last sample was taken; zero before the first
	lastStats broker.Stats

	// Rates over the last sample interval, and their recent history
	// (oldest first) for the page's charts.
	rateIn, rateOut, rateBytesIn float64
	histIn, histOut              []float64

	groups map[groupKey]*groupTrack
}

func (ss *samplerState) init() {
	ss.groups = make(map[groupKey]*groupTrack)
}

// groupKey names a share group: the same name with another filter is
// another group.
type groupKey struct{ name, filter string }

// groupTrack is the sampled history of one share group.
type groupTrack struct {
	// samples are cumulative counters, oldest first, spanning the share
	// window: samples[0] is the baseline shares are measured from.
	samples []groupSample
	// fullSince is when each member was first seen with a full send
	// window, for members whose window is full at the last sample.
	fullSince map[string]time.Time

	rateIn, rateDelivered float64            // messages/s over the last interval
	memberRate            map[string]float64 // delivered/s by member
}

type groupSample struct {
	t         time.Time
	in        uint64
	delivered uint64
	members   map[string]uint64 // delivered, by member client id
}

// windowFull reports whether a client's send window is full: as many QoS
// 1/2 messages in flight as its Receive Maximum allows. A member in that
// state is passed over by the share group; for long, it is a worker that
// stopped acknowledging.
func windowFull(cs broker.ClientStats) bool {
	return cs.Connected && cs.ReceiveMaximum > 0 && cs.InFlight >= cs.ReceiveMaximum
}

// memberClients returns the client snapshot of every member of groups.
func (s *Server) memberClients(groups []broker.GroupStats) map[string]broker.ClientStats {
	out := make(map[string]broker.ClientStats)
	for _, g := range groups {
		for _, m := range g.MemberStats {
			if _, ok := out[m.ClientID]; ok {
				continue
			}
			if cs, _, ok := s.b.Client(m.ClientID); ok {
				out[m.ClientID] = cs
			}
		}
	}
	return out
}

// sample takes one sample at now: the broker's counters for the rates,
// and each share group's counters and members' windows.
func (s *Server) sample(now time.Time) {
	st := s.b.Stats()
	groups := s.b.ShareGroups()
	clients := s.memberClients(groups)

	s.mu.Lock()
	defer s.mu.Unlock()
	ss := &s.sampled
	if !ss.last.IsZero() {
		if dt := now.Sub(ss.last).Seconds(); dt > 0 {
			ss.rateIn = float64(st.MessagesIn-ss.lastStats.MessagesIn) / dt
			ss.rateOut = float64(st.MessagesRouted-ss.lastStats.MessagesRouted) / dt
			ss.rateBytesIn = float64(st.BytesIn-ss.lastStats.BytesIn) / dt
			ss.histIn = pushBounded(ss.histIn, ss.rateIn, HistoryLength)
			ss.histOut = pushBounded(ss.histOut, ss.rateOut, HistoryLength)
		}
	}
	ss.last, ss.lastStats = now, st

	seen := make(map[groupKey]bool, len(groups))
	for i := range groups {
		g := &groups[i]
		k := groupKey{g.Name, g.Filter}
		seen[k] = true
		tr := ss.groups[k]
		if tr == nil {
			tr = &groupTrack{fullSince: make(map[string]time.Time), memberRate: make(map[string]float64)}
			ss.groups[k] = tr
		}
		s.track(tr, g, clients, now)
	}
	for k := range ss.groups {
		if !seen[k] {
			delete(ss.groups, k)
		}
	}
}

// track adds a sample of g to tr.
func (s *Server) track(tr *groupTrack, g *broker.GroupStats, clients map[string]broker.ClientStats, now time.Time) {
	cur := groupSample{t: now, in: g.In, delivered: g.Delivered, members: make(map[string]uint64, len(g.MemberStats))}
	for _, m := range g.MemberStats {
		cur.members[m.ClientID] = m.Delivered
		if windowFull(clients[m.ClientID]) {
			if _, ok := tr.fullSince[m.ClientID]; !ok {
				tr.fullSince[m.ClientID] = now
			}
		} else {
			delete(tr.fullSince, m.ClientID)
		}
	}
	for id := range tr.fullSince {
		if _, ok := cur.members[id]; !ok {
			delete(tr.fullSince, id)
		}
	}
	clear(tr.memberRate)
	if n := len(tr.samples); n > 0 && (cur.in < tr.samples[n-1].in || cur.delivered < tr.samples[n-1].delivered) {
		// The group ended and began again between two samples: its
		// counters started over, and so does its history.
		tr.samples = tr.samples[:0]
		tr.rateIn, tr.rateDelivered = 0, 0
	}
	if n := len(tr.samples); n > 0 {
		prev := tr.samples[n-1]
		if dt := now.Sub(prev.t).Seconds(); dt > 0 {
			tr.rateIn = float64(cur.in-prev.in) / dt
			tr.rateDelivered = float64(cur.delivered-prev.delivered) / dt
			for id, d := range cur.members {
				if p, ok := prev.members[id]; ok && d >= p {
					tr.memberRate[id] = float64(d-p) / dt
				}
			}
		}
	}
	tr.samples = append(tr.samples, cur)
	// Keep the newest sample at or before the window's start as the
	// baseline, and everything after it.
	start := now.Add(-s.opts.Degraded.ShareWindow)
	drop := 0
	for drop+1 < len(tr.samples) && !tr.samples[drop+1].t.After(start) {
		drop++
	}
	if drop > 0 {
		tr.samples = append(tr.samples[:0], tr.samples[drop:]...)
	}
}

// pushBounded appends v to h, dropping the oldest values beyond n.
func pushBounded(h []float64, v float64, n int) []float64 {
	if len(h) < n {
		return append(h, v)
	}
	copy(h, h[1:])
	h[len(h)-1] = v
	return h
}
