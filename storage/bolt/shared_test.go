package bolt

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/storage/storetest"
)

// sharedMsg returns a record of shared message id with a new message.
func sharedMsg(seq, id uint64, payload string) *broker.MessageRecord {
	return sharedRec(seq, id, broker.NewMessage("fan/out", []byte(payload), 1, false))
}

// sharedRec returns a record of m, shared under id.
func sharedRec(seq, id uint64, m *broker.Message) *broker.MessageRecord {
	return &broker.MessageRecord{Seq: seq, MessageID: id, Message: m, QoS: 1, SubIDs: []uint32{3}}
}

func findSession(t *testing.T, snap *broker.Snapshot, id string) *broker.SessionRecord {
	t.Helper()
	for _, s := range snap.Sessions {
		if s.ClientID == id {
			return s
		}
	}
	t.Fatalf("no session %q: %s", id, storetest.Describe(snap))
	return nil
}

// refState reads the stored counts and which bodies are stored.
func refState(t *testing.T, s *Store) (counts map[uint64]uint64, bodies map[uint64]bool) {
	t.Helper()
	must(t, s.flush(ctxT(t)))
	counts, bodies = map[uint64]uint64{}, map[uint64]bool{}
	must(t, s.db.View(func(tx *bbolt.Tx) error {
		_ = tx.Bucket(bucketRefs.name).ForEach(func(k, v []byte) error {
			id, _ := keyID(k)
			counts[id] = decodeCount(v)
			return nil
		})
		return tx.Bucket(bucketBodies.name).ForEach(func(k, _ []byte) error {
			id, _ := keyID(k)
			bodies[id] = true
			return nil
		})
	}))
	return counts, bodies
}

// wantRefs checks the stored counts (a body for every count, and none
// other) and that Check would find nothing wrong with them.
func wantRefs(t *testing.T, s *Store, want map[uint64]uint64) {
	t.Helper()
	counts, bodies := refState(t, s)
	if fmt.Sprint(counts) != fmt.Sprint(want) {
		t.Fatalf("counts %v, want %v", counts, want)
	}
	for id := range want {
		if !bodies[id] {
			t.Fatalf("message %d has a count but no body", id)
		}
	}
	if len(bodies) != len(want) {
		t.Fatalf("bodies %v, want those of %v", bodies, want)
	}
	must(t, s.db.View(func(tx *bbolt.Tx) error {
		if f := faults(tx, countRefs(tx)); len(f) > 0 {
			t.Fatalf("faults: %v", f)
		}
		return nil
	}))
}

// TestSharedBodyStoredOnce: a message queued to many sessions is stored
// once, counted, and loaded as one *Message; its body goes with the last
// record.
func TestSharedBodyStoredOnce(t *testing.T) {
	path := tempDB(t)
	s := openT(t, path, nil)
	const clients, n = 50, 20
	msgs := make([]*broker.Message, n)
	for i := range msgs {
		msgs[i] = broker.NewMessage(fmt.Sprintf("t/%d", i), []byte(strings.Repeat("x", 1024)), 1, false)
		for c := range clients {
			must(t, s.SaveMessage(fmt.Sprintf("c%02d", c), sharedRec(uint64(i+1), uint64(100+i), msgs[i])))
		}
	}
	must(t, s.SaveMessage("c00", storetest.Message(1000, 1024))) // inline, alongside
	want := map[uint64]uint64{}
	for i := range n {
		want[uint64(100+i)] = clients
	}
	wantRefs(t, s, want)
	if st := s.Stats(); st.BytesWritten > 3*clients*n*20+n*1100+2000 {
		t.Fatalf("%d bytes written for %d records of %d bodies", st.BytesWritten, clients*n, n)
	}

	// A restart: one decoded *Message per body, whatever the number of
	// records.
	must(t, s.Close())
	s = openT(t, path, nil)
	snap, err := s.Load(ctxT(t))
	must(t, err)
	for i := range n {
		first := snap.Messages["c00"][i].Message
		if err := storetest.EqualMessage(snap.Messages["c00"][i], sharedRec(uint64(i+1), uint64(100+i), msgs[i])); err != nil {
			t.Fatal(err)
		}
		for c := range clients {
			r := snap.Messages[fmt.Sprintf("c%02d", c)][i]
			if r.Message != first || r.MessageID != uint64(100+i) {
				t.Fatalf("client %d message %d: pointer %p id %d, want %p (shared)", c, i, r.Message, r.MessageID, first)
			}
		}
	}
	if m := snap.Messages["c00"][n]; m.MessageID != 0 || len(m.Message.Payload) != 1024 {
		t.Fatalf("inline record: %+v", m)
	}

	// Acknowledged by all but one session: the body stays, counted once.
	for c := 1; c < clients; c++ {
		for i := range n {
			must(t, s.DeleteMessage(fmt.Sprintf("c%02d", c), uint64(i+1)))
		}
	}
	for id := range want {
		want[id] = 1
	}
	wantRefs(t, s, want)
	for i := range n {
		must(t, s.DeleteMessage("c00", uint64(i+1)))
	}
	wantRefs(t, s, map[uint64]uint64{})
	must(t, s.Close())
	must(t, Check(path))
}

