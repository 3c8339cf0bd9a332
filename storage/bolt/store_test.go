package bolt

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/storage/storetest"
)

var modes = []SyncMode{SyncBatch, SyncAlways, SyncNone}

// openT opens a store at path and closes it when the test ends.
func openT(t testing.TB, path string, opts *Options) *Store {
	t.Helper()
	s, err := Open(path, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func tempDB(t testing.TB) string { return filepath.Join(t.TempDir(), "linemq.db") }

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestStoreSuite(t *testing.T) {
	for _, m := range modes {
		t.Run(m.String(), func(t *testing.T) {
			t.Parallel()
			opts := &Options{Sync: m, BatchInterval: 2 * time.Millisecond}
			open := func(t *testing.T) broker.Store { return openT(t, tempDB(t), opts) }
			storetest.Run(t, open)
			storetest.RunRestart(t, open, func(t *testing.T, s broker.Store) broker.Store {
				must(t, s.(*Store).Close())
				return openT(t, s.(*Store).Path(), opts)
			})
		})
	}
}

// The suite's optional interface for stores that keep subscriptions apart.
var _ storetest.SubscriptionStore = (*Store)(nil)

func TestParseSyncMode(t *testing.T) {
	for _, m := range modes {
		got, err := ParseSyncMode(m.String())
		if err != nil || got != m {
			t.Errorf("ParseSyncMode(%q) = %v, %v", m, got, err)
		}
		var u SyncMode
		text, _ := m.MarshalText()
		if err := u.UnmarshalText(text); err != nil || u != m {
			t.Errorf("text round trip of %v: %v, %v", m, u, err)
		}
	}
	if m, err := ParseSyncMode(""); err != nil || m != SyncBatch {
		t.Errorf(`ParseSyncMode("") = %v, %v; want batch`, m, err)
	}
	if _, err := ParseSyncMode("fsync"); err == nil {
		t.Error("ParseSyncMode(fsync): no error")
	}
}

// TestRestart closes the store and opens the file again, in every mode:
// everything written before Close is back, including changes never synced
// (Close commits them).
func TestRestart(t *testing.T) {
	for _, m := range modes {
		t.Run(m.String(), func(t *testing.T) {
			path := tempDB(t)
			opts := &Options{Sync: m, BatchInterval: time.Hour} // nothing commits by itself
			s := openT(t, path, opts)
			sess := storetest.Session("a")
			must(t, s.SaveSession(sess))
			for _, sub := range sess.Subscriptions {
				must(t, s.SaveSubscription("a", sub))
			}
			must(t, s.SaveSubscription("a", broker.SubscriptionRecord{Filter: "gone"}))
			must(t, s.DeleteSubscription("a", "gone"))
			saved := map[uint64]*broker.MessageRecord{}
			for i := range uint64(20) {
				saved[i] = storetest.Message(i, 300)
				must(t, s.SaveMessage("a", saved[i]))
			}
			must(t, s.DeleteMessage("a", 3))
			shared := broker.NewMessage("fan/out", []byte("once"), 2, false)
			for i := range uint64(3) {
				saved[100+i] = &broker.MessageRecord{Seq: 100 + i, MessageID: 77, Message: shared, QoS: 2}
				must(t, s.SaveMessage("a", saved[100+i]))
			}
			must(t, s.SetInbound("a", 42, true))
			ret := broker.NewMessage("status", []byte("up"), 1, true)
			must(t, s.SaveRetained(ret))
			must(t, s.Close())
			if err := s.Close(); err != nil {
				t.Fatalf("second Close: %v", err)
			}
			if err := s.SaveSession(sess); !errors.Is(err, ErrClosed) {
				t.Fatalf("write after Close: %v, want ErrClosed", err)
			}
			if err := s.Sync(context.Background()); !errors.Is(err, ErrClosed) {
				t.Fatalf("Sync after Close: %v, want ErrClosed", err)
			}

			s = openT(t, path, opts)
			snap, err := s.Load(ctxT(t))
			if err != nil {
				t.Fatal(err)
			}
			if len(snap.Sessions) != 1 {
				t.Fatalf("after restart: %s", storetest.Describe(snap))
			}
			if err := storetest.EqualSession(snap.Sessions[0], sess); err != nil {
				t.Fatal(err)
			}
			if n := len(snap.Messages["a"]); n != 22 {
				t.Fatalf("%d messages after restart, want 22", n)
			}
			if ms := snap.Messages["a"]; ms[19].Message != ms[21].Message {
				t.Fatal("the records of a shared message do not share its *Message")
			}
			for _, m := range snap.Messages["a"] {
				if err := storetest.EqualMessage(m, saved[m.Seq]); err != nil {
					t.Fatal(err)
				}
			}
			if len(snap.Inbound["a"]) != 1 || snap.Inbound["a"][0] != 42 || len(snap.Retained) != 1 ||
				snap.Retained[0].Topic != "status" || string(snap.Retained[0].Payload) != "up" {
				t.Fatalf("after restart: %s", storetest.Describe(snap))
			}
		})
	}
}

// TestCollapse: a message saved and deleted within one batch never reaches
// the disk, while one committed earlier costs only its delete.
func TestCollapse(t *testing.T) {
	s := openT(t, tempDB(t), &Options{BatchInterval: time.Hour})
	ctx := ctxT(t)
	for i := range uint64(100) {
		must(t, s.SaveMessage("a", storetest.Message(i, 300)))
		must(t, s.DeleteMessage("a", i))
	}
	if st := s.Stats(); st.PendingOps != 100 || st.Collapsed != 100 {
		t.Fatalf("before flush: PendingOps %d (want 100 deletes), Collapsed %d (want 100)", st.PendingOps, st.Collapsed)
	}
	must(t, s.flush(ctx))
	st := s.Stats()
	if st.BytesWritten != 0 || st.PageBytesWritten != 0 || st.Commits != 0 {
		t.Fatalf("save+delete in one batch wrote: %+v", st)
	}

	// Committed first, then updated and deleted in the next batch: only the
	// delete (8 key bytes) is written.
	must(t, s.SaveMessage("a", storetest.Message(7, 300)))
	must(t, s.flush(ctx))
	st = s.Stats()
	if st.Commits != 1 || st.BytesWritten < 300 {
		t.Fatalf("save: %+v", st)
	}
	m := storetest.Message(7, 300)
	m.Sent = true
	must(t, s.SaveMessage("a", m))
	must(t, s.DeleteMessage("a", 7))
	must(t, s.flush(ctx))
	st2 := s.Stats()
	if st2.Commits != 2 || st2.BytesWritten-st.BytesWritten != 8 {
		t.Fatalf("update+delete of a committed message wrote %d bytes in %d commits, want 8 in 1",
			st2.BytesWritten-st.BytesWritten, st2.Commits-st.Commits)
	}
	if snap, err := s.Load(ctx); err != nil || len(snap.Messages["a"]) != 0 {
		t.Fatalf("Load: %v, %v", snap, err)
	}
}

// TestDeleteSessionCollapse: DeleteSession replaces the session's pending
// changes, and removes what was committed.
func TestDeleteSessionCollapse(t *testing.T) {
	s := openT(t, tempDB(t), &Options{BatchInterval: time.Hour})
	ctx := ctxT(t)
	must(t, s.SaveSession(storetest.Session("gone")))
	for i := range uint64(10) {
		must(t, s.SaveMessage("gone", storetest.Message(i, 100)))
	}
	must(t, s.SetInbound("gone", 1, true))
	must(t, s.DeleteSession("gone"))
	if st := s.Stats(); st.PendingOps != 1 || st.Collapsed != 12 {
		t.Fatalf("PendingOps %d (want 1), Collapsed %d (want 12)", st.PendingOps, st.Collapsed)
	}
	must(t, s.flush(ctx))
	if st := s.Stats(); st.Commits != 0 {
		t.Fatalf("a session created and deleted in one batch cost %d commits", st.Commits)
	}
}

// TestSyncModes checks when Sync returns in each mode, with a batch
// interval so long that only Sync (or Close) can cause a commit.
func TestSyncModes(t *testing.T) {
	t.Run("batch waits for the batch", func(t *testing.T) {
		s := openT(t, tempDB(t), &Options{Sync: SyncBatch, BatchInterval: time.Hour})
		must(t, s.SaveMessage("a", storetest.Message(1, 10)))
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		if err := s.Sync(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Sync = %v, want to wait out its context", err)
		}
		if st := s.Stats(); st.Commits != 0 || st.PendingOps != 1 {
			t.Fatalf("committed before the interval: %+v", st)
		}
	})
	t.Run("batch commits after the interval", func(t *testing.T) {
		s := openT(t, tempDB(t), &Options{Sync: SyncBatch, BatchInterval: 20 * time.Millisecond})
		must(t, s.SaveMessage("a", storetest.Message(1, 10)))
		start := time.Now()
		must(t, s.Sync(ctxT(t)))
		if d := time.Since(start); d < 15*time.Millisecond {
			t.Fatalf("Sync returned after %v, before the batch interval", d)
		}
		if st := s.Stats(); st.Commits != 1 {
			t.Fatalf("Commits = %d", st.Commits)
		}
	})
	t.Run("nothing pending returns at once", func(t *testing.T) {
		s := openT(t, tempDB(t), &Options{Sync: SyncBatch, BatchInterval: time.Hour})
		must(t, s.SaveMessage("a", storetest.Message(1, 10)))
		must(t, s.flush(ctxT(t)))
		// A Sync that waited for a batch would wait an hour.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		must(t, s.Sync(ctx))
	})
	t.Run("always commits at once", func(t *testing.T) {
		s := openT(t, tempDB(t), &Options{Sync: SyncAlways, BatchInterval: time.Hour})
		for i := range uint64(3) {
			must(t, s.SaveMessage("a", storetest.Message(i, 10)))
			must(t, s.Sync(ctxT(t)))
			if st := s.Stats(); st.Commits != i+1 || st.PendingOps != 0 {
				t.Fatalf("after Sync %d: %+v", i, st)
			}
		}
	})
	t.Run("always without Sync waits for the interval", func(t *testing.T) {
		s := openT(t, tempDB(t), &Options{Sync: SyncAlways, BatchInterval: 20 * time.Millisecond})
		must(t, s.SaveMessage("a", storetest.Message(1, 10)))
		brokertest.Eventually(t, 5*time.Second, "condition", func() bool { return s.Stats().Commits == 1 })
	})
	t.Run("none does not wait", func(t *testing.T) {
		path := tempDB(t)
		s := openT(t, path, &Options{Sync: SyncNone, BatchInterval: time.Hour})
		if !s.db.NoSync {
			t.Fatal("SyncNone did not set bbolt's NoSync")
		}
		must(t, s.SaveMessage("a", storetest.Message(1, 10)))
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // would fail any Sync that waited
		must(t, s.Sync(ctx))
		if st := s.Stats(); st.Commits != 0 {
			t.Fatalf("Sync committed in SyncNone: %+v", st)
		}
		must(t, s.Close()) // commits and fsyncs
		s = openT(t, path, nil)
		snap, err := s.Load(ctxT(t))
		if err != nil || len(snap.Messages["a"]) != 1 {
			t.Fatalf("after close in SyncNone: %v %v", snap, err)
		}
	})
	t.Run("none commits on the interval", func(t *testing.T) {
		s := openT(t, tempDB(t), &Options{Sync: SyncNone, BatchInterval: 5 * time.Millisecond})
		must(t, s.SaveMessage("a", storetest.Message(1, 10)))
		brokertest.Eventually(t, 5*time.Second, "condition", func() bool { return s.Stats().Commits == 1 })
	})
}

// TestSyncWaitsForItsOwnChanges: a Sync called while a commit is under way
// waits for the commit holding its changes, not an earlier one.
func TestSyncWaitsForItsOwnChanges(t *testing.T) {
	s := openT(t, tempDB(t), &Options{Sync: SyncAlways, BatchInterval: time.Hour})
	ctx := ctxT(t)
	done := make(chan error, 200)
	for i := range uint64(200) {
		must(t, s.SaveMessage("a", storetest.Message(i, 1000)))
		go func() { done <- s.Sync(ctx) }()
	}
	for range 200 {
		must(t, <-done)
	}
	// Every Sync returned: all 200 are durable, and the Syncs shared commits.
	snap, err := s.Load(ctx)
	if err != nil || len(snap.Messages["a"]) != 200 {
		t.Fatalf("Load: %d messages, %v", len(snap.Messages["a"]), err)
	}
	if c := s.Stats().Commits; c > 200 {
		t.Fatalf("%d commits for 200 Syncs", c)
	}
}

func TestRefusedWrites(t *testing.T) {
	s := openT(t, tempDB(t), nil)
	long := strings.Repeat("x", 40000)
	if err := s.SaveMessage(long, storetest.Message(1, 1)); !errors.Is(err, ErrKeyTooLarge) {
		t.Errorf("long client id: %v", err)
	}
	if err := s.SaveRetained(broker.NewMessage(long, []byte("x"), 0, true)); !errors.Is(err, ErrKeyTooLarge) {
		t.Errorf("long topic: %v", err)
	}
	if err := s.SaveSession(&broker.SessionRecord{}); !errors.Is(err, ErrEmptyKey) {
		t.Errorf("empty client id: %v", err)
	}
	if err := s.SaveMessage("a", &broker.MessageRecord{Seq: 1}); err == nil {
		t.Error("message record without a message: no error")
	}
	// Nothing refused reached the batch, so the store still works.
	must(t, s.SaveMessage("a", storetest.Message(1, 1)))
	must(t, s.Sync(ctxT(t)))
}

func TestOptionsValidate(t *testing.T) {
	for _, o := range []Options{{Sync: 9}, {BatchInterval: -1}, {MaxSize: -1}} {
		if _, err := Open(tempDB(t), &o); err == nil {
			t.Errorf("Open(%+v): no error", o)
		}
	}
}

// TestLocked: a second Open of the same file fails after the lock timeout
// with ErrLocked, naming the file.
func TestLocked(t *testing.T) {
	path := tempDB(t)
	openT(t, path, nil)
	_, err := Open(path, nil)
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), path) {
		t.Fatalf("second Open: %v", err)
	}
	if err := Check(path); !errors.Is(err, ErrLocked) {
		t.Fatalf("Check of an open database: %v", err)
	}
}

