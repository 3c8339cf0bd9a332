package provision

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/linemq/linemq/internal/durable"
)

// StatusFile is the name, in the configuration directory, of the outcome
// of the last set applied or refused.
const StatusFile = "provision-status.json"

// Status is the outcome of the last set, for the gateway's page, health
// and LED.
type Status struct {
	At       time.Time `json:"at"`
	Applied  bool      `json:"applied"`
	Files    []string  `json:"files"`              // the set's names of its files
	Problems []string  `json:"problems,omitempty"` // why it was refused
}

// ReadStatus reads the status in the configuration directory conf; a
// directory without one gives nil.
func ReadStatus(conf string) (*Status, error) {
	b, err := os.ReadFile(filepath.Join(conf, StatusFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var s Status
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", StatusFile, err)
	}
	return &s, nil
}

// Options adjust Apply.
type Options struct {
	// Trial, when set, is asked last whether a gateway can start with the
	// staged configuration directory (its /etc/linemq is stage): it binds
	// the listeners the file names, for example. An error refuses the set.
	Trial func(stage string) error
	// Group, when the process may change ownership, owns the applied
	// files (root keeps them): the group the daemon runs as. Default
	// "linemq"; a group that does not exist is left out.
	Group string
	// Now is the clock of the status. Default time.Now.
	Now func() time.Time
}

// Apply checks the set in boot against the configuration directory conf
// and, when it holds, makes it conf's content at once. A boot partition
// without a set changes nothing and returns (nil, nil). A refused set
// changes nothing in conf; its problems are returned as *Error, and
// written to linemq-error.txt in boot and to the status. An applied set's
// files are deleted from boot, and linemq-applied.txt there says what was
// applied.
func Apply(boot, conf string, o Options) (*Status, error) {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Group == "" {
		o.Group = "linemq"
	}
	if err := recoverSwap(conf); err != nil {
		return nil, err
	}
	stage := conf + ".new"
	if err := os.RemoveAll(stage); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(stage, 0o750); err != nil {
		return nil, err
	}
	set, problems, err := Verify(boot, conf, stage, o.Trial)
	if err != nil || (len(set.Files) == 0 && len(problems) == 0) {
		os.RemoveAll(stage)
		return nil, err
	}
	st := &Status{At: o.Now().UTC()}
	for _, f := range set.Files {
		st.Files = append(st.Files, f.Name)
	}
	if len(problems) > 0 {
		os.RemoveAll(stage)
		for _, p := range problems {
			st.Problems = append(st.Problems, p.String())
		}
		refusal := &Error{Problems: problems}
		report := fmt.Sprintf("linemq refused the provisioning set (%s); nothing was changed:\n\n%s\n\nFix the files named and put them back.\n",
			st.At.Format("2006-01-02 15:04:05 UTC"), strings.Join(st.Problems, "\n"))
		os.WriteFile(filepath.Join(boot, "linemq-error.txt"), []byte(report), 0o644)
		os.Remove(filepath.Join(boot, "linemq-applied.txt"))
		if err := writeStatus(conf, st); err != nil {
			return st, errors.Join(refusal, err)
		}
		return st, refusal
	}

	// The stage holds the staged configuration with its files mode 0600;
	// now the modes and owners they keep, then the swap.
	gid := groupID(o.Group)
	if err := finish(stage, gid); err != nil {
		os.RemoveAll(stage)
		return nil, err
	}
	st.Applied = true
	if err := writeStatusIn(stage, st, gid); err != nil {
		os.RemoveAll(stage)
		return nil, err
	}
	if err := syncTree(stage); err != nil {
		os.RemoveAll(stage)
		return nil, err
	}
	if err := swap(conf, stage); err != nil {
		return nil, err
	}
	// Only now, with the new directory durable, leave the boot
	// partition: a power cut before this point finds the set there again
	// and applies it again, which changes nothing.
	var removed []error
	for _, f := range set.Files {
		removed = append(removed, os.Remove(filepath.Join(boot, filepath.FromSlash(f.Name))))
	}
	removeEmptyDirs(filepath.Join(boot, Folder))
	os.Remove(filepath.Join(boot, "linemq-error.txt"))
	os.Remove(filepath.Join(boot, ConfigFile+".rejected"))
	note := fmt.Sprintf("linemq applied its provisioning set %s; the files are kept on the data partition and were removed from here:\n%s\n",
		st.At.Format("2006-01-02 15:04:05 UTC"), strings.Join(st.Files, "\n"))
	removed = append(removed, os.WriteFile(filepath.Join(boot, "linemq-applied.txt"), []byte(note), 0o644))
	syncDir(boot)
	if err := errors.Join(removed...); err != nil {
		return st, fmt.Errorf("provisioning set applied, but not all of it left the boot partition: %w", err)
	}
	return st, nil
}

// Verify reads the set in boot and checks it against the configuration
// directory conf, staging it in stage (an empty directory); trial, when
// set, is asked last, if the rest holds. A boot partition without a set
// gives an empty Set and no problem. Apply is Verify, then the swap.
func Verify(boot, conf, stage string, trial func(stage string) error) (*Set, []Problem, error) {
	set, problems, err := Read(boot)
	if err != nil || (len(set.Files) == 0 && len(problems) == 0) {
		return set, problems, err
	}
	problems = append(problems, Check(set, conf, stage)...)
	if len(problems) == 0 && trial != nil {
		if err := trial(stage); err != nil {
			problems = append(problems, Problem{Msg: "a gateway could not start with it: " + err.Error()})
		}
	}
	return set, problems, nil
}

// writeStatus records st in conf (a refusal: conf is otherwise
// unchanged). It is written beside and renamed over the old status.
func writeStatus(conf string, st *Status) error {
	if err := os.MkdirAll(conf, 0o750); err != nil {
		return err
	}
	return writeStatusIn(conf, st, -1)
}

func writeStatusIn(dir string, st *Status, gid int) error {
	b, _ := json.MarshalIndent(st, "", "  ")
	tmp := filepath.Join(dir, StatusFile+".tmp")
	if err := writeFile(tmp, append(b, '\n'), 0o640); err != nil {
		return err
	}
	if gid >= 0 {
		os.Lchown(tmp, 0, gid)
	}
	return os.Rename(tmp, filepath.Join(dir, StatusFile))
}

// swap makes stage conf: conf becomes conf.old, stage conf, then conf.old
// goes. recoverSwap finishes a swap a power cut interrupted.
func swap(conf, stage string) error {
	old := conf + ".old"
	if err := os.RemoveAll(old); err != nil {
		return err
	}
	if err := os.Rename(conf, old); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := os.Rename(stage, conf); err != nil {
		os.Rename(old, conf)
		return err
	}
	syncDir(filepath.Dir(conf))
	return os.RemoveAll(old)
}

// recoverSwap finishes or undoes a swap cut off by a power cut: with conf
// gone, the staged directory (complete and durable before the first
// rename) or else the old one becomes conf; a stage beside a conf was
// not finished and goes.
func recoverSwap(conf string) error {
	old, stage := conf+".old", conf+".new"
	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }
	switch {
	case !exists(conf) && exists(stage) && exists(old):
		// The stage was renamed only after it was durable: it wins.
		if err := os.Rename(stage, conf); err != nil {
			return err
		}
	case !exists(conf) && exists(old):
		if err := os.Rename(old, conf); err != nil {
			return err
		}
	}
	os.RemoveAll(old)
	os.RemoveAll(stage)
	return nil
}

