package certs

import (
	"os"
	"time"
)

// VerifyTime returns the clock certificates are to be checked against:
// the system's, or, while it reads earlier than a time known to have
// passed, that time. A board without a real-time clock starts at 1970 (at
// systemd's build time under systemd) until NTP answers, and at such a
// time every certificate looks "not yet valid": the bridge could not
// reach its broker, nor a gateway its peers, nor a client with a
// certificate connect. Times known to have passed are the build of this
// program (its file's modification time, which an image keeps) and the
// NotBefore of the gateway's own certificates given as floors (an
// authority issued them, so that time has come). The clock is read at
// every handshake: once NTP sets it, it rules again, with no restart.
func VerifyTime(floors ...time.Time) func() time.Time {
	var floor time.Time
	if exe, err := os.Executable(); err == nil {
		if fi, err := os.Stat(exe); err == nil {
			floor = fi.ModTime()
		}
	}
	for _, f := range floors {
		if f.After(floor) {
			floor = f
		}
	}
	return func() time.Time {
		if now := time.Now(); !now.Before(floor) {
			return now
		}
		return floor
	}
}
