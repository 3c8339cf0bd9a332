package bolt

import (
	"bytes"
	"fmt"

	"go.etcd.io/bbolt"
)

// Store-and-forward queues: named, ordered lists of opaque entries that an
// uplink bridge (gateway/bridge) keeps while its remote broker is out of
// reach. They are not part of broker.Store: the broker neither writes nor
// loads them. Their changes go into the same batches as the broker's, so
// they share its group commit and its Sync: a queue entry saved before a
// Sync returns is on disk when it does, and an entry saved and deleted
// within one batch interval never reaches the file.
//
// Layout: bucket "queues" holds one nested bucket per queue name, mapping
// the big-endian Seq to the entry. The bucket is created by the first
// commit that writes an entry, so a file that never had a bridge is
// unchanged (and a file written by this version still opens in one that
// does not know queues; it ignores the bucket).

// bucketQueues holds, per queue name, a bucket mapping the big-endian Seq
// to an entry. It is not in buckets: it is optional, made on first use.
var bucketQueues = &bucket{name: []byte("queues"), perClient: true, about: "queue name -> seq -> entry"}

// QueuePut records entry seq of queue, replacing one with the same Seq.
// Like the broker's writes it only joins the pending batch; Sync makes it
// durable. v is copied.
func (s *Store) QueuePut(queue string, seq uint64, v []byte) error {
	if err := checkKey(queue); err != nil {
		return err
	}
	v = bytes.Clone(v)
	if v == nil {
		v = []byte{}
	}
	return s.change(func(b *batch) int { return b.saveQueued(queue, seq, v) })
}

// QueueDelete forgets entry seq of queue. Deleting an entry saved in the
// same batch cancels both: nothing is written.
func (s *Store) QueueDelete(queue string, seq uint64) error {
	if err := checkKey(queue); err != nil {
		return err
	}
	return s.change(func(b *batch) int { return b.saveQueued(queue, seq, nil) })
}

// QueueGet returns a copy of entry seq of queue as committed, or nil if the
// file does not hold it. It does not see changes still in the pending
// batch: call Sync after QueuePut before reading an entry back.
func (s *Store) QueueGet(queue string, seq uint64) ([]byte, error) {
	var out []byte
	err := s.view(func(tx *bbolt.Tx) error {
		if qb := queueBucket(tx, queue); qb != nil {
			out = bytes.Clone(qb.Get(seqKey(seq)))
		}
		return nil
	})
	return out, err
}

// QueueScan calls f for every committed entry of queue in Seq order,
// stopping at f's first error, which it returns. v is valid only during
// the call. Like QueueGet it reads the file, not the pending batch.
func (s *Store) QueueScan(queue string, f func(seq uint64, v []byte) error) error {
	return s.view(func(tx *bbolt.Tx) error {
		qb := queueBucket(tx, queue)
		if qb == nil {
			return nil
		}
		return qb.ForEach(func(k, v []byte) error {
			if len(k) != 8 || v == nil {
				return fmt.Errorf("storage: queue %q: key %s is not a sequence number", queue, quoteKey(k))
			}
			return f(beUint64(k), v)
		})
	})
}

// view runs f in a read transaction, failing with ErrClosed once the store
// is closed.
func (s *Store) view(f func(tx *bbolt.Tx) error) error {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return ErrClosed
	}
	return protect(func() error { return s.db.View(f) })
}

func queueBucket(tx *bbolt.Tx, queue string) *bbolt.Bucket {
	qs := tx.Bucket(bucketQueues.name)
	if qs == nil {
		return nil
	}
	return qs.Bucket([]byte(queue))
}

// saveQueued records a queue entry (v nil: its deletion).
func (b *batch) saveQueued(queue string, seq uint64, v []byte) int {
	q := b.queues[queue]
	if q == nil {
		q = make(map[uint64][]byte)
		b.queues[queue] = q
	}
	_, had := q[seq]
	q[seq] = v
	if had {
		return 1
	}
	b.ops++
	return 0
}

// applyQueues writes the queue changes, in key order; deletes of entries
// never stored cost nothing, and no bucket is made for them.
func applyQueues(tx *bbolt.Tx, w *written, queues map[string]map[uint64][]byte) error {
	if len(queues) == 0 {
		return nil
	}
	parent := tx.Bucket(bucketQueues.name)
	for _, name := range inOrder(queues) {
		changes := queues[name]
		key := []byte(name)
		var qb *bbolt.Bucket
		if parent != nil {
			qb = parent.Bucket(key)
		}
		if qb != nil {
			qb.FillPercent = appendFill
		}
		for _, seq := range inOrder(changes) {
			v, kb := changes[seq], seqKey(seq)
			if v == nil {
				if qb == nil || qb.Get(kb) == nil {
					continue
				}
				if err := qb.Delete(kb); err != nil {
					return err
				}
				w.del(kb)
				continue
			}
			if qb == nil {
				var err error
				if parent == nil {
					if parent, err = tx.CreateBucketIfNotExists(bucketQueues.name); err != nil {
						return err
					}
					w.put(bucketQueues.name, nil)
				}
				if qb, err = parent.CreateBucketIfNotExists(key); err != nil {
					return err
				}
				qb.FillPercent = appendFill
				w.put(key, nil)
			}
			if err := qb.Put(kb, v); err != nil {
				return err
			}
			w.put(kb, v)
		}
	}
	return nil
}
