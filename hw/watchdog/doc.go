// Package watchdog feeds watchdogs, hardware and systemd's, only while the
// gateway is healthy, so that a wedged broker gets the board reset (or the
// service restarted) instead of a timer keeping it alive forever.
//
// # Model
//
// A [Feeder] is one watchdog: the kernel's watchdog device ([Device],
// /dev/watchdog), an external watchdog IC whose input is a GPIO pin
// ([Pin]), or systemd's service watchdog ([Notifier], which also carries
// READY=1, STATUS= and STOPPING=1). Several run at once.
//
// A [Supervisor] owns the feeders and one ticker. Every period it asks a
// [Gate] whether the gateway is healthy, and feeds every feeder only if it
// is. Nothing else feeds them: once the gate fails (or stops answering),
// the next tick feeds nothing, so feeding stops within one period and the
// watchdogs act after their own timeouts. The period is half the
// shortest feeder timeout, so one late tick is not a reset.
//
// READY=1 is sent when the caller calls [Supervisor.Ready], never by
// construction: systemd must not hear "ready" from a gateway whose
// listeners are not yet accepting.
//
// # Shutdown
//
// [Supervisor.Close] closes the feeders in reverse order: STOPPING=1 to
// systemd, then the magic close ('V' written just before close(2)) that
// disarms the kernel watchdog. A process that dies without Close leaves
// the kernel watchdog armed, which is the point. An external IC's pin is
// released to a floating input, which disables some parts (see [Pin.Close]);
// the others reset the board after Close unless power goes first (see
// docs/hardware.md).
//
// # Keepalives are writes
//
// [Device] sends each keepalive as a one-byte write(2) rather than the
// WDIOC_KEEPALIVE ioctl. The kernel's watchdog core treats any write as a
// keepalive (drivers/watchdog/watchdog_dev.c: watchdog_write pings), for
// every driver, whereas WDIOC_KEEPALIVE fails on drivers that do not
// advertise WDIOF_KEEPALIVEPING. A write also works on a plain file or pty
// standing in for the device, so the tests assert the very bytes the
// hardware gets. The timeout is still set with WDIOC_SETTIMEOUT and read
// back with WDIOC_GETTIMEOUT; a stand-in, which answers those with ENOTTY,
// must be opened with DeviceOptions.StandIn.
//
// # Locking
//
// Supervisor.mu serialises every call into a feeder (Feed, Ready, status,
// Close), so feeders need no locking, and a keepalive can never follow the
// magic close. The gate is called without the lock, so a gate that blocks
// holds up nothing but feeding, and State still answers, reporting the
// blocked check once it has taken longer than a period.
package watchdog
