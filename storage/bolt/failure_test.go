package bolt

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	berrors "go.etcd.io/bbolt/errors"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/storage/storetest"
)

// fillUntilFull saves messages of size bytes for client id, one Sync each,
// until a Sync fails. It returns the records whose Sync succeeded (the
// broker would have acknowledged them), the one whose Sync failed, and the
// error.
func fillUntilFull(t *testing.T, s *Store, id string, size int) (acked []*broker.MessageRecord, failed *broker.MessageRecord, err error) {
	t.Helper()
	for i := range uint64(100000) {
		m := storetest.Message(i, size)
		must(t, s.SaveMessage(id, m)) // never fails: it only records the change
		if err := s.Sync(ctxT(t)); err != nil {
			return acked, m, err
		}
		acked = append(acked, m)
	}
	t.Fatal("the store never filled up")
	return nil, nil, nil
}

// checkMessages loads the store and checks it holds exactly want for id.
func checkMessages(t *testing.T, s *Store, id string, want []*broker.MessageRecord) {
	t.Helper()
	snap, err := s.Load(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	got := snap.Messages[id]
	if len(got) != len(want) {
		t.Fatalf("%d messages stored, want %d", len(got), len(want))
	}
	for i := range want {
		if err := storetest.EqualMessage(got[i], want[i]); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
}

// TestMaxSizeFull uses Options.MaxSize as a deterministic full disk: a
// commit that would grow the file fails with bbolt's ErrMaxSizeReached.
// Every Sync waiting for it gets the error, the changes stay pending and
// are retried, nothing acknowledged is lost, and commits recover once
// deletes make room.
func TestMaxSizeFull(t *testing.T) {
	for _, mode := range []SyncMode{SyncBatch, SyncAlways} {
		t.Run(mode.String(), func(t *testing.T) {
			path := tempDB(t)
			s := openT(t, path, &Options{Sync: mode, BatchInterval: time.Millisecond, MaxSize: 512 << 10})
			acked, failed, err := fillUntilFull(t, s, "a", 8000)
			if !errors.Is(err, berrors.ErrMaxSizeReached) || !strings.Contains(err.Error(), path) {
				t.Fatalf("Sync on a full store: %v", err)
			}
			st := s.Stats()
			if st.CommitErrors == 0 || !st.Failing || !errors.Is(st.LastCommitError, berrors.ErrMaxSizeReached) || st.PendingOps != 1 {
				t.Fatalf("stats while full: %+v", st)
			}
			t.Logf("%d messages of 8000 bytes fit in 512 KiB", len(acked))

			// Still full: the failed change is retried, and fails again.
			if err := s.Sync(ctxT(t)); !errors.Is(err, berrors.ErrMaxSizeReached) {
				t.Fatalf("second Sync: %v", err)
			}

			// The broker refuses the publish and forgets the record, and the
			// oldest half of the backlog is acknowledged. The failed save
			// cancels out; the deletes commit, and free pages.
			must(t, s.DeleteMessage("a", failed.Seq))
			half := len(acked) / 2
			for _, m := range acked[:half] {
				must(t, s.DeleteMessage("a", m.Seq))
			}
			must(t, s.Sync(ctxT(t)))
			if st := s.Stats(); st.Failing || st.PendingOps != 0 {
				t.Fatalf("stats after recovery: %+v", st)
			}
			// And there is room again.
			more := storetest.Message(1<<20, 8000)
			must(t, s.SaveMessage("a", more))
			must(t, s.Sync(ctxT(t)))
			want := append(acked[half:], more)
			checkMessages(t, s, "a", want)

			// Restart: everything acknowledged is there.
			must(t, s.Close())
			s = openT(t, path, &Options{Sync: mode, MaxSize: 512 << 10})
			checkMessages(t, s, "a", want)
		})
	}
}

// TestMaxSizeRaisedOnRestart: a store full at Close loses only the changes
// whose Sync failed (Close says so); reopened with a larger MaxSize,
// everything acknowledged is there and writes succeed.
func TestMaxSizeRaisedOnRestart(t *testing.T) {
	path := tempDB(t)
	s := openT(t, path, &Options{MaxSize: 256 << 10, BatchInterval: time.Millisecond})
	acked, _, err := fillUntilFull(t, s, "a", 8000)
	if !errors.Is(err, berrors.ErrMaxSizeReached) {
		t.Fatal(err)
	}
	if err := s.Close(); !errors.Is(err, berrors.ErrMaxSizeReached) || !strings.Contains(err.Error(), "not saved") {
		t.Fatalf("Close of a full store: %v", err)
	}
	s = openT(t, path, &Options{MaxSize: 4 << 20, BatchInterval: time.Millisecond})
	checkMessages(t, s, "a", acked)
	m := storetest.Message(1<<20, 8000)
	must(t, s.SaveMessage("a", m))
	must(t, s.Sync(ctxT(t)))
	checkMessages(t, s, "a", append(acked, m))
}

// TestSyncNoneReportsFailure: SyncNone does not wait, but does not hide a
// failing disk either.
func TestSyncNoneReportsFailure(t *testing.T) {
	s := openT(t, tempDB(t), &Options{Sync: SyncNone, MaxSize: 256 << 10, BatchInterval: time.Millisecond})
	for i := uint64(0); ; i++ {
		must(t, s.SaveMessage("a", storetest.Message(i, 8000)))
		if i%8 == 0 {
			brokertest.Eventually(t, 5*time.Second, "condition", func() bool { st := s.Stats(); return st.PendingOps == 0 || st.Failing })
		}
		if s.Stats().Failing {
			break
		}
	}
	if err := s.Sync(context.Background()); !errors.Is(err, berrors.ErrMaxSizeReached) {
		t.Fatalf("Sync while failing in SyncNone: %v", err)
	}
}
