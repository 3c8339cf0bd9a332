package watchdog

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Gate says whether the gateway is healthy enough to be kept alive. The
// gateway's health registry implements it (gateway/health.Registry).
type Gate interface {
	// Healthy reports whether every check that matters passes, and if not,
	// why, in words for the log, the status page and systemctl status. It is
	// called once per period from one goroutine. It should answer from
	// state it already has rather than probe anything: a check that blocks
	// stops feeding, which is correct for a wedged gateway but is a reset.
	// During start-up it decides too: the device is armed from the moment
	// it is opened, so a gate that says false until the gateway is ready
	// must be ready within the watchdog's timeout.
	Healthy() (ok bool, reason string)
}

// GateFunc adapts a function to Gate.
type GateFunc func() (ok bool, reason string)

// Healthy implements Gate.
func (f GateFunc) Healthy() (bool, string) { return f() }

// Feeder is one watchdog. The Supervisor calls its methods from one
// goroutine at a time, so implementations need not lock.
type Feeder interface {
	// Feed tells the watchdog the gateway is alive.
	Feed() error

	// Timeout is how long the watchdog waits for a Feed before it acts,
	// or 0 if the feeder does not know; the Supervisor feeds at least
	// twice within the shortest timeout.
	Timeout() time.Duration

	// Close ends feeding cleanly: it disarms the watchdog where that is
	// possible. It is called once, by Supervisor.Close.
	Close() error

	// String names the watchdog for logs and the status page.
	String() string
}

// Readier is a Feeder that is told when the gateway is ready: systemd's
// READY=1.
type Readier interface {
	// Ready announces that the gateway is ready. The Supervisor calls it
	// once, or again after it failed.
	Ready() error
}

// StatusSetter is a Feeder that shows a line of status: systemd's STATUS=.
type StatusSetter interface {
	// SetStatus shows status, one line, until the next call.
	SetStatus(status string) error
}

// Restarter is a Feeder that tells its supervisor when the process is
// about to replace itself with a new version rather than stop: systemd's
// RELOADING=1 in place of STOPPING=1.
type Restarter interface {
	// Restarting makes the feeder's Close announce a restart.
	Restarting()
}

// DefaultPeriod is the feeding period when no feeder knows its timeout
// (systemd without WatchdogSec=, whose feeding is then a no-op anyway).
const DefaultPeriod = 5 * time.Second

// Options configure a Supervisor.
type Options struct {
	// Feeders are the watchdogs to feed; the Supervisor owns them from New
	// on, and closes them in reverse order. None is allowed: the
	// Supervisor then only reports its state.
	Feeders []Feeder

	// Gate decides whether to feed. Required.
	Gate Gate

	// Logger receives the changes between feeding and not feeding, and
	// feed errors (once each, not per period). Nil discards.
	Logger *slog.Logger

	// Now reads the clock; nil means time.Now.
	Now func() time.Time

	// Tick starts a ticker with period d and returns its channel and a
	// function that stops it; nil means time.NewTicker. Tests pass a fake.
	Tick func(d time.Duration) (<-chan time.Time, func())
}

// Supervisor feeds its feeders every period while its gate passes. New
// starts it; Close stops it.
type Supervisor struct {
	gate    Gate
	feeders []Feeder
	period  time.Duration
	log     *slog.Logger
	now     func() time.Time

	stopTick func()
	done     chan struct{} // closed by Close
	exited   chan struct{} // closed when the goroutine returns
	once     sync.Once
	closing  atomic.Bool // set by Close before it looks at inGate
	inGate   atomic.Bool // the goroutine is in, or about to call, gate.Healthy

	mu         sync.Mutex // guards what follows and every call into a feeder
	closed     bool
	ready      bool
	feeding    bool
	reason     string    // why not feeding
	since      time.Time // when feeding last changed
	lastFeed   time.Time
	lastCheck  time.Time
	checkStart time.Time     // when the running check began; zero if none runs
	errs       map[int]error // the last Feed error of each feeder, by index
}

