// Package board is the one place linemq touches periph.io/x/host: it loads
// the host drivers (host.Init), finds pins by the names the configuration
// gives them, and says what board this is for the log. Everything else in
// hw sees plain gpio.PinIO values, and tests and machines without GPIO use
// a [Simulated] board.
//
// # Pin names
//
// A pin is named as periph's registry knows it: "GPIO17" on a Raspberry Pi
// (BCM numbering, the same on every model, Pi 5 included, where the names
// come from the RP1 chip's line names). A GPIO line whose chip gives it no
// name, as on a QEMU board's PL061, is written "<chip>/<line>", for
// instance "gpiochip0/3", and found through the GPIO character device.
package board

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"periph.io/x/conn/v3/gpio"
	"periph.io/x/conn/v3/gpio/gpioreg"
	"periph.io/x/host/v3"
	"periph.io/x/host/v3/gpioioctl"
)

// Errors from Board.Pin.
var (
	// ErrNoGPIO means the machine has no GPIO periph can drive.
	ErrNoGPIO = errors.New("board: no GPIO on this machine")
	// ErrUnknownPin means the board has GPIO but no pin of that name.
	ErrUnknownPin = errors.New("board: unknown pin")
)

// Options configure Open.
type Options struct {
	// Root is prepended to the paths the board model is read from
	// (/proc/device-tree/model); "" means "/". Tests point it at a
	// directory of their own.
	Root string
}

// Board is the machine's GPIO and its name. Its methods are safe for
// concurrent use.
type Board struct {
	model string
	lines int                          // GPIO lines, 0 for none
	pin   func(name string) gpio.PinIO // nil result: no such pin
	err   error                        // host drivers that failed
}

// Open loads periph's host drivers and describes the machine. It does not
// fail: a machine whose drivers find no GPIO gets a Board without GPIO,
// and a driver that failed is reported by Err.
func Open(opts Options) *Board {
	b := &Board{model: readModel(opts.Root), pin: lookup}
	if _, err := host.Init(); err != nil {
		b.err = fmt.Errorf("board: host drivers: %w", err)
	}
	b.lines = countLines()
	return b
}

// countLines counts the GPIO lines periph can drive. The character device's
// chips are counted line by line, because a line without a name (every
// line of a QEMU board's PL061) is not in periph's registry but can still be
// used as "<chip>/<line>"; without chips, the registry is all there is.
func countLines() int {
	n := 0
	for _, c := range gpioioctl.Chips {
		n += c.LineCount()
	}
	return max(n, len(gpioreg.All()))
}

// lookup finds a pin in periph's registry, or a "<chip>/<line>" on the
// GPIO character device.
func lookup(name string) gpio.PinIO {
	if p := gpioreg.ByName(name); p != nil {
		return p
	}
	chip, line, ok := SplitChipLine(name)
	if !ok {
		return nil
	}
	for _, c := range gpioioctl.Chips {
		if c.Name() == chip {
			if l := c.ByNumber(line); l != nil {
				return l
			}
		}
	}
	return nil
}

// SplitChipLine parses a "<chip>/<line>" pin name such as "gpiochip0/3".
func SplitChipLine(name string) (chip string, line int, ok bool) {
	chip, num, found := strings.Cut(name, "/")
	if !found || !strings.HasPrefix(chip, "gpiochip") {
		return "", 0, false
	}
	if _, err := strconv.ParseUint(chip[len("gpiochip"):], 10, 16); err != nil {
		return "", 0, false
	}
	n, err := strconv.ParseUint(num, 10, 16)
	if err != nil {
		return "", 0, false
	}
	return chip, int(n), true
}

// readModel returns the device tree's model string ("Raspberry Pi 4 Model
// B Rev 1.4"), or "" where there is none (a PC).
func readModel(root string) string {
	if root == "" {
		root = "/"
	}
	for _, p := range []string{"proc/device-tree/model", "sys/firmware/devicetree/base/model"} {
		if b, err := os.ReadFile(filepath.Join(root, p)); err == nil {
			// The property is a NUL-terminated string.
			b, _, _ = bytes.Cut(b, []byte{0})
			if m := strings.TrimSpace(string(b)); m != "" {
				return m
			}
		}
	}
	return ""
}

// Simulated returns a board with the given pins, found by their Name(), and
// no others. Without pins it is a board with no GPIO, like a PC. Tests pass
// gpiotest pins.
func Simulated(model string, pins ...gpio.PinIO) *Board {
	byName := make(map[string]gpio.PinIO, len(pins))
	for _, p := range pins {
		byName[p.Name()] = p
	}
	return &Board{model: model, lines: len(pins), pin: func(name string) gpio.PinIO { return byName[name] }}
}

// Model returns the board's model as its device tree names it, or "".
func (b *Board) Model() string { return b.model }

// HasGPIO reports whether the board has GPIO lines to drive.
func (b *Board) HasGPIO() bool { return b.lines > 0 }

// Err returns the failures of host drivers at Open, nil if none failed. A
// driver can fail while others work (one that needs root, say), so this is
// for the log; HasGPIO and Pin tell what can be used.
func (b *Board) Err() error { return b.err }

// Pin returns the pin called name. The errors are ErrNoGPIO and
// ErrUnknownPin, wrapped with the name and the board.
func (b *Board) Pin(name string) (gpio.PinIO, error) {
	if !b.HasGPIO() {
		return nil, fmt.Errorf("pin %q: %w", name, ErrNoGPIO)
	}
	if p := b.pin(name); p != nil {
		return p, nil
	}
	return nil, fmt.Errorf("%w %q on %s", ErrUnknownPin, name, b)
}

// String describes the board for the log: "Raspberry Pi 4 Model B Rev 1.4
// (58 GPIO lines)", or "no GPIO".
func (b *Board) String() string {
	model := b.model
	if model == "" {
		model = "unknown board"
	}
	switch {
	case b.lines == 0 && b.model == "":
		return "no GPIO"
	case b.lines == 0:
		return model + ", no GPIO"
	}
	if b.lines == 1 {
		return model + " (1 GPIO line)"
	}
	return fmt.Sprintf("%s (%d GPIO lines)", model, b.lines)
}
