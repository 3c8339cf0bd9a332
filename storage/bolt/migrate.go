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
	apply    func(tx *bbolt.Tx) error
}

// migrations, in order. To change the layout: bump schemaVersion, add the
// step here, and add a test that builds a file of the old version by hand.
var migrations = []migration{
	{from: 1, to: 2, about: "retained messages from JSON to the broker's binary format", apply: migrateRetainedJSON},
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
		if err := m.apply(tx); err != nil {
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
func migrateRetainedJSON(tx *bbolt.Tx) error {
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
