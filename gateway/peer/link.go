package peer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/linemq/linemq/broker"
)

// link is this node's side of one peer: the peer's queue, its current
// session (stream), the directed deliveries awaiting an answer, its
// breaker and its counters. A link lives from SetPeers listing the peer
// to SetPeers dropping it (or Close); sessions come and go within it.
type link struct {
	m    *Mesh
	name string
	dial bool // this node dials the peer; otherwise the peer dials it
	log  *slog.Logger

	ctx    context.Context // ends when the link is closed
	cancel context.CancelFunc
	redial chan struct{} // capacity 1: the address changed, dial again now

	br *gobreaker.TwoStepCircuitBreaker[struct{}]
	// word is what Available reads: readyBit while the current session
	// has answered a ping, and the breaker's state shifted left by one.
	// The peer is available when it is exactly readyBit (ready, closed).
	word atomic.Uint32
	// tripNow makes the breaker open on the next failure reported, for
	// failures that are certain rather than counted (a broken stream, a
	// missed pong).
	tripNow atomic.Bool
	// cause is why the breaker last opened (causeBroken, causePing or
	// causeTimeouts), for PeerStats.Problem.
	cause atomic.Uint32

	mu      sync.Mutex
	addr    string
	closed  bool
	sess    *session // nil while there is no stream
	q       []outRec // forwards and deliveries waiting for sess's writer
	ctl     []outRec // answers, pings and pongs: written ahead of q
	fl      inflight // directed deliveries awaiting an answer
	seq     uint64   // the last delivery's sequence number
	calls   map[uint64]pendingCall
	callSeq uint64 // the last call's sequence number (apart from seq: fl needs its own consecutive)
	ping    pingState
	rtt     rttStats
	last    error     // why the last stream ended or the last dial failed
	up      time.Time // when the current (or last) stream came up
	// lastPong is when the last pong came, for PeerStats.Problem.
	lastPong time.Time

	c counters
}

// session is one stream of a link, with its three goroutines: a writer,
// a reader, and a clock (pings and deadlines). It ends once, in end.
type session struct {
	l     *link
	s     Stream
	v     uint8         // the frame version written: the newest both ends read
	done  chan struct{} // closed when the session ends
	wake  chan struct{} // capacity 1: records are queued
	rearm chan struct{} // capacity 1: a deadline earlier than the clock's is due
	ended bool          // under l.mu
	age   ager          // the reader's: how old what the peer sends is
}

// pingState is the one ping a session may have outstanding.
type pingState struct {
	out      bool
	seq      uint64
	sent     time.Time
	deadline time.Time
	// report is the breaker's when the ping is a half-open probe, nil
	// for a routine ping while the breaker is closed (a routine pong
	// must not reset the count of deliveries timing out in a row).
	report func(error)
}

const readyBit = 1

// Why a breaker opened.
const (
	causeNone = iota
	causeBroken
	causePing
	causeTimeouts
)

// A clock goroutine that wakes more than stallSlack after its deadline
// has not been running: the process was stopped (SIGSTOP, a paused VM) or
// starved. The peer's answers and pongs may have been waiting in the
// socket all along, so it gives the reader stallGrace to hand them over
// before it judges deadlines; otherwise a node that resumes would time
// out deliveries its peer had answered in time, and re-pick them:
// duplicates.
const (
	stallSlack = 100 * time.Millisecond
	stallGrace = 50 * time.Millisecond
)

// errExcluded is reported to the breaker for a request that was let
// through but then not made, so it counts neither way.
var errExcluded = errors.New("peer: not sent")

func (m *Mesh) newLink(name, addr string) *link {
	l := &link{
		m:      m,
		name:   name,
		dial:   m.opts.Node < name,
		log:    m.log.With("peer", name),
		addr:   addr,
		redial: make(chan struct{}, 1),
	}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.br = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        name,
		MaxRequests: 1, // one probe at a time
		Timeout:     m.opts.OpenTimeout,
		ReadyToTrip: func(c gobreaker.Counts) bool {
			if l.tripNow.Load() {
				return true // the caller has set the cause
			}
			if c.ConsecutiveFailures >= uint32(m.opts.FailureThreshold) {
				l.cause.Store(causeTimeouts)
				return true
			}
			return false
		},
		IsExcluded: func(err error) bool {
			return errors.Is(err, errExcluded) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
		},
		// Called under the breaker's lock: it must not call the
		// breaker or take l.mu.
		OnStateChange: func(_ string, from, to gobreaker.State) {
			l.setWord(func(w uint32) uint32 { return w&readyBit | uint32(to)<<1 })
			switch to {
			case gobreaker.StateOpen:
				l.c.opens.Add(1)
			case gobreaker.StateHalfOpen:
				l.c.probes.Add(1)
			}
			l.log.Info("peer breaker", "from", from.String(), "to", to.String())
		},
	})
	if l.dial {
		m.wg.Add(1)
		go l.dialLoop()
	}
	return l
}

