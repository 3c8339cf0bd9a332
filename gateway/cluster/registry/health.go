package registry

import (
	"sync"
	"sync/atomic"
	"time"
)

// source is the part of the registry a health report comes from. The
// registry is Degraded while either reports a problem.
type source uint8

const (
	sourceWatch  source = iota // the copy: loading and watching
	sourceWriter               // the registrar: lease and writes
	sourceClosed               // Close
	nSources     = 2
)

type healthSnap struct {
	state State
	err   error
}

// health combines the reports of the watcher and the registrar into one
// State and tells OnState about changes.
type health struct {
	mu      sync.Mutex // serialises reports and the calls to onState
	onState func(State, error)
	ready   bool
	closed  bool
	errs    [nSources]error
	cur     atomic.Pointer[healthSnap] // read without the lock by State
}

func (h *health) init(onState func(State, error)) {
	h.onState = onState
	h.cur.Store(&healthSnap{state: Starting})
}

func (h *health) get() (State, error) {
	s := h.cur.Load()
	return s.state, s.err
}

// set records src's problem (nil: none) and recomputes the state.
func (h *health) set(src source, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if src == sourceClosed {
		h.closed = true
	} else {
		h.errs[src] = err
	}
	h.update()
}

func (h *health) setReady() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ready = true
	h.update()
}

func (h *health) update() {
	var err error
	for _, e := range h.errs {
		if e != nil {
			err = e
			break
		}
	}
	next := &healthSnap{err: err}
	switch {
	case h.closed:
		next = &healthSnap{state: Closed}
	case !h.ready:
		next.state = Starting // err says why, if it is taking long
	case err != nil:
		next.state = Degraded
	default:
		next.state = Healthy
	}
	prev := h.cur.Swap(next)
	if prev.state != next.state && h.onState != nil {
		h.onState(next.state, next.err)
	}
}

// lagTracker measures the registry lag of this node's own writes: the
// registrar notes when it sent the transaction that made a revision, the
// watcher notes when that revision arrived, whichever comes second
// records the difference.
type lagTracker struct {
	mu             sync.Mutex
	sent           map[int64]time.Time // revision -> sent, not yet delivered
	seen           map[int64]time.Time // revision -> delivered before the reply came
	last, max, sum time.Duration
	n              uint64
}

// lagKeep bounds both maps: entries that never find their other half (a
// revision of ours delivered by a re-read, a reply lost to a timeout) are
// dropped once this many accumulate.
const lagKeep = 1024

func (l *lagTracker) committed(rev int64, sent time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if at, ok := l.seen[rev]; ok {
		delete(l.seen, rev)
		l.record(at.Sub(sent))
		return
	}
	if l.sent == nil || len(l.sent) >= lagKeep {
		l.sent = map[int64]time.Time{}
	}
	l.sent[rev] = sent
}

func (l *lagTracker) delivered(rev int64, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if sent, ok := l.sent[rev]; ok {
		delete(l.sent, rev)
		l.record(at.Sub(sent))
		return
	}
	if l.seen == nil || len(l.seen) >= lagKeep {
		l.seen = map[int64]time.Time{}
	}
	l.seen[rev] = at
}

func (l *lagTracker) record(d time.Duration) {
	l.last = d
	l.max = max(l.max, d)
	l.sum += d
	l.n++
}

func (l *lagTracker) figures() (last, max, sum time.Duration, n uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last, l.max, l.sum, l.n
}