// TestSharedCollapse: group commit still cancels a shared record saved and
// deleted in one batch, and the counts follow only what reaches the disk.
func TestSharedCollapse(t *testing.T) {
	s := openT(t, tempDB(t), &Options{BatchInterval: time.Hour})
	ctx := ctxT(t)
	m := broker.NewMessage("t", []byte("body"), 1, false)
	for c := range 10 {
		must(t, s.SaveMessage(fmt.Sprint("c", c), sharedRec(1, 5, m)))
		must(t, s.DeleteMessage(fmt.Sprint("c", c), 1))
	}
	must(t, s.flush(ctx))
	if st := s.Stats(); st.Commits != 0 || st.BytesWritten != 0 {
		t.Fatalf("shared records saved and deleted in one batch wrote %+v", st)
	}
	wantRefs(t, s, map[uint64]uint64{})

	// Three stored; then, in one batch, one acknowledged, one more queued
	// and acknowledged, one re-saved (sent): the count goes to 2 and the
	// body is not written again.
	for c := range 3 {
		must(t, s.SaveMessage(fmt.Sprint("c", c), sharedRec(1, 5, m)))
	}
	wantRefs(t, s, map[uint64]uint64{5: 3})
	before := s.Stats()
	must(t, s.DeleteMessage("c0", 1))
	must(t, s.SaveMessage("c9", sharedRec(1, 5, m)))
	must(t, s.DeleteMessage("c9", 1))
	sent := sharedRec(1, 5, m)
	sent.Sent, sent.PacketID = true, 7
	must(t, s.SaveMessage("c1", sent))
	wantRefs(t, s, map[uint64]uint64{5: 2})
	if w := s.Stats().BytesWritten - before.BytesWritten; w > 64 {
		t.Fatalf("the batch wrote %d bytes: the body was written again", w)
	}
	snap, err := s.Load(ctx)
	must(t, err)
	if len(snap.Messages["c0"])+len(snap.Messages["c9"]) != 0 || !snap.Messages["c1"][0].Sent ||
		snap.Messages["c1"][0].Message != snap.Messages["c2"][0].Message {
		t.Fatalf("after the batch: %s", storetest.Describe(snap))
	}

	// DeleteSession drops its records' references, in the same batch as a
	// save to the session that replaces it.
	must(t, s.SaveMessage("c1", sharedRec(2, 6, m)))
	must(t, s.DeleteSession("c1"))
	must(t, s.SaveMessage("c1", sharedRec(9, 6, m)))
	wantRefs(t, s, map[uint64]uint64{5: 1, 6: 1})
	must(t, s.DeleteSession("c2"))
	must(t, s.DeleteSession("c1"))
	wantRefs(t, s, map[uint64]uint64{})
}

