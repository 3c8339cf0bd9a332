package broker

import "time"

// will is a client's Will Message with the properties that decide when it
// is published and for how long it lives.
type will struct {
	msg       *Message
	delay     uint32 // Will Delay Interval, seconds
	expiry    uint32 // Message Expiry Interval, counted from publication
	hasExpiry bool

	client string // whose will it is
	// ref is the cluster's reference to the will's record (Cluster.Claim),
	// empty on a single node and for a will restored from the store.
	ref string
}

// clusterWill is the will as the cluster records it for the line.
func (w *will) clusterWill(sessionExpiry uint32) *Will {
	return &Will{Message: w.msg, Delay: w.delay, SessionExpiry: sessionExpiry, Expiry: w.expiry, HasExpiry: w.hasExpiry}
}

// Will is a connection's will as a cluster keeps it for the line (see
// Cluster.Claim), so that another node can publish it if this one dies
// with the connection open.
type Will struct {
	Message *Message // topic, payload, QoS, retain flag and properties
	Delay   uint32   // Will Delay Interval, seconds
	// SessionExpiry is the session's expiry interval at CONNECT, in
	// seconds: the will goes out when the session ends if that comes
	// before its delay.
	SessionExpiry uint32
	Expiry        uint32 // Message Expiry Interval, counted from publication
	HasExpiry     bool
}

// At returns the will's message as published at now: its expiry counts
// from then.
func (w *Will) At(now time.Time) *Message {
	iw := will{msg: w.Message, expiry: w.Expiry, hasExpiry: w.HasExpiry}
	return iw.message(now)
}

// Due returns how long after its connection ended the will is published:
// its delay, or the session's expiry if that is shorter.
func (w *Will) Due() time.Duration {
	return time.Duration(min(w.Delay, w.SessionExpiry)) * time.Second
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
