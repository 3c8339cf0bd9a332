package update

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func install(t *testing.T, s *Slots, b []byte, keys []Key) *Verified {
	t.Helper()
	v, err := s.Install(bytes.NewReader(b), keys, "arm64")
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func start(t *testing.T, s *Slots) (string, *Event) {
	t.Helper()
	slot, rb, err := s.Start()
	if err != nil {
		t.Fatal(err)
	}
	return slot, rb
}

// TestSlotsLifecycle: installed, a version goes on trial at the next
// start, is committed, and the next version goes into the other slot; a
// trial version started a second time is rolled back to the committed
// one.
func TestSlotsLifecycle(t *testing.T) {
	key, trusted := testKey(t, "plant")
	s := &Slots{Dir: t.TempDir()}
	if slot, rb := start(t, s); slot != "" || rb != nil {
		t.Fatalf("nothing installed: start %q, %v", slot, rb)
	}
	install(t, s, bundle(t, key, "arm64"), []Key{trusted})
	if got, err := os.ReadFile(s.Binary("a")); err != nil || !bytes.Equal(got, binary) {
		t.Fatalf("slot a's linemq: %v", err)
	}
	if fi, _ := os.Stat(s.Binary("a")); fi.Mode().Perm() != 0o755 {
		t.Errorf("slot a's linemq has mode %v", fi.Mode().Perm())
	}
	if slot, _ := start(t, s); slot != "a" {
		t.Fatalf("first start after install: %q, want the trial in a", slot)
	}
	if err := s.Commit("a"); err != nil {
		t.Fatal(err)
	}
	if slot, _ := start(t, s); slot != "a" {
		t.Fatalf("after the commit: %q", slot)
	}
	st, _ := s.Read()
	if st.Committed != "a" || st.CommittedVersion != "v1.5.0" || st.LastCommit == nil || st.Trial != "" {
		t.Fatalf("state after the commit: %+v", st)
	}

	install(t, s, bundle(t, key, "arm64"), []Key{trusted})
	if slot, _ := start(t, s); slot != "b" {
		t.Fatalf("the next version's trial: %q, want b", slot)
	}
	// It crashed, hung or lost power: the next start rolls it back.
	slot, rb := start(t, s)
	if slot != "a" || rb == nil || !strings.Contains(rb.Reason, "stopped before its trial ended") {
		t.Fatalf("second start of the trial: %q, %+v; want a, rolled back", slot, rb)
	}
	st, _ = s.Read()
	if st.Trial != "" || st.LastRollback == nil || st.Committed != "a" {
		t.Fatalf("state after the rollback: %+v", st)
	}
	if slot, rb := start(t, s); slot != "a" || rb != nil {
		t.Fatalf("after the rollback: %q, %v", slot, rb)
	}
}

// TestSlotsFailReason: a trial that gives up says why, and its rollback
// carries the reason.
func TestSlotsFailReason(t *testing.T) {
	key, trusted := testKey(t, "plant")
	s := &Slots{Dir: t.TempDir()}
	install(t, s, bundle(t, key, "arm64"), []Key{trusted})
	start(t, s)
	if err := s.Fail("b", "x"); err == nil {
		t.Error("Fail of a slot not on trial")
	}
	if err := s.Fail("a", "storage: failed"); err != nil {
		t.Fatal(err)
	}
	slot, rb := start(t, s)
	if slot != "" || rb == nil || rb.Reason != "storage: failed" {
		t.Fatalf("start after Fail: %q, %+v; want the image's, rolled back with the reason", slot, rb)
	}
}

// TestSlotsRefusals: a refused bundle and a second install during a trial
// change nothing.
func TestSlotsRefusals(t *testing.T) {
	key, trusted := testKey(t, "plant")
	other, _ := testKey(t, "other")
	s := &Slots{Dir: t.TempDir()}
	if _, err := s.Install(bytes.NewReader(bundle(t, other, "arm64")), []Key{trusted}, "arm64"); err == nil {
		t.Fatal("a bundle signed by another key was installed")
	}
	good := bundle(t, key, "arm64")
	if _, err := s.Install(bytes.NewReader(good[:len(good)-100]), []Key{trusted}, "arm64"); err == nil {
		t.Fatal("a truncated bundle was installed")
	}
	if _, err := os.Stat(filepath.Join(s.Dir, StateFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("refused bundles wrote a state: %v", err)
	}
	if _, err := os.Stat(filepath.Join(s.Dir, "slots", "a")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("refused bundles left a slot: %v", err)
	}
	install(t, s, good, []Key{trusted})
	if _, err := s.Install(bytes.NewReader(good), []Key{trusted}, "arm64"); err == nil || !strings.Contains(err.Error(), "on trial") {
		t.Errorf("a second install during a trial: %v", err)
	}
}

// TestSlotsPowerCutWhileWriting: a cut before the state is replaced leaves
// a half-written stage or a whole slot the state does not name; either way
// the version in force runs, and the next install starts clean.
func TestSlotsPowerCutWhileWriting(t *testing.T) {
	key, trusted := testKey(t, "plant")
	s := &Slots{Dir: t.TempDir()}
	for _, leftover := range []string{"slots/a.new/linemq", "slots/a/linemq"} {
		p := filepath.Join(s.Dir, leftover)
		os.MkdirAll(filepath.Dir(p), 0o750)
		os.WriteFile(p, []byte("half"), 0o755)
	}
	if slot, rb := start(t, s); slot != "" || rb != nil {
		t.Fatalf("after a cut while writing: %q, %v; want the version in force", slot, rb)
	}
	install(t, s, bundle(t, key, "arm64"), []Key{trusted})
	if got, _ := os.ReadFile(s.Binary("a")); !bytes.Equal(got, binary) {
		t.Error("the install after a cut did not replace the half-written slot")
	}
	if _, err := os.Stat(filepath.Join(s.Dir, "slots", "a.new")); !errors.Is(err, os.ErrNotExist) {
		t.Error("the stage stayed")
	}
}

// TestWatch: a trial is committed after its time of health in a row, and
// given up, with the reason recorded, when its health fails for longer
// than the grace; a failure shorter than the grace restarts the clock.
func TestWatch(t *testing.T) {
	key, trusted := testKey(t, "plant")
	newTrial := func(t *testing.T) *Slots {
		s := &Slots{Dir: t.TempDir()}
		install(t, s, bundle(t, key, "arm64"), []Key{trusted})
		start(t, s)
		return s
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	t.Run("healthy", func(t *testing.T) {
		s := newTrial(t)
		if err := s.Watch(ctx, "a", 50*time.Millisecond, time.Second, 5*time.Millisecond, func() (bool, string) { return true, "" }, nil); err != nil {
			t.Fatal(err)
		}
		if st, _ := s.Read(); st.Committed != "a" {
			t.Errorf("not committed: %+v", st)
		}
	})
	t.Run("failing", func(t *testing.T) {
		s := newTrial(t)
		err := s.Watch(ctx, "a", time.Hour, 50*time.Millisecond, 5*time.Millisecond, func() (bool, string) { return false, "storage: disk full" }, nil)
		var tf *TrialFailed
		if !errors.As(err, &tf) || !strings.Contains(tf.Reason, "storage: disk full") {
			t.Fatalf("err %v", err)
		}
		if st, _ := s.Read(); !strings.Contains(st.TrialFailure, "storage: disk full") || st.Committed != "" {
			t.Errorf("state %+v", st)
		}
	})
	t.Run("a short failure restarts the clock", func(t *testing.T) {
		s := newTrial(t)
		var n atomic.Int32
		var sawFailure atomic.Bool
		err := s.Watch(ctx, "a", 100*time.Millisecond, time.Hour, 5*time.Millisecond, func() (bool, string) {
			if n.Add(1) == 3 {
				sawFailure.Store(true)
				return false, "a blip"
			}
			return true, ""
		}, nil)
		if err != nil || !sawFailure.Load() {
			t.Fatalf("err %v, saw the failure %v", err, sawFailure.Load())
		}
	})
	t.Run("progress", func(t *testing.T) {
		s := newTrial(t)
		var p Progress
		if p.Snapshot(time.Now()).Running {
			t.Fatal("a Progress nobody watches reports a trial")
		}
		var failing atomic.Bool
		c, cc := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			done <- s.Watch(c, "a", time.Hour, time.Hour, 5*time.Millisecond, func() (bool, string) {
				if failing.Load() {
					return false, "storage: disk full"
				}
				return true, ""
			}, &p)
		}()
		until := func(what string, cond func(TrialProgress) bool) {
			t.Helper()
			deadline := time.Now().Add(10 * time.Second)
			for !cond(p.Snapshot(time.Now())) {
				if time.Now().After(deadline) {
					t.Fatalf("%s: %+v", what, p.Snapshot(time.Now()))
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
		until("healthy", func(tp TrialProgress) bool {
			return tp.Running && tp.Length == time.Hour && tp.HealthyFor > 0 && tp.Remaining == time.Hour-tp.HealthyFor
		})
		failing.Store(true)
		until("failing", func(tp TrialProgress) bool {
			return tp.HealthyFor == 0 && tp.Remaining == time.Hour && !tp.FailingSince.IsZero() && tp.Reason == "storage: disk full"
		})
		failing.Store(false)
		until("healthy again", func(tp TrialProgress) bool { return tp.HealthyFor > 0 && tp.FailingSince.IsZero() && tp.Reason == "" })
		cc()
		<-done
		if p.Snapshot(time.Now()).Running {
			t.Error("a trial no longer watched is reported running")
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		s := newTrial(t)
		c, cc := context.WithCancel(ctx)
		cc()
		if err := s.Watch(c, "a", time.Hour, time.Hour, 5*time.Millisecond, func() (bool, string) { return true, "" }, nil); !errors.Is(err, context.Canceled) {
			t.Fatalf("err %v", err)
		}
		if st, _ := s.Read(); st.Trial != "a" {
			t.Errorf("a cancelled watch changed the trial: %+v", st)
		}
	})
}

// TestSlotsStopped: a version stopped on purpose during its trial is tried
// again at its next start; one that gave up is not rescued by its stop.
func TestSlotsStopped(t *testing.T) {
	key, trusted := testKey(t, "plant")
	s := &Slots{Dir: t.TempDir()}
	install(t, s, bundle(t, key, "arm64"), []Key{trusted})
	start(t, s)
	if err := s.Stopped("a"); err != nil {
		t.Fatal(err)
	}
	if slot, rb := start(t, s); slot != "a" || rb != nil {
		t.Fatalf("after a stop during the trial: %q, %v; want the trial again", slot, rb)
	}
	s.Fail("a", "storage: failed")
	s.Stopped("a")
	if slot, rb := start(t, s); slot != "" || rb == nil || rb.Reason != "storage: failed" {
		t.Fatalf("a stop after giving up: %q, %+v; want the rollback", slot, rb)
	}
}

// TestSlotsAbandon: a version installed and not yet started is given up as
// rolled back; one that has started cannot be.
func TestSlotsAbandon(t *testing.T) {
	key, trusted := testKey(t, "plant")
	s := &Slots{Dir: t.TempDir()}
	if err := s.Abandon("nothing to give up"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Install(bytes.NewReader(bundle(t, key, "arm64")), []Key{trusted}, "arm64"); err != nil {
		t.Fatal(err)
	}
	if err := s.Abandon("halted on n1"); err != nil {
		t.Fatal(err)
	}
	st, _ := s.Read()
	if st.Trial != "" || st.LastRollback == nil || st.LastRollback.Version != "v1.5.0" || st.LastRollback.Reason != "halted on n1" {
		t.Fatalf("after Abandon: %+v", st)
	}
	if _, err := s.Install(bytes.NewReader(bundle(t, key, "arm64")), []Key{trusted}, "arm64"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Start(); err != nil {
		t.Fatal(err)
	}
	if err := s.Abandon("too late"); err == nil {
		t.Error("a started trial was abandoned")
	}
}

// TestSlotsImage: a version is committed on top of the image whose linemq
// started its trial. When the root file system is replaced (RAUC on the
// appliance) and carries another linemq, that one runs, not the version
// committed on the old image; rolling the image back brings the committed
// version back. A state written before images were recorded runs on any.
func TestSlotsImage(t *testing.T) {
	key, trusted := testKey(t, "plant")
	dir := t.TempDir()
	onImage := func(image string) *Slots { return &Slots{Dir: dir, Image: image} }
	install(t, onImage("v1.4.0"), bundle(t, key, "arm64"), []Key{trusted})
	if slot, _ := start(t, onImage("v1.4.0")); slot != "a" {
		t.Fatalf("the trial: %q", slot)
	}
	// The trial version itself commits, knowing the image from ImageEnv.
	if err := onImage("v1.4.0").Commit("a"); err != nil {
		t.Fatal(err)
	}
	st, _ := onImage("").Read()
	if st.CommittedImage != "v1.4.0" {
		t.Fatalf("committed on %q, want v1.4.0", st.CommittedImage)
	}
	if slot, _ := start(t, onImage("v1.4.0")); slot != "a" {
		t.Fatalf("on its own image the committed version runs: %q", slot)
	}
	// A new root file system with linemq v1.6.0: the image's runs.
	if slot, rb := start(t, onImage("v1.6.0")); slot != "" || rb != nil {
		t.Fatalf("on another image: %q, %v; want the image's linemq", slot, rb)
	}
	if st, _ := onImage("").Read(); st.Committed != "a" || st.OnImage("v1.6.0") || !st.OnImage("v1.4.0") {
		t.Fatalf("the committed version's record changed: %+v", st)
	} else if got, want := st.InForce("v1.6.0"), "the image's linemq v1.6.0 (v1.5.0 in slot a was committed on image v1.4.0)"; got != want {
		t.Fatalf("in force on another image: %q, want %q", got, want)
	} else if got := st.InForce("v1.4.0"); got != "v1.5.0 (slot a)" {
		t.Fatalf("in force on its own image: %q", got)
	}
	// The image update rolled back: the version committed on it is back.
	if slot, _ := start(t, onImage("v1.4.0")); slot != "a" {
		t.Fatalf("back on v1.4.0: %q, want a", slot)
	}
	// Unknown on either side: run it, as before images were recorded.
	if slot, _ := start(t, onImage("")); slot != "a" {
		t.Fatalf("image unknown: %q", slot)
	}
	st, _ = onImage("").Read()
	st.CommittedImage = ""
	b, _ := json.Marshal(st)
	writeState(t, dir, b)
	if slot, _ := start(t, onImage("v1.6.0")); slot != "a" {
		t.Fatalf("a state without committed_image on another image: %q, want a", slot)
	}
}

func writeState(t *testing.T, dir string, b []byte) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, StateFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
}
