// Package hw is the gateway's hardware: its status, cluster and traffic
// LEDs and its watchdogs, opened from the hw: section of the configuration
// ([Config]) in one call ([Open]) and closed in one ([Hardware.Close]).
//
// The parts are packages of their own: hw/led (patterns on lights),
// hw/watchdog (feeding while healthy) and hw/board (the only importer of
// periph.io/x/host). This package only reads the configuration and wires
// them, so that the gateway calls Open, sets LED patterns from its health
// registry, and calls Ready when its listeners accept.
//
// # Simulation
//
// On a machine without GPIO (a PC, CI) every GPIO LED is simulated and the
// log says so once; an LED that is not configured is simulated anywhere.
// A simulated LED keeps its state, so the status page shows the same LEDs
// on every machine. Watchdogs are never simulated: a watchdog IC the
// configuration names but that cannot be fed would reset the board, so
// that is an error unless watchdog.optional is set.
package hw

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/linemq/linemq/hw/board"
	"github.com/linemq/linemq/hw/led"
	"github.com/linemq/linemq/hw/watchdog"
)

// Options are what Open needs besides the configuration.
type Options struct {
	// Gate decides whether the watchdogs are fed: the gateway's health
	// registry. Required when any watchdog (systemd's included) is in use.
	Gate watchdog.Gate

	// Logger receives one line describing the hardware, and warnings for
	// optional parts that could not be opened. Nil discards.
	Logger *slog.Logger

	// Board is the machine; nil opens the real one (board.Open). Tests pass
	// board.Simulated.
	Board *board.Board

	// SysfsRoot is where kernel LEDs are; "" means led.SysfsRoot.
	SysfsRoot string

	// Getenv reads systemd's NOTIFY_SOCKET and WATCHDOG_USEC; nil means
	// os.Getenv.
	Getenv func(string) string

	// standIn lets tests open a plain file as the watchdog device.
	standIn bool
}

// Hardware is the opened hardware. Its fields are set by Open and never
// change.
type Hardware struct {
	// Board is the machine.
	Board *board.Board

	// LEDs drives the three LEDs below, for a status page that lists them.
	LEDs *led.Group

	// Status, Cluster and Traffic are the gateway's LEDs; each is real or
	// simulated, as configured and available. They start dark.
	Status, Cluster, Traffic *led.LED

	// Watchdog feeds the watchdogs while Options.Gate passes; call its
	// Ready once the gateway accepts clients, and read its State for the
	// status page. With no watchdog it feeds nothing and says so.
	Watchdog *watchdog.Supervisor

	// lamps counts the LEDs that drive a real lamp (not simulated).
	lamps int
}

// Configured reports whether there is hardware to show: an LED that drives
// a lamp, or a watchdog being fed (systemd's included). Three simulated
// LEDs and nothing to feed, a PC's usual state, are no hardware: a status
// page should say "not configured" rather than list make-believe parts.
func (h *Hardware) Configured() bool {
	return h.lamps > 0 || len(h.Watchdog.State().Feeders) > 0
}

// Open validates cfg, opens the LEDs and watchdogs it names and starts
// driving them. An LED or watchdog that cannot be opened is an *Error
// naming its key, unless it is marked optional; all such errors are
// reported together, and whatever was opened is closed again.
//
// A kernel watchdog is armed from here on: from now on the gateway must be
// healthy, as Options.Gate sees it, within the watchdog's timeout.
func Open(cfg Config, opts Options) (*Hardware, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	b := opts.Board
	if b == nil {
		b = board.Open(board.Options{})
	}
	if err := b.Err(); err != nil {
		// Some driver failing is normal (one may need root the service
		// does not have); what matters is whether the pins work.
		log.Debug("hardware: host drivers", "err", err)
	}
	o := opener{cfg: &cfg, opts: &opts, board: b, log: log}

	h := &Hardware{Board: b, LEDs: led.NewGroup(led.Options{Logger: log})}
	add := func(name string, c *LED) *led.LED {
		light := o.light("leds."+name, c)
		if _, sim := light.(*led.Sim); !sim {
			h.lamps++
		}
		l := h.LEDs.Add(name, light)
		l.SetFlickerEvery(uint64(c.FlickerEvery))
		return l
	}
	h.Status = add("status", &cfg.LEDs.Status)
	h.Cluster = add("cluster", &cfg.LEDs.Cluster)
	h.Traffic = add("traffic", &cfg.LEDs.Traffic)

	feeders := o.feeders()
	if len(o.errs) == 0 && len(feeders) > 0 && opts.Gate == nil {
		o.errs = append(o.errs, errors.New("hw: Options.Gate is required to feed a watchdog"))
	}
	if len(o.errs) > 0 {
		closeFeeders(feeders)
		h.LEDs.Close()
		return nil, errors.Join(o.errs...)
	}
	gate := opts.Gate
	if gate == nil {
		// No feeders: the Supervisor never asks.
		gate = watchdog.GateFunc(func() (bool, string) { return false, "no health gate" })
	}
	wd, err := watchdog.New(watchdog.Options{Feeders: feeders, Gate: gate, Logger: log})
	if err != nil {
		closeFeeders(feeders)
		h.LEDs.Close()
		return nil, fmt.Errorf("hw: %w", err)
	}
	h.Watchdog = wd

	if !b.HasGPIO() {
		log.Info("hardware: no GPIO: simulated LEDs", "board", b.String(), "leds", o.summary(), "watchdogs", wd.State().Feeders)
	} else {
		log.Info("hardware", "board", b.String(), "leds", o.summary(), "watchdogs", wd.State().Feeders)
	}
	return h, nil
}

