package broker

import (
	"io"
	"net"
	"os"
	"syscall"
	"time"
	"unsafe"
)

// rxClock reads a TCP socket with recvmsg, so that each read comes with the
// time the kernel received its last segment (SO_TIMESTAMPNS): the arrival
// time that orders packets across connections (arrival.go). It goes
// through the socket's RawConn, so the runtime's poller and the read
// deadlines work as for any read.
type rxClock struct {
	raw  syscall.RawConn
	recv func(fd uintptr) bool // r.recvmsg, bound once
	p    []byte                // the buffer of the read in progress
	oob  [8]uint64             // control messages; uint64 for alignment
	n    int
	ts   int64
	err  error
}

// newRxClock returns a timestamping reader for nc, or nil when nc is not
// a TCP socket (TLS, WebSocket and test pipes are read as before). With
// enable it first turns timestamps on for the socket.
func newRxClock(nc net.Conn, enable bool) *rxClock {
	if _, tcp := nc.LocalAddr().(*net.TCPAddr); !tcp {
		return nil
	}
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	if enable {
		var serr error
		err = raw.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_TIMESTAMPNS, 1)
		})
		if err != nil || serr != nil {
			return nil
		}
	}
	r := &rxClock{raw: raw}
	r.recv = r.recvmsg
	return r
}

func (r *rxClock) recvmsg(fd uintptr) bool {
	oob := unsafe.Slice((*byte)(unsafe.Pointer(&r.oob)), unsafe.Sizeof(r.oob))
	for {
		n, oobn, _, _, err := syscall.Recvmsg(int(fd), r.p, oob, 0)
		switch err {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false // wait for the poller
		case nil:
			r.n, r.err, r.ts = n, nil, rxTimestamp(oob[:oobn])
			raceSyncRead(int(fd))
		default:
			r.n, r.err, r.ts = 0, err, 0
		}
		return true
	}
}

// read reads into p like net.Conn.Read, and returns the kernel's receive
// time of what it read (Unix ns), 0 when there is none or it is not
// plausible.
func (r *rxClock) read(p []byte) (int, int64, error) {
	r.p = p
	err := r.raw.Read(r.recv)
	r.p = nil
	switch {
	case err != nil:
		return 0, 0, err
	case r.err != nil:
		return 0, 0, os.NewSyscallError("recvmsg", r.err)
	case r.n == 0 && len(p) > 0:
		return 0, 0, io.EOF
	}
	ts := r.ts
	if d := time.Now().UnixNano() - ts; d < 0 || d > int64(rxSane) {
		ts = 0
	}
	return r.n, ts, nil
}

// rxTimestamp finds SCM_TIMESTAMPNS among control messages.
func rxTimestamp(oob []byte) int64 {
	for len(oob) >= syscall.SizeofCmsghdr {
		h := (*syscall.Cmsghdr)(unsafe.Pointer(&oob[0]))
		l := int(h.Len)
		if l < syscall.SizeofCmsghdr || l > len(oob) {
			return 0
		}
		data := syscall.CmsgLen(0)
		if h.Level == syscall.SOL_SOCKET && h.Type == syscall.SCM_TIMESTAMPNS && l >= data+int(unsafe.Sizeof(syscall.Timespec{})) {
			return (*syscall.Timespec)(unsafe.Pointer(&oob[data])).Nano()
		}
		oob = oob[min(len(oob), syscall.CmsgSpace(l-data)):]
	}
	return 0
}
