package bolt

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"
)

// maxRetryDelay caps the wait between retries of a failing commit. A
// retry of a full disk costs little (bbolt fails before writing, or on the
// first page), but logging and waking every 10 ms for hours would not help.
const maxRetryDelay = time.Second

// round is one commit as Sync sees it.
type round struct {
	upto uint64        // the changes numbered up to this are in it (set when taken)
	done chan struct{} // closed when the commit has finished
	err  error         // its result, readable once done is closed
}

func newRound() *round { return &round{done: make(chan struct{})} }

// poke sends on a 1-buffered signal channel without blocking: one pending
// signal is as good as many.
func poke(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// run is the committer goroutine. It sleeps while there is nothing to
// write: an idle gateway has no timer waking it 100 times a second.
func (s *Store) run() {
	defer close(s.done)
	// A fault reading a corrupt page becomes a panic that commit recovers,
	// rather than killing the broker.
	debug.SetPanicOnFault(true)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case <-s.closing:
			s.closeErr = s.commit()
			return
		case <-s.kick:
		case <-s.dirty:
			// Collect changes for the batch interval (longer after failures),
			// unless a Sync in SyncAlways mode, a full batch or Close cuts it short.
			timer.Reset(s.delay())
			select {
			case <-timer.C:
			case <-s.kick:
				timer.Stop()
			case <-s.closing:
				timer.Stop()
				s.closeErr = s.commit()
				return
			}
		}
		_ = s.commit() // results reach Sync through the round; failures are logged and retried
	}
}

// delay is how long to collect changes before the next commit: the batch
// interval, doubled for each consecutive failure up to maxRetryDelay.
func (s *Store) delay() time.Duration {
	s.mu.Lock()
	n := s.fails
	s.mu.Unlock()
	d := s.interval
	for i := 0; i < n && d < maxRetryDelay; i++ {
		d *= 2
	}
	if d > maxRetryDelay {
		d = max(maxRetryDelay, s.interval)
	}
	return d
}

// commit takes the pending batch and writes it in one transaction. On
// failure the batch goes back under the changes made meanwhile, to be
// retried whole by the next commit: a batch is atomic on disk, and splitting
// it could leave a state that never existed in the broker (a message
// deleted from one session before it was saved to another).
func (s *Store) commit() error {
	s.mu.Lock()
	b := s.pending
	if s.spare != nil {
		s.pending, s.spare = s.spare, nil
	} else {
		s.pending = newBatch()
	}
	r := s.next
	r.upto = s.enq
	s.taken = s.enq
	s.inflight, s.next = r, newRound()
	s.writing = b
	s.mu.Unlock()

	var (
		w     written
		pages uint64
		err   error
	)
	if !b.empty() {
		w, pages, err = s.write(b)
	}

	s.mu.Lock()
	s.inflight, s.writing = nil, nil
	if err == nil {
		s.durable = r.upto
		if w.changed {
			s.stats.Commits++
			s.stats.BytesWritten += w.bytes
			s.stats.PageBytesWritten += pages
		}
		if s.failing {
			s.log.Info("storage: commits succeed again", "path", s.path, "after_failures", s.fails)
		}
		s.failing, s.fails = false, 0
		b.clear()
		s.spare = b
	} else {
		s.stats.Collapsed += uint64(b.absorb(s.pending))
		s.pending.clear()
		s.pending, s.spare = b, s.pending
		s.stats.CommitErrors++
		s.lastErr, s.failing = err, true
		s.fails++
		if s.fails == 1 {
			s.log.Error("storage: commit failed; retrying, changes kept in memory", "path", s.path, "err", err)
		}
	}
	r.err = err
	s.mu.Unlock()
	close(r.done)
	if err != nil {
		poke(s.dirty) // retry after the (growing) delay
	}
	return err
}

