package bolt

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"go.etcd.io/bbolt"

	"github.com/linemq/linemq/broker"
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
		sess := appendSessionV1(nil, storetest.Session("old"))
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

// appendSessionV1 appends s in session format 1, schema 1 and 2's, with
// its subscriptions inside: the format the migration to schema 3 reads.
func appendSessionV1(dst []byte, s *broker.SessionRecord) []byte {
	var flags byte
	if !s.Disconnected.IsZero() {
		flags |= sessDisconnected
	}
	if w := s.Will; w != nil {
		flags |= sessWill
		if w.HasExpiry {
			flags |= sessWillExpiry
		}
	}
	dst = append(dst, sessionFormatV1, byte(s.Version), flags)
	dst = binary.AppendUvarint(dst, uint64(s.ExpiryInterval))
	if flags&sessDisconnected != 0 {
		dst = binary.AppendVarint(dst, s.Disconnected.UnixNano())
	}
	dst = binary.AppendUvarint(dst, uint64(len(s.Subscriptions)))
	for i := range s.Subscriptions {
		sub := &s.Subscriptions[i]
		dst = binary.AppendUvarint(dst, uint64(len(sub.Filter)))
		dst = append(dst, sub.Filter...)
		dst = append(dst, subOptions(sub))
		dst = binary.AppendUvarint(dst, uint64(sub.SubscriptionID))
	}
	if w := s.Will; w != nil {
		dst = binary.AppendUvarint(dst, uint64(w.Delay))
		if w.HasExpiry {
			dst = binary.AppendUvarint(dst, uint64(w.Expiry))
		}
		dst = w.Message.AppendBinary(dst)
	}
	return dst
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
	// On through schema 2 to 3: the subscriptions are records of their own.
	if got, want := snap.Sessions[0].Subscriptions, storetest.Session("old").Subscriptions; !slices.Equal(got, want) {
		t.Fatalf("subscriptions %+v, want %+v", got, want)
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

// v2File is what a schema 2 file holds, for writeV2.
type v2File struct {
	sessions map[string]*broker.SessionRecord
	raw      map[string][]byte // session records as given, for broken ones
	messages map[string][]*broker.MessageRecord
	inbound  map[string][]uint16
	retained []*broker.Message
}

// writeV2 builds a schema version 2 file by hand, as linemq left it before
// schema 3: the same buckets as version 1, session records in format 1
// (the subscriptions inside), message records carrying their bodies
// (format 1, which is what the current code writes for MessageID 0), and
// retained messages in the broker's binary format.
func writeV2(t *testing.T, path string, f v2File) {
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
		if err := tx.Bucket([]byte("meta")).Put([]byte("schema_version"), binary.BigEndian.AppendUint64(nil, 2)); err != nil {
			return err
		}
		for id, s := range f.sessions {
			if err := tx.Bucket([]byte("sessions")).Put([]byte(id), appendSessionV1(nil, s)); err != nil {
				return err
			}
		}
		for id, v := range f.raw {
			if err := tx.Bucket([]byte("sessions")).Put([]byte(id), v); err != nil {
				return err
			}
		}
		for id, ms := range f.messages {
			b, err := tx.Bucket([]byte("messages")).CreateBucket([]byte(id))
			if err != nil {
				return err
			}
			for _, m := range ms {
				if m.MessageID != 0 {
					t.Fatal("schema 2 had no shared bodies")
				}
				v, err := appendMessageRecord(nil, m)
				if err != nil || v[0] != 1 {
					t.Fatalf("not a format 1 record: %v", err)
				}
				if err := b.Put(seqKey(m.Seq), v); err != nil {
					return err
				}
			}
		}
		for id, pids := range f.inbound {
			b, err := tx.Bucket([]byte("inbound")).CreateBucket([]byte(id))
			if err != nil {
				return err
			}
			for _, pid := range pids {
				if err := b.Put(pidKey(pid), []byte{1}); err != nil {
					return err
				}
			}
		}
		for _, m := range f.retained {
			if err := tx.Bucket([]byte("retained")).Put([]byte(m.Topic), m.AppendBinary(nil)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestMigrateV2 opens a schema 2 file: the subscriptions leave the session
// records for records of their own, everything else loads as it was (the
// queued messages keep their bodies inline, MessageID 0), and the file
// then behaves as any schema 3 file.
func TestMigrateV2(t *testing.T) {
	path := tempDB(t)
	a := storetest.Session("a")
	a.Subscriptions = append(a.Subscriptions, broker.SubscriptionRecord{Filter: "a/z", QoS: 0, SubscriptionID: 268435455})
	slicesSortSubs(a.Subscriptions)
	b := storetest.Session("b")
	b.Subscriptions, b.Will = nil, nil
	c := storetest.Session("c")
	c.Subscriptions = []broker.SubscriptionRecord{{Filter: "", QoS: 1}, {Filter: "ok", QoS: 2}} // "" cannot be a key
	msgs := []*broker.MessageRecord{storetest.Message(1, 1000), storetest.Message(2, 10), storetest.Message(7, 0)}
	msgs[1].GroupName, msgs[1].GroupFilter = "g", "sensors/+"
	ret := broker.NewMessage("status", []byte("up"), 1, true)
	writeV2(t, path, v2File{
		sessions: map[string]*broker.SessionRecord{"a": a, "b": b, "c": c},
		messages: map[string][]*broker.MessageRecord{"a": msgs, "b": msgs[:1]},
		inbound:  map[string][]uint16{"a": {5, 300}},
		retained: []*broker.Message{ret},
	})
	if err := Check(path); err != nil {
		t.Fatalf("Check of a valid schema 2 file: %v", err)
	}

	var logs strings.Builder
	s := openT(t, path, &Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	snap, err := s.Load(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]*broker.SessionRecord{"a": a, "b": b, "c": c}
	c.Subscriptions = c.Subscriptions[1:]
	if len(snap.Sessions) != 3 {
		t.Fatalf("after migration: %s", storetest.Describe(snap))
	}
	for _, got := range snap.Sessions {
		if err := storetest.EqualSession(got, want[got.ClientID]); err != nil {
			t.Errorf("session %s: %v", got.ClientID, err)
		}
	}
	for id, n := range map[string]int{"a": 3, "b": 1} {
		if len(snap.Messages[id]) != n {
			t.Fatalf("messages of %s: %s", id, storetest.Describe(snap))
		}
		for i, m := range snap.Messages[id] {
			if err := storetest.EqualMessage(m, msgs[i]); err != nil || m.MessageID != 0 {
				t.Errorf("message %s/%d: id %d, %v", id, m.Seq, m.MessageID, err)
			}
		}
	}
	if len(snap.Inbound["a"]) != 2 || len(snap.Retained) != 1 {
		t.Fatalf("after migration: %s", storetest.Describe(snap))
	}
	for _, want := range []string{"migrated database", "from=2 to=3", "drops a subscription"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs.String())
		}
	}

	// The file is schema 3 through and through: session records without
	// subscriptions, one key per subscription, and it works as one.
	must(t, s.SaveMessage("a", sharedMsg(8, 42, "new")))
	must(t, s.SaveMessage("b", sharedMsg(8, 42, "new")))
	must(t, s.DeleteMessage("a", 1))
	must(t, s.SaveSubscription("b", broker.SubscriptionRecord{Filter: "b/+", QoS: 1}))
	must(t, s.Close())
	if v := fileVersion(t, path); v != schemaVersion {
		t.Fatalf("version after migration: %d", v)
	}
	raw := dumpBucket(t, path, bucketSessions)
	for id, v := range raw {
		if v[0] != sessionFormat {
			t.Errorf("session %s still in format %d", id, v[0])
		}
	}
	if subs := dumpNested(t, path, bucketSubscriptions, "a"); len(subs) != 3 {
		t.Errorf("subscriptions of a stored as %d keys, want 3", len(subs))
	}
	must(t, Check(path))
	s = openT(t, path, nil)
	snap, err = s.Load(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Messages["a"]) != 3 || snap.Messages["a"][2].Message != snap.Messages["b"][1].Message ||
		len(findSession(t, snap, "b").Subscriptions) != 1 {
		t.Fatalf("after reopening: %s", storetest.Describe(snap))
	}
}

// TestMigrateV2Bad: a session record the migration cannot read stops it,
// naming the record, and leaves the file at schema 2.
func TestMigrateV2Bad(t *testing.T) {
	path := tempDB(t)
	writeV2(t, path, v2File{
		sessions: map[string]*broker.SessionRecord{"ok": storetest.Session("ok")},
		raw:      map[string][]byte{"broken": {1, 5, 0}},
	})
	_, err := Open(path, nil)
	if err == nil || !strings.Contains(err.Error(), `session "broken"`) || !strings.Contains(err.Error(), "not changed") {
		t.Fatalf("Open: %v", err)
	}
	if v := fileVersion(t, path); v != 2 {
		t.Fatalf("file version after a failed migration: %d, want 2", v)
	}
	if v := dumpBucket(t, path, bucketSessions)["ok"]; v[0] != sessionFormatV1 {
		t.Fatalf("record changed by a failed migration: %x", v)
	}
}

func slicesSortSubs(subs []broker.SubscriptionRecord) {
	slices.SortFunc(subs, func(a, b broker.SubscriptionRecord) int { return strings.Compare(a.Filter, b.Filter) })
}

// dumpBucket returns a top-level bucket's values by key.
func dumpBucket(t *testing.T, path string, b *bucket) map[string][]byte {
	t.Helper()
	return dump(t, path, func(tx *bbolt.Tx) *bbolt.Bucket { return tx.Bucket(b.name) })
}

// dumpNested returns the values of a client's bucket under b.
func dumpNested(t *testing.T, path string, b *bucket, client string) map[string][]byte {
	t.Helper()
	return dump(t, path, func(tx *bbolt.Tx) *bbolt.Bucket {
		if p := tx.Bucket(b.name); p != nil {
			return p.Bucket([]byte(client))
		}
		return nil
	})
}

func dump(t *testing.T, path string, which func(*bbolt.Tx) *bbolt.Bucket) map[string][]byte {
	t.Helper()
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	out := map[string][]byte{}
	must(t, db.View(func(tx *bbolt.Tx) error {
		b := which(tx)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			out[string(k)] = bytes.Clone(v)
			return nil
		})
	}))
	return out
}