// setWord updates the availability word.
func (l *link) setWord(f func(uint32) uint32) {
	for {
		w := l.word.Load()
		if l.word.CompareAndSwap(w, f(w)) {
			return
		}
	}
}

func (l *link) available() bool { return l.word.Load() == readyBit }

func (l *link) breakerState() BreakerState { return BreakerState(l.word.Load() >> 1) }

// trip opens the breaker now if it is closed.
func (l *link) trip(err error) {
	l.tripNow.Store(true)
	if report, e := l.br.Allow(); e == nil {
		report(err)
	}
	l.tripNow.Store(false)
}

// setAddr records the peer's address. If this node dials the peer and the
// address changed, the node registered anew elsewhere: the current
// stream, if any, is to where it was, so setAddr returns it for the
// caller to end (outside its own locks) and the dial loop dials the new
// address at once.
func (l *link) setAddr(addr string) (stale *session) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if addr == l.addr {
		return nil
	}
	l.addr = addr
	if !l.dial {
		return nil
	}
	select {
	case l.redial <- struct{}{}:
	default:
	}
	return l.sess
}

func (l *link) address() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.addr
}

// close ends the link for good: pending deliveries complete with err.
func (l *link) close(err error) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.closed = true
	s := l.sess
	l.mu.Unlock()
	l.cancel()
	if s != nil {
		l.end(s, err)
	}
}

// attach makes st, to a peer that introduced itself with remote, the
// link's stream, ending the one before (a peer that dials again has given
// up on it), and starts its goroutines.
func (l *link) attach(st Stream, remote Hello) (*session, error) {
	// The newest version both read; a node that says nothing reads 1.
	v := uint8(min(max(remote.Version, frameVersion1), frameVersion))
	for {
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			st.Close()
			return nil, ErrClosed
		}
		old := l.sess
		if old == nil {
			s := &session{
				l:     l,
				s:     st,
				v:     v,
				done:  make(chan struct{}),
				wake:  make(chan struct{}, 1),
				rearm: make(chan struct{}, 1),
			}
			l.sess = s
			l.up = time.Now()
			l.m.wg.Add(3)
			l.mu.Unlock()
			l.c.streams.Add(1)
			l.log.Info("peer stream up", "dialled", l.dial)
			go l.writer(s)
			go l.reader(s)
			go l.clock(s)
			return s, nil
		}
		l.mu.Unlock()
		l.end(old, fmt.Errorf("%w: replaced by a new stream", ErrBroken))
	}
}

// end ends session s, once: the stream is closed, the peer becomes
// unavailable and its breaker opens, queued forwards are dropped, and
// every pending delivery completes with err at once.
func (l *link) end(s *session, err error) {
	l.mu.Lock()
	if s.ended {
		l.mu.Unlock()
		return
	}
	s.ended = true
	close(s.done)
	if l.sess == s {
		l.sess = nil
	}
	l.setWord(func(w uint32) uint32 { return w &^ readyBit })
	q := l.q
	l.q, l.ctl = nil, nil
	pend := l.fl.drain(nil)
	l.failCallsLocked(s, err)
	probe := l.ping.report
	l.ping = pingState{}
	l.last = err
	l.mu.Unlock()

	s.s.Close()
	var dropped uint64
	for i := range q {
		if q[i].kind == kindForward || q[i].kind == kindRetain {
			dropped++
		}
	}
	l.c.dropped.Add(dropped)
	l.cause.Store(causeBroken)
	if probe != nil {
		probe(err) // a half-open probe failed: open again
	}
	l.trip(err)
	if errors.Is(err, ErrClosed) {
		l.c.cancelled.Add(uint64(len(pend)))
	} else {
		l.c.broken.Add(uint64(len(pend)))
	}
	for i := range pend {
		pend[i].finish(err, err)
	}
	l.log.Warn("peer stream down", "err", err, "pending", len(pend), "dropped", dropped)
}

