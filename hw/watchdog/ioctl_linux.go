package watchdog

import (
	"os"

	"golang.org/x/sys/unix"
)

// setTimeoutIoctl sets the watchdog's timeout in seconds (WDIOC_SETTIMEOUT;
// the kernel pings the watchdog as it does so).
func setTimeoutIoctl(f *os.File, secs int) error {
	return control(f, func(fd int) error { return unix.IoctlSetPointerInt(fd, unix.WDIOC_SETTIMEOUT, secs) })
}

// getTimeoutIoctl reads the watchdog's timeout in seconds
// (WDIOC_GETTIMEOUT).
func getTimeoutIoctl(f *os.File) (int, error) {
	var secs int
	err := control(f, func(fd int) error {
		var err error
		secs, err = unix.IoctlGetInt(fd, unix.WDIOC_GETTIMEOUT)
		return err
	})
	return secs, err
}

// control runs fn on f's descriptor without f.Fd, which would switch the
// file to blocking mode for good.
func control(f *os.File, fn func(fd int) error) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = fn(int(fd)) }); err != nil {
		return err
	}
	return ferr
}
