package auth

import (
	"container/list"
	"net"
	"net/netip"
	"sync"
	"time"
)

// throttle spaces out the password checks of an address that keeps
// failing them. The first few failures cost nothing (typos); after them
// each check from the address waits for a slot, the slots a delay apart
// that doubles with every failure up to a maximum. Slots are handed out in
// turn, so opening many connections at once does not buy more guesses: it
// only queues them, and a queue longer than the client would wait is
// refused at once. A success forgets the address; so does a quiet spell.
//
// Checks still running count against the free allowance as if they had
// failed: without that, a burst of connections from a fresh address would
// all be checked at once, every one of them a free guess. An attempt past
// the allowance while some of it is still being checked waits for those
// outcomes instead (a few milliseconds): if one succeeds the address is
// forgotten and the attempt goes ahead at once, which keeps the reconnect
// burst of an edge box with many clients behind one address quick.
//
// Memory is bounded: at most capacity addresses are remembered, the least
// recently seen forgotten first. Someone with more addresses than that can
// push an address out and start it afresh, which costs them capacity
// connections each time.
type throttle struct {
	free     int           // failures without delay
	base     time.Duration // delay after free failures
	max      time.Duration // longest delay
	forget   time.Duration // failures older than this are forgotten
	capacity int           // most addresses remembered
	now      func() time.Time

	mu      sync.Mutex
	entries map[string]*list.Element // of *penalty
	lru     list.List                // most recently seen at the front
}

// penalty is the record of one address.
type penalty struct {
	key      string
	failures int
	pending  int       // checks booked and not yet decided
	last     time.Time // last attempt or failure
	next     time.Time // when the next check may start

	// changed is closed (and cleared) when a pending check is decided or
	// the address is forgotten; nil while nobody waits for that.
	changed chan struct{}
}

func newThrottle(free int, base, max, forget time.Duration, capacity int, now func() time.Time) *throttle {
	return &throttle{free: free, base: base, max: max, forget: forget, capacity: capacity, now: now,
		entries: make(map[string]*list.Element)}
}

// delay is the spacing of checks after failures failures (or failures and
// checks booked together).
func (t *throttle) delay(failures int) time.Duration {
	n := min(failures-t.free, 30)
	if n < 0 {
		return 0
	}
	return min(t.base<<n, t.max)
}

// reserve books a check from key and returns when it may start. It books
// nothing and returns a channel instead when the outcome of checks still
// running decides whether this one is free: call reserve again once the
// channel is closed. It books nothing and returns false when the slot is
// later than limit: the caller refuses the attempt without checking it.
// A booked check must be ended with failed, succeeded or abandoned.
func (t *throttle) reserve(key string, limit time.Time) (time.Time, <-chan struct{}, bool) {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.entry(key)
	if now.Sub(p.last) > t.forget && p.pending == 0 {
		p.failures, p.next = 0, time.Time{}
	}
	p.last = now
	if p.failures+p.pending < t.free {
		p.pending++
		return now, nil, true
	}
	if p.failures < t.free {
		if p.changed == nil {
			p.changed = make(chan struct{})
		}
		return time.Time{}, p.changed, true
	}
	slot := now
	if p.next.After(now) {
		slot = p.next
	}
	if slot.After(limit) {
		return slot, nil, false
	}
	p.next = slot.Add(t.delay(p.failures + p.pending + 1))
	p.pending++
	return slot, nil, true
}

// entry returns key's record, made (and the least recently seen dropped
// beyond capacity) if there is none, and marks it the most recently seen.
func (t *throttle) entry(key string) *penalty {
	e := t.entries[key]
	if e == nil {
		e = t.lru.PushFront(&penalty{key: key})
		t.entries[key] = e
		for t.lru.Len() > t.capacity {
			t.remove(t.lru.Back())
		}
	} else {
		t.lru.MoveToFront(e)
	}
	return e.Value.(*penalty)
}

// failed records a failed check from key, and reports the failures
// counted, for the log.
func (t *throttle) failed(key string) int {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.entry(key)
	if now.Sub(p.last) > t.forget && p.pending == 0 {
		p.failures, p.next = 0, time.Time{}
	}
	p.failures++
	p.last = now
	if p.failures >= t.free {
		// The next check waits from now, or from the slot already booked
		// for it, whichever is later.
		if next := now.Add(t.delay(p.failures)); next.After(p.next) {
			p.next = next
		}
	}
	t.decided(p)
	return p.failures
}

// abandoned ends a check booked for key that never ran (its client gave
// up waiting, or the checks were all busy): it is neither a failure nor a
// success, and must not hold up the address's next attempt.
func (t *throttle) abandoned(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e := t.entries[key]; e != nil {
		t.decided(e.Value.(*penalty))
	}
}

// decided ends one pending check of p and wakes the attempts waiting for
// its outcome.
func (t *throttle) decided(p *penalty) {
	if p.pending > 0 {
		p.pending--
	}
	if p.changed != nil {
		close(p.changed)
		p.changed = nil
	}
}

// succeeded forgets key: its owner knows a password.
func (t *throttle) succeeded(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e := t.entries[key]; e != nil {
		t.remove(e)
	}
}

func (t *throttle) remove(e *list.Element) {
	p := e.Value.(*penalty)
	if p.changed != nil {
		// Waiters try again and find the address fresh.
		close(p.changed)
		p.changed = nil
	}
	delete(t.entries, p.key)
	t.lru.Remove(e)
}

// len returns how many addresses are remembered.
func (t *throttle) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lru.Len()
}

// throttleKey is what failures are counted against: the IPv4 address, or
// the /64 of an IPv6 address (one host commonly has a whole /64 to pick
// from), or the address as a string when it is not IP.
func throttleKey(a net.Addr) string {
	ip, ok := addrIP(a)
	switch {
	case !ok && a == nil:
		return ""
	case !ok:
		return a.Network() + ":" + a.String()
	case ip.Is4():
		return ip.String()
	}
	p, _ := ip.Prefix(64)
	return p.String()
}

// addrIP returns the IP address of a, unmapped from IPv4-in-IPv6.
func addrIP(a net.Addr) (netip.Addr, bool) {
	for {
		u, ok := a.(interface{ Unwrap() net.Addr })
		if !ok {
			break
		}
		a = u.Unwrap()
	}
	var ip netip.Addr
	switch a := a.(type) {
	case nil:
		return ip, false
	case *net.TCPAddr:
		ip, _ = netip.AddrFromSlice(a.IP)
	case *net.UDPAddr:
		ip, _ = netip.AddrFromSlice(a.IP)
	case *net.IPAddr:
		ip, _ = netip.AddrFromSlice(a.IP)
	default:
		if ap, err := netip.ParseAddrPort(a.String()); err == nil {
			ip = ap.Addr()
		} else if p, err := netip.ParseAddr(a.String()); err == nil {
			ip = p
		}
	}
	return ip.Unmap(), ip.IsValid()
}

// isLocal reports whether a is a loopback address or a Unix socket, the
// clients the safe default lets in anonymously.
func isLocal(a net.Addr) bool {
	for {
		u, ok := a.(interface{ Unwrap() net.Addr })
		if !ok {
			break
		}
		a = u.Unwrap()
	}
	if _, ok := a.(*net.UnixAddr); ok {
		return true
	}
	ip, ok := addrIP(a)
	return ok && ip.IsLoopback()
}
