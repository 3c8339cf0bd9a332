package bolt

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"go.etcd.io/bbolt"

	"github.com/linemq/linemq/storage/storetest"
)

// writeV1 builds a schema version 1 file by hand, the way a linemq of
// that version left it: the same buckets, session and message records in
// today's format, and retained messages as JSON.
func writeV1(t *testing.T, path string, retained map[string]retainedV1, raw map[string]string) {
	t.Helper()
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bbolt.Tx) error {
		for _, name := range []string{"meta", "sessions", "messages", "inbound", "retained"} {
			if _, err := tx.CreateBucket([]byte(name)); err != nil {
				return err
			}
		}
		if err := tx.Bucket([]byte("meta")).Put([]byte("schema_version"), binary.BigEndian.AppendUint64(nil, 1)); err != nil {
			return err
		}
		sess, _ := appendSession(nil, storetest.Session("old"))
		if err := tx.Bucket([]byte("sessions")).Put([]byte("old"), sess); err != nil {
			return err
		}
		mb, err := tx.Bucket([]byte("messages")).CreateBucket([]byte("old"))
		if err != nil {
			return err
		}
		msg, _ := appendMessageRecord(nil, storetest.Message(9, 20))
		if err := mb.Put(seqKey(9), msg); err != nil {
			return err
		}
		rb := tx.Bucket([]byte("retained"))
		for topic, r := range retained {
			v, _ := json.Marshal(r)
			if err := rb.Put([]byte(topic), v); err != nil {
				return err
			}
		}
		for topic, v := range raw {
			if err := rb.Put([]byte(topic), []byte(v)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// fileVersion reads a file's schema version directly.
func fileVersion(t *testing.T, path string) int {
	t.Helper()
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var v int
	must(t, db.View(func(tx *bbolt.Tx) (err error) { v, err = readVersion(tx); return err }))
	return v
}

func TestMigrateV1(t *testing.T) {
	path := tempDB(t)
	writeV1(t, path, map[string]retainedV1{
		"status/a": {Topic: "status/a", Payload: []byte{0, 1, 2, 0xff}, QoS: 1},
		"status/b": {Topic: "status/b", Payload: []byte("on"), QoS: 0},
		"status/c": {Topic: "status/c", QoS: 2}, // empty: dropped
	}, nil)
	// The hand-made file is what a v1 linemq wrote: JSON with base64.
	if !strings.Contains(dumpRetained(t, path)["status/a"], `"payload":"AAEC/w=="`) {
		t.Fatalf("v1 fixture is not JSON with base64: %v", dumpRetained(t, path))
	}
	if err := Check(path); err != nil {
		t.Fatalf("Check of a valid v1 file: %v", err)
	}

	s := openT(t, path, nil)
	snap, err := s.Load(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Retained) != 2 {
		t.Fatalf("retained after migration: %d, want 2", len(snap.Retained))
	}
	for _, m := range snap.Retained {
		want := map[string]string{"status/a": "\x00\x01\x02\xff", "status/b": "on"}[m.Topic]
		wantQoS := map[string]byte{"status/a": 1, "status/b": 0}[m.Topic]
		if string(m.Payload) != want || m.QoS != wantQoS || !m.Retain {
			t.Errorf("migrated %q: payload %q QoS %d retain %v", m.Topic, m.Payload, m.QoS, m.Retain)
		}
	}
	if len(snap.Sessions) != 1 || len(snap.Messages["old"]) != 1 {
		t.Fatalf("sessions and messages not kept: %s", storetest.Describe(snap))
	}
	must(t, s.Close())
	if v := fileVersion(t, path); v != schemaVersion {
		t.Fatalf("version after migration: %d", v)
	}
	if err := Check(path); err != nil {
		t.Fatalf("Check after migration: %v", err)
	}
	// Opening again changes nothing.
	s = openT(t, path, nil)
	snap, err = s.Load(ctxT(t))
	if err != nil || len(snap.Retained) != 2 {
		t.Fatalf("second open: %v, %v", snap, err)
	}
}

// TestMigrateV1Bad: a migration that fails leaves the file as it was, and
// says which record stopped it.
func TestMigrateV1Bad(t *testing.T) {
	path := tempDB(t)
	writeV1(t, path, map[string]retainedV1{"ok": {Topic: "ok", Payload: []byte("x")}},
		map[string]string{"broken": `{"topic":"broken","payload":`})
	if err := Check(path); err == nil || !strings.Contains(err.Error(), `"broken"`) {
		t.Fatalf("Check of a bad v1 file: %v", err)
	}
	_, err := Open(path, nil)
	if err == nil || !strings.Contains(err.Error(), `retained "broken"`) || !strings.Contains(err.Error(), "not changed") {
		t.Fatalf("Open: %v", err)
	}
	if v := fileVersion(t, path); v != 1 {
		t.Fatalf("file version after a failed migration: %d, want 1", v)
	}
	if got := dumpRetained(t, path)["ok"]; !strings.HasPrefix(got, "{") {
		t.Fatalf("record changed by a failed migration: %q", got)
	}
}

func TestSchemaTooNew(t *testing.T) {
	path := tempDB(t)
	s := openT(t, path, nil)
	must(t, s.Close())
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	must(t, db.Update(func(tx *bbolt.Tx) error { return writeVersion(tx, schemaVersion+1) }))
	must(t, db.Close())
	_, err = Open(path, nil)
	if !errors.Is(err, ErrSchemaTooNew) || !strings.Contains(err.Error(), path) {
		t.Fatalf("Open of a newer file: %v", err)
	}
	if err := Check(path); err == nil || !strings.Contains(err.Error(), "newer") {
		t.Fatalf("Check of a newer file: %v", err)
	}
}

// TestForeignBolt: a bbolt file that is not linemq's is refused, not
// taken over.
func TestForeignBolt(t *testing.T) {
	path := tempDB(t)
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	must(t, db.Update(func(tx *bbolt.Tx) error {
		_, err := tx.CreateBucket([]byte("someone-else"))
		return err
	}))
	must(t, db.Close())
	_, err = Open(path, nil)
	var ue *UnreadableError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "not linemq's") {
		t.Fatalf("Open of a foreign bbolt file: %v", err)
	}
}

func dumpRetained(t *testing.T, path string) map[string]string {
	t.Helper()
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	out := map[string]string{}
	must(t, db.View(func(tx *bbolt.Tx) error {
		return tx.Bucket(bucketRetained.name).ForEach(func(k, v []byte) error {
			out[string(k)] = string(v)
			return nil
		})
	}))
	return out
}