// send queues an ordinary forward, or (kindRetain) a retained message.
func (l *link) send(k kind, msg *broker.Message) error {
	if !l.available() {
		l.c.rejected.Add(1)
		return ErrUnavailable
	}
	l.mu.Lock()
	s := l.sess
	if s == nil {
		l.mu.Unlock()
		l.c.rejected.Add(1)
		return ErrUnavailable
	}
	if len(l.q) >= l.m.opts.MaxQueued {
		l.mu.Unlock()
		l.c.rejected.Add(1)
		return ErrQueueFull
	}
	l.q = append(l.q, outRec{kind: k, msg: msg})
	l.mu.Unlock()
	s.signal()
	return nil
}

// deliver queues a directed delivery and records it as pending.
func (l *link) deliver(ctx context.Context, to Target, msg *broker.Message, done func(error)) error {
	l.c.deliveries.Add(1)
	if !l.available() {
		l.refused()
		return ErrUnavailable
	}
	report, err := l.br.Allow()
	if err != nil {
		l.refused()
		return ErrUnavailable
	}
	l.mu.Lock()
	s := l.sess
	var refuse error
	switch {
	case s == nil || !l.available():
		refuse = ErrUnavailable
	case len(l.q) >= l.m.opts.MaxQueued || l.fl.len() >= l.m.opts.MaxInFlight:
		refuse = ErrQueueFull
	}
	if refuse != nil {
		l.mu.Unlock()
		report(errExcluded)
		l.refused()
		return refuse
	}
	l.seq++
	seq := l.seq
	p := pending{
		seq:      seq,
		deadline: time.Now().Add(l.m.opts.DeliverTimeout),
		done:     done,
		report:   report,
	}
	if ctx.Done() != nil {
		// Registered under l.mu, so the entry holds stop before anyone
		// can take it; the function itself waits for l.mu.
		p.stop = context.AfterFunc(ctx, func() { l.cancelled(seq, ctx) })
	}
	head := l.fl.push(p)
	l.q = append(l.q, outRec{kind: kindDeliver, seq: seq, msg: msg, to: to, sent: l.m.opts.clock(), timeout: l.m.opts.DeliverTimeout})
	l.mu.Unlock()
	if head {
		select {
		case s.rearm <- struct{}{}:
		default:
		}
	}
	s.signal()
	return nil
}

// refused counts a Deliver that failed at once.
func (l *link) refused() {
	l.c.rejected.Add(1)
	l.c.refused.Add(1)
}

// cancelled completes delivery seq with ctx's error, if it still waits.
func (l *link) cancelled(seq uint64, ctx context.Context) {
	l.mu.Lock()
	p, ok := l.fl.take(seq)
	l.mu.Unlock()
	if ok {
		l.c.cancelled.Add(1)
		p.finish(ctx.Err(), errExcluded)
	}
}

// control queues an answer, a ping or a pong for s, whatever the queue's
// length: they are few (a pong or an answer per record the peer sent),
// and they go out ahead of the data queued before them, so a long queue of
// large messages delays neither a waiting publisher's answer nor the
// liveness check.
func (l *link) control(s *session, rec outRec) {
	l.mu.Lock()
	if l.sess != s {
		l.mu.Unlock()
		return
	}
	l.ctl = append(l.ctl, rec)
	l.mu.Unlock()
	s.signal()
}

func (s *session) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// writer sends whatever is queued, as few frames as frameTarget allows,
// until the session ends.
func (l *link) writer(s *session) {
	defer l.m.wg.Done()
	var batch, ctl []outRec
	buf := make([]byte, 0, 4<<10)
	for {
		select {
		case <-s.wake:
		case <-s.done:
			return
		}
		l.mu.Lock()
		if l.sess != s {
			l.mu.Unlock()
			return
		}
		ctl, l.ctl = l.ctl, ctl[:0]
		batch, l.q = l.q, batch[:0]
		l.mu.Unlock()
		var err error
		buf, err = l.write(s, ctl, batch, buf)
		clear(batch) // let the messages go
		if err != nil {
			l.end(s, fmt.Errorf("%w: %v", ErrBroken, err))
			return
		}
		if cap(buf) > 4*frameTarget {
			buf = make([]byte, 0, 4<<10) // a huge message passed: do not keep its buffer
		}
	}
}