// finish gives the staged files their modes: directories 0750, files
// 0640 (0600 when there is no group to give them to), owned by root and
// the daemon's group when the process may say so.
func finish(stage string, gid int) error {
	return filepath.WalkDir(stage, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		mode := fs.FileMode(0o640)
		if d.IsDir() {
			mode = 0o750
		}
		if gid < 0 && !d.IsDir() {
			mode = 0o600
		}
		if gid >= 0 {
			if err := os.Lchown(p, 0, gid); err != nil {
				return err
			}
		}
		return os.Chmod(p, mode)
	})
}

// groupID is the id of group, or -1 when the process is not root or the
// group does not exist.
func groupID(group string) int {
	if os.Geteuid() != 0 {
		return -1
	}
	g, err := user.LookupGroup(group)
	if err != nil {
		return -1
	}
	id, err := strconv.Atoi(g.Gid)
	if err != nil {
		return -1
	}
	return id
}

// copyTree copies the regular files under src into dst (created), leaving
// out the status, which a new set replaces.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o750)
		}
		if !d.Type().IsRegular() || rel == StatusFile {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return writeFile(filepath.Join(dst, rel), b, 0o600)
	})
}

// writeFile writes b to a new file p (its directories created) and makes
// it durable.
func writeFile(p string, b []byte, mode fs.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
		return err
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	return errors.Join(err, f.Close())
}

// syncTree makes every directory under root durable (the files were
// synced as they were written).
func syncTree(root string) error {
	var dirs []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return err
	})
	slices.Reverse(dirs)
	for _, d := range dirs {
		syncDir(d)
	}
	return err
}

// syncDir syncs dir's entries where it can: the steps that call it are
// redone from the boot partition after a power cut, so a failure here
// costs nothing.
func syncDir(dir string) { durable.SyncDir(dir) }

// removeEmptyDirs removes dir and the directories under it that are left
// empty, deepest first.
func removeEmptyDirs(dir string) {
	var dirs []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	slices.Reverse(dirs)
	for _, d := range dirs {
		os.Remove(d) // fails, as it should, on a directory not empty
	}
}
