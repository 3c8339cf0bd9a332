package broker

import (
	"errors"
	"fmt"
	"path"
	"sync"
	"sync/atomic"

	"github.com/linemq/linemq/broker/packet"
	"github.com/linemq/linemq/broker/share"
)

// ShareOptions configure shared subscription groups.
type ShareOptions struct {
	// Strategy is the pick strategy of groups no policy names: round_robin
	// (the default), random, sticky, hash_clientid, hash_topic or prefer_local.
	Strategy string
	// Groups are per-group policies; the first whose Name pattern matches a
	// group's name applies to it.
	Groups []GroupPolicy
	// Overload is what happens when a group's workers cannot keep up and a
	// member's queue reaches MaxQueuedMessages: "backpressure" (the default)
	// holds the publishers' PUBACK/PUBREC until the queue drains to half, so
	// no acknowledged message is dropped; "drop_oldest" drops the oldest
	// queued message instead (counted), for users who prefer fresh data.
	Overload string
}

// GroupPolicy declares how a share group (or a family of them) behaves, and
// who may join it: the contract that keeps a consumer needing the complete
// stream out of a worker pool.
type GroupPolicy struct {
	// Name is the group name or a glob pattern (path.Match syntax) of names.
	Name string
	// Strategy overrides ShareOptions.Strategy; empty keeps it.
	Strategy string
	// StrictRotation turns off passing over members whose send window is
	// full (configured as skip_full_members: false).
	StrictRotation bool
	// RedispatchOnDisconnect hands a member's queued and unacknowledged
	// QoS 1 messages to the other members as soon as its connection breaks,
	// instead of when its session ends.
	RedispatchOnDisconnect bool
	// AllowedClients are client id glob patterns; when set, other clients
	// are refused with 0x87 Not authorized.
	AllowedClients []string
	// MinMembers marks the group degraded while it has fewer members.
	MinMembers int
	// MaxMembers refuses members beyond it with 0x97 Quota exceeded; 0 for no limit.
	MaxMembers int
	// Overload overrides ShareOptions.Overload; empty keeps it.
	Overload string
}

func (o *ShareOptions) validate() error {
	var errs []error
	if o.Strategy != "" {
		if _, err := share.ParseStrategy(o.Strategy); err != nil {
			errs = append(errs, fmt.Errorf("broker: Shares.Strategy: %w", err))
		}
	}
	if err := validOverload(o.Overload); err != nil {
		errs = append(errs, fmt.Errorf("broker: Shares.Overload: %w", err))
	}
	for i, g := range o.Groups {
		if g.Name == "" {
			errs = append(errs, fmt.Errorf("broker: Shares.Groups[%d].Name is empty", i))
		} else if _, err := path.Match(g.Name, ""); err != nil {
			errs = append(errs, fmt.Errorf("broker: Shares.Groups[%d].Name %q: %w", i, g.Name, err))
		}
		if g.Strategy != "" {
			if _, err := share.ParseStrategy(g.Strategy); err != nil {
				errs = append(errs, fmt.Errorf("broker: Shares.Groups[%d].Strategy: %w", i, err))
			}
		}
		if err := validOverload(g.Overload); err != nil {
			errs = append(errs, fmt.Errorf("broker: Shares.Groups[%d].Overload: %w", i, err))
		}
		for _, p := range g.AllowedClients {
			if _, err := path.Match(p, ""); err != nil {
				errs = append(errs, fmt.Errorf("broker: Shares.Groups[%d].AllowedClients %q: %w", i, p, err))
			}
		}
		if g.MinMembers < 0 || g.MaxMembers < 0 || (g.MaxMembers > 0 && g.MinMembers > g.MaxMembers) {
			errs = append(errs, fmt.Errorf("broker: Shares.Groups[%d]: need 0 <= MinMembers <= MaxMembers", i))
		}
	}
	return errors.Join(errs...)
}

// Overload modes of a share group.
const (
	OverloadBackpressure = "backpressure"
	OverloadDropOldest   = "drop_oldest"
)

func validOverload(s string) error {
	switch s {
	case "", OverloadBackpressure, OverloadDropOldest:
		return nil
	}
	return fmt.Errorf("unknown overload mode %q (valid: %s, %s)", s, OverloadBackpressure, OverloadDropOldest)
}

// policyFor resolves the policy of the group named name.
func (o *ShareOptions) policyFor(name string) (GroupPolicy, share.Options) {
	so := share.Options{SkipFull: true}
	so.Strategy, _ = share.ParseStrategy(o.Strategy)
	for _, g := range o.Groups {
		if ok, _ := path.Match(g.Name, name); ok {
			if g.Strategy != "" {
				so.Strategy, _ = share.ParseStrategy(g.Strategy)
			}
			so.SkipFull = !g.StrictRotation
			return g, so
		}
	}
	return GroupPolicy{}, so
}

// groupKey identifies a share group: the same name with another filter is
// another group [MQTT-4.8.2].
type groupKey struct{ name, filter string }

// shareGroup is one share group on this node: its members and counters.
type shareGroup struct {
	srv    *Server
	key    groupKey
	policy GroupPolicy

	mu      sync.Mutex // guards members and qos; taken before any member's session mu
	members *share.Group[*subscription]
	qos     byte // QoS of the message being picked for, read by accept
	accept  func(share.Member[*subscription]) share.Verdict
	exclude []string // members a repick must pass over (their delivery failed)
	ended   bool

	backpressure bool // hold publishers' acks instead of dropping (see ShareOptions.Overload)

	in, delivered, acked, redispatched, dropped, discarded atomic.Uint64
}

