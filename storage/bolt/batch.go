package bolt

import (
	"bytes"
	"cmp"
	"maps"
	"slices"

	"go.etcd.io/bbolt"

	"github.com/linemq/linemq/broker"
)

// batch is the changes collected since the last commit, already collapsed:
// it holds at most one pending change per key, the last one made. A
// SaveMessage followed by a DeleteMessage of the same Seq leaves a single
// delete, which costs nothing at commit when the record never reached the
// disk; that is how a QoS 1 message acknowledged within one batch interval
// never touches the flash.
//
// Values are encoded when the change is made, not at commit: the broker
// may change its records after the call returns.
//
// The reference counts of shared bodies are not changes of their own: the
// commit derives them from the records it replaces and deletes (apply), so
// whatever collapsed in the batch, the counts follow the records that
// actually reach the disk.
type batch struct {
	clients  map[string]*clientBatch
	retained map[string][]byte // topic -> message bytes; nil deletes
	// bodies holds the body of every shared message saved in this batch,
	// for the commit to store if the file does not have it yet.
	bodies map[uint64]body
	// queues holds store-and-forward queue changes (queue.go): queue name
	// -> Seq -> entry; nil deletes.
	queues map[string]map[uint64][]byte
	// repair asks the commit to recount references and drop what nothing
	// refers to (Load found the file inconsistent).
	repair bool
	ops    int // pending changes after collapsing (Stats.PendingOps)
}

// body is a shared message's encoded body.
type body struct {
	// msg is what b was encoded from. The broker hands every session the
	// same *Message for one publish, so a save with the same pointer needs
	// no second encoding; a different pointer under the same id (the id
	// reused once the earlier message was gone) is encoded again.
	msg *broker.Message
	b   []byte
}

// clientBatch is one client id's pending changes. At commit, reset (from
// DeleteSession) is applied first, then session, msgs, inbound and subs.
type clientBatch struct {
	reset   bool              // delete the session and its subscription, message and inbound buckets
	session []byte            // encoded record to store; nil: no change
	msgs    map[uint64][]byte // Seq -> encoded record; nil deletes
	inbound map[uint16]bool   // packet id -> pending (store) or not (delete)
	subs    map[string][]byte // filter -> encoded subscription; nil deletes
}

func newBatch() *batch {
	return &batch{
		clients:  make(map[string]*clientBatch),
		retained: make(map[string][]byte),
		bodies:   make(map[uint64]body),
		queues:   make(map[string]map[uint64][]byte),
	}
}

func (b *batch) empty() bool {
	return len(b.clients) == 0 && len(b.retained) == 0 && len(b.queues) == 0 && !b.repair
}

