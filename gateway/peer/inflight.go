package peer

import "time"

// pending is a directed delivery waiting for its answer.
type pending struct {
	seq      uint64
	deadline time.Time
	done     func(error) // the caller's
	report   func(error) // the breaker's, for the outcome
	stop     func() bool // stops the context.AfterFunc; nil if the context cannot end
}

// finish completes p: the breaker learns whether the peer answered (fail)
// and the caller gets its outcome (err).
func (p *pending) finish(err, fail error) {
	if p.stop != nil {
		p.stop()
	}
	p.report(fail)
	p.done(err)
}

// inflight holds a link's pending deliveries in a ring ordered by sequence
// number. Sequence numbers are handed out consecutively and every delivery
// has the same timeout, so the ring is also ordered by deadline: the head
// is the next to expire, and the ring is the peer's timer wheel with one
// slot per delivery. Lookup by sequence number is an index; an answered
// slot is emptied and the head skips empty slots, so the ring spans at most
// the deliveries sent within one timeout.
type inflight struct {
	buf   []pending // a slot is empty when its done is nil
	head  int       // index of the oldest slot
	n     int       // slots from head, empty ones included
	first uint64    // seq of the slot at head
}

// push adds p, whose seq must follow the last one pushed (any seq when the
// ring is empty). It reports whether p is now the head, so its deadline is
// the next one.
func (f *inflight) push(p pending) bool {
	if f.n == 0 {
		f.head, f.first = 0, p.seq
	}
	if f.n == len(f.buf) {
		grown := make([]pending, max(16, 2*len(f.buf)))
		for i := range f.n {
			grown[i] = f.buf[(f.head+i)%len(f.buf)]
		}
		f.buf, f.head = grown, 0
	}
	f.buf[(f.head+f.n)%len(f.buf)] = p
	f.n++
	return f.n == 1
}

// take removes and returns the delivery seq, if it is still waiting.
func (f *inflight) take(seq uint64) (pending, bool) {
	if f.n == 0 || seq < f.first || seq-f.first >= uint64(f.n) {
		return pending{}, false
	}
	slot := &f.buf[(f.head+int(seq-f.first))%len(f.buf)]
	p := *slot
	if p.done == nil {
		return pending{}, false
	}
	*slot = pending{}
	f.trim()
	return p, true
}

// trim drops empty slots from the head.
func (f *inflight) trim() {
	for f.n > 0 && f.buf[f.head].done == nil {
		f.head = (f.head + 1) % len(f.buf)
		f.first++
		f.n--
	}
}

// next returns the head's deadline; ok is false when nothing waits.
func (f *inflight) next() (deadline time.Time, ok bool) {
	if f.n == 0 {
		return time.Time{}, false
	}
	return f.buf[f.head].deadline, true
}

// expire removes the deliveries whose deadline is not after now and
// appends them to out.
func (f *inflight) expire(now time.Time, out []pending) []pending {
	for f.n > 0 && !f.buf[f.head].deadline.After(now) {
		out = append(out, f.buf[f.head])
		f.buf[f.head] = pending{}
		f.trim()
	}
	return out
}

// drain removes every waiting delivery and appends it to out.
func (f *inflight) drain(out []pending) []pending {
	for i := range f.n {
		if p := f.buf[(f.head+i)%len(f.buf)]; p.done != nil {
			out = append(out, p)
		}
	}
	clear(f.buf)
	f.head, f.n = 0, 0
	return out
}

// len is the number of slots the ring spans: the window MaxInFlight bounds.
func (f *inflight) len() int { return f.n }
