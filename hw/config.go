package hw

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/linemq/linemq/hw/board"
)

// Config is the hw: section of linemq.yaml. The zero value is a gateway
// with three simulated LEDs and no watchdog but systemd's.
type Config struct {
	// LEDs says where the status, cluster and traffic LEDs are.
	LEDs LEDs `yaml:"leds"`

	// Watchdog configures the hardware watchdogs.
	Watchdog Watchdog `yaml:"watchdog"`
}

// LEDs names the gateway's three LEDs. An LED left out is simulated: it
// still has a state for the status page, just no lamp.
type LEDs struct {
	// Status shows overall health: heartbeat healthy, slow blink degraded,
	// fast blink failed.
	Status LED `yaml:"status"`
	// Cluster shows membership: on in quorum, slow blink degraded, off
	// standalone.
	Cluster LED `yaml:"cluster"`
	// Traffic flickers with messages.
	Traffic LED `yaml:"traffic"`
}

// LED is where one LED is: a GPIO pin or a kernel LED, at most one.
type LED struct {
	// GPIO is the pin driving the LED: "GPIO17" (BCM numbering on a
	// Raspberry Pi), or "<chip>/<line>" such as "gpiochip0/3" for a line
	// without a name.
	GPIO string `yaml:"gpio"`

	// ActiveLow is for an LED wired from 3.3 V to the pin, lit when the pin
	// is low. GPIO only.
	ActiveLow bool `yaml:"active_low"`

	// Sysfs is the name of a Linux LED class device under
	// /sys/class/leds, such as "ACT" (the Pi's green LED; "led0" on older
	// kernels) or "PWR".
	Sysfs string `yaml:"sysfs"`

	// FlickerEvery is how many messages make one flicker (of the traffic
	// LED, normally); 0 means 1. The LED flickers at most 10 times a second whatever
	// the rate, so this only matters at low rates.
	FlickerEvery int `yaml:"flicker_every"`

	// Optional makes an LED that cannot be opened a warning (the LED is
	// then simulated) instead of a start-up error.
	Optional bool `yaml:"optional"`
}

// Watchdog configures the hardware watchdogs. systemd's watchdog needs no
// configuration here: it is used when the unit has WatchdogSec=.
type Watchdog struct {
	// Device is the kernel watchdog device, normally /dev/watchdog; empty
	// for none. Opening it arms the watchdog.
	Device string `yaml:"device"`

	// Timeout is set on Device, in whole seconds. Default 10s. The
	// Raspberry Pi's bcm2835 watchdog takes at most 15s.
	Timeout time.Duration `yaml:"timeout"`

	// GPIO is the pin wired to an external watchdog IC's input (WDI or
	// DONE); empty for none.
	GPIO string `yaml:"gpio"`

	// GPIOTimeout is the IC's timeout as wired, the data sheet's minimum.
	// Required with GPIO.
	GPIOTimeout time.Duration `yaml:"gpio_timeout"`

	// GPIOPulse makes every feed a pulse of this width for ICs that want
	// one; 0 (the default) toggles the pin, one edge per feed.
	GPIOPulse time.Duration `yaml:"gpio_pulse"`

	// Optional makes a watchdog that cannot be opened a warning instead of
	// a start-up error. Use it for a configuration shared with machines
	// that lack the watchdog, never to get past an error on the appliance.
	Optional bool `yaml:"optional"`
}

// DefaultTimeout is the kernel watchdog's timeout when none is configured:
// under the bcm2835's 15 s ceiling, and long enough that feeding every 5 s
// survives a slow moment.
const DefaultTimeout = 10 * time.Second

// maxTimeout is the largest timeout the kernel's watchdog API can carry
// with the common drivers (softdog's limit); a real chip's is lower, and
// OpenDevice reports it.
const maxTimeout = 65535 * time.Second

// Error is one configuration error: the key path relative to hw: and what
// is wrong with it. Validate and Open return them joined (errors.Join),
// so a caller can list them, or find their keys with errors.As over
// Unwrap() []error.
type Error struct {
	Key string // "leds.status.gpio"
	Err error  // what is wrong with it
}

// Error implements error.
func (e *Error) Error() string { return e.Key + ": " + e.Err.Error() }

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// maxBCM is the highest BCM GPIO number: the BCM2711 of the Pi 4 and CM4
// has 58 lines (the BCM2835/7 of earlier Pis 54, the Pi 5's RP1 fewer).
const maxBCM = 57

// Validate reports every value that is malformed or inconsistent, each as
// an *Error naming its key; several are joined. It checks what can be
// checked without the hardware: whether a pin exists on this board, or a
// device opens, is Open's to find out.
func (c *Config) Validate() error {
	var v validator
	pins := make(map[string]string) // pin -> the first key that uses it
	for _, l := range c.LEDs.named() {
		v.led("leds."+l.name, l.cfg, pins)
	}
	v.watchdog(&c.Watchdog, pins)
	return errors.Join(v.errs...)
}

