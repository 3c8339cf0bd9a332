package led

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// ErrClosed is returned by a Light's Set after its Close.
var ErrClosed = errors.New("led: closed")

// Light is one lamp. The [Group] is its only user: it calls Set from its
// goroutine, only when the wanted state changes, and Close once at the end,
// so implementations need not be safe for concurrent use.
type Light interface {
	// Set lights the lamp (on) or darkens it. Setting the state it is
	// already in is harmless. After Close it returns ErrClosed.
	Set(on bool) error

	// Close gives the lamp back: a pin is left dark and inert, a kernel LED
	// gets its trigger back. Calling it again does nothing.
	Close() error
}

// Pattern is what an LED shows.
type Pattern uint8

// The patterns. Their timing, in Steps of 50 ms, is fixed so that the
// meaning of a blink is the same on every gateway.
const (
	Off       Pattern = iota // dark
	On                       // lit
	SlowBlink                // 1 Hz: 500 ms lit, 500 ms dark
	FastBlink                // 5 Hz: 100 ms lit, 100 ms dark
	Heartbeat                // two 100 ms flashes 150 ms apart, every 1.2 s
)

// String returns the pattern's name as the docs and the status page write
// it, "slow blink" for SlowBlink.
func (p Pattern) String() string {
	switch p {
	case Off:
		return "off"
	case On:
		return "on"
	case SlowBlink:
		return "slow blink"
	case FastBlink:
		return "fast blink"
	case Heartbeat:
		return "heartbeat"
	}
	return fmt.Sprintf("Pattern(%d)", p)
}

// Step is the time resolution of every pattern and flicker. 50 ms is short
// enough for a flicker to be seen and long enough that a Pi Zero-class CPU
// does not notice the ticker.
const Step = 50 * time.Millisecond

// Pattern timings, in Steps.
const (
	slowHalf       = 10 // 500 ms
	fastHalf       = 2  // 100 ms
	heartbeatFlash = 2  // 100 ms
	heartbeatGap   = 3  // 150 ms between the two flashes
	heartbeatCycle = 24 // 1.2 s, about 50 beats a minute: calm, not alarming
)

// lit reports whether p lights the LED n Steps after it was set.
func (p Pattern) lit(n uint64) bool {
	switch p {
	case On:
		return true
	case SlowBlink:
		return n%(2*slowHalf) < slowHalf
	case FastBlink:
		return n%(2*fastHalf) < fastHalf
	case Heartbeat:
		n %= heartbeatCycle
		second := uint64(heartbeatFlash + heartbeatGap)
		return n < heartbeatFlash || (n >= second && n < second+heartbeatFlash)
	}
	return false
}

// Options configure a Group. The zero value is ready to use.
type Options struct {
	// Logger receives a warning when a light fails, and a note when it works
	// again; one each, not one per Step. Nil discards.
	Logger *slog.Logger

	// Tick starts the ticker that drives the Group every d and returns its
	// channel and a function that stops it. Nil uses time.NewTicker; tests
	// pass a channel they send on.
	Tick func(d time.Duration) (<-chan time.Time, func())
}

// Group drives a set of LEDs from one goroutine. Create it with NewGroup,
// add LEDs with Add, and Close it to stop the goroutine and give every
// light back.
type Group struct {
	log    *slog.Logger
	stop   func()        // stops the ticker
	done   chan struct{} // closed by Close to end the goroutine
	exited chan struct{} // closed by the goroutine when it returns
	once   sync.Once

	mu     sync.Mutex // guards what follows and every LED's Step-owned fields
	leds   []*LED
	closed bool
}

// NewGroup starts a Group's goroutine. It has no LEDs until Add.
func NewGroup(opts Options) *Group {
	tick := opts.Tick
	if tick == nil {
		tick = func(d time.Duration) (<-chan time.Time, func()) {
			t := time.NewTicker(d)
			return t.C, t.Stop
		}
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c, stop := tick(Step)
	g := &Group{log: log, stop: stop, done: make(chan struct{}), exited: make(chan struct{})}
	go g.run(c)
	return g
}

func (g *Group) run(tick <-chan time.Time) {
	defer close(g.exited)
	for {
		select {
		case <-g.done:
			return
		case <-tick:
			g.step()
		}
	}
}

// Add drives l as an LED called name, dark until its pattern is set, and
// returns it. The Group closes l when it is closed; Add after Close closes
// l at once and returns an LED that never lights.
func (g *Group) Add(name string, l Light) *LED {
	led := &LED{name: name, light: l}
	led.every.Store(1)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		if err := l.Close(); err != nil {
			g.log.Warn("led: close", "led", name, "err", err)
		}
		return led
	}
	g.leds = append(g.leds, led)
	return led
}