// write applies b in one bbolt transaction. A batch whose changes all
// cancelled out is rolled back, so it writes nothing at all.
func (s *Store) write(b *batch) (w written, pages uint64, err error) {
	err = protect(func() error {
		tx, err := s.db.Begin(true)
		if err != nil {
			return err
		}
		committed := false
		defer func() {
			if !committed {
				_ = tx.Rollback()
			}
		}()
		if err := b.apply(tx, &w); err != nil {
			return err
		}
		if !w.changed {
			return nil
		}
		if s.cleanMark {
			// From now on the file holds what this run wrote: should
			// the process die, the next Open must know.
			if err := tx.Bucket(bucketMeta.name).Delete(keyClosedCleanly); err != nil {
				return err
			}
		}
		before := s.pageAlloc()
		committed = true // Commit rolls back by itself on failure
		if err := tx.Commit(); err != nil {
			return err
		}
		s.cleanMark = false
		// Every page a commit allocates is written, and so is one meta page.
		pages = uint64(s.pageAlloc()-before) + uint64(s.pageSize)
		return nil
	})
	if err != nil {
		var p *panicError
		if errors.As(err, &p) {
			err = &UnreadableError{Path: s.path, Err: err}
		}
		return written{}, 0, fmt.Errorf("storage: commit to %s: %w", s.path, err)
	}
	return w, pages, nil
}

// pageAlloc returns the bytes of pages bbolt has allocated so far. Only
// the committer writes, so the difference across a commit is its own.
func (s *Store) pageAlloc() int64 {
	st := s.db.Stats()
	return st.TxStats.GetPageAlloc()
}

// Sync blocks until every change made before the call is committed and, in
// SyncAlways and SyncBatch modes, flushed to the medium. In SyncBatch it
// waits for the batch to commit (up to BatchInterval); in SyncAlways it
// starts the commit at once; in SyncNone it returns at once, with the
// current commit error if commits are failing.
//
// If the commit fails, every Sync waiting for it returns the error (it
// wraps the cause: errors.Is(err, syscall.ENOSPC), or bbolt's
// ErrMaxSizeReached for Options.MaxSize). The failed changes are not
// dropped: they are retried by the following commits, and a later Sync
// returns nil once they succeed. Sync returns ctx's error if ctx ends
// first; the changes are still committed.
func (s *Store) Sync(ctx context.Context) error {
	if s.mode == SyncNone {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.closed {
			return ErrClosed
		}
		if s.failing {
			return s.lastErr
		}
		return nil
	}
	return s.wait(ctx, s.mode == SyncAlways)
}

// Commit is Sync without the wait for the batch interval: the changes so
// far are committed at once (in SyncNone mode, as Sync, nothing is
// waited for). For a writer whose changes come already batched, such as
// a cluster replica applying another gateway's batch, which would
// otherwise wait for the interval on top of the sender's own.
func (s *Store) Commit(ctx context.Context) error {
	if s.mode == SyncNone {
		return s.Sync(ctx)
	}
	return s.flush(ctx)
}

// flush commits everything pending now, in any mode, and waits for it.
func (s *Store) flush(ctx context.Context) error { return s.wait(ctx, true) }

// wait waits for the commit holding every change made so far; now starts
// that commit at once.
func (s *Store) wait(ctx context.Context, now bool) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	target := s.enq
	if target <= s.durable {
		s.mu.Unlock()
		return nil
	}
	r := s.next
	if s.inflight != nil && target <= s.inflight.upto {
		r, now = s.inflight, false
	}
	s.mu.Unlock()
	if now {
		poke(s.kick)
	}
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// panicError is a panic inside bbolt, which some corruptions cause.
type panicError struct{ v any }

func (p *panicError) Error() string { return fmt.Sprintf("bbolt panicked: %v", p.v) }

// protect runs f, turning a panic, or a memory fault (a page beyond the
// end of a truncated file), into a *panicError.
func protect(f func() error) (err error) {
	old := debug.SetPanicOnFault(true)
	defer func() {
		if r := recover(); r != nil {
			err = &panicError{r}
		}
		debug.SetPanicOnFault(old)
	}()
	return f()
}
