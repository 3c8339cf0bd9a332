package broker_test

import (
	"net"
	"syscall"
	"testing"
)

// kernelRxTimestamps reports whether a loopback TCP socket here delivers
// receive timestamps (SO_TIMESTAMPNS). Linux does; qemu-user, which
// make test-arm runs the tests under, refuses the option.
func kernelRxTimestamps(t *testing.T) bool {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	raw, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		return false
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_TIMESTAMPNS, 1)
	}); err != nil || serr != nil {
		return false
	}
	return true
}
