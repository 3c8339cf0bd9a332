//go:build !linux

package broker

import "net"

// rxClock is unavailable off Linux: reads carry no arrival time, and the
// look-back of new subscriptions (arrival.go) finds nothing.
type rxClock struct{}

func newRxClock(net.Conn, bool) *rxClock { return nil }

func (*rxClock) read([]byte) (int, int64, error) { panic("unreachable") }
