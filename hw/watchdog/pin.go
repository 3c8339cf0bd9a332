package watchdog

import (
	"fmt"
	"time"

	"periph.io/x/conn/v3/gpio"
)

// PinOptions configure NewPin.
type PinOptions struct {
	// Timeout is the IC's timeout as wired (its data sheet, its timing
	// resistor or its SET pins), which the Supervisor feeds within. Use the
	// data sheet's minimum, not its typical value.
	Timeout time.Duration

	// Pulse, if not 0, makes every feed a pulse of this width (high, then
	// low) for ICs that count rising edges or want a DONE pulse. 0 toggles
	// the pin on every feed, which is one edge per feed for the common
	// edge-triggered WDI input (MAX6369, TPS3823 and their kind).
	Pulse time.Duration
}

// Pin is an external watchdog IC fed through a GPIO pin.
type Pin struct {
	pin   gpio.PinOut
	opts  PinOptions
	level gpio.Level
	sleep func(time.Duration) // time.Sleep; tests may shorten it
}

// NewPin drives p low and returns a feeder that toggles or pulses it.
func NewPin(p gpio.PinOut, opts PinOptions) (*Pin, error) {
	if opts.Timeout < 0 || opts.Pulse < 0 {
		return nil, fmt.Errorf("watchdog: %s: negative timeout or pulse", p)
	}
	if opts.Timeout > 0 && opts.Pulse >= opts.Timeout/2 {
		return nil, fmt.Errorf("watchdog: %s: pulse %v is not short beside timeout %v", p, opts.Pulse, opts.Timeout)
	}
	if err := p.Out(gpio.Low); err != nil {
		return nil, fmt.Errorf("watchdog: %s: %w", p, err)
	}
	return &Pin{pin: p, opts: opts, level: gpio.Low, sleep: time.Sleep}, nil
}

// Feed implements Feeder: one edge (toggle) or one pulse.
func (w *Pin) Feed() error {
	if w.opts.Pulse == 0 {
		if err := w.pin.Out(!w.level); err != nil {
			return fmt.Errorf("watchdog: %s: %w", w.pin, err)
		}
		w.level = !w.level
		return nil
	}
	if err := w.pin.Out(gpio.High); err != nil {
		return fmt.Errorf("watchdog: %s: %w", w.pin, err)
	}
	w.sleep(w.opts.Pulse)
	if err := w.pin.Out(gpio.Low); err != nil {
		return fmt.Errorf("watchdog: %s: %w", w.pin, err)
	}
	return nil
}

// Timeout implements Feeder.
func (w *Pin) Timeout() time.Duration { return w.opts.Timeout }

// Close implements Feeder: the pin is released to a high-impedance input
// if it can be one, and otherwise left as it is. Parts that disable their
// watchdog while WDI floats (the MAX823/TPS3823 family, by their data
// sheets) are disarmed by that; any other IC has no software off switch,
// keeps counting, and resets the board after its timeout unless the
// system has powered off or rebooted by then.
func (w *Pin) Close() error {
	in, ok := w.pin.(gpio.PinIn)
	if !ok {
		return nil
	}
	if err := in.In(gpio.Float, gpio.NoEdge); err != nil {
		return fmt.Errorf("watchdog: release %s: %w", w.pin, err)
	}
	return nil
}

// String implements Feeder.
func (w *Pin) String() string {
	return fmt.Sprintf("watchdog IC on %s", w.pin)
}
