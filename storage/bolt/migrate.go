package bolt

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"

	"go.etcd.io/bbolt"

	"github.com/linemq/linemq/broker"
)

// migration converts a file from one schema version to the next. Open
// applies every step from the file's version to schemaVersion in one
// transaction with the version bump, so a file is either entirely at its
// old version or entirely at the new one, power cut or not.
type migration struct {
	from, to int
	about    string
	apply    func(tx *bbolt.Tx, log *slog.Logger) error
}

// migrations, in order. To change the layout: bump schemaVersion, add the
// step here, and add a test that builds a file of the old version by hand.
var migrations = []migration{
	{from: 1, to: 2, about: "retained messages from JSON to the broker's binary format", apply: migrateRetainedJSON},
	{from: 2, to: 3, about: "subscriptions out of the session records, one record each", apply: migrateSubscriptions},
}

// migrate brings tx from version v to schemaVersion.
func migrate(tx *bbolt.Tx, v int, path string, log *slog.Logger) error {
	for v < schemaVersion {
		i := -1
		for j := range migrations {
			if migrations[j].from == v {
				i = j
				break
			}
		}
		if i < 0 {
			return fmt.Errorf("storage: %s has schema version %d, which this linemq cannot migrate", path, v)
		}
		m := &migrations[i]
		if err := m.apply(tx, log.With("path", path)); err != nil {
			return fmt.Errorf("storage: migrating %s from schema %d to %d (%s): %w; the file was not changed",
				path, m.from, m.to, m.about, err)
		}
		log.Info("storage: migrated database", "path", path, "from", m.from, "to", m.to, "what", m.about)
		v = m.to
	}
	return nil
}

// retainedV1 is a retained message as schema version 1 stored it: JSON,
// the payload base64 (encoding/json's form for []byte). Version 1 had the
// same buckets as version 2 and the same session and message records; only
// the retained values differ.
type retainedV1 struct {
	Topic   string `json:"topic"`
	Payload []byte `json:"payload"`
	QoS     byte   `json:"qos"`
}

// migrateRetainedJSON rewrites version 1's JSON retained messages in the
// broker's binary format. Version 1 kept no creation time, so the messages
// count as created now; it had no expiry either.
func migrateRetainedJSON(tx *bbolt.Tx, _ *slog.Logger) error {
	rb := tx.Bucket(bucketRetained.name)
	if rb == nil {
		return nil
	}
	type change struct{ k, v []byte }
	var changes []change
	// bbolt forbids changing a bucket while iterating it: collect first.
	err := rb.ForEach(func(k, v []byte) error {
		nv, err := convertRetainedV1(k, v)
		if err != nil {
			return err
		}
		changes = append(changes, change{k: bytes.Clone(k), v: nv})
		return nil
	})
	if err != nil {
		return err
	}
	for _, c := range changes {
		if c.v == nil {
			err = rb.Delete(c.k)
		} else {
			err = rb.Put(c.k, c.v)
		}
		if err != nil {
			return fmt.Errorf("retained %s: %w", quoteKey(c.k), err)
		}
	}
	return nil
}

// convertRetainedV1 returns the version 2 value of a version 1 retained
// message, nil if it should be deleted.
func convertRetainedV1(k, v []byte) ([]byte, error) {
	if v == nil {
		return nil, fmt.Errorf("retained %s: a bucket where a message belongs", quoteKey(k))
	}
	var r retainedV1
	if err := json.Unmarshal(v, &r); err != nil {
		return nil, fmt.Errorf("retained %s: %w", quoteKey(k), err)
	}
	switch {
	case r.Topic != string(k):
		return nil, fmt.Errorf("retained %s: message has topic %q", quoteKey(k), r.Topic)
	case r.QoS > 2:
		return nil, fmt.Errorf("retained %s: QoS %d", quoteKey(k), r.QoS)
	case len(r.Payload) == 0:
		return nil, nil // it would have been a clear
	}
	return broker.NewMessage(r.Topic, r.Payload, r.QoS, true).AppendBinary(nil), nil
}

// checkRetainedV1 reports version 1 retained messages that the migration
// would refuse.
func checkRetainedV1(tx *bbolt.Tx, add func(string, ...any)) {
	rb := tx.Bucket(bucketRetained.name)
	if rb == nil {
		return
	}
	_ = rb.ForEach(func(k, v []byte) error {
		if _, err := convertRetainedV1(k, v); err != nil {
			add("schema 1 %v (Open's migration would fail)", err)
		}
		return nil
	})
}

// migrateSubscriptions moves each session's subscriptions out of its
// record (session format 1) into its bucket under bucketSubscriptions, one
// key per filter, and rewrites the record without them (format 2).
//
// Message records are left as they are: schema 2's records carry their
// body, which schema 3 still reads (MessageID 0). Giving them shared bodies
// would rewrite every queued record, and a large backlog in one
// transaction is held in memory until it commits, which a small gateway
// may not have; the backlog drains as before, and new messages are stored
// shared. So the migration costs one rewrite per session, whatever the
// backlog.
func migrateSubscriptions(tx *bbolt.Tx, log *slog.Logger) error {
	sb := tx.Bucket(bucketSessions.name)
	if sb == nil {
		return nil
	}
	subs, err := tx.CreateBucketIfNotExists(bucketSubscriptions.name)
	if err != nil {
		return err
	}
	type session struct {
		id  []byte
		rec *broker.SessionRecord
	}
	var all []session
	// bbolt forbids changing a bucket while iterating it: collect first.
	err = sb.ForEach(func(k, v []byte) error {
		if v == nil {
			return fmt.Errorf("session %s: a bucket where a session record belongs", quoteKey(k))
		}
		r, err := decodeSession(string(k), v)
		if err != nil {
			return fmt.Errorf("session %s: %w", quoteKey(k), err)
		}
		all = append(all, session{id: bytes.Clone(k), rec: r})
		return nil
	})
	if err != nil {
		return err
	}
	for _, s := range all {
		v, err := appendSession(nil, s.rec)
		if err != nil {
			return fmt.Errorf("session %s: %w", quoteKey(s.id), err)
		}
		if err := sb.Put(s.id, v); err != nil {
			return fmt.Errorf("session %s: %w", quoteKey(s.id), err)
		}
		if len(s.rec.Subscriptions) == 0 {
			continue
		}
		b, err := subs.CreateBucketIfNotExists(s.id)
		if err != nil {
			return fmt.Errorf("subscriptions of %s: %w", quoteKey(s.id), err)
		}
		for i := range s.rec.Subscriptions {
			sub := &s.rec.Subscriptions[i]
			if checkKey(sub.Filter) != nil {
				// bbolt cannot key it (empty, or over 32 KiB), and the broker
				// never accepted either; dropping one subscription beats
				// refusing to start.
				log.Warn("storage: migration drops a subscription whose filter cannot be stored",
					"client", s.rec.ClientID, "filter_bytes", len(sub.Filter))
				continue
			}
			if err := b.Put([]byte(sub.Filter), appendSubscription(nil, sub)); err != nil {
				return fmt.Errorf("subscription %q of %s: %w", sub.Filter, quoteKey(s.id), err)
			}
		}
	}
	return nil
}
