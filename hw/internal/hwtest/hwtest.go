// Package hwtest holds the test doubles the hw packages share: a Clock
// whose time and ticks move only when a test advances it, so pattern and
// feeding tests are exact rather than timed.
package hwtest

import (
	"sync"
	"testing"
	"time"
)

// Clock is a fake clock with one ticker. Its Now and Tick have the
// signatures the hw packages' Options take.
type Clock struct {
	t  testing.TB
	c  chan time.Time // unbuffered: Advance returns once the tick is taken
	mu sync.Mutex
	// Guarded by mu.
	now     time.Time
	period  time.Duration
	stopped bool
}

// NewClock returns a clock reading a fixed instant, with no ticker yet.
func NewClock(t testing.TB) *Clock {
	return &Clock{t: t, c: make(chan time.Time), now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Tick starts the clock's ticker, recording its period; the ticker ticks
// only on Advance.
func (c *Clock) Tick(d time.Duration) (<-chan time.Time, func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.period = d
	return c.c, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.stopped = true
	}
}

// Period returns the period the ticker was started with, 0 before Tick.
func (c *Clock) Period() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.period
}

// Stopped reports whether the ticker was stopped.
func (c *Clock) Stopped() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stopped
}

// Move moves the time on by d without a tick, for a test whose ticker's
// reader is busy (in a health check that blocks, say).
func (c *Clock) Move(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Advance moves the time on by d and delivers one tick, waiting until the
// ticker's reader has taken it. Because the reader is one goroutine that
// handles a tick before taking the next, when Advance returns every earlier
// tick has been handled completely. It fails the test if nobody takes the
// tick within 10 seconds.
func (c *Clock) Advance(d time.Duration) {
	c.t.Helper()
	c.mu.Lock()
	c.now = c.now.Add(d)
	now := c.now
	c.mu.Unlock()
	select {
	case c.c <- now:
	case <-time.After(10 * time.Second):
		c.t.Fatalf("hwtest: nobody took the tick at %v", now)
	}
}