// LEDs returns the Group's LEDs in the order they were added, for a status
// page that draws them.
func (g *Group) LEDs() []*LED {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]*LED(nil), g.leds...)
}

// step advances every LED by one Step.
func (g *Group) step() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return
	}
	for _, l := range g.leds {
		g.stepLED(l)
	}
}

// stepLED advances l by one Step and writes its light if the level changed.
// Called with g.mu held.
func (g *Group) stepLED(l *LED) {
	if p := Pattern(l.pattern.Load()); p != l.cur {
		l.cur, l.phase = p, 0
	}
	on := l.cur.lit(l.phase)
	l.phase++

	// A flicker takes two Steps: the pattern inverted, then the pattern as
	// it is, so back-to-back flickers stay visible as separate blinks.
	if l.flickering {
		l.flickering = false
	} else if n := l.count.Load(); n-l.shown >= l.every.Load() {
		// Everything counted so far is shown by this one flicker.
		l.shown = n
		l.flickering = true
		on = !on
	}

	if l.written && on == l.lit.Load() {
		return
	}
	if err := l.light.Set(on); err != nil {
		// written stays false so the next Step tries again; the log hears
		// about it once.
		l.written = false
		if !l.failing {
			l.failing = true
			g.log.Warn("led: cannot set", "led", l.name, "err", err)
		}
		return
	}
	if l.failing {
		l.failing = false
		g.log.Info("led: works again", "led", l.name)
	}
	l.written = true
	l.lit.Store(on)
}

// Close stops the Group's goroutine and closes every light, which leaves
// GPIO LEDs dark and gives kernel LEDs their trigger back. Calling it
// again does nothing and returns nil.
func (g *Group) Close() error {
	var err error
	g.once.Do(func() {
		g.stop()
		close(g.done)
		<-g.exited
		g.mu.Lock()
		defer g.mu.Unlock()
		g.closed = true
		var errs []error
		for _, l := range g.leds {
			if cerr := l.light.Close(); cerr != nil {
				errs = append(errs, fmt.Errorf("led %s: %w", l.name, cerr))
			}
			l.lit.Store(false)
		}
		err = errors.Join(errs...)
	})
	return err
}

// LED is one named LED of a Group. Its methods are safe from any goroutine
// and never block; the Group's goroutine applies them at its next Step.
type LED struct {
	name  string
	light Light

	// Set from any goroutine.
	pattern atomic.Uint32 // a Pattern
	count   atomic.Uint64 // messages counted
	every   atomic.Uint64 // messages per flicker, at least 1
	lit     atomic.Bool   // the level last written to the light

	// Owned by the Step, under Group.mu.
	cur        Pattern
	phase      uint64 // Steps since cur was set
	shown      uint64 // count when the last flicker started
	flickering bool   // the previous Step inverted the pattern
	written    bool   // the light holds lit
	failing    bool   // the last Set failed (and was logged)
}

// Name returns the name the LED was added with.
func (l *LED) Name() string { return l.name }

// Device describes the lamp behind the LED as its Light names itself
// ("GPIO17", a sysfs LED's directory, "simulated"), or "" for a Light
// without a String method. The status page shows it, so that a wrong pin
// is seen before anyone climbs up to the cabinet.
func (l *LED) Device() string {
	if s, ok := l.light.(fmt.Stringer); ok {
		return s.String()
	}
	return ""
}

// Set shows p from the next Step on, starting at the beginning of p's
// cycle. Setting the pattern the LED already shows changes nothing, so a
// caller may set it on every health report without restarting the blink.
func (l *LED) Set(p Pattern) { l.pattern.Store(uint32(p)) }

// Pattern returns the pattern last set.
func (l *LED) Pattern() Pattern { return Pattern(l.pattern.Load()) }

// Lit reports whether the LED is lit now, as last written to its light.
func (l *LED) Lit() bool { return l.lit.Load() }

// Count adds n messages to the LED's traffic count; it flickers once for
// every SetFlickerEvery messages, and never more often than every other
// Step. It is one atomic add, so it may be called per message, or with the
// difference of a counter such as broker.Stats().MessagesIn between polls.
func (l *LED) Count(n uint64) { l.count.Add(n) }

// SetFlickerEvery sets how many counted messages make one flicker; 0 is
// taken as 1, which is the default.
func (l *LED) SetFlickerEvery(n uint64) { l.every.Store(max(n, 1)) }

// Interface guards.
var (
	_ Light = (*GPIO)(nil)
	_ Light = (*Sysfs)(nil)
	_ Light = (*Sim)(nil)
)
