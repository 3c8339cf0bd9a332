package peer

import (
	"testing"
	"time"
)

const ms = int64(time.Millisecond)

// The rules that expire a delivery, on a receiver whose clock reads R
// and a sender whose clock reads R + off, with 1 ms of transit.
func TestAgerRules(t *testing.T) {
	const (
		timeout = int64(2 * time.Second)
		pingTO  = int64(time.Second)
	)
	for _, off := range []int64{0, int64(time.Hour), -int64(time.Hour), 1 << 62} {
		// healthy sets up a stream that has run for 5 s: frames every
		// 100 ms with 1 ms transit, a fresh ping every 500 ms.
		healthy := func() *ager {
			a := &ager{}
			for r := int64(0); r <= 5000*ms; r += 100 * ms {
				a.frame(r, true, r-ms+off)
				if r%(500*ms) == 0 {
					a.ping(r, r-ms+off, pingTO)
				}
			}
			return a
		}
		const r0 = 5000 * ms // the receiver's clock now
		type step struct {
			name    string
			run     func(a *ager) bool // reports expired
			expired bool
		}
		for _, s := range []step{
			{"fresh", func(a *ager) bool {
				a.frame(r0+ms, true, r0+off)
				return a.expired(r0+ms, r0+off, timeout)
			}, false},
			{"queued 1.4 s at the sender", func(a *ager) bool {
				a.frame(r0+ms, true, r0+off)
				return a.expired(r0+ms, r0-1400*ms+off, timeout)
			}, false},
			{"queued 1.6 s at the sender: past timeout less a quarter", func(a *ager) bool {
				a.frame(r0+ms, true, r0+off)
				return a.expired(r0+ms, r0-1600*ms+off, timeout)
			}, true},
			{"a late ping came first: sent before its deadline", func(a *ager) bool {
				a.frame(r0+800*ms, true, r0+off)
				a.ping(r0+800*ms, r0+off, pingTO) // read 0.8 s late: its pong misses
				return a.expired(r0+800*ms, r0+10*ms+off, timeout)
			}, true},
			{"a late ping came first: sent after its deadline", func(a *ager) bool {
				a.frame(r0+800*ms, true, r0+off)
				a.ping(r0+800*ms, r0+off, pingTO)
				a.frame(r0+1200*ms, true, r0+1100*ms+off)
				return a.expired(r0+1200*ms, r0+1100*ms+off, timeout)
			}, false},
			{"a ping 0.7 s late is in time", func(a *ager) bool {
				a.frame(r0+700*ms, true, r0+off)
				a.ping(r0+700*ms, r0+off, pingTO)
				a.frame(r0+710*ms, true, r0+700*ms+off)
				return a.expired(r0+710*ms, r0+5*ms+off, timeout)
			}, false},
			{"its frame waited 0.8 s here, no late ping seen yet", func(a *ager) bool {
				a.frame(r0+800*ms, true, r0+off)
				return a.expired(r0+800*ms, r0+off, timeout)
			}, true},
			{"its frame waited 0.7 s here", func(a *ager) bool {
				a.frame(r0+700*ms, true, r0+off)
				return a.expired(r0+700*ms, r0+off, timeout)
			}, false},
			{"a handler held the reader 0.8 s within the frame", func(a *ager) bool {
				a.frame(r0+ms, true, r0+off)
				return a.expired(r0+801*ms, r0+off, timeout)
			}, true},
			{"a version 1 frame has no write time to judge", func(a *ager) bool {
				a.frame(r0+800*ms, false, 0)
				return a.expired(r0+800*ms, r0+off, timeout)
			}, false},
			{"frozen 30 s: the baseline from before the freeze holds", func(a *ager) bool {
				for i := range int64(5) { // the backlog, read in a burst
					a.frame(r0+30_000*ms+i, true, r0+i*ms+off)
				}
				return a.expired(r0+30_000*ms+5, r0+2*ms+off, timeout)
			}, true},
			{"frozen 30 s, then 25 s of fresh frames: the baseline has moved on", func(a *ager) bool {
				a.frame(r0+30_000*ms, true, r0+off)
				for r := r0 + 30_000*ms; r <= r0+55_000*ms; r += 100 * ms {
					a.frame(r, true, r-ms+off)
					a.ping(r, r-ms+off, pingTO)
				}
				r := r0 + 55_001*ms
				a.frame(r, true, r-ms+off)
				return a.expired(r, r-ms+off, timeout)
			}, false},
		} {
			if got := s.run(healthy()); got != s.expired {
				t.Errorf("offset %v: %s: expired %v, want %v", time.Duration(off), s.name, got, s.expired)
			}
		}
	}
}

// Two clocks drifting 200 ppm apart for ten minutes never make a fresh
// delivery look old: the baseline's window follows the drift.
func TestAgerDrift(t *testing.T) {
	for _, ppm := range []int64{200, -200} {
		a := &ager{}
		sender := func(r int64) int64 { return r + r/1_000_000*ppm + 12345 }
		for r := int64(0); r <= 600_000*ms; r += 50 * ms {
			a.frame(r, true, sender(r-ms))
			a.ping(r, sender(r-ms), int64(time.Second))
			if a.expired(r, sender(r-ms), int64(2*time.Second)) {
				t.Fatalf("%d ppm: a fresh delivery expired after %v", ppm, time.Duration(r))
			}
		}
		if age := a.age(600_000*ms, sender(600_000*ms-ms)); age > 5*ms {
			t.Fatalf("%d ppm: a fresh record is %v old after ten minutes", ppm, time.Duration(age))
		}
	}
}
