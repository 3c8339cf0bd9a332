//go:build !unix

package bolt

import "os"

// unlock does nothing where bbolt does not lock with flock.
func unlock(*os.File) {}
