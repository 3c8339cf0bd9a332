package health

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/linemq/linemq/broker"
)

// State is how well a component works. The order matters: a larger State
// is worse, and the overall state is the largest.
type State uint8

// The states, best first.
const (
	// OK: the component works.
	OK State = iota
	// Degraded: it works with a problem an operator should see (a share
	// group below its minimum, a slow disk); the gateway still serves.
	Degraded
	// Failed: it does not work. The gateway is not ready, and a hardware
	// watchdog stops being fed.
	Failed
)

var stateNames = [...]string{OK: "ok", Degraded: "degraded", Failed: "failed"}

// String returns "ok", "degraded" or "failed".
func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// MarshalText writes the state as its name, which is how it appears in the
// JSON API.
func (s State) MarshalText() ([]byte, error) {
	if int(s) >= len(stateNames) {
		return nil, fmt.Errorf("health: invalid state %d", uint8(s))
	}
	return []byte(stateNames[s]), nil
}

// UnmarshalText parses a state's name.
func (s *State) UnmarshalText(b []byte) error {
	for i, n := range stateNames {
		if string(b) == n {
			*s = State(i)
			return nil
		}
	}
	return fmt.Errorf("health: unknown state %q (valid: ok, degraded, failed)", b)
}

// Check is the state of one component, as a value.
type Check struct {
	Name   string
	State  State
	Reason string // why it is not OK; "" when OK
	// Since is when the check entered State; a change of reason alone
	// keeps it.
	Since time.Time
	// Updated is when the check last reported (pushed) or answered
	// (polled), or timed out.
	Updated time.Time
	// Polled is true for checks run by the registry.
	Polled bool
}

// Change is one change of a check, as subscribers receive it.
type Change struct {
	Check   Check // the check after the change
	Prev    State // its state before; OK for a check that is new
	Removed bool  // the check was removed
	Overall State // the overall state after the change
}

// Options configure a Registry. The zero value is usable.
type Options struct {
	// Clock drives poll intervals and timeouts and stamps Since; nil uses
	// the system clock.
	Clock broker.Clock
	// Logger receives one line per state change; nil discards them.
	Logger *slog.Logger
}

// Registry is the set of health checks. Its methods may be called
// concurrently. Make one with New; stop its polls with Close.
type Registry struct {
	clock broker.Clock
	log   *slog.Logger

	mu     sync.Mutex
	checks map[string]*entry
	subs   map[*subscriber]struct{}
	closed bool
}

type entry struct {
	Check
	poll     *poller // nil for pushed checks
	answered bool    // a polled check has answered at least once
}

// New returns an empty registry.
func New(opts Options) *Registry {
	r := &Registry{
		clock:  opts.Clock,
		log:    opts.Logger,
		checks: make(map[string]*entry),
		subs:   make(map[*subscriber]struct{}),
	}
	if r.clock == nil {
		r.clock = systemClock{}
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	return r
}

// ErrExists is returned by Poll for a name already in use.
var ErrExists = errors.New("health: a check with this name exists")

// ErrClosed is returned by Poll after Close.
var ErrClosed = errors.New("health: registry closed")

// Set reports the state of a pushed check, creating it on first use. A
// reason given with OK is kept for display (e.g. "3 of 3 members"). Set on
// the name of a polled check is ignored (and logged): the poll would
// overwrite it at its next answer, so the two would fight.
func (r *Registry) Set(name string, st State, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	e := r.checks[name]
	if e == nil {
		e = &entry{Check: Check{Name: name}}
		r.checks[name] = e
		r.updateLocked(e, st, reason, true)
		return
	}
	if e.poll != nil {
		r.log.Warn("health: Set on a polled check ignored", "check", name)
		return
	}
	r.updateLocked(e, st, reason, false)
}

// Remove forgets a check (and stops it, if polled); subscribers see a
// Change with Removed set.
func (r *Registry) Remove(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.checks[name]
	if e == nil {
		return
	}
	delete(r.checks, name)
	if e.poll != nil {
		e.poll.stopLocked()
	}
	r.notifyLocked(Change{Check: e.Check, Prev: e.State, Removed: true, Overall: r.overallLocked()})
}

// Get returns the check named name.
func (r *Registry) Get(name string) (Check, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.checks[name]
	if e == nil {
		return Check{}, false
	}
	return e.Check, true
}

// Checks returns every check, sorted by name.
func (r *Registry) Checks() []Check {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Check, 0, len(r.checks))
	for _, e := range r.checks {
		out = append(out, e.Check)
	}
	slices.SortFunc(out, func(a, b Check) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Overall returns the worst state of all checks; OK when there are none.
func (r *Registry) Overall() State {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.overallLocked()
}

func (r *Registry) overallLocked() State {
	worst := OK
	for _, e := range r.checks {
		worst = max(worst, e.State)
	}
	return worst
}

// Healthy is the gate a hardware watchdog feeds through: ok is false while
// any check is Failed. reason names the checks that are not OK, worst
// first ("broker: failed: no answer within 2s; storage: degraded: ..."),
// so the same call explains a degraded but still healthy gateway; it is ""
// when every check is OK.
func (r *Registry) Healthy() (ok bool, reason string) {
	checks := r.Checks()
	slices.SortStableFunc(checks, func(a, b Check) int { return int(b.State) - int(a.State) })
	var parts []string
	worst := OK
	for _, c := range checks {
		if c.State == OK {
			continue
		}
		worst = max(worst, c.State)
		parts = append(parts, c.Name+": "+c.State.String()+": "+c.Reason)
	}
	return worst != Failed, strings.Join(parts, "; ")
}

// updateLocked sets e's state and reason, stamps it, and tells subscribers
// when something visible changed. fresh marks a check that did not exist.
func (r *Registry) updateLocked(e *entry, st State, reason string, fresh bool) {
	now := r.clock.Now()
	prev := e.State
	changed := fresh || st != prev || reason != e.Reason
	if fresh || st != prev {
		e.Since = now
	}
	e.State, e.Reason, e.Updated = st, reason, now
	if !changed {
		return
	}
	if fresh {
		prev = OK
	}
	first := e.Polled && !fresh && !e.answered
	if e.Polled && !fresh {
		e.answered = true
	}
	switch {
	case e.Polled && fresh:
		// A polled check starts as "no answer yet": not worth a warning
		// at every start; its first answer is logged if it is not OK.
	case first && st == OK:
		// The first answer of a polled check, and it is OK: silent.
	case st == OK && prev != OK:
		r.log.Info("health: recovered", "check", e.Name, "was", prev.String())
	case st != OK:
		r.log.Warn("health: "+st.String(), "check", e.Name, "reason", reason)
	}
	r.notifyLocked(Change{Check: e.Check, Prev: prev, Overall: r.overallLocked()})
}

// Close stops every polled check (their contexts are cancelled) and closes
// every subscription channel. Checks keep their last state for readers.
// It is safe to call more than once.
func (r *Registry) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	r.closed = true
	for _, e := range r.checks {
		if e.poll != nil {
			e.poll.stopLocked()
		}
	}
	for s := range r.subs {
		close(s.ch)
		delete(r.subs, s)
	}
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }
func (systemClock) AfterFunc(d time.Duration, f func()) broker.Timer {
	return time.AfterFunc(d, f)
}
