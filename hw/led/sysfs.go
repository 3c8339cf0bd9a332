package led

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// SysfsRoot is where Linux puts its LED class devices.
const SysfsRoot = "/sys/class/leds"

// Sysfs is a Linux LED class device, such as the Raspberry Pi's ACT LED at
// /sys/class/leds/ACT (led0 on older kernels). While open, its trigger is
// "none" so the kernel does not blink it too; Close restores the trigger
// (and, if there was none, the brightness) found at open.
type Sysfs struct {
	dir        string
	on         []byte // max_brightness: "1" would be dim on a dimmable LED
	trigger    string // the trigger at open, "" if none could be read
	brightness []byte // the brightness at open
	closed     bool
}

// OpenSysfs takes over the LED class device in dir (SysfsRoot/<name>): it
// sets the trigger to "none" and darkens the LED. Writing there needs root
// or a udev rule granting the service's user access.
func OpenSysfs(dir string) (*Sysfs, error) {
	s := &Sysfs{dir: dir, on: []byte("1")}
	if b, err := os.ReadFile(filepath.Join(dir, "max_brightness")); err == nil {
		if b = bytes.TrimSpace(b); len(b) > 0 {
			s.on = b
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "brightness"))
	if err != nil {
		return nil, fmt.Errorf("led: %w", err)
	}
	s.brightness = bytes.TrimSpace(b)
	if b, err := os.ReadFile(filepath.Join(dir, "trigger")); err == nil {
		s.trigger = activeTrigger(string(b))
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("led: %w", err)
	}
	if s.trigger != "" && s.trigger != "none" {
		if err := s.write("trigger", []byte("none")); err != nil {
			return nil, err
		}
	}
	if err := s.Set(false); err != nil {
		s.restore()
		return nil, err
	}
	return s, nil
}

// activeTrigger picks the selected trigger out of a trigger file, which
// lists them all and brackets the active one: "none timer [mmc0] heartbeat".
func activeTrigger(list string) string {
	for _, f := range strings.Fields(list) {
		if len(f) > 2 && f[0] == '[' && f[len(f)-1] == ']' {
			return f[1 : len(f)-1]
		}
	}
	return ""
}

// Set implements Light.
func (s *Sysfs) Set(on bool) error {
	if s.closed {
		return ErrClosed
	}
	v := []byte("0")
	if on {
		v = s.on
	}
	return s.write("brightness", v)
}

// Close implements Light: the trigger found at open is restored, or, if
// the LED had none, its brightness.
func (s *Sysfs) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	return s.restore()
}

func (s *Sysfs) restore() error {
	if s.trigger != "" && s.trigger != "none" {
		return s.write("trigger", []byte(s.trigger))
	}
	return s.write("brightness", s.brightness)
}

// write stores v in the attribute. Each write opens the file afresh and
// truncates it: sysfs takes every write(2) whole, and a plain file standing
// in for it in tests must not keep the tail of a longer earlier value.
// Writes happen only on an edge, so the open is not a cost worth saving.
func (s *Sysfs) write(attr string, v []byte) error {
	f, err := os.OpenFile(filepath.Join(s.dir, attr), os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return fmt.Errorf("led: %w", err)
	}
	_, err = f.Write(v)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("led: write %q to %s: %w", v, f.Name(), err)
	}
	return nil
}

// String returns the LED's directory, for logs.
func (s *Sysfs) String() string { return s.dir }
