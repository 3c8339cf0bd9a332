package gateway

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/linemq/linemq/gateway/cluster"
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

func newUpdater(o UpdateOptions, keysDir string, admins []string, trial time.Duration, version string, cl *cluster.Cluster, log *slog.Logger) *updater {
	ctx, cancel := context.WithCancel(context.Background())
	return &updater{opts: o, keysDir: keysDir, admins: admins, trial: trial, version: version, now: time.Now,
		restart: make(chan struct{}), cluster: cl, log: log, ctx: ctx, cancel: cancel}
}

// RestartRequested is closed once a bundle uploaded through the API has
// been installed and, on a clustered gateway, the line's update lock is
// this gateway's: the caller then calls Restarting, closes the gateway and
// starts the version on trial (cmd/linemq execs it). Nil, never closed,
// without Options.Update.
func (g *Gateway) RestartRequested() <-chan struct{} {
	if g.upd == nil {
		return nil
	}
	return g.upd.restart
}

// Restarting tells the gateway that the coming Close is a restart into a
// new version of the same process: systemd is told the service reloads
// (RELOADING=1) rather than stops. (Close leaves the line's update lock
// to the new program in any case: it only stops keeping its lease alive.)
func (g *Gateway) Restarting() {
	if g.hw != nil {
		g.hw.Watchdog.Restarting()
	}
}

// UpdateCommitted tells the gateway that the version it runs was
// committed after its trial: a clustered gateway lets go of the line's
// update lock, so that the next gateway may update.
func (g *Gateway) UpdateCommitted() {
	if g.cluster == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.cluster.ReleaseUpdate(ctx, nil); err != nil {
		// Its lease is no longer kept alive: it ends by itself.
		g.log.Warn("update: releasing the line's update lock", "err", err, "ends_within", cluster.UpdateLockTTL)
	}
}

// var _ guards the interface the page calls: a renamed method would
// otherwise only show as a missing panel.
var _ web.Updater = (*updater)(nil)

// updater is the update slots as the status page sees them.
type updater struct {
	opts    UpdateOptions
	keysDir string
	admins  []string
	trial   time.Duration // update.trial
	version string
	now     func() time.Time
	// restart is closed once an uploaded bundle is installed (and, with a
	// cluster, the line's update lock taken): the daemon then stops the
	// gateway and starts the new version (Gateway.RestartRequested).
	restart chan struct{}
	cluster *cluster.Cluster // nil when standalone
	log     *slog.Logger
	// ctx ends with the gateway: a wait for the line's lock ends with it.
	ctx    context.Context
	cancel context.CancelFunc
	bg     sync.WaitGroup // awaitLine and settleLine, ended by cancel

	installing sync.Mutex  // one install at a time
	installed  atomic.Bool // a bundle installed, the restart requested or awaited
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
	// restarting into it, or waiting for the line (WaitingForLine says
	// why) to do so.
	RestartPending bool          `json:"restart_pending,omitempty"`
	WaitingForLine string        `json:"waiting_for_line,omitempty"`
	LastCommit     *update.Event `json:"last_commit"`
	LastRollback   *update.Event `json:"last_rollback"`
	Uploads        bool          `json:"uploads"` // whether update.admins may upload
	Error          string        `json:"error,omitempty"`
}

func (u *updater) Status() any {
	out := updateJSON{Version: u.version, RunningIn: "image", Committed: "the image's linemq"} // until the state is read
	if u.opts.Slot != "" {
		out.RunningIn = "slot " + u.opts.Slot
	}
	st, err := u.opts.Slots.Read()
	if err != nil {
		out.Error = err.Error()
		return out
	}
	out.Committed = st.InForce(u.opts.Slots.Image)
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
		} else if !tp.Ended {
			// Ready, and the watch not begun yet (it starts right after
			// the ready line): the whole trial is ahead, not none of it.
			out.TrialSeconds, out.TrialRemaining = u.trial.Seconds(), u.trial.Seconds()
		}
	}
	out.RestartPending = u.installed.Load()
	if u.cluster != nil && out.RestartPending {
		out.WaitingForLine = u.cluster.UpdateWaiting()
	}
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
	// WaitsForLine: a clustered gateway restarts once the line is whole
	// and no other gateway of it is updating.
	WaitsForLine bool `json:"waits_for_line,omitempty"`
}

func (u *updater) Install(r io.Reader, user string) (any, error) {
	u.installing.Lock()
	defer u.installing.Unlock()
	if u.installed.Load() {
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
	u.installed.Store(true)
	if u.cluster == nil {
		close(u.restart)
	} else {
		u.bg.Go(func() { u.awaitLine(v.Manifest.Version) })
	}
	return installJSON{
		Version: v.Manifest.Version, Arch: v.Manifest.Arch, Slot: st.Trial,
		SignedBy: v.Key.Name, KeyID: v.Key.ID(), Restarting: true, WaitsForLine: u.cluster != nil,
	}, nil
}

// awaitLine waits for the line's update lock, then asks for the restart.
// If the line's update of version was halted on another gateway, the
// installed version is given up instead. If the gateway closes first, the
// version stays installed and goes on trial at the next start, which then
// takes the lock if it is free (HoldUpdate).
func (u *updater) awaitLine(version string) {
	u.log.Info("update: waiting for the line's update lock before restarting", "version", version)
	err := u.cluster.AcquireUpdate(u.ctx, version)
	switch {
	case err == nil:
		close(u.restart)
	case errors.Is(err, cluster.ErrUpdateHalted):
		// Logged once done, so that what the log says the panel shows
		// (a test that read the panel on this line found the trial still
		// there).
		if aerr := u.opts.Slots.Abandon(err.Error()); aerr != nil {
			u.log.Error("update: giving up the installed version", "version", version, "err", aerr)
		}
		u.installed.Store(false)
		u.log.Warn("update: giving up the installed version: its update failed elsewhere on the line", "version", version, "reason", err)
	}
}

// stop ends the background work; the gateway calls it as it stops.
func (u *updater) stop() {
	u.cancel()
	u.bg.Wait()
}

// settleLine runs once the gateway is ready: a version on trial keeps the
// line's update lock it took before its restart; otherwise an update of
// this gateway that held the lock has ended (committed earlier, or rolled
// back at this start), and the lock is let go, with a halt mark for the
// rest of the line after a rollback.
func (u *updater) settleLine() {
	if u.cluster == nil {
		return
	}
	ctx, cancel := context.WithTimeout(u.ctx, 30*time.Second)
	defer cancel()
	st, err := u.opts.Slots.Read()
	if err != nil {
		u.log.Error("update: reading the slots' state", "err", err)
		return
	}
	if st.Trial != "" && st.Trial == u.opts.Slot {
		held, err := u.cluster.HoldUpdate(ctx, st.TrialVersion)
		switch {
		case err != nil:
			u.log.Warn("update: keeping the line's update lock", "err", err)
		case !held:
			u.log.Warn("update: on trial without the line's update lock (another gateway holds it)")
		}
		return
	}
	h, err := u.cluster.UpdateHolder(ctx)
	if err != nil || h == nil || h.Node != u.cluster.Node() {
		return
	}
	var halt *cluster.UpdateHalt
	if r := st.LastRollback; r != nil && r.Version == h.Version && !r.At.Before(h.Since) {
		halt = &cluster.UpdateHalt{Version: r.Version, At: r.At, Reason: r.Reason}
	}
	if err := u.cluster.ReleaseUpdate(ctx, halt); err != nil {
		u.log.Warn("update: releasing the line's update lock", "err", err)
	}
}
