package led

import (
	"fmt"

	"periph.io/x/conn/v3/gpio"
)

// GPIO is an LED on a GPIO pin, lit at High (wired from the pin through a
// resistor to ground) or, active-low, at Low (wired from 3.3 V to the pin).
type GPIO struct {
	pin    gpio.PinOut
	lit    gpio.Level
	closed bool
}

// NewGPIO drives the LED on p dark and returns it. A pin's level at boot is
// whatever the firmware left, so the LED starts dark rather than showing a
// meaning nobody chose.
func NewGPIO(p gpio.PinOut, activeLow bool) (*GPIO, error) {
	g := &GPIO{pin: p, lit: gpio.Level(!activeLow)}
	if err := g.Set(false); err != nil {
		return nil, err
	}
	return g, nil
}

// Set implements Light.
func (g *GPIO) Set(on bool) error {
	if g.closed {
		return ErrClosed
	}
	l := !g.lit
	if on {
		l = g.lit
	}
	if err := g.pin.Out(l); err != nil {
		return fmt.Errorf("led: %s: %w", g.pin, err)
	}
	return nil
}

// Close implements Light: the LED is left dark and the pin halted.
func (g *GPIO) Close() error {
	if g.closed {
		return nil
	}
	err := g.Set(false)
	g.closed = true
	if herr := g.pin.Halt(); herr != nil && err == nil {
		err = fmt.Errorf("led: halt %s: %w", g.pin, herr)
	}
	return err
}

// String names the pin and its polarity, for logs.
func (g *GPIO) String() string {
	// The pin's name rather than its String: periph's ioctl lines render
	// themselves as several lines of JSON, which a log line must not carry.
	name := g.pin.Name()
	if name == "" {
		name = fmt.Sprintf("GPIO%d", g.pin.Number())
	}
	if g.lit == gpio.Low {
		return name + " (active low)"
	}
	return name
}
