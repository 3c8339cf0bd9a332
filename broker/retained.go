package broker

import (
	"sync"
	"time"

	"github.com/linemq/linemq/broker/topic"
)

// retainedStore holds the last retained message of each topic.
type retainedStore struct {
	mu   sync.RWMutex
	msgs map[string]*Message
}

func (r *retainedStore) init() { r.msgs = make(map[string]*Message) }

// set stores m as its topic's retained message, or clears the topic's
// retained message when m has an empty payload [MQTT-3.3.1-6] [MQTT-3.3.1-7].
func (r *retainedStore) set(m *Message) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(m.Payload) == 0 {
		delete(r.msgs, m.Topic)
		return
	}
	r.msgs[m.Topic] = m
}

// match returns the retained messages whose topics match filter, leaving out
// the expired ones.
func (r *retainedStore) match(filter string, now time.Time) []*Message {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var out []*Message
	for t, m := range r.msgs {
		if topic.Match(filter, t) && !m.expired(now) {
			out = append(out, m)
		}
	}
	return out
}

// len returns the number of retained messages.
func (r *retainedStore) len() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return len(r.msgs)
}

// retain records m as retained, and persists it when a Store is configured.
func (srv *Server) retain(m *Message) {
	// The stored copy is delivered later with RETAIN set, whatever the
	// subscription's options; keep the flag on it.
	srv.retained.set(m)
	if st := srv.opts.Store; st != nil {
		if err := st.SaveRetained(m); err != nil {
			srv.log.Error("storing retained message failed", "topic", m.Topic, "err", err)
		}
	}
}

// removeExpired drops retained messages whose expiry has passed and returns them.
func (r *retainedStore) removeExpired(now time.Time) []*Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*Message
	for t, m := range r.msgs {
		if m.expired(now) {
			delete(r.msgs, t)
			out = append(out, m)
		}
	}
	return out
}
