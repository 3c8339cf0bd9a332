package bolt

import "go.etcd.io/bbolt"

// batch is the changes collected since the last commit, already collapsed:
// it holds at most one pending change per key, the last one made. A
// SaveMessage followed by a DeleteMessage of the same Seq leaves a single
// delete, which costs nothing at commit when the record never reached the
// disk; that is how a QoS 1 message acknowledged within one batch interval
// never touches the flash.
//
// Values are encoded when the change is made, not at commit: the broker
// may change its records after the call returns.
type batch struct {
	clients  map[string]*clientBatch
	retained map[string][]byte // topic -> message bytes; nil deletes
	ops      int               // pending changes after collapsing (Stats.PendingOps)
}

// clientBatch is one client id's pending changes. At commit, reset (from
// DeleteSession) is applied first, then session, msgs and inbound.
type clientBatch struct {
	reset   bool              // delete the session and its message and inbound buckets
	session []byte            // encoded record to store; nil: no change
	msgs    map[uint64][]byte // Seq -> encoded record; nil deletes
	inbound map[uint16]bool   // packet id -> pending (store) or not (delete)
}

func newBatch() *batch {
	return &batch{clients: make(map[string]*clientBatch), retained: make(map[string][]byte)}
}

func (b *batch) empty() bool { return len(b.clients) == 0 && len(b.retained) == 0 }

// clear empties b for reuse, keeping its maps' storage.
func (b *batch) clear() {
	clear(b.clients)
	clear(b.retained)
	b.ops = 0
}

func (b *batch) client(id string) *clientBatch {
	c := b.clients[id]
	if c == nil {
		c = &clientBatch{}
		b.clients[id] = c
	}
	return c
}

// The add methods record one change and return how many earlier pending
// changes it replaced (Stats.Collapsed).

func (b *batch) saveSession(id string, v []byte) int {
	c := b.client(id)
	replaced := 0
	if c.session != nil {
		replaced = 1
	} else {
		b.ops++
	}
	c.session = v
	return replaced
}

func (b *batch) deleteSession(id string) int {
	c := b.client(id)
	replaced := len(c.msgs) + len(c.inbound)
	if c.session != nil {
		replaced++
	}
	if c.reset {
		replaced++
	}
	b.ops += 1 - replaced
	*c = clientBatch{reset: true}
	return replaced
}

func (b *batch) saveMessage(id string, seq uint64, v []byte) int {
	c := b.client(id)
	if c.msgs == nil {
		c.msgs = make(map[uint64][]byte)
	}
	_, had := c.msgs[seq]
	c.msgs[seq] = v
	if had {
		return 1
	}
	b.ops++
	return 0
}

func (b *batch) setInbound(id string, pid uint16, pending bool) int {
	c := b.client(id)
	if c.inbound == nil {
		c.inbound = make(map[uint16]bool)
	}
	_, had := c.inbound[pid]
	c.inbound[pid] = pending
	if had {
		return 1
	}
	b.ops++
	return 0
}

func (b *batch) saveRetained(topic string, v []byte) int {
	_, had := b.retained[topic]
	b.retained[topic] = v
	if had {
		return 1
	}
	b.ops++
	return 0
}

// absorb applies newer's changes on top of b's, as if they had been made
// after b's, and returns how many of b's changes they replaced. It puts a
// failed batch back under the changes made while it was being committed,
// so the retry keeps their order.
func (b *batch) absorb(newer *batch) int {
	replaced := 0
	for id, n := range newer.clients {
		if n.reset {
			replaced += b.deleteSession(id)
		}
		if n.session != nil {
			replaced += b.saveSession(id, n.session)
		}
		for seq, v := range n.msgs {
			replaced += b.saveMessage(id, seq, v)
		}
		for pid, p := range n.inbound {
			replaced += b.setInbound(id, pid, p)
		}
	}
	for t, v := range newer.retained {
		replaced += b.saveRetained(t, v)
	}
	return replaced
}

// written is what one commit wrote, for Stats.
type written struct {
	bytes   uint64 // key and value bytes put, key bytes deleted
	changed bool   // anything at all: false means no commit is needed
}

func (w *written) put(k, v []byte) {
	w.bytes += uint64(len(k) + len(v))
	w.changed = true
}

func (w *written) del(k []byte) {
	w.bytes += uint64(len(k))
	w.changed = true
}

// apply writes b into tx. Deletes of keys that are not on disk are skipped
// without touching a page, so a batch whose changes all cancelled out
// leaves w.changed false and the caller rolls back instead of committing:
// no page, not even the meta page, is written.
func (b *batch) apply(tx *bbolt.Tx, w *written) error {
	sessions := tx.Bucket(bucketSessions.name)
	messages := tx.Bucket(bucketMessages.name)
	inbound := tx.Bucket(bucketInbound.name)
	retained := tx.Bucket(bucketRetained.name)
	for id, c := range b.clients {
		key := []byte(id)
		if c.reset {
			if sessions.Get(key) != nil {
				if err := sessions.Delete(key); err != nil {
					return err
				}
				w.del(key)
			}
			for _, parent := range []*bbolt.Bucket{messages, inbound} {
				if parent.Bucket(key) != nil {
					if err := parent.DeleteBucket(key); err != nil {
						return err
					}
					w.del(key)
				}
			}
		}
		if c.session != nil {
			if err := sessions.Put(key, c.session); err != nil {
				return err
			}
			w.put(key, c.session)
		}
		if err := applyNested(messages, key, w, c.msgs, seqKey); err != nil {
			return err
		}
		if err := applyNested(inbound, key, w, inboundValues(c.inbound), pidKey); err != nil {
			return err
		}
	}
	for topic, v := range b.retained {
		key := []byte(topic)
		if v == nil {
			if retained.Get(key) == nil {
				continue
			}
			if err := retained.Delete(key); err != nil {
				return err
			}
			w.del(key)
			continue
		}
		if err := retained.Put(key, v); err != nil {
			return err
		}
		w.put(key, v)
	}
	return nil
}

// inboundValues turns inbound changes into puts (inboundValue) and deletes (nil).
func inboundValues(in map[uint16]bool) map[uint16][]byte {
	if len(in) == 0 {
		return nil
	}
	out := make(map[uint16][]byte, len(in))
	for pid, pending := range in {
		if pending {
			out[pid] = inboundValue
		} else {
			out[pid] = nil
		}
	}
	return out
}

// applyNested applies puts (non-nil values) and deletes (nil) to the client's
// nested bucket under parent, creating the bucket only for a put: a delete
// of something never stored must not cost a page.
func applyNested[K comparable](parent *bbolt.Bucket, client []byte, w *written, changes map[K][]byte, key func(K) []byte) error {
	if len(changes) == 0 {
		return nil
	}
	b := parent.Bucket(client)
	for k, v := range changes {
		if v == nil {
			if b == nil {
				continue
			}
			kb := key(k)
			if b.Get(kb) == nil {
				continue
			}
			if err := b.Delete(kb); err != nil {
				return err
			}
			w.del(kb)
			continue
		}
		if b == nil {
			var err error
			if b, err = parent.CreateBucket(client); err != nil {
				return err
			}
			w.put(client, nil)
		}
		kb := key(k)
		if err := b.Put(kb, v); err != nil {
			return err
		}
		w.put(kb, v)
	}
	return nil
}
