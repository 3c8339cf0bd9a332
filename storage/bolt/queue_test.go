package bolt

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
)

// TestQueue: entries survive a reopen in Seq order, a delete removes one,
// and a put and delete within one batch write nothing at all.
func TestQueue(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.db")
	s, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for seq := uint64(1); seq <= 5; seq++ {
		if err := s.QueuePut("site", seq, fmt.Appendf(nil, "m%d", seq)); err != nil {
			t.Fatal(err)
		}
	}
	if v, _ := s.QueueGet("site", 1); v != nil {
		t.Fatalf("QueueGet saw an uncommitted entry: %q", v)
	}
	if err := s.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if v, err := s.QueueGet("site", 3); err != nil || string(v) != "m3" {
		t.Fatalf("QueueGet(3) = %q, %v", v, err)
	}
	if err := s.QueueDelete("site", 2); err != nil {
		t.Fatal(err)
	}
	before := s.Stats()
	s.QueuePut("site", 9, []byte("gone"))
	s.QueueDelete("site", 9)
	s.QueueDelete("other", 1) // never stored: no bucket made
	if err := s.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if after := s.Stats(); after.Commits != before.Commits+1 {
		t.Errorf("commits %d -> %d, want one (the delete of 2)", before.Commits, after.Commits)
	}

	s, err = Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var got []string
	err = s.QueueScan("site", func(seq uint64, v []byte) error {
		got = append(got, fmt.Sprintf("%d=%s", seq, v))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != "[1=m1 3=m3 4=m4 5=m5]" {
		t.Errorf("after reopen: %v", got)
	}
	if err := s.QueueScan("other", func(uint64, []byte) error { t.Error("entry in other"); return nil }); err != nil {
		t.Fatal(err)
	}
	if err := Check(path + ".none"); err == nil {
		t.Error("Check of a missing file passed")
	}
}

// TestQueueCheck: a file with queues passes Check.
func TestQueueCheck(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.db")
	s, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.QueuePut("site", 1, []byte("x"))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := Check(path); err != nil {
		t.Fatal(err)
	}
}
