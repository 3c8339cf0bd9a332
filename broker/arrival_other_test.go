//go:build !linux

package broker_test

import "testing"

// kernelRxTimestamps reports whether receive timestamps are available:
// linemq uses them on Linux only.
func kernelRxTimestamps(*testing.T) bool { return false }
