package peer

import (
	"context"
	"errors"
)

// Caller is what a Handler may also implement to answer calls: requests
// that are rare, carry their own bytes and need an answer (a session's
// hand-over between nodes is one). A Handler without it answers every
// call with an error.
type Caller interface {
	// Call answers method with arg on behalf of the node from. It runs on
	// a goroutine of its own, so it may take a moment, but the caller
	// waits for it. arg is the handler's to keep.
	Call(from, method string, arg []byte) ([]byte, error)
}

// errNoCaller answers a call on a node whose Handler is not a Caller.
var errNoCaller = errors.New("peer: this node answers no calls")

// callResult is the answer to one call.
type callResult struct {
	body []byte
	err  error
}

// pendingCall is a call waiting for its answer on one session.
type pendingCall struct {
	s  *session
	ch chan callResult // capacity 1
}

// Call sends method with arg to peer and waits for its answer, until ctx
// ends. Calls travel on the peer's stream ahead of queued messages; they
// are for rare, small exchanges, not data. It fails at once with
// ErrUnknownPeer or ErrUnavailable, with ErrBroken when the stream ends
// before the answer, and with a *RemoteError carrying the peer's own
// error.
func (m *Mesh) Call(ctx context.Context, peer, method string, arg []byte) ([]byte, error) {
	l := (*m.links.Load())[peer]
	if l == nil {
		return nil, ErrUnknownPeer
	}
	l.mu.Lock()
	s := l.sess
	if s == nil || !l.available() {
		l.mu.Unlock()
		return nil, ErrUnavailable
	}
	if l.calls == nil {
		l.calls = make(map[uint64]pendingCall)
	}
	l.callSeq++
	seq := l.callSeq
	ch := make(chan callResult, 1)
	l.calls[seq] = pendingCall{s: s, ch: ch}
	l.ctl = append(l.ctl, outRec{kind: kindCall, seq: seq, text: method, body: arg})
	l.mu.Unlock()
	s.signal()
	select {
	case r := <-ch:
		return r.body, r.err
	case <-ctx.Done():
		l.mu.Lock()
		delete(l.calls, seq)
		l.mu.Unlock()
		return nil, ctx.Err()
	}
}

// called answers a call the peer made, on a goroutine of its own.
func (l *link) called(s *session, seq uint64, method string, arg []byte) {
	c, ok := l.m.opts.Handler.(Caller)
	if !ok {
		l.control(s, outRec{kind: kindResult, seq: seq, status: statusError, text: errNoCaller.Error()})
		return
	}
	l.m.wg.Add(1)
	go func() {
		defer l.m.wg.Done()
		body, err := c.Call(l.name, method, arg)
		rec := outRec{kind: kindResult, seq: seq, status: statusAccepted, body: body}
		if err != nil {
			rec.status, rec.text = statusError, err.Error()
		}
		l.control(s, rec)
	}()
}

// result completes call seq with the peer's answer.
func (l *link) result(seq uint64, status uint8, body []byte) {
	l.mu.Lock()
	p, ok := l.calls[seq]
	delete(l.calls, seq)
	l.mu.Unlock()
	if !ok {
		return // its caller gave up
	}
	if status == statusError {
		p.ch <- callResult{err: &RemoteError{Node: l.name, Msg: string(body)}}
		return
	}
	p.ch <- callResult{body: append([]byte(nil), body...)}
}

// failCallsLocked ends the calls waiting on session s with err.
func (l *link) failCallsLocked(s *session, err error) {
	for seq, p := range l.calls {
		if p.s == s {
			delete(l.calls, seq)
			p.ch <- callResult{err: err}
		}
	}
}
