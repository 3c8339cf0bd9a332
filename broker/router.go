package broker

// router routes messages to sessions. Each connection's reader owns one and
// reuses its scratch space, so routing does not allocate in steady state.
type router struct {
	owner     *conn
	persisted bool        // a delivery wrote to the Store since the last reset
	matched   bool        // the last message matched a subscription or a group
	refused   bool        // a session or group refused a message (queue full) since the last reset
	refusedBy []string    // forwards only: the clients whose full queues refused it
	remote    *remoteWait // directed deliveries to other nodes of the last message, or nil
	nodes     []string    // scratch: the nodes a message was forwarded to
	congested *session    // a member past its high-water mark since the last reset
	targets   []target
	index     map[*session]int
	touched   map[*conn]struct{}
}

// target is one session a message goes to, with what its matching
// subscriptions add up to: a client with overlapping subscriptions gets the
// message once, at the highest granted QoS, with every subscription
// identifier [MQTT-3.3.4-2] [MQTT-3.3.4-3].
type target struct {
	sess   *session
	qos    byte
	retain bool
	ids    subIDs
}

// add folds sub's grant for m into t: the highest QoS, RETAIN if any
// subscription keeps it [MQTT-3.3.1-12] [MQTT-3.3.1-13], and every
// subscription identifier.
func (t *target) add(sub *subscription, m *Message) {
	t.qos = max(t.qos, min(m.QoS, sub.qos))
	t.retain = t.retain || (m.Retain && sub.retainAsPublished)
	t.ids.add(sub.id)
}

// linearDedupLimit is the number of matching subscriptions below which
// overlapping subscriptions are found by a linear scan instead of a map.
const linearDedupLimit = 16

// route delivers m to every matching ordinary subscriber and to one member
// of every matching share group. It returns how many sessions took it, and
// sets r.matched when anything matched (even if none could take it).
func (r *router) route(srv *Server, m *Message, from *conn) int {
	subs, gen := srv.subs.MatchGen(m.topicBytes)
	if m.rx != 0 {
		m.matchedGen.Store(gen + 1) // for subscriptions looking back (arrival.go)
	}
	r.targets = r.targets[:0]
	r.matched = false
	useMap := len(subs) > linearDedupLimit
	if useMap {
		if r.index == nil {
			r.index = make(map[*session]int)
		}
		clear(r.index)
	}
	for _, sub := range subs {
		if sub.noLocal && m.Origin != "" && sub.sess.id == m.Origin {
			continue // [MQTT-3.8.3-3]
		}
		i := -1
		if useMap {
			if j, ok := r.index[sub.sess]; ok {
				i = j
			}
		} else {
			for j := range r.targets {
				if r.targets[j].sess == sub.sess {
					i = j
					break
				}
			}
		}
		if i < 0 {
			r.targets = append(r.targets, target{sess: sub.sess})
			i = len(r.targets) - 1
			if useMap {
				r.index[sub.sess] = i
			}
		}
		r.targets[i].add(sub, m)
	}
	n := 0
	for i := range r.targets {
		t := &r.targets[i]
		res := t.sess.deliver(m, t.qos, t.retain, &t.ids, nil)
		if res.moved && t.qos > 0 && srv.redirectTo(t.sess.id, m, r) {
			n++ // carried to the node its session moved to (redirect.go)
			continue
		}
		if res.ok {
			n++
		}
		if res.refused {
			r.refused = true
			if m.fromPeer {
				r.refusedBy = append(r.refusedBy, t.sess.id)
			}
		}
		r.persisted = r.persisted || res.persisted
		r.touch(res.conn)
	}
	r.matched = len(r.targets) > 0
	clear(r.targets)
	if m.fromPeer {
		// The node that received it picked from the groups and forwarded
		// it; it goes no further from here.
		srv.stats.msgsRouted.Add(uint64(n))
		return n
	}
	if srv.opts.Cluster != nil {
		r.forwardRemote(srv, m)
	}
	for _, g := range srv.shares.Match(m.topicBytes) {
		r.matched = true
		if g.dispatch(m, r) {
			n++
		}
	}
	srv.stats.msgsRouted.Add(uint64(n))
	return n
}

// touch records that c has bytes to write once this batch is handled.
func (r *router) touch(c *conn) {
	if c == nil || c == r.owner {
		return
	}
	if r.touched == nil {
		r.touched = make(map[*conn]struct{})
	}
	r.touched[c] = struct{}{}
}

// flush wakes every touched connection's writer once.
func (r *router) flush() {
	for c := range r.touched {
		c.signal()
	}
	clear(r.touched)
	if r.owner != nil {
		r.owner.signal()
	}
}
