package broker

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// syncer is the broker's group commit: readers hand it the acknowledgements
// that must wait for the Store, and one goroutine calls Store.Sync for all
// that arrived since its last call, then sends them. While a sync runs,
// readers keep reading and the next batch collects, so a publisher with a
// window of messages in flight gets them acknowledged a batch at a time,
// not one sync per message.
//
// A Store that commits on a timer (storage.sync: batch) is asked to commit
// at once (Committer) as soon as no acknowledgement has been added for
// quietCommit: the publishers waiting for these have nothing more to send
// until they get them, so the rest of the interval would add nothing to
// the batch but their wait.
type syncer struct {
	srv    *Server
	commit Committer // the Store, if it can commit at once; nil otherwise
	mu     sync.Mutex
	next   []ackBatch
	closed bool          // under mu: waits added from now on are told ErrServerClosed
	added  atomic.Uint64 // acknowledgements batches added, ever: quiet when it stops moving
	wake   chan struct{}
	stop   chan struct{}
	done   chan struct{}
}

// quietCommit is how long no acknowledgement may be added, while a sync
// waits, before a Committer is asked to commit at once.
const quietCommit = time.Millisecond

// ackBatch is one read's acknowledgements, or (c nil) a wait of another
// kind told the sync's result through then.
type ackBatch struct {
	c    *conn
	acks []heldAck
	then func(error)
}

func newSyncer(srv *Server) *syncer {
	c, _ := srv.opts.Store.(Committer)
	s := &syncer{srv: srv, commit: c, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go s.loop()
	return s
}

// add queues a connection's acknowledgements for the next sync. The
// connection counts its batches in the syncer, so that later ones queue
// behind them.
func (s *syncer) add(c *conn, acks []heldAck) {
	c.syncing.Add(1)
	s.mu.Lock()
	s.next = append(s.next, ackBatch{c: c, acks: acks})
	s.mu.Unlock()
	s.added.Add(1)
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// after calls then with the result of the next sync, for a wait that is
// not a connection's: a delivery another node asked for, whose answer
// waits for the message to be stored. then must not block.
func (s *syncer) after(then func(error)) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		then(ErrServerClosed)
		return
	}
	s.next = append(s.next, ackBatch{then: then})
	s.mu.Unlock()
	s.added.Add(1)
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
		err := s.sync()
		for _, b := range batch {
			if b.c == nil {
				b.then(err)
				continue
			}
			b.c.sendAcks(b.acks, err)
			b.c.syncing.Add(-1)
			b.c.signal()
		}
		clear(batch)
	}
}

// sync waits for the Store to make durable what the batch's
// acknowledgements promise, asking a Committer to commit at once when the
// acknowledgements stop coming.
func (s *syncer) sync() error {
	if s.commit == nil {
		return s.srv.syncStore()
	}
	// The Sync runs on a goroutine of its own (one per commit, not per
	// message) so that this one can watch for the quiet.
	done := make(chan error, 1)
	go func() { done <- s.srv.syncStore() }()
	t := time.NewTimer(quietCommit)
	defer t.Stop()
	last := s.added.Load()
	for {
		select {
		case err := <-done:
			return err
		case <-t.C:
		}
		if n := s.added.Load(); n != last {
			last = n
			t.Reset(quietCommit)
			continue
		}
		// The commit's result reaches the Sync waiting above too.
		ctx, cancel := context.WithTimeout(context.Background(), s.srv.opts.WriteTimeout)
		_ = s.commit.Commit(ctx)
		cancel()
		return <-done
	}
}

// afterSync calls then with the result of the next group commit, as the
// syncer gives the publishers' acknowledgements theirs. then must not
// block.
func (srv *Server) afterSync(then func(error)) {
	if srv.syncer == nil {
		then(nil) // no Store: nothing to wait for
		return
	}
	srv.syncer.after(then)
}

// close stops the syncer once everything queued has been synced and sent.
func (s *syncer) close() {
	close(s.stop)
	<-s.done
	// A wait added after the last sync (a delivery answered as the server
	// stops) is told it failed, so that its sender does not wait in vain.
	s.mu.Lock()
	s.closed = true
	left := s.next
	s.next = nil
	s.mu.Unlock()
	for _, b := range left {
		if b.c == nil {
			b.then(ErrServerClosed)
		}
	}
}
