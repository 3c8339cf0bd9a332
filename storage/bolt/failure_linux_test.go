//go:build linux

package bolt

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/linemq/linemq/broker/brokertest"
)

// TestTmpfsFull fills a real, size-limited file system (tmpfs) to ENOSPC,
// then frees space by removing a ballast file: the failed changes, kept
// pending, commit, and nothing is lost. It needs root (mount); without it,
// it skips.
func TestTmpfsFull(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=2m"); err != nil {
		t.Skipf("cannot mount a 2 MiB tmpfs at %s (%v): needs root or CAP_SYS_ADMIN; TestMaxSizeFull covers the same logic", dir, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	// Ballast leaves the database about 700 KiB.
	ballast := filepath.Join(dir, "ballast")
	must(t, os.WriteFile(ballast, make([]byte, 1300<<10), 0o600))
	path := filepath.Join(dir, "linemq.db")
	s := openT(t, path, &Options{BatchInterval: time.Millisecond})
	acked, failed, err := fillUntilFull(t, s, "a", 8000)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Sync on a full tmpfs: %v", err)
	}
	t.Logf("%d messages acknowledged before ENOSPC: %v", len(acked), err)
	if st := s.Stats(); !st.Failing || st.PendingOps == 0 {
		t.Fatalf("stats while full: %+v", st)
	}

	// Space comes back: the pending change is retried and commits.
	must(t, os.Remove(ballast))
	brokertest.Eventually(t, 5*time.Second, "condition", func() bool { return !s.Stats().Failing })
	must(t, s.Sync(ctxT(t)))
	want := append(acked, failed)
	checkMessages(t, s, "a", want)
	must(t, s.Close())
	if err := Check(path); err != nil {
		t.Fatalf("Check after ENOSPC: %v", err)
	}
	s = openT(t, path, nil)
	checkMessages(t, s, "a", want)
}
