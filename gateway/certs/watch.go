package certs

import (
	"context"
	"os"
	"slices"
	"syscall"
	"time"
)

// DefaultInterval is how often a Watcher looks at its files.
const DefaultInterval = 250 * time.Millisecond

// stamp is what tells that a file changed without reading it.
type stamp struct {
	size         int64
	mtime, ctime int64
	ino          uint64
	missing      bool
}

func stampOf(file string) stamp {
	fi, err := os.Stat(file)
	if err != nil {
		return stamp{missing: true}
	}
	s := stamp{size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		s.ctime = st.Ctim.Nano()
		s.ino = st.Ino
	}
	return s
}

func stamps(files []string) []stamp {
	s := make([]stamp, len(files))
	for i, f := range files {
		s[i] = stampOf(f)
	}
	return s
}

// Watcher calls back when a set of files has changed and settled.
type Watcher struct {
	files    []string
	interval time.Duration
	changed  func()

	loaded []stamp // at the last callback (or at NewWatcher)
	seen   []stamp // at the previous look
}

// NewWatcher watches files (empty names are left out), taking their state
// now as loaded. changed runs in Run's goroutine, after the files differ
// from the state loaded and have not moved for one interval; an interval
// of zero or less is DefaultInterval.
func NewWatcher(files []string, interval time.Duration, changed func()) *Watcher {
	files = slices.DeleteFunc(slices.Clone(files), func(f string) bool { return f == "" })
	if interval <= 0 {
		interval = DefaultInterval
	}
	now := stamps(files)
	return &Watcher{files: files, interval: interval, changed: changed, loaded: now, seen: now}
}

// Check looks at the files once and calls back if they have changed and
// settled. Run calls it every interval; tests may call it directly.
func (w *Watcher) Check() {
	now := stamps(w.files)
	settled := slices.Equal(now, w.seen)
	w.seen = now
	if settled && !slices.Equal(now, w.loaded) {
		w.loaded = now
		w.changed()
	}
}

// Run checks the files every interval until ctx ends.
func (w *Watcher) Run(ctx context.Context) {
	if len(w.files) == 0 {
		return
	}
	t := time.NewTicker(w.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			w.Check()
		}
	}
}
