package update

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/linemq/linemq/internal/durable"
)

// SlotEnv is the environment variable a slot's linemq is started with: the
// slot's name. It tells the program it is the installed version (so it
// does not look for another to start) and which slot it runs from.
const SlotEnv = "LINEMQ_SLOT"

// ImageEnv carries the version of the root file system's own linemq (the
// program systemd starts) to the installed versions it starts, and on to
// the ones they restart into: see Slots.Image.
const ImageEnv = "LINEMQ_IMAGE_VERSION"

// Dir is the update directory's name in the data directory.
const Dir = "update"

// StateFile is the slots' state, in the update directory.
const StateFile = "state.json"

// Slots is linemq's A/B installation in an update directory on the data
// partition (dir/slots/a, dir/slots/b, dir/state.json): one slot holds
// the committed version (or neither does, and the image's linemq runs),
// the other takes a new version, first on trial.
type Slots struct {
	Dir string
	// Image is the version of the root file system's own linemq, or ""
	// when it is not known. A version is committed on top of one image:
	// once the root file system carries another linemq (the whole image
	// was updated, by RAUC on the appliance), that one runs instead of
	// the committed version, which comes back only if the image it was
	// committed on does (the image update was rolled back).
	Image string
	// Now is the clock; nil is time.Now.
	Now func() time.Time
}

// State is what the slots hold and what happened last.
type State struct {
	// Committed is the slot of the version in force ("a" or "b"), or ""
	// for the image's own linemq.
	Committed        string `json:"committed,omitempty"`
	CommittedVersion string `json:"committed_version,omitempty"`
	// CommittedImage is the image's linemq the committed version was
	// tried and committed on (Slots.Image); "" runs it on any image.
	CommittedImage string `json:"committed_image,omitempty"`
	// Trial is the slot of a version installed and not yet committed.
	Trial        string    `json:"trial,omitempty"`
	TrialVersion string    `json:"trial_version,omitempty"`
	TrialSince   time.Time `json:"trial_since,omitzero"`
	// TrialStarts counts how often the trial version was started: a second
	// start means the first ended before its trial did.
	TrialStarts int `json:"trial_starts,omitempty"`
	// TrialImage is the image's linemq the trial started on.
	TrialImage string `json:"trial_image,omitempty"`
	// TrialFailure is why the trial version gave up, written by it before
	// it exits (a failed health check); empty for a crash or a hang.
	TrialFailure string `json:"trial_failure,omitempty"`
	// LastCommit and LastRollback are the outcome of the last trials.
	LastCommit   *Event `json:"last_commit,omitempty"`
	LastRollback *Event `json:"last_rollback,omitempty"`
}

// Event is a commit or a rollback.
type Event struct {
	At      time.Time `json:"at"`
	Version string    `json:"version"`
	Reason  string    `json:"reason,omitempty"`
}

func (s *Slots) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// Binary is the path of slot's linemq.
func (s *Slots) Binary(slot string) string { return filepath.Join(s.Dir, "slots", slot, "linemq") }

// Read returns the state; an update directory without one is the empty
// State (the image's linemq, nothing on trial).
func (s *Slots) Read() (*State, error) {
	b, err := os.ReadFile(filepath.Join(s.Dir, StateFile))
	if errors.Is(err, fs.ErrNotExist) {
		return &State{}, nil
	}
	if err != nil {
		return nil, err
	}
	var st State
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(s.Dir, StateFile), err)
	}
	return &st, nil
}

// write replaces the state durably: a new file beside it, synced, renamed
// over it, the directory synced. A power cut leaves the old state or the
// new one.
func (s *Slots) write(st *State) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	return durable.WriteFile(filepath.Join(s.Dir, StateFile), append(b, '\n'), 0o640)
}

// PendingError is Install's answer while a version is on trial.
type PendingError struct {
	Version string
	Since   time.Time
}

func (e *PendingError) Error() string {
	return fmt.Sprintf("version %s is on trial since %s: wait for it to be committed or rolled back",
		e.Version, e.Since.Format(time.RFC3339))
}

