package broker

import "sync"

// syncer is the broker's group commit: readers hand it the acknowledgements
// that must wait for the Store, and one goroutine calls Store.Sync for all
// that arrived since its last call, then sends them. While a sync runs,
// readers keep reading and the next batch collects, so a publisher with a
// window of messages in flight gets them acknowledged a batch at a time,
// not one sync per message.
type syncer struct {
	srv  *Server
	mu   sync.Mutex
	next []ackBatch
	wake chan struct{}
	stop chan struct{}
	done chan struct{}
}

// ackBatch is one read's acknowledgements.
type ackBatch struct {
	c    *conn
	acks []heldAck
}

func newSyncer(srv *Server) *syncer {
	s := &syncer{srv: srv, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go s.loop()
	return s
}

// add queues a connection's acknowledgements for the next sync. The
// connection counts its batches in the syncer, so that later ones queue
// behind them.
func (s *syncer) add(c *conn, acks []heldAck) {
	c.syncing.Add(1)
	s.mu.Lock()
	s.next = append(s.next, ackBatch{c, acks})
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *syncer) loop() {
	defer close(s.done)
	var batch []ackBatch
	for {
		select {
		case <-s.wake:
		case <-s.stop:
			// Whatever is left is acknowledged after a final sync.
			s.mu.Lock()
			empty := len(s.next) == 0
			s.mu.Unlock()
			if empty {
				return
			}
		}
		s.mu.Lock()
		batch, s.next = s.next, batch[:0]
		s.mu.Unlock()
		if len(batch) == 0 {
			continue
		}
		err := s.srv.syncStore()
		for _, b := range batch {
			b.c.sendAcks(b.acks, err)
			b.c.syncing.Add(-1)
			b.c.signal()
		}
		clear(batch)
	}
}

// close stops the syncer once everything queued has been synced and sent.
func (s *syncer) close() {
	close(s.stop)
	<-s.done
}