func TestStatsFileSize(t *testing.T) {
	s := openT(t, tempDB(t), nil)
	fi, err := os.Stat(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Stats().FileSize; got != fi.Size() || got == 0 {
		t.Fatalf("FileSize %d, file is %d", got, fi.Size())
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestStoreID: a file keeps its identity across Opens; another file, as
// a gateway whose data directory was lost would make, has another.
func TestStoreID(t *testing.T) {
	dir := t.TempDir()
	open := func(name string) string {
		s, err := Open(filepath.Join(dir, name), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		return s.ID()
	}
	first := open("a.db")
	if len(first) < 16 {
		t.Fatalf("ID %q: too short to be unique", first)
	}
	if again := open("a.db"); again != first {
		t.Fatalf("ID changed across Opens: %q, then %q", first, again)
	}
	if other := open("b.db"); other == first {
		t.Fatalf("two files share the ID %q", first)
	}
}

// TestCommitDoesNotWaitForTheInterval: Commit commits what is pending at
// once, where Sync waits for the batch interval (here an hour).
func TestCommitDoesNotWaitForTheInterval(t *testing.T) {
	s := openT(t, tempDB(t), &Options{BatchInterval: time.Hour})
	if err := s.SaveSession(&broker.SessionRecord{ClientID: "c", ExpiryInterval: 60}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := s.Sync(ctx); err == nil {
		t.Fatal("Sync returned before the batch interval: nothing to compare Commit with")
	}
	if err := s.Commit(ctxT(t)); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	if err := s.Sync(ctxT(t)); err != nil {
		t.Fatalf("Sync after Commit: %v", err)
	}
}
