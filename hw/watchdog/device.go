package watchdog

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
	"time"
)

// DefaultDevice is the kernel's watchdog device.
const DefaultDevice = "/dev/watchdog"

// Bytes written to the device. The kernel pings on any write and disarms on
// close only if the last write ended with 'V', so a keepalive must not be
// 'V'.
const (
	keepalive  = 'k'
	magicClose = 'V'
)

// DeviceOptions configure OpenDevice.
type DeviceOptions struct {
	// Timeout is set on the device with WDIOC_SETTIMEOUT, in whole
	// seconds; 0 keeps the driver's. The Raspberry Pi's bcm2835 watchdog
	// takes at most 15 s.
	Timeout time.Duration

	// StandIn accepts a file that is not a watchdog (a plain file or a pty
	// in tests): the timeout ioctls, which such a file answers with ENOTTY,
	// are skipped and the Timeout is taken as given. Keepalives and the
	// magic close are written as to the real device.
	StandIn bool
}

// Device is the kernel watchdog device. Opening it arms the watchdog: from
// then on it must be fed within its timeout, or closed with Close, or the
// board resets.
type Device struct {
	f       *os.File
	timeout time.Duration
	closed  bool
}

// OpenDevice opens and arms the watchdog device at path (DefaultDevice)
// and sets its timeout. If the timeout cannot be set, the device is
// disarmed again before the error is returned.
func OpenDevice(path string, opts DeviceOptions) (*Device, error) {
	if opts.Timeout < 0 || opts.Timeout%time.Second != 0 {
		return nil, fmt.Errorf("watchdog: %s: timeout %v is not a whole number of seconds", path, opts.Timeout)
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("watchdog: %w%s", err, openHint(err))
	}
	d := &Device{f: f, timeout: opts.Timeout}
	if err := d.setTimeout(opts); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// openHint explains the usual reasons the device does not open.
func openHint(err error) string {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return " (no watchdog driver loaded: dtparam=watchdog=on on a Raspberry Pi, or modprobe softdog)"
	case errors.Is(err, syscall.EBUSY):
		return " (another process holds it; systemd does when RuntimeWatchdogSec= is set)"
	case errors.Is(err, fs.ErrPermission):
		return " (needs root, or a udev rule giving the service's user the device)"
	}
	return ""
}

func (d *Device) setTimeout(opts DeviceOptions) error {
	secs := int(opts.Timeout / time.Second)
	if secs > 0 {
		err := setTimeoutIoctl(d.f, secs)
		switch {
		case err == nil:
		case opts.StandIn && (errors.Is(err, syscall.ENOTTY) || errors.Is(err, errors.ErrUnsupported)):
			return nil
		case errors.Is(err, syscall.ENOTTY):
			return fmt.Errorf("watchdog: %s is not a watchdog device", d.f.Name())
		case errors.Is(err, syscall.EINVAL):
			return fmt.Errorf("watchdog: %s refuses a timeout of %v (out of its range; the Raspberry Pi's bcm2835 watchdog allows at most 15s): %w", d.f.Name(), opts.Timeout, err)
		case errors.Is(err, syscall.EOPNOTSUPP):
			got, _ := getTimeoutIoctl(d.f)
			return fmt.Errorf("watchdog: %s cannot change its timeout, which is %ds: set the timeout to that: %w", d.f.Name(), got, err)
		default:
			return fmt.Errorf("watchdog: %s: set timeout %v: %w", d.f.Name(), opts.Timeout, err)
		}
	}
	got, err := getTimeoutIoctl(d.f)
	switch {
	case err == nil:
		// The driver may round: the timeout that counts is the one it took.
		d.timeout = time.Duration(got) * time.Second
	case opts.StandIn:
	default:
		return fmt.Errorf("watchdog: %s: read timeout: %w", d.f.Name(), err)
	}
	return nil
}

// Feed implements Feeder with a one-byte write, which the kernel takes as a
// keepalive (see the package doc for why not WDIOC_KEEPALIVE).
func (d *Device) Feed() error {
	if d.closed {
		return fmt.Errorf("watchdog: %s: closed", d.f.Name())
	}
	if _, err := d.f.Write([]byte{keepalive}); err != nil {
		return fmt.Errorf("watchdog: keepalive: %w", err)
	}
	return nil
}

// Timeout implements Feeder: the timeout the driver reported.
func (d *Device) Timeout() time.Duration { return d.timeout }

// Close implements Feeder with the magic close: 'V', then close(2), which
// disarms the watchdog unless the kernel was built with
// CONFIG_WATCHDOG_NOWAYOUT (or the driver loaded with nowayout=1), in which
// case it stays armed and the board resets after the timeout.
func (d *Device) Close() error {
	if d.closed {
		return nil
	}
	d.closed = true
	_, err := d.f.Write([]byte{magicClose})
	if cerr := d.f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("watchdog: magic close: %w", err)
	}
	return nil
}

// String implements Feeder.
func (d *Device) String() string {
	if d.timeout > 0 {
		return fmt.Sprintf("%s (timeout %v)", d.f.Name(), d.timeout)
	}
	return d.f.Name()
}