type namedLED struct {
	name string
	cfg  *LED
}

// named returns the LEDs with their key names, in a fixed order.
func (l *LEDs) named() []namedLED {
	return []namedLED{{"status", &l.Status}, {"cluster", &l.Cluster}, {"traffic", &l.Traffic}}
}

type validator struct{ errs []error }

func (v *validator) fail(key string, format string, args ...any) {
	v.errs = append(v.errs, &Error{Key: key, Err: fmt.Errorf(format, args...)})
}

func (v *validator) led(key string, l *LED, pins map[string]string) {
	switch {
	case l.GPIO != "" && l.Sysfs != "":
		v.fail(key, "set gpio or sysfs, not both")
	case l.GPIO != "":
		v.pin(key+".gpio", l.GPIO, pins)
	case l.Sysfs != "":
		if l.Sysfs == "." || l.Sysfs == ".." || strings.ContainsAny(l.Sysfs, "/\x00") {
			v.fail(key+".sysfs", "%q is not an LED name (a directory in /sys/class/leds, such as ACT)", l.Sysfs)
		}
	}
	if l.ActiveLow && l.GPIO == "" {
		v.fail(key+".active_low", "only applies to a gpio LED (a kernel LED's polarity is in its device tree)")
	}
	if l.FlickerEvery < 0 {
		v.fail(key+".flicker_every", "must not be negative (got %d)", l.FlickerEvery)
	}
}

func (v *validator) watchdog(w *Watchdog, pins map[string]string) {
	if w.Device != "" && !filepath.IsAbs(w.Device) {
		v.fail("watchdog.device", "%q is not an absolute path (normally /dev/watchdog)", w.Device)
	}
	switch t := w.Timeout; {
	case t < 0 || t > maxTimeout:
		v.fail("watchdog.timeout", "%v out of range (1s..%v)", t, maxTimeout)
	case t%time.Second != 0:
		v.fail("watchdog.timeout", "%v is not a whole number of seconds (the kernel sets it in seconds)", t)
	}

	if w.GPIO == "" {
		if w.GPIOTimeout != 0 {
			v.fail("watchdog.gpio_timeout", "set without watchdog.gpio")
		}
		if w.GPIOPulse != 0 {
			v.fail("watchdog.gpio_pulse", "set without watchdog.gpio")
		}
		return
	}
	v.pin("watchdog.gpio", w.GPIO, pins)
	switch {
	case w.GPIOTimeout == 0:
		v.fail("watchdog.gpio_timeout", "required with watchdog.gpio: the IC's timeout, the minimum from its data sheet")
	case w.GPIOTimeout < 0:
		v.fail("watchdog.gpio_timeout", "must not be negative (got %v)", w.GPIOTimeout)
	case w.GPIOTimeout < 10*time.Millisecond:
		// Feeding twice a timeout from a Go ticker needs some slack.
		v.fail("watchdog.gpio_timeout", "%v is too short to feed reliably (at least 10ms)", w.GPIOTimeout)
	}
	switch {
	case w.GPIOPulse < 0:
		v.fail("watchdog.gpio_pulse", "must not be negative (got %v)", w.GPIOPulse)
	case w.GPIOPulse > 0 && w.GPIOTimeout > 0 && w.GPIOPulse >= w.GPIOTimeout/2:
		v.fail("watchdog.gpio_pulse", "%v is not short beside gpio_timeout %v", w.GPIOPulse, w.GPIOTimeout)
	}
}

// pin checks a pin name's form and that no other key uses the pin.
func (v *validator) pin(key, name string, pins map[string]string) {
	if first, dup := pins[name]; dup {
		v.fail(key, "%s is also %s", name, first)
		return
	}
	pins[name] = key
	if n, ok := strings.CutPrefix(name, "GPIO"); ok {
		if i, err := strconv.Atoi(n); err == nil {
			if i < 0 || i > maxBCM {
				v.fail(key, "unknown pin %q (BCM numbering runs from GPIO0 to GPIO%d)", name, maxBCM)
			}
			return
		}
	}
	if strings.Contains(name, "/") {
		if _, _, ok := board.SplitChipLine(name); !ok {
			v.fail(key, "invalid pin %q (write a line without a name as <chip>/<line>, such as gpiochip0/3)", name)
		}
		return
	}
	// Another name the kernel gives a line ("ID_SDA"); whether this board
	// has it is for Open to find out.
	for _, r := range name {
		if !(r == '_' || r == '-' || r == '.' || r >= '0' && r <= '9' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z') {
			v.fail(key, "invalid pin name %q", name)
			return
		}
	}
}
