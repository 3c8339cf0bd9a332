package update

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// TrialFailed is a version on trial giving up.
type TrialFailed struct{ Reason string }

func (e *TrialFailed) Error() string { return "update trial failed: " + e.Reason }

// Progress is a trial under way, as Watch sees it, for the status page. The
// zero value is ready to use and reports no trial.
type Progress struct {
	mu           sync.Mutex
	trial        time.Duration
	healthySince time.Time // zero while unhealthy
	failingSince time.Time
	reason       string
	done         bool
}

// TrialProgress is a snapshot of a Progress.
type TrialProgress struct {
	// Running is whether a trial is being watched; Ended, whether the
	// watch is over (committed, given up, or stopped with its context).
	Running, Ended bool
	// Length is the trial's length (update.trial).
	Length time.Duration
	// HealthyFor is how long the version has been healthy without a
	// break; Remaining is how much longer it must stay so.
	HealthyFor, Remaining time.Duration
	// FailingSince and Reason describe a failing health check, whose
	// failure has not yet lasted long enough to give the trial up.
	FailingSince time.Time
	Reason       string
}

// Snapshot returns the trial's progress at now.
func (p *Progress) Snapshot(now time.Time) TrialProgress {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.trial == 0 || p.done {
		return TrialProgress{Ended: p.done}
	}
	tp := TrialProgress{Running: true, Length: p.trial, FailingSince: p.failingSince, Reason: p.reason, Remaining: p.trial}
	if !p.healthySince.IsZero() {
		tp.HealthyFor = max(now.Sub(p.healthySince), 0)
		tp.Remaining = max(p.trial-tp.HealthyFor, 0)
	}
	return tp
}

func (p *Progress) set(f func(p *Progress)) {
	if p != nil {
		p.mu.Lock()
		f(p)
		p.mu.Unlock()
	}
}

// Watch runs the trial of the version in slot, which the caller runs: it
// samples healthy every interval and commits the version once healthy has
// held for trial without a break. When healthy fails for longer than
// grace, or trial of health in a row cannot be had within three trials,
// it records why (Fail) and returns a *TrialFailed: the caller then
// exits, and its next start rolls the version back. It returns nil once
// committed, or ctx's error when ctx ends first (the trial goes on at the
// next start). p, if not nil, follows the trial for the status page.
func (s *Slots) Watch(ctx context.Context, slot string, trial, grace, interval time.Duration, healthy func() (bool, string), p *Progress) error {
	start := s.now()
	healthySince := start
	var failingSince time.Time
	p.set(func(p *Progress) { p.trial, p.healthySince, p.done = trial, start, false })
	defer p.set(func(p *Progress) { p.done = true })
	t := time.NewTicker(interval)
	defer t.Stop()
	fail := func(reason string) error {
		if err := s.Fail(slot, reason); err != nil {
			return fmt.Errorf("recording the failed trial (%s): %w", reason, err)
		}
		return &TrialFailed{Reason: reason}
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		now := s.now()
		ok, why := healthy()
		switch {
		case !ok && failingSince.IsZero():
			failingSince = now
			p.set(func(p *Progress) { p.healthySince, p.failingSince, p.reason = time.Time{}, now, why })
		case !ok && now.Sub(failingSince) > grace:
			return fail(fmt.Sprintf("unhealthy for %v during its trial: %s", now.Sub(failingSince).Round(time.Second), why))
		case !ok:
			p.set(func(p *Progress) { p.reason = why })
		case ok && !failingSince.IsZero():
			failingSince, healthySince = time.Time{}, now
			p.set(func(p *Progress) { p.healthySince, p.failingSince, p.reason = now, time.Time{}, "" })
		case ok && now.Sub(healthySince) >= trial:
			return s.Commit(slot)
		}
		if now.Sub(start) > 3*trial+grace {
			return fail(fmt.Sprintf("not healthy for %v in a row within %v", trial, now.Sub(start).Round(time.Second)))
		}
	}
}
