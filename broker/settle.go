package broker

import (
	"sync"
	"time"
)

// A member that leaves its share group (it unsubscribes, its session ends
// or expires, another node takes its session over) may still hold messages
// of the group: queued, or QoS 1 in flight. Each was acknowledged to its
// publisher, so it must reach another member. Settling places them again
// and keeps each in the departed session's stored records until another
// member has it: taken by a member here (in the same group commit as the
// delete), or accepted by a member's node. A message no member can take
// now (every other member's node unreachable, as when a restarted node
// lets a session go before its streams to the others are up; every queue
// full) is tried again with backoff, not dropped; only a group with no
// member anywhere discards it (counted). If the broker stops first, the
// records stay, and the next start settles them again.

// settleRetryMin and settleRetryMax bound the backoff between attempts to
// place the messages no member could take.
const (
	settleRetryMin = 50 * time.Millisecond
	settleRetryMax = time.Second
)

// settling is one departed member's messages on their way to the others.
type settling struct {
	srv   *Server
	sess  *session
	after func() // once every message is placed or discarded; may be nil

	mu       sync.Mutex
	pending  int
	retry    []delivery
	retrying bool
}

// settle places ds, share-group messages taken from sess, with the other
// members of their groups, forgetting each from sess's stored records once
// placed, and calls after (if not nil) when all are.
func (srv *Server) settle(sess *session, ds []delivery, after func()) {
	n := 0
	for _, d := range ds {
		if d.group != nil {
			n++
		}
	}
	if n == 0 {
		if after != nil {
			after()
		}
		return
	}
	s := &settling{srv: srv, sess: sess, after: after, pending: n}
	for _, d := range ds {
		if d.group != nil {
			d.group.redispatched.Add(1)
			s.place(d)
		}
	}
}

// place tries d once.
func (s *settling) place(d delivery) {
	g := s.srv.liveGroup(d.group)
	if g == nil {
		// No member anywhere: nobody is left to give it to.
		d.group.discarded.Add(1)
		s.srv.stats.groupDiscarded.Add(1)
		s.placed(d)
		return
	}
	var r router
	r.remote = &remoteWait{settling: true}
	// Its new copy carries DUP: in flight to the departed member it may
	// have reached it, and queued it arrives after messages its publisher
	// sent later, so the member can tell it for what it is, a message the
	// group handed on, not one out of order.
	ok := g.place(s.srv.maybeDelivered(d.msg, d.msg.QoS > 0), &r)
	r.flush()
	if !ok {
		s.later(d)
		return
	}
	r.remote.whenDone(func(refused bool) {
		if refused {
			s.later(d)
		} else {
			s.placed(d)
		}
	})
}

// placed forgets d from the departed session's records.
func (s *settling) placed(d delivery) {
	s.sess.mu.Lock()
	s.sess.forgetMsgLocked(&d)
	s.sess.mu.Unlock()
	s.mu.Lock()
	s.pending--
	done := s.pending == 0
	s.mu.Unlock()
	if done && s.after != nil {
		s.after()
	}
}

// later keeps d for the next attempt.
func (s *settling) later(d delivery) {
	s.mu.Lock()
	s.retry = append(s.retry, d)
	start := !s.retrying
	s.retrying = true
	s.mu.Unlock()
	if start {
		go s.retryLoop()
	}
}

// retryLoop tries the kept messages again, with backoff, until none is
// left or the broker closes (their records then stay for the next start).
func (s *settling) retryLoop() {
	wait := settleRetryMin
	for {
		t := time.NewTimer(wait)
		select {
		case <-s.srv.stopping:
			t.Stop()
			return
		case <-t.C:
		}
		s.mu.Lock()
		batch := s.retry
		s.retry = nil
		s.mu.Unlock()
		for _, d := range batch {
			s.place(d)
		}
		s.mu.Lock()
		if len(s.retry) == 0 {
			s.retrying = false
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		wait = min(2*wait, settleRetryMax)
	}
}

// liveGroup returns the group now serving g's name and filter: g itself
// while it has members, or the one made since if members joined again
// after g ended; nil when there is none.
func (srv *Server) liveGroup(g *shareGroup) *shareGroup {
	srv.groupsMu.Lock()
	defer srv.groupsMu.Unlock()
	return srv.groups[g.key]
}