// TestSharedIDReuse: once no record refers to an id, the broker may give
// it to another message: the new body is stored, in the same batch as the
// last delete or later, and a record re-saved under another id releases
// its old body.
func TestSharedIDReuse(t *testing.T) {
	s := openT(t, tempDB(t), &Options{BatchInterval: time.Hour})
	ctx := ctxT(t)
	must(t, s.SaveMessage("a", sharedMsg(1, 7, "first")))
	must(t, s.flush(ctx))
	// In one batch: the last reference goes, the id comes back.
	must(t, s.DeleteMessage("a", 1))
	must(t, s.SaveMessage("b", sharedMsg(1, 7, "second")))
	// And within one batch, saved, deleted, reused.
	must(t, s.SaveMessage("c", sharedMsg(1, 8, "third")))
	must(t, s.DeleteMessage("c", 1))
	must(t, s.SaveMessage("d", sharedMsg(1, 8, "fourth")))
	snap, err := s.Load(ctx)
	must(t, err)
	if got := string(snap.Messages["b"][0].Message.Payload); got != "second" {
		t.Fatalf("reused id 7 loads %q", got)
	}
	if got := string(snap.Messages["d"][0].Message.Payload); got != "fourth" {
		t.Fatalf("reused id 8 loads %q", got)
	}
	wantRefs(t, s, map[uint64]uint64{7: 1, 8: 1})

	// The same Seq saved again as another message (a session reused after
	// DeleteSession in another batch): the old body is released.
	must(t, s.SaveMessage("b", sharedMsg(1, 9, "other")))
	wantRefs(t, s, map[uint64]uint64{8: 1, 9: 1})
	must(t, s.SaveMessage("b", storetest.Message(1, 10))) // now inline
	wantRefs(t, s, map[uint64]uint64{8: 1})
	must(t, s.SaveMessage("b", sharedMsg(1, 8, "fourth")))
	wantRefs(t, s, map[uint64]uint64{8: 2})
}

// TestSharedRetryAfterFailure: a batch of shared records that fails (the
// file at MaxSize) is kept, with its bodies, under the changes made after
// it and retried; once the refused publish is forgotten and deliveries
// acknowledged, the commit succeeds and the counts are those of the
// records kept, whether a retry stored the refused publish meanwhile or not.
func TestSharedRetryAfterFailure(t *testing.T) {
	path := tempDB(t)
	s := openT(t, path, &Options{Sync: SyncAlways, BatchInterval: time.Millisecond, MaxSize: 512 << 10})
	clients := []string{"a", "b", "c"}
	publish := func(i uint64) error {
		m := broker.NewMessage("t", make([]byte, 8000), 1, false)
		for _, c := range clients {
			must(t, s.SaveMessage(c, sharedRec(i, i, m)))
		}
		return s.Sync(ctxT(t))
	}
	var acked []uint64
	var failed uint64
	for i := uint64(1); failed == 0; i++ {
		switch err := publish(i); {
		case err == nil:
			acked = append(acked, i)
		case errors.Is(err, berrors.ErrMaxSizeReached):
			failed = i
		default:
			t.Fatal(err)
		}
	}
	// The broker refuses the publish and forgets its records; every session
	// acknowledges the oldest half.
	half := acked[:len(acked)/2]
	for _, c := range clients {
		must(t, s.DeleteMessage(c, failed))
		for _, i := range half {
			must(t, s.DeleteMessage(c, i))
		}
	}
	must(t, s.Sync(ctxT(t)))
	want := map[uint64]uint64{}
	for _, i := range acked[len(half):] {
		want[i] = 3
	}
	wantRefs(t, s, want)
	// And there is room again.
	must(t, publish(failed+1))
	want[failed+1] = 3
	wantRefs(t, s, want)
	must(t, s.Close())
	must(t, Check(path))
}

// corrupt opens the closed file at path and changes it with f.
func corrupt(t *testing.T, path string, f func(tx *bbolt.Tx) error) {
	t.Helper()
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	must(t, db.Update(f))
	must(t, db.Close())
}

