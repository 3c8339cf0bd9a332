package broker

import "time"

// janitorInterval is how often queued and retained messages are checked for
// expiry. Expired messages are also dropped whenever they reach the front
// of a queue; the sweep keeps offline sessions and idle topics from holding
// (and the Store from keeping) messages nobody may receive any more.
const janitorInterval = time.Minute

func (srv *Server) scheduleJanitor() {
	srv.clock.AfterFunc(janitorInterval, func() {
		if srv.closed.Load() {
			return
		}
		srv.sweepExpired()
		srv.scheduleJanitor()
	})
}

// sweepExpired drops expired messages from every session's queue and from
// the retained store.
func (srv *Server) sweepExpired() {
	now := srv.clock.Now()
	for _, s := range srv.sessionList() {
		s.mu.Lock()
		keep := ring{total: s.queue.total}
		for s.queue.len() > 0 {
			d := s.queue.pop()
			if d.feed == nil && d.msg.expired(now) {
				s.forgetMsgLocked(&d)
				srv.stats.expired.Add(1)
				continue
			}
			keep.push(d)
		}
		s.queue = keep
		s.mu.Unlock()
	}
	for _, m := range srv.retained.removeExpired(now) {
		if st := srv.opts.Store; st != nil {
			clear := NewMessage(m.Topic, nil, 0, true)
			srv.storeErr("clear expired retained", "", st.SaveRetained(clear))
		}
	}
}
