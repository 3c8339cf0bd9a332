package peer

import "time"

// A node that was frozen (SIGSTOP, a stuck reader, a stalled network)
// finds, when it reads on, records its peer has long given up on: the
// sender completed those deliveries with ErrTimeout and its broker
// re-picked another member, so delivering them now would duplicate them.
// The receiving side therefore judges each version 2 delivery's age before
// handing it to the Handler, and answers an old one "expired" instead.
//
// No clock sync between gateways is assumed. Each node stamps what it
// sends with its own clock (Mesh.clock: monotonic, so that a wall clock
// stepped by NTP, as on a gateway without a battery-backed clock that
// boots at 1970, does not make every record look hours old or new). The
// receiver keeps per stream a baseline, the minimum over recent frames of
// (its clock on reading the frame − the sender's clock on writing it): the
// clocks' constant offset plus the smallest transit. A record's age is
// then (now − its send time) − baseline: how much longer than the fastest
// frame it has taken, which is the time it waited in the sender's queue,
// on the wire and at this node. A frozen receiver's clock runs on while it
// is stopped, so after it resumes what it buffered looks exactly as old
// as it is.
//
// A delivery is expired, and not delivered, when one of these says the
// sender has given up on it (or will have before an answer could reach
// it):
//
//   - its age exceeds its timeout less a quarter (the quarter leaves time
//     for the handler, a persistent session's sync, and the answer's way
//     back, so what is delivered is answered in time rather than counted
//     late);
//   - a ping read earlier waited so long that its pong reaches the sender
//     after its ping timeout (less a quarter): the sender then gave up on
//     everything waiting, so every delivery sent before that ping's
//     deadline is expired;
//   - the frame it came in has itself waited at this node longer than the
//     sender's ping timeout less a quarter: this node has been stalled
//     long enough for the sender to miss a pong, even if the ping that
//     missed comes later in the stream.
//
// The last rule can refuse a delivery the sender still waits for (it then
// gets ErrExpired in time and re-picks, which is safe); it never delivers
// one the first two rules would refuse.
type ager struct {
	base minWindow // baseline: minimum of (read − written) over recent frames

	written int64 // the current frame's write time (sender's clock)
	timed   bool  // the current frame is version 2

	// cutoff: deliveries sent before it (sender's clock) were given up on
	// when a pong came too late.
	cutoff    int64
	hasCutoff bool
	// pingTimeout is the sender's, from its last ping; 0 until one is read.
	pingTimeout int64
}

// baselineWindow bounds how long a baseline sample counts: the minimum
// is taken over the last 10 to 20 s, so it follows the two clocks' drift
// (parts per million: microseconds over the window) and a lasting change
// of route, yet survives a freeze (the window turns over only as frames
// arrive, see minWindow).
const baselineWindow = 10 * time.Second

// frame notes a frame read at now (this node's clock) and written at
// written (the sender's).
func (a *ager) frame(now int64, timed bool, written int64) {
	a.timed, a.written = timed, written
	if timed {
		a.base.add(now, now-written)
	}
}

// ping notes a version 2 ping read at now.
func (a *ager) ping(now, sent, timeout int64) {
	a.pingTimeout = timeout
	if a.age(now, sent) > timeout-timeout/4 && (!a.hasCutoff || sent+timeout > a.cutoff) {
		a.cutoff, a.hasCutoff = sent+timeout, true
	}
}

// expired judges a version 2 delivery read at now.
func (a *ager) expired(now, sent, timeout int64) bool {
	switch {
	case timeout > 0 && a.age(now, sent) > timeout-timeout/4:
		return true
	case a.hasCutoff && sent < a.cutoff:
		return true
	case a.timed && a.pingTimeout > 0 && a.age(now, a.written) > a.pingTimeout-a.pingTimeout/4:
		return true
	}
	return false
}

// age is how much longer than the baseline something sent at sent (the
// sender's clock) has taken to be handled at now; never negative.
func (a *ager) age(now, sent int64) int64 {
	b, ok := a.base.min()
	if !ok {
		return 0
	}
	return max(now-sent-b, 0)
}

// minWindow is the minimum of samples over the last span to 2·span: two
// buckets, the current and the previous one. It turns over lazily, when a
// sample arrives a span after the current bucket began, so after a long
// freeze the first sample moves the bucket from before the freeze into
// the previous slot rather than dropping it: the backlog that follows is
// measured against the baseline from before, as it must be.
type minWindow struct {
	cur, prev int64
	start     int64 // this node's clock when cur began
	n         int   // buckets in use: 0, 1 (cur) or 2
}

func (w *minWindow) add(now, v int64) {
	switch {
	case w.n == 0:
		w.cur, w.start, w.n = v, now, 1
	case now-w.start >= int64(baselineWindow):
		w.prev, w.cur, w.start, w.n = w.cur, v, now, 2
	default:
		w.cur = min(w.cur, v)
	}
}

func (w *minWindow) min() (int64, bool) {
	switch w.n {
	case 0:
		return 0, false
	case 1:
		return w.cur, true
	}
	return min(w.cur, w.prev), true
}
