//go:build !linux

package watchdog

import (
	"errors"
	"os"
)

// The watchdog ioctls are Linux's; elsewhere only a stand-in device opens.

func setTimeoutIoctl(*os.File, int) error   { return errors.ErrUnsupported }
func getTimeoutIoctl(*os.File) (int, error) { return 0, errors.ErrUnsupported }
