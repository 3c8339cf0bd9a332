package broker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
)

// probeTopic is where liveness probes are published. Ordinary clients can
// subscribe to it like any topic, and would see a probe go by now and then;
// nothing else is sent there.
const probeTopic = "$linemq/probe/"

// prober sends the broker's liveness probes through its own router.
type prober struct {
	once sync.Once
	sess *session // an internal, never-connected session subscribed to probeTopic
	subs atomic.Int32
	mu   sync.Mutex
	n    uint64
}

// ErrProbeTimeout is returned by Probe when the probe did not come back
// before its context ended: the broker is wedged or overloaded.
var ErrProbeTimeout = errors.New("broker: liveness probe did not complete in time")

// Probe checks that the broker is alive rather than assuming it: a message
// makes a round trip through the same path a client's PUBLISH takes (the
// subscription index, the router, a session's lock and queue) and the
// server's own lock, and must come back before ctx ends. A health check
// calls it periodically; a watchdog must not be fed while it fails.
func (srv *Server) Probe(ctx context.Context) error {
	p := &srv.probe
	p.once.Do(func() {
		s := newSession(srv, "$linemq-probe", 5)
		s.queue.total = nil // probes are not client messages: not counted against MaxQueuedTotal
		p.sess = s
		srv.subs.Add(probeTopic+"#", &subscription{sess: s, filter: probeTopic + "#", topicFilter: probeTopic + "#", qos: 1})
		p.subs.Store(1) // not a client's: Stats leaves it out
	})
	p.mu.Lock()
	p.n++
	topic := probeTopic + strconv.FormatUint(p.n, 10)
	p.mu.Unlock()

	done := make(chan error, 1)
	go func() {
		m := NewMessage(topic, []byte("probe"), 1, false)
		var r router
		if r.route(srv, m, nil) > 0 {
			srv.stats.msgsRouted.Add(^uint64(0)) // not a client's message
		}
		s := p.sess
		s.mu.Lock()
		found := false
		for i := 0; i < s.queue.len(); i++ {
			if s.queue.at(i).msg == m {
				found = true
			}
		}
		s.queue.reset()
		s.mu.Unlock()
		srv.mu.Lock()
		closed := srv.closed.Load()
		srv.mu.Unlock()
		switch {
		case closed:
			done <- ErrServerClosed
		case !found:
			done <- fmt.Errorf("broker: liveness probe %s was not routed back", topic)
		default:
			done <- nil
		}
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ErrProbeTimeout
	}
}