func newShareGroup(srv *Server, key groupKey, opts *ShareOptions) *shareGroup {
	pol, so := opts.policyFor(key.name)
	g := &shareGroup{srv: srv, key: key, policy: pol, members: share.NewGroup[*subscription](key.name, key.filter, so)}
	mode := opts.Overload
	if pol.Overload != "" {
		mode = pol.Overload
	}
	g.backpressure = mode != OverloadDropOldest
	// One closure per group, made once, so that Pick does not allocate one
	// per message.
	g.accept = func(m share.Member[*subscription]) share.Verdict {
		if m.Value.remote != nil {
			for _, id := range g.exclude {
				if id == m.ID {
					return share.Skip
				}
			}
			if srv.opts.Cluster == nil || !srv.opts.Cluster.Available(m.Value.remote.Node) {
				return share.Skip
			}
			return share.Take // its node has the window; a refusal comes back as an error
		}
		for _, id := range g.exclude {
			if id == m.ID {
				return share.Skip
			}
		}
		return m.Value.sess.verdict(min(g.qos, m.Value.qos), !g.backpressure)
	}
	return g
}

// dispatch hands m to one member of the group. It reports whether a member
// took it. When none can (every member offline with a full queue, under
// backpressure), the message is refused: r.refused tells the publisher's
// acknowledgement, and the group counts it as dropped.
func (g *shareGroup) dispatch(m *Message, r *router) bool {
	g.in.Add(1)
	if g.place(m, r) {
		return true
	}
	g.dropped.Add(1)
	r.refused = true
	return false
}

// place hands m to one member of the group, or reports false when no
// member can take it now.
func (g *shareGroup) place(m *Message, r *router) bool {
	// A member can end between the pick and the delivery (its session
	// expiring, its connection dying): then pick again. Its verdict is Skip
	// from then on, so this ends within one try per member.
	for try := 0; ; try++ {
		g.mu.Lock()
		if g.ended || try > g.members.Len() {
			ended := g.ended
			g.mu.Unlock()
			if !ended {
				break
			}
			if r.remote == nil || !r.remote.settling {
				g.discarded.Add(1)
				g.srv.stats.groupDiscarded.Add(1) // the group is gone: count it where it stays visible
			}
			return false
		}
		g.qos = m.QoS
		mem, ok := g.members.Pick(shareKey(m), g.accept)
		g.mu.Unlock()
		if !ok {
			break
		}
		sub := mem.Value
		if sub.remote != nil {
			if r.remote == nil {
				r.remote = &remoteWait{}
			}
			r.remote.add()
			g.delivered.Add(1)
			sub.delivered.Add(1)
			g.deliverRemote(m, sub, r.remote, nil)
			return true
		}
		var ids subIDs
		ids.add(sub.id)
		res := sub.sess.deliver(m, min(m.QoS, sub.qos), m.Retain && sub.retainAsPublished, &ids, g)
		if !res.ok {
			continue
		}
		g.delivered.Add(1)
		sub.delivered.Add(1)
		r.persisted = r.persisted || res.persisted
		if res.congested != nil {
			r.congested = res.congested
		}
		r.touch(res.conn)
		return true
	}
	return false
}

// joinGroup adds sub to its share group, creating the group on first use.
// A client the group's contract does not allow is refused.
func (srv *Server) joinGroup(name, filter string, sub *subscription) packet.ReasonCode {
	key := groupKey{name, filter}
	srv.groupsMu.Lock()
	defer srv.groupsMu.Unlock()
	g := srv.groups[key]
	if g == nil {
		g = newShareGroup(srv, key, &srv.opts.Shares)
	}
	id := sub.clientID()
	if allowed := g.policy.AllowedClients; len(allowed) > 0 && !matchAny(allowed, id) {
		srv.log.Warn("client refused by share group contract", "client", id, "group", name, "filter", filter)
		return packet.NotAuthorized
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if cur, ok := g.members.Get(id); ok && sub.remote != nil && cur.Value.remote == nil {
		// The client's session is here: another node's registration of
		// it (one it moved from, not yet withdrawn) must not take its
		// place, or this node would send its own member's messages away.
		return packet.GrantedQoS0
	}
	if _, member := g.members.Get(id); !member && g.policy.MaxMembers > 0 && g.members.Len() >= g.policy.MaxMembers {
		srv.log.Warn("share group full", "client", id, "group", name, "max", g.policy.MaxMembers)
		return packet.QuotaExceeded
	}
	g.members.Join(share.Member[*subscription]{ID: id, Local: sub.remote == nil, Value: sub})
	sub.group = g
	if srv.groups[key] == nil {
		srv.groups[key] = g
		srv.shares.Add(filter, g)
	}
	return packet.GrantedQoS0
}

// leaveGroup removes sub from its group; the group ends with its last member.
func (srv *Server) leaveGroup(sub *subscription) {
	g := sub.group
	srv.groupsMu.Lock()
	defer srv.groupsMu.Unlock()
	g.mu.Lock()
	if m, ok := g.members.Get(sub.clientID()); ok && m.Value == sub {
		g.members.Leave(sub.clientID())
	}
	empty := g.members.Len() == 0
	if empty {
		g.ended = true
	}
	g.mu.Unlock()
	if empty && srv.groups[g.key] == g {
		delete(srv.groups, g.key)
		srv.shares.Remove(g.key.filter, g)
	}
}

// shareKey is what the hash strategies hash for m.
func shareKey(m *Message) share.Key {
	return share.Key{ClientID: m.originBytes, Topic: m.topicBytes}
}

func matchAny(patterns []string, s string) bool {
	for _, p := range patterns {
		if ok, _ := path.Match(p, s); ok {
			return true
		}
	}
	return false
}
