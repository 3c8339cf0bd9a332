package watchdog

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Notifier speaks systemd's notify protocol (sd_notify(3)): READY=1,
// STATUS=, WATCHDOG=1 and STOPPING=1, one datagram each on the socket
// systemd names in NOTIFY_SOCKET. It is the service watchdog of a unit with
// Type=notify and WatchdogSec=.
//
// It is a few lines over a unix datagram socket rather than go-systemd's
// daemon package so the socket and the watchdog interval come in as values
// (tests point it at their own socket) rather than from the environment
// each call.
type Notifier struct {
	addr     *net.UnixAddr
	watchdog time.Duration // WATCHDOG_USEC; 0: systemd is not watching
	// restarting makes Close say RELOADING=1: the process execs a new
	// version of itself, whose READY=1 ends the reload (Restarting).
	restarting atomic.Bool
}

// NewNotifier returns a Notifier sending to socket: a path, or an abstract
// socket written with a leading '@'. watchdog is WATCHDOG_USEC as a
// duration, 0 if systemd's watchdog is off for the unit.
func NewNotifier(socket string, watchdog time.Duration) (*Notifier, error) {
	if socket == "" || (socket[0] != '/' && socket[0] != '@') {
		// systemd also offers vsock: addresses, to virtual machines; an
		// appliance has no use for them.
		return nil, fmt.Errorf("watchdog: NOTIFY_SOCKET %q is not a unix socket path", socket)
	}
	if watchdog < 0 {
		return nil, fmt.Errorf("watchdog: negative systemd watchdog interval %v", watchdog)
	}
	// Go's net package turns a leading '@' into the abstract namespace.
	return &Notifier{addr: &net.UnixAddr{Name: socket, Net: "unixgram"}, watchdog: watchdog}, nil
}

// NotifierFromEnv reads NOTIFY_SOCKET, WATCHDOG_USEC and WATCHDOG_PID
// through getenv (os.Getenv) as systemd sets them for pid (os.Getpid()). It
// returns nil and no error when NOTIFY_SOCKET is unset: the service is not
// run by systemd with Type=notify, and there is no one to notify.
func NotifierFromEnv(getenv func(string) string, pid int) (*Notifier, error) {
	socket := getenv("NOTIFY_SOCKET")
	if socket == "" {
		return nil, nil
	}
	var wd time.Duration
	if s := getenv("WATCHDOG_USEC"); s != "" {
		usec, err := strconv.ParseUint(s, 10, 63)
		if err != nil || usec == 0 {
			return nil, fmt.Errorf("watchdog: WATCHDOG_USEC=%q is not a positive number of microseconds", s)
		}
		wd = time.Duration(usec) * time.Microsecond
		// WATCHDOG_PID names the process systemd watches; a process it
		// merely inherited the variables from must not feed for it.
		if p := getenv("WATCHDOG_PID"); p != "" && p != strconv.Itoa(pid) {
			wd = 0
		}
	}
	return NewNotifier(socket, wd)
}

// send writes one notification. A fresh socket per message costs nothing at
// these rates and survives systemd re-executing itself.
func (n *Notifier) send(state string) error {
	c, err := net.DialUnix("unixgram", nil, n.addr)
	if err != nil {
		return fmt.Errorf("watchdog: sd_notify %s: %w", firstLine(state), err)
	}
	_, err = c.Write([]byte(state))
	if cerr := c.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("watchdog: sd_notify %s: %w", firstLine(state), err)
	}
	return nil
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// Ready implements Readier: READY=1.
func (n *Notifier) Ready() error { return n.send("READY=1") }

// SetStatus implements StatusSetter: STATUS=, one line.
func (n *Notifier) SetStatus(status string) error {
	if strings.ContainsAny(status, "\n") {
		// A newline would start another assignment in the datagram.
		return errors.New("watchdog: status must be one line")
	}
	return n.send("STATUS=" + status)
}

// Feed implements Feeder: WATCHDOG=1, if systemd watches this process.
func (n *Notifier) Feed() error {
	if n.watchdog == 0 {
		return nil
	}
	return n.send("WATCHDOG=1")
}

// Timeout implements Feeder: WATCHDOG_USEC.
func (n *Notifier) Timeout() time.Duration { return n.watchdog }

// Close implements Feeder: STOPPING=1, so systemd shows the unit as
// deactivating and stops expecting WATCHDOG=1; after Restarting,
// RELOADING=1 instead.
func (n *Notifier) Close() error {
	if n.restarting.Load() {
		// MONOTONIC_USEC, which systemd 253 and later want with it, is
		// CLOCK_MONOTONIC, as Go's runtime clock is.
		var ts unix.Timespec
		unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
		return n.send("RELOADING=1\nMONOTONIC_USEC=" + strconv.FormatInt(ts.Nano()/1000, 10))
	}
	return n.send("STOPPING=1")
}

// Restarting implements Restarter: the process is about to replace itself
// with another program (exec, the same process id), so Close tells systemd
// that the service reloads rather than stops. STOPPING=1 would make
// systemd wait for the process to exit and then count the service as
// stopped, and the new program's READY=1 would come too late.
func (n *Notifier) Restarting() { n.restarting.Store(true) }

// String implements Feeder.
func (n *Notifier) String() string {
	if n.watchdog > 0 {
		return fmt.Sprintf("systemd (WatchdogSec %v)", n.watchdog)
	}
	return "systemd"
}

// Interface guards.
var (
	_ Feeder       = (*Device)(nil)
	_ Feeder       = (*Pin)(nil)
	_ Feeder       = (*Notifier)(nil)
	_ Readier      = (*Notifier)(nil)
	_ StatusSetter = (*Notifier)(nil)
	_ Restarter    = (*Notifier)(nil)
)