// write encodes ctl, then batch, into frames and sends them; it returns
// buf for reuse.
func (l *link) write(s *session, ctl, batch []outRec, buf []byte) ([]byte, error) {
	clock := l.m.opts.clock
	buf = appendFrameHeader(buf[:0], s.v, clock())
	n := 0
	flush := func() error {
		if err := s.s.Send(buf); err != nil {
			return err
		}
		l.c.sentFrames.Add(1)
		l.c.sentBytes.Add(uint64(len(buf)))
		l.c.sentRecords.Add(uint64(n))
		buf, n = appendFrameHeader(buf[:0], s.v, clock()), 0
		return nil
	}
	for _, recs := range [2][]outRec{ctl, batch} {
		for i := range recs {
			buf = appendRecord(buf, &recs[i], s.v)
			n++
			if len(buf) >= frameTarget {
				if err := flush(); err != nil {
					return buf, err
				}
			}
		}
	}
	if n > 0 {
		return buf, flush()
	}
	return buf, nil
}

// reader receives frames and hands their records over until the stream
// ends.
func (l *link) reader(s *session) {
	defer l.m.wg.Done()
	for {
		frame, err := s.s.Recv()
		if err != nil {
			l.end(s, fmt.Errorf("%w: %v", ErrBroken, err))
			return
		}
		l.c.recvFrames.Add(1)
		l.c.recvBytes.Add(uint64(len(frame)))
		if err := l.dispatch(s, frame); err != nil {
			l.c.malformed.Add(1)
			l.end(s, fmt.Errorf("%w: %v", ErrBroken, err))
			return
		}
	}
}

// dispatch handles one frame's records.
func (l *link) dispatch(s *session, frame []byte) error {
	fr, err := newFrameReader(frame)
	if err != nil {
		return err
	}
	h := l.m.opts.Handler
	clock := l.m.opts.clock
	s.age.frame(clock(), fr.v >= frameVersion2, fr.written)
	var r inRec
	for {
		ok, err := fr.next(&r)
		if err != nil || !ok {
			return err
		}
		l.c.recvRecords.Add(1)
		switch r.kind {
		case kindForward:
			m, err := broker.UnmarshalMessage(r.body)
			if err != nil {
				l.c.malformed.Add(1) // a message this node cannot read: skip it
				continue
			}
			m.SetView(r.view)
			h.Forward(l.name, m)
		case kindDeliver:
			rep := Reply{s: s, seq: r.seq}
			// Judged now, not when the frame arrived: a handler
			// earlier in the frame may have held the reader.
			if r.timed && s.age.expired(clock(), r.sent, r.timeout) {
				l.c.expired.Add(1)
				rep.expire()
				continue
			}
			m, err := broker.UnmarshalMessage(r.body)
			if err != nil {
				l.c.malformed.Add(1)
				rep.Done(false, err) // the sender picks another member
				continue
			}
			m.SetView(r.view)
			to := Target{Group: string(r.to[0]), Filter: string(r.to[1]), Client: string(r.to[2])}
			h.Deliver(l.name, to, m, rep)
		case kindRetain:
			m, err := broker.UnmarshalMessage(r.body)
			if err != nil {
				l.c.malformed.Add(1)
				continue
			}
			if rh, ok := h.(RetainHandler); ok {
				rh.Retained(l.name, m)
			}
		case kindAnswer:
			l.answered(s, r.seq, r.status, r.body)
		case kindPing:
			if r.timed {
				s.age.ping(clock(), r.sent, r.timeout)
			}
			l.control(s, outRec{kind: kindPong, seq: r.seq})
		case kindPong:
			l.ponged(s, r.seq)
		case kindCall:
			l.called(s, r.seq, string(r.to[0]), append([]byte(nil), r.body...))
		case kindResult:
			l.result(r.seq, r.status, r.body)
		}
	}
}

