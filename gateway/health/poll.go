package health

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/linemq/linemq/broker"
)

// Poll adds a polled check: fn runs at once and then interval after each
// answer. nil from fn means OK, an error wrapped by [Degrade] means
// Degraded, any other error Failed, with the error's text as the reason.
//
// fn gets a context that is cancelled at timeout; a check still running
// then is Failed ("no answer within ..."). The registry does not start
// another run of fn while one is still running, so a hung check costs one
// goroutine, not one per interval; it stays Failed until fn returns, and
// its next run starts interval after that. fn must therefore honour ctx to
// recover promptly.
//
// Poll fails with ErrExists when the name is taken and ErrClosed after
// Close; interval and timeout must be positive.
func (r *Registry) Poll(name string, interval, timeout time.Duration, fn func(ctx context.Context) error) error {
	if interval <= 0 || timeout <= 0 {
		return fmt.Errorf("health: check %q: interval %v and timeout %v must be positive", name, interval, timeout)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return ErrClosed
	}
	if r.checks[name] != nil {
		return fmt.Errorf("%w: %q", ErrExists, name)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &poller{r: r, fn: fn, interval: interval, timeout: timeout, ctx: ctx, cancel: cancel}
	e := &entry{Check: Check{Name: name, Polled: true}, poll: p}
	p.e = e
	r.checks[name] = e
	r.updateLocked(e, Degraded, "no answer yet", true)
	p.startLocked()
	return nil
}

// Degrade marks err as a Degraded answer of a polled check rather than a
// Failed one.
func Degrade(err error) error {
	if err == nil {
		return nil
	}
	return &degradedError{err}
}

type degradedError struct{ err error }

func (e *degradedError) Error() string { return e.err.Error() }
func (e *degradedError) Unwrap() error { return e.err }

// poller runs one polled check. Its fields are guarded by the registry's mu.
type poller struct {
	r        *Registry
	e        *entry
	fn       func(context.Context) error
	interval time.Duration
	timeout  time.Duration

	ctx    context.Context // cancelled when the check is removed or the registry closed
	cancel context.CancelFunc

	round    uint64       // number of the current (or last) run
	timer    broker.Timer // the pending timeout, or the next run
	running  bool         // fn is running
	timedOut bool         // the current run passed its timeout
	stopped  bool
}

// startLocked starts a run: fn on its own goroutine, and its timeout.
func (p *poller) startLocked() {
	if p.stopped {
		return
	}
	p.round++
	round := p.round
	p.running, p.timedOut = true, false
	ctx, cancel := context.WithCancel(p.ctx)
	p.timer = p.r.clock.AfterFunc(p.timeout, func() { p.expire(round, cancel) })
	go func() {
		err := p.fn(ctx)
		cancel()
		p.finish(round, err)
	}()
}

// expire runs when a run's timeout passes.
func (p *poller) expire(round uint64, cancel context.CancelFunc) {
	r := p.r
	r.mu.Lock()
	if p.stopped || p.round != round || !p.running {
		r.mu.Unlock()
		return
	}
	p.timedOut = true
	r.updateLocked(p.e, Failed, fmt.Sprintf("no answer within %v", p.timeout), false)
	r.mu.Unlock()
	cancel() // outside the lock: fn may be waiting for it
}

// finish records a run's answer and schedules the next run.
func (p *poller) finish(round uint64, err error) {
	r := p.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if p.stopped || p.round != round {
		return
	}
	p.running = false
	if !p.timedOut {
		// An answer after the timeout is not taken as the component's
		// state: it was too late to count as alive. The next run decides.
		p.timer.Stop()
		st, reason := OK, ""
		var de *degradedError
		switch {
		case errors.As(err, &de):
			st, reason = Degraded, err.Error()
		case err != nil:
			st, reason = Failed, err.Error()
		}
		r.updateLocked(p.e, st, reason, false)
	}
	p.timer = r.clock.AfterFunc(p.interval, p.next)
}

// next starts the next run when its interval has passed.
func (p *poller) next() {
	p.r.mu.Lock()
	defer p.r.mu.Unlock()
	if p.running {
		return
	}
	p.startLocked()
}

func (p *poller) stopLocked() {
	p.stopped = true
	if p.timer != nil {
		p.timer.Stop()
	}
	p.cancel()
}
