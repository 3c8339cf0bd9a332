package watchdog

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/linemq/linemq/broker/brokertest"
)

// standIn returns the path of an empty file standing in for /dev/watchdog.
func standIn(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "watchdog")
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func contents(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestDeviceKeepalivesAndMagicClose(t *testing.T) {
	p := standIn(t)
	d, err := OpenDevice(p, DeviceOptions{Timeout: 10 * time.Second, StandIn: true})
	if err != nil {
		t.Fatal(err)
	}
	if d.Timeout() != 10*time.Second {
		t.Errorf("Timeout() = %v", d.Timeout())
	}
	g := newGate()
	s, clk := start(t, g, d)
	clk.Advance(5 * time.Second)
	clk.Advance(5 * time.Second)
	if got := contents(t, p); got != "kk" && got != "kkk" {
		t.Fatalf("device got %q after three checks (the last may still run), want keepalives", got)
	}

	// Feeding stops within one period of the gate failing: a check that
	// passed the gate before it failed may still write its keepalive, no
	// later one does.
	g.set(false, "broker: liveness probe blocked")
	clk.Advance(5 * time.Second)
	clk.Advance(5 * time.Second) // the check that saw the failure is done
	fed := contents(t, p)
	for range 4 {
		clk.Advance(5 * time.Second)
	}
	if got := contents(t, p); got != fed {
		t.Errorf("keepalives after the gate failed: %q, then %q", fed, got)
	}

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := contents(t, p); got != fed+"V" {
		t.Errorf("device got %q, want %q then the magic close", got, fed)
	}
	if err := d.Feed(); err == nil {
		t.Error("Feed after Close succeeded")
	}
}

// TestDevicePty uses a pty, a character device that, like a watchdog
// device node, answers the watchdog ioctls with ENOTTY unless it is one.
func TestDevicePty(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("pty setup is Linux's")
	}
	master, slave := openPty(t)

	if _, err := OpenDevice(slave, DeviceOptions{Timeout: 10 * time.Second}); err == nil || !strings.Contains(err.Error(), "is not a watchdog device") {
		t.Fatalf("OpenDevice(pty) without StandIn = %v", err)
	}
	if got := readPty(t, master, 1); got != "V" {
		t.Errorf("a device that failed to open was not disarmed: read %q", got)
	}

	d, err := OpenDevice(slave, DeviceOptions{Timeout: 10 * time.Second, StandIn: true})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := d.Feed(); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if got := readPty(t, master, 4); got != "kkkV" {
		t.Errorf("pty read %q, want kkkV", got)
	}
	if err := d.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func openPty(t *testing.T) (master *os.File, slave string) {
	t.Helper()
	fd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Skipf("no pty: %v", err)
	}
	master = os.NewFile(uintptr(fd), "/dev/ptmx")
	t.Cleanup(func() { master.Close() })
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlockpt: %v", err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("ptsname: %v", err)
	}
	return master, fmt.Sprintf("/dev/pts/%d", n)
}

// readPty reads n bytes from the master side, failing after a deadline.
func readPty(t *testing.T, master *os.File, n int) string {
	t.Helper()
	var got []byte
	done := make(chan error, 1)
	go func() {
		buf := make([]byte, 16)
		for len(got) < n {
			k, err := master.Read(buf)
			if err != nil {
				done <- err
				return
			}
			got = append(got, buf[:k]...)
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("read pty: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("read pty: timed out")
	}
	return string(got)
}

func TestDeviceNotAWatchdog(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the ioctls are Linux's")
	}
	p := standIn(t)
	_, err := OpenDevice(p, DeviceOptions{Timeout: 10 * time.Second})
	if err == nil || !strings.Contains(err.Error(), "is not a watchdog device") {
		t.Fatalf("OpenDevice(plain file) = %v", err)
	}
	if got := contents(t, p); got != "V" {
		t.Errorf("file got %q: a failed open must disarm with the magic close", got)
	}
}

func TestDeviceOpenErrors(t *testing.T) {
	_, err := OpenDevice(filepath.Join(t.TempDir(), "watchdog"), DeviceOptions{})
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "softdog") {
		t.Errorf("missing device: %v", err)
	}
	_, err = OpenDevice(standIn(t), DeviceOptions{Timeout: 1500 * time.Millisecond, StandIn: true})
	if err == nil || !strings.Contains(err.Error(), "whole number of seconds") {
		t.Errorf("1.5s timeout: %v", err)
	}
}

// TestSoftdog runs against a real watchdog when the test may use one:
// LINEMQ_TEST_WATCHDOG=/dev/watchdog1 (softdog, say, loaded with
// soft_noboot=1 so a mistake prints rather than reboots).
func TestSoftdog(t *testing.T) {
	p := os.Getenv("LINEMQ_TEST_WATCHDOG")
	if p == "" {
		t.Skip("LINEMQ_TEST_WATCHDOG not set")
	}
	d, err := OpenDevice(p, DeviceOptions{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if d.Timeout() != 5*time.Second {
		t.Errorf("Timeout() = %v", d.Timeout())
	}
	s, err := New(Options{Feeders: []Feeder{d}, Gate: newGate()})
	if err != nil {
		t.Fatal(err)
	}
	brokertest.Eventually(t, 5*time.Second, "fed", func() bool { return !s.State().LastFeed.IsZero() })
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}
