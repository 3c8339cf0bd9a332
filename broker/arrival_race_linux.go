//go:build race

package broker

import "syscall"

// raceSyncRead gives a recvmsg what package syscall gives every read under
// the race detector: it synchronises with the writes to descriptors before
// it (syscall.Read acquires, syscall.Write releases, one shared token), so
// that bytes sent over a loopback socket carry happens-before as they do
// with net.Conn.Read, on which tests rely. An empty read of the socket does
// exactly that and consumes nothing.
func raceSyncRead(fd int) { syscall.Read(fd, nil) }
