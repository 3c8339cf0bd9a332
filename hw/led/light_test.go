package led

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"periph.io/x/conn/v3/gpio"
)

// testLight checks the Light contract on one backend. open returns a fresh
// light and a probe reporting whether it is lit.
func testLight(t *testing.T, open func(t *testing.T) (Light, func() bool)) {
	t.Run("set", func(t *testing.T) {
		l, lit := open(t)
		if lit() {
			t.Fatal("lit right after opening")
		}
		for _, on := range []bool{true, true, false, false, true} {
			if err := l.Set(on); err != nil {
				t.Fatalf("Set(%v): %v", on, err)
			}
			if lit() != on {
				t.Fatalf("Set(%v) left it lit=%v", on, lit())
			}
		}
	})
	t.Run("close", func(t *testing.T) {
		l, _ := open(t)
		if err := l.Set(true); err != nil {
			t.Fatal(err)
		}
		if err := l.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if err := l.Set(true); !errors.Is(err, ErrClosed) {
			t.Errorf("Set after Close = %v, want ErrClosed", err)
		}
		if err := l.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
	})
}

func TestGPIOLight(t *testing.T) {
	for _, activeLow := range []bool{false, true} {
		t.Run(map[bool]string{false: "active high", true: "active low"}[activeLow], func(t *testing.T) {
			testLight(t, func(t *testing.T) (Light, func() bool) {
				pin := newRecPin("GPIO17")
				// The pin starts at the level that would light the LED, as
				// firmware may leave it.
				pin.L = gpio.Level(!activeLow)
				l, err := NewGPIO(pin, activeLow)
				if err != nil {
					t.Fatal(err)
				}
				return l, func() bool { return pin.Read() == gpio.Level(!activeLow) }
			})
		})
	}
}

func TestSimLight(t *testing.T) {
	testLight(t, func(t *testing.T) (Light, func() bool) {
		s := NewSim()
		return s, s.Lit
	})
}

func TestSysfsLight(t *testing.T) {
	testLight(t, func(t *testing.T) (Light, func() bool) {
		dir := fakeSysfsLED(t, "ACT", "none rc-feedback kbd-capslock [mmc0] timer heartbeat", "1", "255")
		l, err := OpenSysfs(dir)
		if err != nil {
			t.Fatal(err)
		}
		return l, func() bool { return readAttr(t, dir, "brightness") == "255" }
	})
}

// fakeSysfsLED makes a directory laid out like /sys/class/leds/<name>.
func fakeSysfsLED(t *testing.T, name, trigger, brightness, max string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for attr, v := range map[string]string{"trigger": trigger, "brightness": brightness, "max_brightness": max} {
		if v == "" {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, attr), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func readAttr(t *testing.T, dir, attr string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, attr))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func TestSysfsTrigger(t *testing.T) {
	t.Run("restored", func(t *testing.T) {
		dir := fakeSysfsLED(t, "ACT", "none timer oneshot [mmc0] heartbeat", "1", "1")
		l, err := OpenSysfs(dir)
		if err != nil {
			t.Fatal(err)
		}
		if got := readAttr(t, dir, "trigger"); got != "none" {
			t.Errorf("trigger while open = %q, want none", got)
		}
		if got := readAttr(t, dir, "brightness"); got != "0" {
			t.Errorf("brightness after open = %q, want 0", got)
		}
		if err := l.Set(true); err != nil {
			t.Fatal(err)
		}
		if got := readAttr(t, dir, "brightness"); got != "1" {
			t.Errorf("brightness lit = %q, want max_brightness 1", got)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if got := readAttr(t, dir, "trigger"); got != "mmc0" {
			t.Errorf("trigger after Close = %q, want mmc0", got)
		}
	})
	t.Run("none keeps brightness", func(t *testing.T) {
		dir := fakeSysfsLED(t, "PWR", "[none] timer heartbeat", "1", "")
		l, err := OpenSysfs(dir)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if got := readAttr(t, dir, "brightness"); got != "1" {
			t.Errorf("brightness after Close = %q, want the 1 found at open", got)
		}
	})
	t.Run("missing", func(t *testing.T) {
		_, err := OpenSysfs(filepath.Join(t.TempDir(), "nope"))
		if !errors.Is(err, os.ErrNotExist) {
			t.Errorf("OpenSysfs(missing) = %v, want ErrNotExist", err)
		}
	})
}

func TestActiveTrigger(t *testing.T) {
	for in, want := range map[string]string{
		"none [mmc0] timer\n": "mmc0",
		"[none] timer":        "none",
		"none timer":          "",
		"":                    "",
		"[] x":                "",
	} {
		if got := activeTrigger(in); got != want {
			t.Errorf("activeTrigger(%q) = %q, want %q", in, got, want)
		}
	}
}
