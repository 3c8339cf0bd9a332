package broker

import "time"

// will is a client's Will Message with the properties that decide when it
// is published and for how long it lives.
type will struct {
	msg       *Message
	delay     uint32 // Will Delay Interval, seconds
	expiry    uint32 // Message Expiry Interval, counted from publication
	hasExpiry bool
}

// message returns the will as published at now: its expiry counts from the
// moment it is published, not from the CONNECT that carried it.
func (w *will) message(now time.Time) *Message {
	m := w.msg.clone()
	m.Created = now
	if w.hasExpiry {
		m.Expires = now.Add(time.Duration(w.expiry) * time.Second)
	}
	return m
}
