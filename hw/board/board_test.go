package board

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"periph.io/x/conn/v3/gpio/gpiotest"
)

func TestSimulated(t *testing.T) {
	p17 := &gpiotest.Pin{N: "GPIO17", Num: 17}
	pl061 := &gpiotest.Pin{N: "gpiochip0/3", Num: 3}
	b := Simulated("Raspberry Pi 4 Model B Rev 1.4", p17, pl061)
	if !b.HasGPIO() {
		t.Fatal("HasGPIO() = false")
	}
	if got := b.String(); got != "Raspberry Pi 4 Model B Rev 1.4 (2 GPIO lines)" {
		t.Errorf("String() = %q", got)
	}
	for name, want := range map[string]any{"GPIO17": p17, "gpiochip0/3": pl061} {
		p, err := b.Pin(name)
		if err != nil || p != want {
			t.Errorf("Pin(%q) = %v, %v", name, p, err)
		}
	}
	_, err := b.Pin("GPIO40")
	if !errors.Is(err, ErrUnknownPin) || !strings.Contains(err.Error(), `"GPIO40" on Raspberry Pi 4`) {
		t.Errorf("Pin(GPIO40) = %v", err)
	}
}

func TestSimulatedNoGPIO(t *testing.T) {
	b := Simulated("")
	if b.HasGPIO() || b.String() != "no GPIO" {
		t.Errorf("HasGPIO() = %v, String() = %q", b.HasGPIO(), b.String())
	}
	if _, err := b.Pin("GPIO17"); !errors.Is(err, ErrNoGPIO) {
		t.Errorf("Pin on a board without GPIO = %v", err)
	}
}

func TestReadModel(t *testing.T) {
	root := t.TempDir()
	if got := readModel(root); got != "" {
		t.Errorf("no device tree: %q", got)
	}
	dir := filepath.Join(root, "sys/firmware/devicetree/base")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "model"), []byte("linux,dummy-virt\x00"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := readModel(root); got != "linux,dummy-virt" {
		t.Errorf("from /sys/firmware: %q", got)
	}
	dir = filepath.Join(root, "proc/device-tree")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "model"), []byte("Raspberry Pi 5 Model B Rev 1.0\x00"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := readModel(root); got != "Raspberry Pi 5 Model B Rev 1.0" {
		t.Errorf("from /proc/device-tree: %q", got)
	}
}

// TestOpen runs the real host drivers. On a machine without GPIO (CI, a
// PC) that must give a board without GPIO, not an error.
func TestOpen(t *testing.T) {
	b := Open(Options{Root: t.TempDir()})
	t.Logf("board: %s (driver errors: %v)", b, b.Err())
	if b.HasGPIO() {
		if _, err := b.Pin("no-such-pin"); !errors.Is(err, ErrUnknownPin) {
			t.Errorf("Pin(no-such-pin) = %v", err)
		}
		return
	}
	if b.String() != "no GPIO" {
		t.Errorf("String() = %q", b.String())
	}
	if _, err := b.Pin("GPIO17"); !errors.Is(err, ErrNoGPIO) {
		t.Errorf("Pin = %v", err)
	}
}

func TestSplitChipLine(t *testing.T) {
	for in, want := range map[string]struct {
		chip string
		line int
		ok   bool
	}{
		"gpiochip0/3":   {"gpiochip0", 3, true},
		"gpiochip12/31": {"gpiochip12", 31, true},
		"GPIO17":        {},
		"gpiochip/3":    {},
		"gpiochip0/":    {},
		"gpiochip0/x":   {},
		"chip0/3":       {},
		"gpiochip0/3/4": {},
	} {
		chip, line, ok := SplitChipLine(in)
		if chip != want.chip || line != want.line || ok != want.ok {
			t.Errorf("SplitChipLine(%q) = %q, %d, %v", in, chip, line, ok)
		}
	}
}