// Install verifies the bundle read from r against keys and arch and puts
// it into the slot the committed version is not in, as the version on
// trial from the next start. A bundle that is refused, or a write that
// fails, leaves the slots as they were; so does a power cut at any point,
// the state being replaced last. A trial already pending is an error:
// its outcome must be known before another version goes on trial.
func (s *Slots) Install(r io.Reader, keys []Key, arch string) (*Verified, error) {
	st, err := s.Read()
	if err != nil {
		return nil, err
	}
	if st.Trial != "" {
		return nil, &PendingError{Version: st.TrialVersion, Since: st.TrialSince}
	}
	slot := "a"
	if st.Committed == "a" {
		slot = "b"
	}
	final := filepath.Join(s.Dir, "slots", slot)
	stage := final + ".new"
	if err := os.RemoveAll(stage); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(stage, 0o750); err != nil {
		return nil, err
	}
	var files []*os.File
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	v, err := Read(r, keys, arch, func(f File) (io.Writer, error) {
		out, err := os.OpenFile(filepath.Join(stage, f.Name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, os.FileMode(f.Mode))
		if err != nil {
			return nil, err
		}
		files = append(files, out)
		return out, nil
	})
	if err == nil {
		for _, f := range files {
			if err = f.Sync(); err != nil {
				break
			}
		}
	}
	if err != nil {
		os.RemoveAll(stage)
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(stage, "linemq")); err != nil {
		os.RemoveAll(stage)
		return nil, &Error{Reason: "it holds no linemq"}
	}
	if err := durable.SyncDir(stage); err != nil {
		return nil, err
	}
	if err := os.RemoveAll(final); err != nil {
		return nil, err
	}
	if err := os.Rename(stage, final); err != nil {
		return nil, err
	}
	if err := durable.SyncDir(filepath.Dir(final)); err != nil {
		return nil, err
	}
	st.Trial, st.TrialVersion, st.TrialSince = slot, v.Manifest.Version, s.now().UTC()
	st.TrialStarts, st.TrialFailure, st.TrialImage = 0, "", ""
	if err := s.write(st); err != nil {
		return nil, err
	}
	return v, nil
}

// Start decides, as linemq starts, which program is to run: the trial
// version on its first start, the committed one otherwise, or the image's
// own ("" with no error). A trial version starting a second time ended
// before its trial did (it crashed, the watchdog ended it, the power was
// cut, or it gave up on a failed health check): it is rolled back, and
// the returned event says so. The state is on disk before Start returns,
// so a power cut right after still counts the start.
func (s *Slots) Start() (slot string, rollback *Event, err error) {
	st, err := s.Read()
	if err != nil {
		return "", nil, err
	}
	if st.Trial != "" {
		if st.TrialStarts == 0 {
			st.TrialStarts, st.TrialImage = 1, s.Image
			if err := s.write(st); err != nil {
				return "", nil, err
			}
			return st.Trial, nil, nil
		}
		reason := st.TrialFailure
		if reason == "" {
			reason = "it stopped before its trial ended: a crash, a hang its watchdog ended, or a power cut"
		}
		rollback = &Event{At: s.now().UTC(), Version: st.TrialVersion, Reason: reason}
		st.LastRollback = rollback
		st.Trial, st.TrialVersion, st.TrialSince, st.TrialStarts, st.TrialFailure, st.TrialImage = "", "", time.Time{}, 0, "", ""
		if err := s.write(st); err != nil {
			return "", nil, err
		}
	}
	if st.Committed != "" && !st.OnImage(s.Image) {
		return "", rollback, nil
	}
	if st.Committed != "" {
		if _, err := os.Stat(s.Binary(st.Committed)); err != nil {
			return "", rollback, fmt.Errorf("the committed version %s: %w", st.CommittedVersion, err)
		}
	}
	return st.Committed, rollback, nil
}

// OnImage reports whether the committed version is to run on the image
// whose linemq is image: it was committed on that image, or either is
// unknown.
func (st *State) OnImage(image string) bool {
	return st.CommittedImage == "" || image == "" || st.CommittedImage == image
}

// InForce says, in words, which linemq runs after a restart on the image
// whose linemq is image: the committed version and its slot, or the
// image's own (and why, when a version committed on another image is
// passed over).
func (st *State) InForce(image string) string {
	switch {
	case st.Committed == "":
		return "the image's linemq"
	case st.OnImage(image):
		return fmt.Sprintf("%s (slot %s)", st.CommittedVersion, st.Committed)
	default:
		return fmt.Sprintf("the image's linemq %s (%s in slot %s was committed on image %s)", image, st.CommittedVersion, st.Committed, st.CommittedImage)
	}
}

// Commit makes the version on trial in slot the one in force.
func (s *Slots) Commit(slot string) error {
	st, err := s.Read()
	if err != nil {
		return err
	}
	if st.Trial != slot {
		return fmt.Errorf("slot %s is not on trial (the state says %q)", slot, st.Trial)
	}
	st.Committed, st.CommittedVersion, st.CommittedImage = st.Trial, st.TrialVersion, st.TrialImage
	st.LastCommit = &Event{At: s.now().UTC(), Version: st.TrialVersion}
	st.Trial, st.TrialVersion, st.TrialSince, st.TrialStarts, st.TrialFailure, st.TrialImage = "", "", time.Time{}, 0, "", ""
	return s.write(st)
}

// Stopped records that the version on trial in slot was stopped on
// purpose (systemctl stop, a reboot) before its trial ended: that is no
// failure, so its next start begins the trial again instead of rolling it
// back. A power cut or a kill leaves no such record.
func (s *Slots) Stopped(slot string) error {
	st, err := s.Read()
	if err != nil {
		return err
	}
	if st.Trial != slot || st.TrialFailure != "" {
		return nil
	}
	st.TrialStarts = 0
	return s.write(st)
}

// Abandon gives up the version on trial before it has started (the line's
// update of that version was halted on another gateway): it is recorded
// as rolled back with reason, and its slot is free for the next install.
func (s *Slots) Abandon(reason string) error {
	st, err := s.Read()
	if err != nil {
		return err
	}
	if st.Trial == "" {
		return nil
	}
	if st.TrialStarts > 0 {
		return fmt.Errorf("version %s has started its trial already", st.TrialVersion)
	}
	st.LastRollback = &Event{At: s.now().UTC(), Version: st.TrialVersion, Reason: reason}
	st.Trial, st.TrialVersion, st.TrialSince, st.TrialStarts, st.TrialFailure, st.TrialImage = "", "", time.Time{}, 0, "", ""
	return s.write(st)
}

// Fail records why the version on trial in slot gives up; its next start
// rolls it back with that reason.
func (s *Slots) Fail(slot, reason string) error {
	st, err := s.Read()
	if err != nil {
		return err
	}
	if st.Trial != slot {
		return fmt.Errorf("slot %s is not on trial (the state says %q)", slot, st.Trial)
	}
	st.TrialFailure = reason
	return s.write(st)
}