// TestCheckSharedFaults: each kind of inconsistency between records,
// counts, bodies and sessions is reported by Check; Load repairs those it
// can (the snapshot is unaffected) and refuses a record whose body is gone;
// Compact repairs its copy.
func TestCheckSharedFaults(t *testing.T) {
	build := func(t *testing.T) string {
		path := tempDB(t)
		s := openT(t, path, nil)
		must(t, s.SaveSession(storetest.Session("a")))
		must(t, s.SaveSubscription("a", broker.SubscriptionRecord{Filter: "x/#", QoS: 1}))
		m := broker.NewMessage("t", []byte("shared"), 1, false)
		must(t, s.SaveMessage("a", sharedRec(1, 11, m)))
		must(t, s.SaveMessage("b", sharedRec(1, 11, m)))
		must(t, s.SaveMessage("b", sharedMsg(2, 12, "other")))
		must(t, s.Close())
		must(t, Check(path))
		return path
	}
	put := func(b *bucket, k, v []byte) func(tx *bbolt.Tx) error {
		return func(tx *bbolt.Tx) error { return tx.Bucket(b.name).Put(k, v) }
	}
	for _, c := range []struct {
		name, report string
		change       func(tx *bbolt.Tx) error
	}{
		{"count too high", "message 11: count 5 but 2 record(s)", put(bucketRefs, idKey(11), encodeCount(5))},
		{"count too low", "message 11: count 1 but 2 record(s)", put(bucketRefs, idKey(11), encodeCount(1))},
		{"count missing", "message 12: 1 record(s) refer to it but it has no count", func(tx *bbolt.Tx) error {
			return tx.Bucket(bucketRefs.name).Delete(idKey(12))
		}},
		{"leaked body", "message 99: body stored but no record refers to it (leaked)", func(tx *bbolt.Tx) error {
			if err := put(bucketBodies, idKey(99), broker.NewMessage("t", []byte("x"), 0, false).AppendBinary(nil))(tx); err != nil {
				return err
			}
			return put(bucketRefs, idKey(99), encodeCount(1))(tx)
		}},
		{"orphaned subscriptions", `subscriptions of client "b", which has no session`, func(tx *bbolt.Tx) error {
			b, err := tx.Bucket(bucketSubscriptions.name).CreateBucket([]byte("b"))
			if err != nil {
				return err
			}
			return b.Put([]byte("f"), appendSubscription(nil, &broker.SubscriptionRecord{Filter: "f"}))
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := build(t)
			corrupt(t, path, c.change)
			err := Check(path)
			if err == nil || !strings.Contains(err.Error(), c.report) || !strings.Contains(err.Error(), "Load and Compact repair") {
				t.Fatalf("Check: %v", err)
			}
			// Compact's copy is repaired; the original is left alone.
			dst := filepath.Join(t.TempDir(), "compacted.db")
			must(t, Compact(path, dst))
			must(t, Check(dst))
			if Check(path) == nil {
				t.Fatal("Compact changed its source")
			}
			// Load repairs the file itself.
			s := openT(t, path, nil)
			snap, err := s.Load(ctxT(t))
			must(t, err)
			if len(snap.Messages["a"]) != 1 || len(snap.Messages["b"]) != 2 ||
				snap.Messages["a"][0].Message != snap.Messages["b"][0].Message ||
				len(findSession(t, snap, "a").Subscriptions) != 1 {
				t.Fatalf("snapshot: %s", storetest.Describe(snap))
			}
			wantRefs(t, s, map[uint64]uint64{11: 2, 12: 1})
			must(t, s.Close())
			must(t, Check(path))
		})
	}
	t.Run("missing body", func(t *testing.T) {
		path := build(t)
		corrupt(t, path, func(tx *bbolt.Tx) error { return tx.Bucket(bucketBodies.name).Delete(idKey(11)) })
		err := Check(path)
		if err == nil || !strings.Contains(err.Error(), "the body of message 11 is missing") {
			t.Fatalf("Check: %v", err)
		}
		s := openT(t, path, nil)
		_, err = s.Load(ctxT(t))
		wantUnreadable(t, err, path)
		if !strings.Contains(err.Error(), "the body of message 11 is missing") {
			t.Fatalf("Load: %v", err)
		}
	})
}

// TestFanOutSize stores a fan-out backlog with bodies inline (MessageID 0,
// the schema 2 layout) and shared, and compares what each writes. It
// asserts bytes, never time; BenchmarkFanOutBacklog is the full-size
// version (500 sessions x 1,000 messages of 1 KiB).
func TestFanOutSize(t *testing.T) {
	const sessions, msgs, size = 50, 200, 1024
	inline := fanOut(t, sessions, msgs, size, false)
	shared := fanOut(t, sessions, msgs, size, true)
	t.Logf("%d sessions x %d messages of %d B: inline %s; shared %s", sessions, msgs, size, inline, shared)
	// Pages fall less than bytes: each publish still rewrites one leaf page
	// per session, where its record goes.
	if shared.written*10 > inline.written || shared.file*5 > inline.file || shared.pages*3 > inline.pages*2 ||
		shared.heap*3 > inline.heap {
		t.Fatalf("shared bodies do not save enough: inline %s, shared %s", inline, shared)
	}
}