// answered completes delivery seq with the peer's answer.
func (l *link) answered(s *session, seq uint64, status uint8, text []byte) {
	l.mu.Lock()
	p, ok := l.fl.take(seq)
	l.mu.Unlock()
	if !ok {
		// Too late: it timed out (or was cancelled) and the caller has
		// re-picked. If the peer accepted it, that is a duplicate; if it
		// answers expired, the peer knew and did not deliver it.
		l.c.late.Add(1)
		switch status {
		case statusAccepted:
			l.c.lateAccepted.Add(1)
		case statusExpired:
			l.c.lateExpired.Add(1)
		}
		return
	}
	var err error
	switch status {
	case statusAccepted:
		l.c.accepted.Add(1)
	case statusNotHere:
		err = ErrNotHere
		l.c.notHere.Add(1)
	case statusError:
		err = &RemoteError{Node: l.name, Msg: string(text)}
		l.c.remoteErrors.Add(1)
	case statusExpired:
		// Rare: the peer judged it too old while this node still
		// waited (within the quarter it keeps in hand).
		err = ErrExpired
		l.c.expiredByPeer.Add(1)
	}
	l.c.answers.Add(1)
	p.finish(err, nil) // the peer answered: a success for the breaker
}

// ponged completes the outstanding ping, making the session ready (and
// closing the breaker if the ping was a probe).
func (l *link) ponged(s *session, seq uint64) {
	l.mu.Lock()
	if l.sess != s || !l.ping.out || l.ping.seq != seq {
		l.mu.Unlock()
		return // a pong for a ping that already timed out
	}
	report := l.ping.report
	now := time.Now()
	l.rtt.add(now.Sub(l.ping.sent))
	l.lastPong = now
	l.ping = pingState{}
	l.setWord(func(w uint32) uint32 { return w | readyBit })
	l.mu.Unlock()
	if report != nil {
		report(nil)
	}
}

// clock pings the peer every PingInterval and completes what passes its
// deadline, until the session ends.
func (l *link) clock(s *session) {
	defer l.m.wg.Done()
	tick := time.NewTicker(l.m.opts.PingInterval)
	defer tick.Stop()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var armed, hold time.Time // hold: no judging before it (stallGrace)
	var expired []pending
	arm := func() {
		l.mu.Lock()
		at, ok := l.fl.next()
		if l.ping.out && (!ok || l.ping.deadline.Before(at)) {
			at, ok = l.ping.deadline, true
		}
		l.mu.Unlock()
		if ok && at.Before(hold) {
			at = hold
		}
		switch {
		case !ok:
			timer.Stop()
			armed = time.Time{}
		case !at.Equal(armed):
			timer.Reset(time.Until(at))
			armed = at
		}
	}
	l.sendPing(s) // at once: a new stream is ready one round trip later
	arm()
	for {
		select {
		case <-s.done:
			return
		case <-tick.C:
			l.sendPing(s)
		case <-s.rearm:
		case <-timer.C:
			now := time.Now()
			if hold.IsZero() && now.Sub(armed) > stallSlack {
				hold = now.Add(stallGrace)
				l.c.stalls.Add(1)
				l.log.Warn("peer clock woke late: this node was stopped or starved", "late", now.Sub(armed))
			} else {
				hold = time.Time{}
				expired = l.expire(s, expired[:0])
				clear(expired)
			}
			armed = time.Time{}
		}
		arm()
	}
}

// sendPing queues a ping unless one is outstanding. While the breaker is
// closed it is routine; while it is open, once OpenTimeout has passed,
// the breaker lets one through as its half-open probe.
func (l *link) sendPing(s *session) {
	var report func(error)
	if l.breakerState() != BreakerClosed {
		r, err := l.br.Allow()
		if err != nil {
			return // still open, or a probe is out
		}
		report = r
	}
	l.mu.Lock()
	if l.sess != s || l.ping.out {
		l.mu.Unlock()
		if report != nil {
			report(errExcluded)
		}
		return
	}
	now := time.Now()
	l.ping = pingState{out: true, seq: l.ping.seq + 1, sent: now, deadline: now.Add(l.m.opts.PingTimeout), report: report}
	l.ctl = append(l.ctl, outRec{kind: kindPing, seq: l.ping.seq, sent: l.m.opts.clock(), timeout: l.m.opts.PingTimeout})
	l.mu.Unlock()
	s.signal()
}

