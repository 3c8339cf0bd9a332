package health

// subscriber is one Subscribe channel.
type subscriber struct{ ch chan Change }

// Subscribe returns a channel that receives every change from now on, and
// a function that ends the subscription (and closes the channel). The
// channel holds up to buffer changes (at least 1); when the subscriber
// falls further behind, the oldest pending change is dropped to make room,
// so the newest state always arrives and the registry never waits for a
// reader. A consumer that needs the whole picture after a gap reads
// Checks. The channel is closed by the returned function or by Close.
func (r *Registry) Subscribe(buffer int) (<-chan Change, func()) {
	s := &subscriber{ch: make(chan Change, max(1, buffer))}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		close(s.ch)
		return s.ch, func() {}
	}
	r.subs[s] = struct{}{}
	return s.ch, func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if _, ok := r.subs[s]; ok {
			delete(r.subs, s)
			close(s.ch)
		}
	}
}

// notifyLocked sends c to every subscriber without blocking. Sending under
// the registry's lock keeps every subscriber's changes in order; making
// room by dropping the oldest is safe because only this function sends.
func (r *Registry) notifyLocked(c Change) {
	for s := range r.subs {
		select {
		case s.ch <- c:
			continue
		default:
		}
		select {
		case <-s.ch:
		default:
		}
		select {
		case s.ch <- c:
		default:
		}
	}
}