// fanOutResult is what a fan-out backlog cost.
type fanOutResult struct {
	file, written, pages int64
	commits              uint64
	load                 time.Duration
	heap                 int64 // what the loaded snapshot holds in memory
}

func (r fanOutResult) String() string {
	return fmt.Sprintf("file %.1f MB, written %.1f MB (keys and values), %.1f MB (pages), %d commits, load %v holding %.1f MB",
		float64(r.file)/1e6, float64(r.written)/1e6, float64(r.pages)/1e6, r.commits, r.load.Round(time.Millisecond), float64(r.heap)/1e6)
}

// fanOut queues msgs messages of size bytes to each of sessions offline
// sessions, as the broker does for a QoS 1 publish (one Sync, and so one
// commit, per publish), then restarts the store and loads it.
func fanOut(t testing.TB, sessions, msgs, size int, shared bool) fanOutResult {
	path := filepath.Join(t.TempDir(), "fanout.db")
	// SyncAlways with a long interval: a commit per Sync and no other, so
	// that the figures do not depend on timing.
	s, err := Open(path, &Options{Sync: SyncAlways, BatchInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background() // the full-size benchmark takes minutes
	ids := make([]string, sessions)
	for c := range ids {
		ids[c] = fmt.Sprintf("client-%04d", c)
		must(t, s.SaveSession(&broker.SessionRecord{ClientID: ids[c], ExpiryInterval: 3600}))
	}
	must(t, s.Sync(ctx))
	base := s.Stats()
	payload := make([]byte, size)
	for k := range msgs {
		m := broker.NewMessage(fmt.Sprintf("sensors/%d", k%10), payload, 1, false)
		for _, id := range ids {
			rec := &broker.MessageRecord{Seq: uint64(k + 1), Message: m, QoS: 1, SubIDs: []uint32{1}}
			if shared {
				rec.MessageID = uint64(k + 1)
			}
			must(t, s.SaveMessage(id, rec))
		}
		must(t, s.Sync(ctx))
	}
	st := s.Stats()
	must(t, s.Close())
	fi, err := os.Stat(path)
	must(t, err)
	r := fanOutResult{
		file: fi.Size(), written: int64(st.BytesWritten - base.BytesWritten),
		pages: int64(st.PageBytesWritten - base.PageBytesWritten), commits: st.Commits - base.Commits,
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	s, err = Open(path, nil)
	must(t, err)
	snap, err := s.Load(ctx)
	must(t, err)
	r.load = time.Since(start)
	must(t, s.Close())
	runtime.GC()
	runtime.ReadMemStats(&after)
	r.heap = int64(after.HeapAlloc) - int64(before.HeapAlloc)
	if len(snap.Messages) != sessions || len(snap.Messages[ids[0]]) != msgs {
		t.Fatalf("loaded %d sessions' messages", len(snap.Messages))
	}
	runtime.KeepAlive(snap)
	return r
}

// BenchmarkFanOutBacklog is issue 9 item 5's case: 500 offline sessions
// sharing 1,000 queued messages of 1 KiB, stored with bodies inline
// (schema 2's layout) and shared. One iteration is the whole backlog; run
// it with -benchtime=1x.
func BenchmarkFanOutBacklog(b *testing.B) {
	for _, shared := range []bool{false, true} {
		name := "inline"
		if shared {
			name = "shared"
		}
		b.Run(name, func(b *testing.B) {
			for range b.N {
				r := fanOut(b, 500, 1000, 1024, shared)
				b.ReportMetric(float64(r.file)/1e6, "file-MB")
				b.ReportMetric(float64(r.written)/1e6, "written-MB")
				b.ReportMetric(float64(r.pages)/1e6, "page-MB")
				b.ReportMetric(r.load.Seconds(), "load-s")
				b.ReportMetric(float64(r.heap)/1e6, "loaded-MB")
				b.Logf("%s: %s", name, r)
			}
		})
	}
}
