package bolt

import (
	"encoding/binary"
	"fmt"
	"slices"

	"go.etcd.io/bbolt"
)

// The references between buckets: a shared message record names a body by
// its MessageID, the body's count says how many records do, and a client's
// subscriptions belong to its session. Every commit keeps them right in the
// same transaction as the records (batch.apply), so a crash cannot break
// them. A file can still disagree with itself through a bug or an edited
// file; then:
//
//   - a record whose body is missing cannot be loaded: Load fails naming it
//     and Check reports it (the message's content is gone);
//   - a wrong count, a body or count nothing refers to (leaked), and the
//     subscriptions of a client without a session are harmless to read but
//     would mislead later commits (a leaked body could be taken for the
//     body of a new message given its id): Check reports them, and Load and
//     Compact repair them, recounting every reference.

// encodeCount is the stored form of a reference count.
func encodeCount(n uint64) []byte { return binary.AppendUvarint(make([]byte, 0, 4), n) }

// decodeCount reads a stored reference count; nil or malformed reads as 0.
func decodeCount(v []byte) uint64 {
	n, k := binary.Uvarint(v)
	if k <= 0 || k != len(v) {
		return 0
	}
	return n
}

// refCounts is the number of records that refer to each shared body,
// counted from the records themselves.
type refCounts map[uint64]uint64

// countRefs counts the references of every message record in tx.
func countRefs(tx *bbolt.Tx) refCounts {
	counted := make(refCounts)
	forEachNested(tx.Bucket(bucketMessages.name), func(_ []byte, b *bbolt.Bucket) {
		_ = b.ForEach(func(_, v []byte) error {
			if id := recordMessageID(v); id != 0 {
				counted[id]++
			}
			return nil
		})
	})
	return counted
}

// forEachNested calls f for each nested bucket of parent (nil: none).
func forEachNested(parent *bbolt.Bucket, f func(name []byte, b *bbolt.Bucket)) {
	if parent == nil {
		return
	}
	_ = parent.ForEachBucket(func(k []byte) error {
		if b := parent.Bucket(k); b != nil {
			f(k, b)
		}
		return nil
	})
}

// faults lists the inconsistencies between buckets that repair fixes,
// given the references counted from the records. Records whose body is
// missing are not among them: reading the records reports those.
func faults(tx *bbolt.Tx, counted refCounts) []string {
	var out []string
	rb, bb := tx.Bucket(bucketRefs.name), tx.Bucket(bucketBodies.name)
	if rb != nil {
		_ = rb.ForEach(func(k, v []byte) error {
			id, ok := keyID(k)
			switch {
			case !ok:
				out = append(out, fmt.Sprintf("bucket %s: key %s is not a message id", bucketRefs.name, quoteKey(k)))
			case counted[id] == 0:
				out = append(out, fmt.Sprintf("message %d: count %d but no record refers to it (leaked)", id, decodeCount(v)))
			case decodeCount(v) != counted[id]:
				out = append(out, fmt.Sprintf("message %d: count %d but %d record(s) refer to it", id, decodeCount(v), counted[id]))
			}
			return nil
		})
	}
	for _, id := range sortedIDs(counted) {
		if rb != nil && rb.Get(idKey(id)) == nil && bb != nil && bb.Get(idKey(id)) != nil {
			out = append(out, fmt.Sprintf("message %d: %d record(s) refer to it but it has no count", id, counted[id]))
		}
	}
	if bb != nil {
		_ = bb.ForEach(func(k, _ []byte) error {
			id, ok := keyID(k)
			switch {
			case !ok:
				out = append(out, fmt.Sprintf("bucket %s: key %s is not a message id", bucketBodies.name, quoteKey(k)))
			case counted[id] == 0:
				out = append(out, fmt.Sprintf("message %d: body stored but no record refers to it (leaked)", id))
			}
			return nil
		})
	}
	sessions := tx.Bucket(bucketSessions.name)
	forEachNested(tx.Bucket(bucketSubscriptions.name), func(client []byte, _ *bbolt.Bucket) {
		if sessions == nil || sessions.Get(client) == nil {
			out = append(out, fmt.Sprintf("subscriptions of client %s, which has no session (orphaned)", quoteKey(client)))
		}
	})
	return out
}

// repair makes the counts match the records, deletes the bodies and counts
// nothing refers to and the subscriptions of clients without a session. It
// recounts inside tx, so it is right whatever was committed since the
// faults were found.
func repair(tx *bbolt.Tx, w *written) error {
	counted := countRefs(tx)
	rb, bb := tx.Bucket(bucketRefs.name), tx.Bucket(bucketBodies.name)
	type fix struct {
		b *bbolt.Bucket
		k []byte
		v []byte // nil deletes
	}
	var fixes []fix
	// bbolt forbids changing a bucket while iterating it: collect first.
	_ = rb.ForEach(func(k, v []byte) error {
		id, ok := keyID(k)
		switch {
		case !ok || counted[id] == 0:
			fixes = append(fixes, fix{b: rb, k: slices.Clone(k)})
		case decodeCount(v) != counted[id]:
			fixes = append(fixes, fix{b: rb, k: slices.Clone(k), v: encodeCount(counted[id])})
		}
		return nil
	})
	for id, n := range counted {
		// A body without a count gets one; a record whose body is missing
		// stays as it is, for Load and Check to report.
		if k := idKey(id); rb.Get(k) == nil && bb.Get(k) != nil {
			fixes = append(fixes, fix{b: rb, k: k, v: encodeCount(n)})
		}
	}
	_ = bb.ForEach(func(k, _ []byte) error {
		if id, ok := keyID(k); !ok || counted[id] == 0 {
			fixes = append(fixes, fix{b: bb, k: slices.Clone(k)})
		}
		return nil
	})
	for _, f := range fixes {
		var err error
		if f.v == nil {
			err = f.b.Delete(f.k)
			w.del(f.k)
		} else {
			err = f.b.Put(f.k, f.v)
			w.put(f.k, f.v)
		}
		if err != nil {
			return err
		}
	}
	sessions, subs := tx.Bucket(bucketSessions.name), tx.Bucket(bucketSubscriptions.name)
	var orphans [][]byte
	forEachNested(subs, func(client []byte, _ *bbolt.Bucket) {
		if sessions.Get(client) == nil {
			orphans = append(orphans, slices.Clone(client))
		}
	})
	for _, client := range orphans {
		if err := subs.DeleteBucket(client); err != nil {
			return err
		}
		w.del(client)
	}
	return nil
}

// keyID decodes a body or count key.
func keyID(k []byte) (uint64, bool) {
	if len(k) != 8 {
		return 0, false
	}
	return binary.BigEndian.Uint64(k), true
}

// sortedIDs returns the ids counted, ascending, for stable reports.
func sortedIDs(counted refCounts) []uint64 {
	ids := make([]uint64, 0, len(counted))
	for id := range counted {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}