// New checks opts and starts feeding: the gate is asked at once, then every
// period. On error the feeders are left to the caller.
func New(opts Options) (*Supervisor, error) {
	if opts.Gate == nil {
		return nil, errors.New("watchdog: no Gate")
	}
	period := choosePeriod(opts.Feeders)
	s := &Supervisor{
		gate:    opts.Gate,
		feeders: opts.Feeders,
		period:  period,
		log:     opts.Logger,
		now:     opts.Now,
		done:    make(chan struct{}),
		exited:  make(chan struct{}),
		reason:  "starting",
		errs:    make(map[int]error),
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.now == nil {
		s.now = time.Now
	}
	tick := opts.Tick
	if tick == nil {
		tick = func(d time.Duration) (<-chan time.Time, func()) {
			t := time.NewTicker(d)
			return t.C, t.Stop
		}
	}
	s.since = s.now()
	if len(s.feeders) == 0 {
		s.reason = "no watchdog configured"
		s.stopTick = func() {}
		close(s.exited)
		return s, nil
	}
	c, stop := tick(period)
	s.stopTick = stop
	s.log.Info("watchdog: feeding while healthy", "feeders", s.names(), "period", period)
	go s.run(c)
	return s, nil
}

// choosePeriod returns how often to feed: half the shortest feeder timeout,
// so that one late tick is not a reset, or DefaultPeriod if no feeder
// knows its timeout.
func choosePeriod(feeders []Feeder) time.Duration {
	var shortest time.Duration
	for _, f := range feeders {
		if t := f.Timeout(); t > 0 && (shortest == 0 || t < shortest) {
			shortest = t
		}
	}
	if shortest == 0 {
		return DefaultPeriod
	}
	return shortest / 2
}

func (s *Supervisor) run(tick <-chan time.Time) {
	defer close(s.exited)
	s.check()
	for {
		select {
		case <-s.done:
			return
		case <-tick:
			s.check()
		}
	}
}

// check asks the gate and feeds if it passes.
func (s *Supervisor) check() {
	// Close reads inGate after setting closing, and this reads closing
	// after setting inGate: one of the two sees the other, so Close either
	// waits for a goroutine that will not call the gate, or does not wait
	// for one that may be stuck in it.
	s.inGate.Store(true)
	if s.closing.Load() {
		s.inGate.Store(false)
		return
	}
	s.mu.Lock()
	s.checkStart = s.now()
	s.mu.Unlock()

	ok, reason := s.gate.Healthy()
	s.inGate.Store(false)

	s.mu.Lock()
	defer s.mu.Unlock()
	s.checkStart = time.Time{}
	if s.closed {
		return
	}
	now := s.now()
	s.lastCheck = now
	if !ok {
		if reason == "" {
			reason = "health check failed"
		}
		s.stopFeeding(now, reason)
		return
	}
	s.feedAll(now)
}

// stopFeeding records and announces that feeding stopped. Called with s.mu
// held.
func (s *Supervisor) stopFeeding(now time.Time, reason string) {
	if !s.feeding && s.reason == reason {
		return
	}
	if s.feeding || s.reason == "starting" {
		s.log.Error("watchdog: not feeding; the watchdogs will act", "reason", reason, "feeders", s.names())
	} else {
		s.log.Warn("watchdog: still not feeding", "reason", reason)
	}
	if s.feeding {
		s.since = now
	}
	s.feeding, s.reason = false, reason
	s.setStatus("Not feeding the watchdog: " + reason)
}

// feedAll feeds every feeder. Called with s.mu held.
func (s *Supervisor) feedAll(now time.Time) {
	for i, f := range s.feeders {
		err := f.Feed()
		switch prev := s.errs[i]; {
		case err != nil && prev == nil:
			s.log.Error("watchdog: feed failed", "feeder", f.String(), "err", err)
			s.errs[i] = err
		case err != nil:
			s.errs[i] = err
		case prev != nil:
			s.log.Info("watchdog: feeding again", "feeder", f.String())
			delete(s.errs, i)
		}
	}
	s.lastFeed = now
	if !s.feeding {
		if s.reason != "starting" {
			s.log.Info("watchdog: healthy again; feeding", "was", s.reason)
		}
		s.feeding, s.reason, s.since = true, "", now
		s.setStatus("Healthy; feeding the watchdog")
	}
}

// setStatus passes a status line to the feeders that show one. Called with
// s.mu held.
func (s *Supervisor) setStatus(status string) {
	// A gate's reason may span lines; systemd's STATUS= is one.
	status = strings.Join(strings.Fields(status), " ")
	for _, f := range s.feeders {
		if ss, ok := f.(StatusSetter); ok {
			if err := ss.SetStatus(status); err != nil {
				s.log.Warn("watchdog: status", "feeder", f.String(), "err", err)
			}
		}
	}
}

// Ready tells the feeders that care (systemd: READY=1) that the gateway is
// ready. Call it once the listeners accept connections. Calling it again
// does nothing.
func (s *Supervisor) Ready() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("watchdog: Ready after Close")
	}
	if s.ready {
		return nil
	}
	var errs []error
	for _, f := range s.feeders {
		if r, ok := f.(Readier); ok {
			if err := r.Ready(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	s.ready = true
	return nil
}

// State is a Supervisor's state, for the status page.
type State struct {
	// Feeding is true while the last health check passed and the feeders
	// were fed.
	Feeding bool

	// Reason says why feeding stopped: the gate's reason, "starting" before
	// the first check, or that the check has not answered for longer than a
	// period. Empty while feeding.
	Reason string

	// Since is when Feeding last changed.
	Since time.Time

	// LastFeed is when the feeders were last fed; zero before the first.
	LastFeed time.Time

	// LastCheck is when the gate last answered; zero before it first does.
	LastCheck time.Time

	// Period is how often the gate is asked.
	Period time.Duration

	// Ready reports whether Ready was called.
	Ready bool

	// Feeders names the watchdogs fed, in the order they are fed.
	Feeders []string

	// Errors lists the feeders whose last Feed failed, with the error.
	Errors []string
}

// State returns the Supervisor's state.
func (s *Supervisor) State() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := State{
		Feeding:   s.feeding,
		Reason:    s.reason,
		Since:     s.since,
		LastFeed:  s.lastFeed,
		LastCheck: s.lastCheck,
		Period:    s.period,
		Ready:     s.ready,
		Feeders:   s.names(),
	}
	if !s.checkStart.IsZero() {
		if late := s.now().Sub(s.checkStart); late > s.period {
			// Feeding has in fact stopped: no tick feeds while the check
			// runs.
			st.Feeding = false
			st.Reason = fmt.Sprintf("health check has not answered for %v", late.Round(time.Millisecond))
			st.Since = s.checkStart
		}
	}
	for i, f := range s.feeders {
		if err := s.errs[i]; err != nil {
			st.Errors = append(st.Errors, fmt.Sprintf("%s: %v", f, err))
		}
	}
	return st
}

func (s *Supervisor) names() []string {
	names := make([]string, len(s.feeders))
	for i, f := range s.feeders {
		names[i] = f.String()
	}
	return names
}

// Restarting tells the feeders that can tell their supervisor (systemd)
// that the coming Close is a restart of the process into a new version
// (exec), not a stop.
func (s *Supervisor) Restarting() {
	for _, f := range s.feeders {
		if r, ok := f.(Restarter); ok {
			r.Restarting()
		}
	}
}

// Close stops feeding and closes the feeders in reverse order (for systemd,
// STOPPING=1; for the kernel watchdog, the magic close that disarms it).
// It does not wait for a gate that is stuck: that goroutine returns, without
// feeding, whenever the gate does. Calling Close again returns nil.
func (s *Supervisor) Close() error {
	var err error
	s.once.Do(func() {
		s.closing.Store(true)
		s.stopTick()
		close(s.done)

		s.mu.Lock()
		s.closed = true
		s.feeding, s.reason, s.since = false, "stopped", s.now()
		var errs []error
		for i := len(s.feeders) - 1; i >= 0; i-- {
			if cerr := s.feeders[i].Close(); cerr != nil {
				errs = append(errs, cerr)
			}
		}
		s.mu.Unlock()
		err = errors.Join(errs...)

		if !s.inGate.Load() {
			<-s.exited
		}
	})
	return err
}
