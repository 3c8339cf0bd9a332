package update

import (
	"context"
	"fmt"
	"time"
)

// TrialFailed is a version on trial giving up.
type TrialFailed struct{ Reason string }

func (e *TrialFailed) Error() string { return "update trial failed: " + e.Reason }

// Watch runs the trial of the version in slot, which the caller runs: it
// samples healthy every interval and commits the version once healthy has
// held for trial without a break. When healthy fails for longer than
// grace, or trial of health in a row cannot be had within three trials,
// it records why (Fail) and returns a *TrialFailed: the caller then
// exits, and its next start rolls the version back. It returns nil once
// committed, or ctx's error when ctx ends first (the trial goes on at the
// next start).
func (s *Slots) Watch(ctx context.Context, slot string, trial, grace, interval time.Duration, healthy func() (bool, string)) error {
	start := s.now()
	healthySince := start
	var failingSince time.Time
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
		case !ok && now.Sub(failingSince) > grace:
			return fail(fmt.Sprintf("unhealthy for %v during its trial: %s", now.Sub(failingSince).Round(time.Second), why))
		case ok && !failingSince.IsZero():
			failingSince, healthySince = time.Time{}, now
		case ok && now.Sub(healthySince) >= trial:
			return s.Commit(slot)
		}
		if now.Sub(start) > 3*trial+grace {
			return fail(fmt.Sprintf("not healthy for %v in a row within %v", trial, now.Sub(start).Round(time.Second)))
		}
	}
}
