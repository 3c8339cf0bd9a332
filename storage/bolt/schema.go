package bolt

import (
	"encoding/binary"
	"fmt"

	"go.etcd.io/bbolt"
)

// schemaVersion is the layout this code writes. Files at an older version
// are migrated at Open (migrate.go); files at a newer one are refused,
// because an older linemq cannot know what a newer one stored.
const schemaVersion = 3

// bucket is one top-level bucket of the schema. The schema is declared once,
// as data, so that Open, Load, Check and the migrations agree on it
// (etcd's server/storage/schema/bucket.go does the same).
type bucket struct {
	name []byte
	// perClient: the bucket holds one nested bucket per client id rather
	// than values.
	perClient bool
	// what the values are, for Check's messages.
	about string
}

var (
	// bucketMeta holds keySchemaVersion.
	bucketMeta = &bucket{name: []byte("meta"), about: "schema metadata"}
	// bucketSessions maps a client id to its encoded SessionRecord
	// (codec.go): the session's own fields, without its subscriptions; the
	// record does not repeat the client id.
	bucketSessions = &bucket{name: []byte("sessions"), about: "client id -> session record"}
	// bucketSubscriptions holds, per client id, a bucket mapping each topic
	// filter (as subscribed, $share prefix included) to its encoded options.
	// One SUBSCRIBE writes one key, not the session's whole list, and
	// bbolt's key order is the filter order Load returns.
	bucketSubscriptions = &bucket{name: []byte("subscriptions"), perClient: true, about: "client id -> filter -> subscription"}
	// bucketMessages holds, per client id, a bucket mapping the big-endian
	// Seq to an encoded MessageRecord. Big-endian keys make bbolt's byte
	// order the Seq order, so Load reads messages already sorted. A record
	// with a MessageID holds only the per-delivery fields and the id; its
	// body is in bucketBodies. A record without one carries its body.
	bucketMessages = &bucket{name: []byte("messages"), perClient: true, about: "client id -> seq -> message record"}
	// bucketBodies maps a big-endian MessageID to the body of a message
	// queued to one or more sessions, in the broker's own format: a
	// message fanned out to 500 sessions is stored once.
	bucketBodies = &bucket{name: []byte("bodies"), about: "message id -> message body"}
	// bucketRefs maps a big-endian MessageID to the number of message
	// records that refer to it (uvarint). It is kept apart from the body so
	// that a delivery acknowledged rewrites a few bytes in a page shared
	// with hundreds of other counts, never the body itself (which for a
	// large message spans overflow pages). Every change to it is in the
	// same transaction as the records that cause it.
	bucketRefs = &bucket{name: []byte("refs"), about: "message id -> reference count"}
	// bucketInbound holds, per client id, a bucket whose keys are the
	// big-endian inbound QoS 2 packet ids not yet released.
	bucketInbound = &bucket{name: []byte("inbound"), perClient: true, about: "client id -> packet id"}
	// bucketRetained maps a topic to the retained message's bytes in the
	// broker's own format (broker.Message.AppendBinary).
	bucketRetained = &bucket{name: []byte("retained"), about: "topic -> retained message"}
)

// buckets is every top-level bucket of schemaVersion.
var buckets = []*bucket{bucketMeta, bucketSessions, bucketSubscriptions, bucketMessages, bucketBodies, bucketRefs, bucketInbound, bucketRetained}

// keySchemaVersion in bucketMeta holds the schema version, 8 bytes big-endian.
var keySchemaVersion = []byte("schema_version")

// keyClosedCleanly in bucketMeta marks a file that Close left: the first
// commit after an Open deletes it, Close writes it again. A file without it
// was last written by a process that died (Snapshot.Unclean). Open itself
// writes nothing, so that a start costs the flash nothing (but for
// keyStoreID, once in a file's life).
var keyClosedCleanly = []byte("closed_cleanly")

// keyStoreID in bucketMeta holds the file's identity (Store.ID): random,
// written once, by the Open that finds it missing.
var keyStoreID = []byte("store_id")

// inboundValue is the value of every inbound packet id key. It is not empty
// because bbolt reports nested buckets as nil values when iterating, and a
// non-empty value keeps "a key" and "a bucket" apart without a second lookup.
var inboundValue = []byte{1}

// seqKey returns the key of a message record.
func seqKey(seq uint64) []byte { return binary.BigEndian.AppendUint64(make([]byte, 0, 8), seq) }

// idKey returns the key of a message body and of its reference count.
func idKey(id uint64) []byte { return binary.BigEndian.AppendUint64(make([]byte, 0, 8), id) }

// pidKey returns the key of an inbound packet id.
func pidKey(pid uint16) []byte { return binary.BigEndian.AppendUint16(make([]byte, 0, 2), pid) }

// readVersion returns the file's schema version, 0 for a file with no
// buckets at all (new), or an error for a bbolt file that is not linemq's.
func readVersion(tx *bbolt.Tx) (int, error) {
	meta := tx.Bucket(bucketMeta.name)
	if meta == nil {
		empty := true
		_ = tx.ForEach(func([]byte, *bbolt.Bucket) error { empty = false; return nil })
		if empty {
			return 0, nil
		}
		return 0, fmt.Errorf("no %q bucket: a bbolt database, but not linemq's", bucketMeta.name)
	}
	v := meta.Get(keySchemaVersion)
	if len(v) != 8 {
		return 0, fmt.Errorf("schema version key is %d bytes, want 8", len(v))
	}
	n := binary.BigEndian.Uint64(v)
	if n == 0 || n > 1<<20 {
		return 0, fmt.Errorf("implausible schema version %d", n)
	}
	return int(n), nil
}

// writeVersion records the schema version.
func writeVersion(tx *bbolt.Tx, v int) error {
	meta, err := tx.CreateBucketIfNotExists(bucketMeta.name)
	if err != nil {
		return err
	}
	return meta.Put(keySchemaVersion, binary.BigEndian.AppendUint64(nil, uint64(v)))
}

// createBuckets makes every bucket of the current schema that is missing.
func createBuckets(tx *bbolt.Tx) error {
	for _, b := range buckets {
		if _, err := tx.CreateBucketIfNotExists(b.name); err != nil {
			return fmt.Errorf("creating bucket %q: %w", b.name, err)
		}
	}
	return nil
}

// schemaReady reports whether a file needs no schema work at Open: it is at
// the current version and has every bucket. Open checks this in a read
// transaction first, because a write transaction always writes a meta page,
// and a clean start should cost the flash nothing.
func schemaReady(tx *bbolt.Tx) (bool, error) {
	v, err := readVersion(tx)
	if err != nil || v != schemaVersion {
		return false, err
	}
	for _, b := range buckets {
		if tx.Bucket(b.name) == nil {
			return false, nil
		}
	}
	return true, nil
}