// expire completes the deliveries past their deadline with ErrTimeout,
// and a ping past its deadline opens the breaker and completes every
// delivery waiting (ErrTimeout). out is scratch space.
func (l *link) expire(s *session, out []pending) []pending {
	now := time.Now()
	l.mu.Lock()
	if l.sess != s {
		l.mu.Unlock()
		return out
	}
	missed := l.ping.out && !now.Before(l.ping.deadline)
	if !missed {
		out = l.fl.expire(now, out)
		l.mu.Unlock()
		l.c.timeouts.Add(uint64(len(out)))
		for i := range out {
			out[i].finish(ErrTimeout, ErrTimeout)
		}
		return out
	}
	probe := l.ping.report
	// Keep the sequence number, so the late pong is not taken for the
	// next ping's.
	l.ping = pingState{seq: l.ping.seq}
	l.mu.Unlock()
	// The peer stopped answering. The breaker opens first: the deliveries
	// failed below are picked again from their callbacks, and one picked
	// for this peer again before it was marked unavailable would wait out
	// its own deadline here (a publisher on a gateway cut off from the
	// others waited 1.4 s + 2 s).
	l.c.pingTimeouts.Add(1)
	l.cause.Store(causePing)
	if probe != nil {
		probe(errPingTimeout)
	} else {
		l.trip(errPingTimeout)
	}
	l.log.Warn("peer missed a pong", "timeout", l.m.opts.PingTimeout)
	// What waits on it fails now, not at each delivery's own deadline, so
	// the publishers' turns pass on within the ping timeout. An answer
	// that still comes is late (counted; an accepted one is a duplicate).
	l.mu.Lock()
	if l.sess == s {
		out = l.fl.drain(out)
	}
	l.mu.Unlock()
	l.c.timeouts.Add(uint64(len(out)))
	for i := range out {
		out[i].finish(ErrTimeout, ErrTimeout)
	}
	return out
}

var errPingTimeout = errors.New("peer: no pong in time")

// dialLoop keeps a stream to a peer this node dials: it dials, waits for
// the stream to end, and dials again, with backoff while dials fail.
func (l *link) dialLoop() {
	defer l.m.wg.Done()
	backoff := reconnectMin
	failing := false
	for {
		l.mu.Lock()
		addr := l.addr
		l.mu.Unlock()
		ctx, cancel := context.WithTimeout(l.ctx, dialTimeout)
		st, remote, err := l.m.tr.Dial(ctx, l.name, addr, l.m.hello)
		cancel()
		if err == nil && (remote.Node != l.name || remote.Cluster != l.m.hello.Cluster) {
			st.Close()
			err = fmt.Errorf("peer: %s answered as node %q of cluster %q", addr, remote.Node, remote.Cluster)
		}
		var s *session
		if err == nil {
			s, err = l.attach(st, remote)
		}
		if l.ctx.Err() != nil {
			return
		}
		if err != nil {
			l.c.dialErrors.Add(1)
			l.mu.Lock()
			l.last = err
			l.mu.Unlock()
			switch {
			case failing:
			case strings.Contains(err.Error(), "is not a peer of"):
				// The other node's registry copy does not list this one
				// yet: every start of a line meets it for a moment. If it
				// lasts, cluster_peers says so.
				l.log.Info("peer does not know this node yet; dialling again", "addr", addr, "err", err)
			default:
				l.log.Warn("peer dial failed", "addr", addr, "err", err)
			}
			failing = true
			if !l.sleep(backoff) {
				return
			}
			backoff = min(2*backoff, l.m.opts.ReconnectMax)
			continue
		}
		failing, backoff = false, reconnectMin
		select {
		case <-s.done:
		case <-l.ctx.Done():
			return
		}
		// The peer may have restarted: come back soon.
		if !l.sleep(reconnectMin) {
			return
		}
	}
}

// sleep waits about d (jittered, so peers that lost a node together do not
// redial in step) or until the address changes; false if the link closed.
func (l *link) sleep(d time.Duration) bool {
	t := time.NewTimer(d/2 + rand.N(d/2+1))
	defer t.Stop()
	select {
	case <-t.C:
	case <-l.redial:
	case <-l.ctx.Done():
		return false
	}
	return true
}
