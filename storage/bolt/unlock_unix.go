//go:build unix

package bolt

import (
	"os"
	"syscall"
)

// unlock releases bbolt's flock on f. Closing f is not enough while a
// memory map of the file exists: the map keeps the open file, and the
// lock with it, alive in the kernel.
func unlock(f *os.File) { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }
