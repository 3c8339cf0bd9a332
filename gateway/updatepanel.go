package gateway

import (
	"io"
	"sync"
	"time"

	"github.com/linemq/linemq/gateway/update"
	"github.com/linemq/linemq/gateway/web"
)

// UpdateOptions tell the gateway about the daemon's update slots
// (gateway/update, docs/updates.md): it shows them on the page and in
// /api/v1/update, and installs bundles the admins upload.
type UpdateOptions struct {
	// Slots is the data directory's A/B installation; nil when this
	// process does not manage it (an embedded gateway, tests), which
	// leaves the update panel out and refuses uploads.
	Slots *update.Slots
	// Slot is the slot this program runs from; "" for the image's linemq.
	Slot string
	// Trial follows this version's trial while it runs (Slots.Watch).
	Trial *update.Progress
}

func newUpdater(o UpdateOptions, keysDir string, admins []string, version string) *updater {
	return &updater{opts: o, keysDir: keysDir, admins: admins, version: version, now: time.Now, restart: make(chan struct{})}
}

// RestartRequested is closed once a bundle uploaded through the API has
// been installed: the caller then closes the gateway and starts the
// version on trial (cmd/linemq execs it). Nil, never closed, without
// Options.Update.
func (g *Gateway) RestartRequested() <-chan struct{} {
	if g.upd == nil {
		return nil
	}
	return g.upd.restart
}

// var _ guards the interface the page calls: a renamed method would
// otherwise only show as a missing panel.
var _ web.Updater = (*updater)(nil)

// updater is the update slots as the status page sees them.
type updater struct {
	opts    UpdateOptions
	keysDir string
	admins  []string
	version string
	now     func() time.Time
	// restart is closed once an uploaded bundle is installed: the daemon
	// then stops the gateway and starts the new version (Gateway.Restart).
	restart chan struct{}

	mu        sync.Mutex // one install at a time
	installed bool
}

// updateJSON is the update panel.
type updateJSON struct {
	Version   string `json:"version"`
	RunningIn string `json:"running_in"` // "slot a", "slot b" or "image"
	Committed string `json:"committed"`  // the version in force after restarts
	// Trial is the version on trial, if any; TrialRunning whether it is
	// this process (a trial installed and not yet started is not).
	Trial             string    `json:"trial,omitempty"`
	TrialSince        time.Time `json:"trial_since,omitzero"`
	TrialRunning      bool      `json:"trial_running"`
	TrialSeconds      float64   `json:"trial_seconds,omitempty"`
	TrialHealthyFor   float64   `json:"trial_healthy_seconds,omitempty"`
	TrialRemaining    float64   `json:"trial_remaining_seconds,omitempty"`
	TrialFailingSince time.Time `json:"trial_failing_since,omitzero"`
	TrialFailing      string    `json:"trial_failing,omitempty"`
	// RestartPending: an uploaded bundle was installed and the gateway is
	// restarting into it.
	RestartPending bool          `json:"restart_pending,omitempty"`
	LastCommit     *update.Event `json:"last_commit"`
	LastRollback   *update.Event `json:"last_rollback"`
	Uploads        bool          `json:"uploads"` // whether update.admins may upload
	Error          string        `json:"error,omitempty"`
}

func (u *updater) Status() any {
	out := updateJSON{Version: u.version, RunningIn: "image", Committed: "the image's linemq"}
	if u.opts.Slot != "" {
		out.RunningIn = "slot " + u.opts.Slot
	}
	st, err := u.opts.Slots.Read()
	if err != nil {
		out.Error = err.Error()
		return out
	}
	if st.Committed != "" {
		out.Committed = st.CommittedVersion + " (slot " + st.Committed + ")"
	}
	out.LastCommit, out.LastRollback = st.LastCommit, st.LastRollback
	if st.Trial != "" {
		out.Trial, out.TrialSince = st.TrialVersion+" (slot "+st.Trial+")", st.TrialSince
		out.TrialRunning = st.Trial == u.opts.Slot
	}
	if u.opts.Trial != nil && out.TrialRunning {
		if tp := u.opts.Trial.Snapshot(u.now()); tp.Running {
			out.TrialSeconds = tp.Length.Seconds()
			out.TrialHealthyFor = tp.HealthyFor.Round(time.Second).Seconds()
			out.TrialRemaining = tp.Remaining.Round(time.Second).Seconds()
			out.TrialFailingSince, out.TrialFailing = tp.FailingSince, tp.Reason
		}
	}
	u.mu.Lock()
	out.RestartPending = u.installed
	u.mu.Unlock()
	out.Uploads = len(u.admins) > 0
	return out
}

// installJSON answers an upload.
type installJSON struct {
	Version    string `json:"version"`
	Arch       string `json:"arch"`
	Slot       string `json:"slot"`
	SignedBy   string `json:"signed_by"`
	KeyID      string `json:"key_id"`
	Restarting bool   `json:"restarting"`
}

func (u *updater) Install(r io.Reader, user string) (any, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.installed {
		st, _ := u.opts.Slots.Read()
		return nil, &update.PendingError{Version: st.TrialVersion, Since: st.TrialSince}
	}
	// Read at each upload, so that a key added to the directory (a
	// provisioning set, a reload) counts without a restart.
	keys, err := update.LoadKeys(u.keysDir)
	if err != nil {
		return nil, err
	}
	v, err := u.opts.Slots.Install(r, keys, update.Arch())
	if err != nil {
		return nil, err
	}
	st, err := u.opts.Slots.Read()
	if err != nil {
		return nil, err
	}
	u.installed = true
	close(u.restart)
	return installJSON{
		Version: v.Manifest.Version, Arch: v.Manifest.Arch, Slot: st.Trial,
		SignedBy: v.Key.Name, KeyID: v.Key.ID(), Restarting: true,
	}, nil
}
