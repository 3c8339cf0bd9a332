package broker

import "sync/atomic"

// delivery is one message bound for one session: queued while the session
// is offline or its send window is full, then in flight until acknowledged.
type delivery struct {
	msg      *Message
	seq      uint64 // order within the session, for resend after reconnect
	pid      uint16 // packet id while in flight
	qos      byte   // QoS it is delivered at: min(published, granted)
	retain   bool   // RETAIN flag to send
	released bool   // QoS 2: PUBREC received and PUBREL sent
	sent     bool   // sent at least once on some connection, so a resend sets DUP
	// maybeSent: queued when the node stopped without a clean shutdown
	// while its client was connected; it may have been sent in the last
	// moments, its record's update not yet committed: it goes with DUP.
	maybeSent bool
	stored    bool // the Store has a record of it
	subIDs    subIDs
	group     *shareGroup // share group it was picked for, nil if ordinary
	// feed, when set, makes this entry a place holder for the retained
	// messages a new subscription receives: they are sent from here one by
	// one as the send window allows, ahead of anything queued after the
	// SUBSCRIBE and behind anything queued before. msg is the next of them.
	feed *retainedFeed
}

// retainedFeed is what is left to send of the retained messages matching a
// new subscription. Sending them under the client's window, rather than
// queueing them all at once, lets a subscriber receive any number of them
// without overflowing its queue or its pending-bytes bound.
type retainedFeed struct {
	msgs []*Message
	qos  byte // the subscription's granted QoS
	ids  subIDs
}

// subIDs holds the subscription identifiers of a delivery without
// allocating for the common case of at most two.
type subIDs struct {
	n     uint8
	small [2]uint32
	more  []uint32
}

func (s *subIDs) add(id uint32) {
	if id == 0 {
		return
	}
	if s.more != nil {
		s.more = append(s.more, id)
		return
	}
	if int(s.n) < len(s.small) {
		s.small[s.n] = id
		s.n++
		return
	}
	s.more = append(append(make([]uint32, 0, 4), s.small[:]...), id)
}

func (s *subIDs) appendTo(dst []uint32) []uint32 {
	if s.more != nil {
		return append(dst, s.more...)
	}
	return append(dst, s.small[:s.n]...)
}

// ring is a FIFO of deliveries on a growable circular buffer, so a session
// that queues and drains steadily does not allocate.
type ring struct {
	buf   []delivery
	head  int
	n     int
	qos0  int           // QoS 0 entries, so that a full queue finds its victim in O(1) when there are none
	total *atomic.Int64 // the server-wide count of queued messages, or nil
}

// count adds d to the server-wide total.
func (r *ring) count(d int) {
	if r.total != nil {
		r.total.Add(int64(d))
	}
}

// reset empties the ring, keeping its link to the server-wide total.
func (r *ring) reset() {
	r.count(-r.n)
	*r = ring{total: r.total}
}

func (r *ring) len() int { return r.n }

func (r *ring) push(d delivery) {
	if r.n == len(r.buf) {
		nb := make([]delivery, max(8, 2*len(r.buf)))
		for i := 0; i < r.n; i++ {
			nb[i] = r.buf[(r.head+i)%len(r.buf)]
		}
		r.buf, r.head = nb, 0
	}
	r.buf[(r.head+r.n)%len(r.buf)] = d
	r.n++
	if d.qos == 0 {
		r.qos0++
	}
	r.count(1)
}

func (r *ring) pop() delivery {
	d := r.buf[r.head]
	r.buf[r.head] = delivery{}
	r.head = (r.head + 1) % len(r.buf)
	r.n--
	if d.qos == 0 {
		r.qos0--
	}
	r.count(-1)
	if r.n == 0 {
		r.head = 0
		// Give a large idle buffer back so a burst does not pin memory.
		if len(r.buf) > 1024 {
			r.buf = nil
		}
	}
	return d
}

// at returns the i-th queued delivery, 0 being the oldest.
func (r *ring) at(i int) *delivery { return &r.buf[(r.head+i)%len(r.buf)] }

// removeAt removes the i-th delivery, keeping the order of the rest.
func (r *ring) removeAt(i int) delivery {
	d := *r.at(i)
	for j := i; j > 0; j-- {
		*r.at(j) = *r.at(j - 1)
	}
	*r.at(0) = d // so that pop accounts for the removed entry's QoS
	r.pop()
	return d
}

// oldestQoS0 returns the position of the oldest QoS 0 entry, or -1. It
// costs nothing when the queue holds none, the common case.
func (r *ring) oldestQoS0() int {
	if r.qos0 == 0 {
		return -1
	}
	for i := 0; i < r.n; i++ {
		if r.at(i).qos == 0 {
			return i
		}
	}
	return -1
}