// clear empties b for reuse, keeping its maps' storage.
func (b *batch) clear() {
	clear(b.clients)
	clear(b.retained)
	clear(b.bodies)
	clear(b.queues)
	b.repair = false
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
	replaced := len(c.msgs) + len(c.inbound) + len(c.subs)
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

// saveMessage records a message record (v nil: its deletion).
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

// saveBody makes sure the batch holds the body of shared message id,
// encoded from m: enc if the caller encoded it already, else now.
func (b *batch) saveBody(id uint64, m *broker.Message, enc []byte) {
	if cur, ok := b.bodies[id]; ok && cur.msg == m {
		return
	}
	if enc == nil {
		enc = m.AppendBinary(nil)
	}
	b.bodies[id] = body{msg: m, b: enc}
}

// hasBody reports whether the batch holds id's body encoded from m.
func (b *batch) hasBody(id uint64, m *broker.Message) bool {
	cur, ok := b.bodies[id]
	return ok && cur.msg == m
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

// saveSubscription records a subscription (v nil: its deletion).
func (b *batch) saveSubscription(id, filter string, v []byte) int {
	c := b.client(id)
	if c.subs == nil {
		c.subs = make(map[string][]byte)
	}
	_, had := c.subs[filter]
	c.subs[filter] = v
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

// setRepair asks the commit to repair the reference counts.
func (b *batch) setRepair() int {
	if b.repair {
		return 1
	}
	b.repair = true
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
		for f, v := range n.subs {
			replaced += b.saveSubscription(id, f, v)
		}
	}
	for t, v := range newer.retained {
		replaced += b.saveRetained(t, v)
	}
	// The newer body is the one the newer records were saved with.
	for id, bd := range newer.bodies {
		b.bodies[id] = bd
	}
	for q, es := range newer.queues {
		for seq, v := range es {
			replaced += b.saveQueued(q, seq, v)
		}
	}
	if newer.repair {
		replaced += b.setRepair()
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

// appendFill is the fill factor for buckets whose keys only grow (Seq,
// MessageID): bbolt splits a full page at FillPercent, and its default of
// one half leaves every page of an append-only bucket half empty, twice
// the pages to store and to write.
const appendFill = 0.9

// apply writes b into tx. Deletes of keys that are not on disk are skipped
// without touching a page, so a batch whose changes all cancelled out
// leaves w.changed false and the caller rolls back instead of committing:
// no page, not even the meta page, is written.
//
// The records written change the references to shared bodies; apply counts
// them (refs: message id -> net change) from what each record replaces on
// disk, and applyRefs then stores the new counts, stores the bodies that
// gained their first reference, and deletes those that lost their last.
// All of it is one transaction: whatever the moment of a crash, the file
// has either the records with their counts and bodies or neither.
func (b *batch) apply(tx *bbolt.Tx, w *written) error {
	sessions := tx.Bucket(bucketSessions.name)
	subscriptions := tx.Bucket(bucketSubscriptions.name)
	messages := tx.Bucket(bucketMessages.name)
	inbound := tx.Bucket(bucketInbound.name)
	retained := tx.Bucket(bucketRetained.name)
	refs := make(map[uint64]int)
	for _, id := range inOrder(b.clients) {
		c := b.clients[id]
		key := []byte(id)
		if c.reset {
			if sessions.Get(key) != nil {
				if err := sessions.Delete(key); err != nil {
					return err
				}
				w.del(key)
			}
			if mb := messages.Bucket(key); mb != nil {
				// Every record goes: so do its references.
				_ = mb.ForEach(func(_, v []byte) error {
					if mid := recordMessageID(v); mid != 0 {
						refs[mid]--
					}
					return nil
				})
			}
			for _, parent := range []*bbolt.Bucket{messages, inbound, subscriptions} {
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
		if err := applyMessages(messages, key, w, c.msgs, refs); err != nil {
			return err
		}
		if err := applyNested(inbound, key, w, inboundValues(c.inbound), pidKey); err != nil {
			return err
		}
		if err := applyNested(subscriptions, key, w, c.subs, func(f string) []byte { return []byte(f) }); err != nil {
			return err
		}
	}
	for _, topic := range inOrder(b.retained) {
		v := b.retained[topic]
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
	if err := applyRefs(tx, w, refs, b.bodies); err != nil {
		return err
	}
	if err := applyQueues(tx, w, b.queues); err != nil {
		return err
	}
	if b.repair {
		return repair(tx, w)
	}
	return nil
}

// applyMessages applies a client's message record changes, counting in
// refs the references each one adds (the new record's body) and drops (the
// record it replaces or deletes).
func applyMessages(parent *bbolt.Bucket, client []byte, w *written, changes map[uint64][]byte, refs map[uint64]int) error {
	if len(changes) == 0 {
		return nil
	}
	b := parent.Bucket(client)
	if b != nil {
		b.FillPercent = appendFill
	}
	for _, seq := range inOrder(changes) {
		v := changes[seq]
		kb := seqKey(seq)
		var old []byte
		if b != nil {
			old = b.Get(kb)
		}
		if mid := recordMessageID(old); mid != 0 {
			refs[mid]--
		}
		if v == nil {
			if old == nil {
				continue // never stored: costs nothing
			}
			if err := b.Delete(kb); err != nil {
				return err
			}
			w.del(kb)
			continue
		}
		if mid := recordMessageID(v); mid != 0 {
			refs[mid]++
		}
		if b == nil {
			var err error
			if b, err = parent.CreateBucket(client); err != nil {
				return err
			}
			b.FillPercent = appendFill
			w.put(client, nil)
		}
		if err := b.Put(kb, v); err != nil {
			return err
		}
		w.put(kb, v)
	}
	return nil
}

// applyRefs stores the reference counts changed by refs, the bodies of
// messages that gained references, and deletes the bodies of those left
// with none.
func applyRefs(tx *bbolt.Tx, w *written, refs map[uint64]int, bodies map[uint64]body) error {
	if len(refs) == 0 {
		return nil
	}
	rb := tx.Bucket(bucketRefs.name)
	bb := tx.Bucket(bucketBodies.name)
	rb.FillPercent, bb.FillPercent = appendFill, appendFill
	for _, id := range inOrder(refs) {
		delta := refs[id]
		k := idKey(id)
		cur := decodeCount(rb.Get(k))
		n := int64(cur) + int64(delta)
		if n <= 0 {
			// The last reference is gone (n < 0 only on a file whose counts
			// were already wrong: Check reports those, Load repairs them).
			for _, bk := range []*bbolt.Bucket{rb, bb} {
				if bk.Get(k) != nil {
					if err := bk.Delete(k); err != nil {
						return err
					}
					w.del(k)
				}
			}
			continue
		}
		if uint64(n) != cur {
			v := encodeCount(uint64(n))
			if err := rb.Put(k, v); err != nil {
				return err
			}
			w.put(k, v)
		}
		// A body saved in this batch is stored unless the file has the same
		// bytes: it is new (cur == 0), or the id was reused for another
		// message once the first one's references were all gone. A count
		// that only changed by deletes keeps the stored body.
		if bd, ok := bodies[id]; ok {
			if old := bb.Get(k); !bytes.Equal(old, bd.b) {
				if err := bb.Put(k, bd.b); err != nil {
					return err
				}
				w.put(k, bd.b)
			}
		}
	}
	return nil
}

// inOrder returns m's keys in ascending order, which for every key here
// (strings, and integers stored big-endian) is bbolt's key order. A
// transaction must put keys in order: bbolt splits its nodes only at
// commit, and a key put in the middle of a node moves every key after it,
// so a batch of 100,000 subscriptions put in map order is quadratic (a
// minute, where in order it takes a fraction of a second).
func inOrder[K cmp.Ordered, V any](m map[K]V) []K {
	return slices.Sorted(maps.Keys(m))
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
func applyNested[K cmp.Ordered](parent *bbolt.Bucket, client []byte, w *written, changes map[K][]byte, key func(K) []byte) error {
	if len(changes) == 0 {
		return nil
	}
	b := parent.Bucket(client)
	for _, k := range inOrder(changes) {
		v := changes[k]
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