// opener opens the parts of one Config, collecting errors.
type opener struct {
	cfg   *Config
	opts  *Options
	board *board.Board
	log   *slog.Logger
	errs  []error
	leds  []string // "status=GPIO17", for the log line
}

// light opens one LED, or a simulated one when it is not configured, the
// board has no GPIO, or it is optional and fails.
func (o *opener) light(key string, c *LED) led.Light {
	name := strings.TrimPrefix(key, "leds.")
	var (
		l   led.Light
		err *Error
	)
	switch {
	case c.Sysfs != "":
		root := o.opts.SysfsRoot
		if root == "" {
			root = led.SysfsRoot
		}
		s, serr := led.OpenSysfs(filepath.Join(root, c.Sysfs))
		if serr != nil {
			err = &Error{Key: key + ".sysfs", Err: fmt.Errorf("cannot drive LED %q: %w", c.Sysfs, plain(serr, "led: "))}
		} else {
			l = s
		}
	case c.GPIO != "" && !o.board.HasGPIO():
		// Said once for all LEDs, in Open's summary line.
	case c.GPIO != "":
		l, err = o.gpioLED(key, c)
	}
	if err != nil {
		if !c.Optional {
			o.errs = append(o.errs, err)
		} else {
			o.log.Warn("hardware: optional LED simulated", "led", name, "err", err)
		}
	}
	if l == nil {
		o.leds = append(o.leds, name+"=simulated")
		return led.NewSim()
	}
	o.leds = append(o.leds, fmt.Sprintf("%s=%s", name, l))
	return l
}

func (o *opener) gpioLED(key string, c *LED) (led.Light, *Error) {
	p, err := o.board.Pin(c.GPIO)
	if err != nil {
		return nil, &Error{Key: key + ".gpio", Err: pinError(c.GPIO, o.board, err)}
	}
	l, err := led.NewGPIO(p, c.ActiveLow)
	if err != nil {
		return nil, &Error{Key: key + ".gpio", Err: fmt.Errorf("cannot drive %s: %w", c.GPIO, err)}
	}
	return l, nil
}

// pinError words a board.Pin error for someone editing the configuration.
func pinError(name string, b *board.Board, err error) error {
	switch {
	case errors.Is(err, board.ErrUnknownPin):
		return fmt.Errorf("unknown pin %q on %s", name, b)
	case errors.Is(err, board.ErrNoGPIO):
		return fmt.Errorf("pin %q: this machine has no GPIO", name)
	}
	return err
}

// feeders opens the configured watchdogs, then systemd's if the service
// runs under it, in the order they are fed.
func (o *opener) feeders() []watchdog.Feeder {
	w := &o.cfg.Watchdog
	var fs []watchdog.Feeder
	fail := func(key string, err error) {
		if w.Optional {
			o.log.Warn("hardware: optional watchdog not used", "key", key, "err", err)
			return
		}
		o.errs = append(o.errs, &Error{Key: key, Err: err})
	}
	if w.Device != "" {
		timeout := w.Timeout
		if timeout == 0 {
			timeout = DefaultTimeout
		}
		d, err := watchdog.OpenDevice(w.Device, watchdog.DeviceOptions{Timeout: timeout, StandIn: o.opts.standIn})
		if err != nil {
			fail("watchdog.device", plain(err, "watchdog: "))
		} else {
			fs = append(fs, d)
		}
	}
	if w.GPIO != "" {
		if p, err := o.board.Pin(w.GPIO); err != nil {
			fail("watchdog.gpio", pinError(w.GPIO, o.board, err))
		} else if ic, err := watchdog.NewPin(p, watchdog.PinOptions{Timeout: w.GPIOTimeout, Pulse: w.GPIOPulse}); err != nil {
			fail("watchdog.gpio", plain(err, "watchdog: "))
		} else {
			fs = append(fs, ic)
		}
	}
	getenv := o.opts.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	n, err := watchdog.NotifierFromEnv(getenv, os.Getpid())
	switch {
	case err != nil:
		// Not a configuration key: systemd set the environment.
		o.errs = append(o.errs, fmt.Errorf("hw: systemd notify: %w", err))
	case n != nil:
		fs = append(fs, n)
	}
	return fs
}

// plain drops a package prefix, which means nothing in a configuration
// error, from err's message, keeping err for errors.Is.
func plain(err error, prefix string) error {
	return &plainError{strings.TrimPrefix(err.Error(), prefix), err}
}

type plainError struct {
	msg string
	err error
}

// Error returns the message without the prefix.
func (e *plainError) Error() string { return e.msg }

// Unwrap returns the original error.
func (e *plainError) Unwrap() error { return e.err }

func (o *opener) summary() string { return strings.Join(o.leds, " ") }

func closeFeeders(fs []watchdog.Feeder) {
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i].Close()
	}
}

// Close stops feeding and disarms what can be disarmed (STOPPING=1 to
// systemd, the magic close to the kernel watchdog), then darkens the LEDs
// and gives kernel LEDs their triggers back. Calling it again returns nil.
func (h *Hardware) Close() error {
	return errors.Join(h.Watchdog.Close(), h.LEDs.Close())
}
