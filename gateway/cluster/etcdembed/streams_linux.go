package etcdembed

import (
	"errors"
	"net"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// shutdownPeerConns shuts down (both ways) every TCP connection of this
// process that eps matches, and returns how many. etcd owns them and
// offers no way to reach them, so they are found by walking the process's
// descriptors. Shutting a socket down, unlike closing it, leaves the
// descriptor to its owner: etcd's reader sees the end of its stream and
// dials again, its writer fails its next write and waits for the other
// member to dial in.
func shutdownPeerConns(eps peerEndpoints) (int, error) {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0, err
	}
	var n int
	var errs []error
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		local, remote, ok := tcpEnds(fd)
		if !ok || !eps.matches(local, remote) {
			continue
		}
		// The descriptor could have been closed and its number reused
		// since tcpEnds, by a socket opened in these microseconds; only
		// another connection to or from a peer port would match again,
		// so it is read once more right before the shutdown.
		if local, remote, ok = tcpEnds(fd); !ok || !eps.matches(local, remote) {
			continue
		}
		if err := unix.Shutdown(fd, unix.SHUT_RDWR); err != nil && !errors.Is(err, unix.ENOTCONN) {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// tcpEnds returns a connected TCP socket's two addresses; ok is false for
// any other descriptor.
func tcpEnds(fd int) (local, remote *net.TCPAddr, ok bool) {
	typ, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE)
	if err != nil || typ != unix.SOCK_STREAM {
		return nil, nil, false
	}
	ls, err := unix.Getsockname(fd)
	if err != nil {
		return nil, nil, false
	}
	rs, err := unix.Getpeername(fd)
	if err != nil {
		return nil, nil, false
	}
	local, remote = tcpAddr(ls), tcpAddr(rs)
	return local, remote, local != nil && remote != nil
}

func tcpAddr(sa unix.Sockaddr) *net.TCPAddr {
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return &net.TCPAddr{IP: net.IP(a.Addr[:]).To16(), Port: a.Port}
	case *unix.SockaddrInet6:
		return &net.TCPAddr{IP: net.IP(a.Addr[:]), Port: a.Port}
	}
	return nil
}
