package bolt

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/packet"
)

// The stored forms of SessionRecord, SubscriptionRecord and MessageRecord.
// Each starts with a format byte, so a later linemq can read old records and
// change the layout without a schema migration; a decoder refuses formats it
// does not know. Numbers are encoding/binary varints: most are small (QoS,
// packet ids, subscription ids), and flash writes are paid per byte.
//
// The keys carry what they identify (client id, Seq, filter), so the values
// do not repeat it. Messages are the broker's own bytes
// (broker.Message.AppendBinary), opaque here: the broker owns that format.
const (
	// sessionFormatV1 is schema 2's session record, with the subscriptions
	// inside; it is read (by the migration, and by Check on an old file)
	// but no longer written.
	sessionFormatV1 = 1
	// sessionFormat is the session record without subscriptions, which
	// live in bucketSubscriptions from schema 3 on.
	sessionFormat = 2
	// messageFormat is a record that carries its message's body (MessageID 0).
	messageFormat = 1
	// messageFormatShared is a record whose body is in bucketBodies under
	// its MessageID.
	messageFormatShared = 2
	// subscriptionFormat is a subscription's options.
	subscriptionFormat = 1
)

// ErrCorruptRecord is returned when a stored record cannot be decoded. Load
// and Check wrap it with the bucket and key.
var ErrCorruptRecord = errors.New("storage: malformed record")

// Session record layout (format 2):
//
//	format    byte = 2
//	version   byte (packet.Version)
//	flags     byte: 1 disconnected, 2 will, 4 will has expiry
//	expiry    uvarint (seconds, fits uint32)
//	[disconnected unix nanoseconds, varint]         if flags&1
//	[will: delay uvarint, [expiry uvarint if flags&4], message: the rest]
//
// Format 1 (schema 2) had, after the disconnected time, the subscriptions:
//
//	nsubs     uvarint
//	  filter  uvarint length + bytes
//	  options byte (see Subscription layout)
//	  subid   uvarint (fits uint32)
//
// The will's message is last so that it needs no length.
const (
	sessDisconnected = 1 << iota
	sessWill
	sessWillExpiry
	sessFlagsKnown = sessDisconnected | sessWill | sessWillExpiry
)

// appendSession appends s's stored form to dst: its own fields, not its
// Subscriptions (SaveSubscription stores those). It fails only for a will
// without a message, which the broker never makes.
func appendSession(dst []byte, s *broker.SessionRecord) ([]byte, error) {
	var flags byte
	if !s.Disconnected.IsZero() {
		flags |= sessDisconnected
	}
	if w := s.Will; w != nil {
		if w.Message == nil {
			return dst, errors.New("storage: session will has no message")
		}
		flags |= sessWill
		if w.HasExpiry {
			flags |= sessWillExpiry
		}
	}
	dst = append(dst, sessionFormat, byte(s.Version), flags)
	dst = binary.AppendUvarint(dst, uint64(s.ExpiryInterval))
	if flags&sessDisconnected != 0 {
		dst = binary.AppendVarint(dst, s.Disconnected.UnixNano())
	}
	if w := s.Will; w != nil {
		dst = binary.AppendUvarint(dst, uint64(w.Delay))
		if w.HasExpiry {
			dst = binary.AppendUvarint(dst, uint64(w.Expiry))
		}
		dst = w.Message.AppendBinary(dst)
	}
	return dst, nil
}

// decodeSession decodes a session record stored under clientID, in either
// format; a format 1 record returns the subscriptions it holds. It copies
// what it keeps, so b may be a bbolt value.
func decodeSession(clientID string, b []byte) (*broker.SessionRecord, error) {
	if len(b) < 3 || (b[0] != sessionFormat && b[0] != sessionFormatV1) || b[2]&^sessFlagsKnown != 0 {
		return nil, ErrCorruptRecord
	}
	flags := b[2]
	s := &broker.SessionRecord{ClientID: clientID, Version: packet.Version(b[1])}
	r := decoder{b: b[3:]}
	s.ExpiryInterval = r.uint32()
	if flags&sessDisconnected != 0 {
		s.Disconnected = time.Unix(0, r.varint())
	}
	if b[0] == sessionFormatV1 {
		// Every subscription takes at least three bytes, which bounds the
		// allocation a corrupt count can cause.
		if n := r.uvarint(); n > uint64(len(r.b))/3 {
			r.fail()
		} else if n > 0 {
			s.Subscriptions = make([]broker.SubscriptionRecord, n)
			for i := range s.Subscriptions {
				sub := &s.Subscriptions[i]
				sub.Filter = string(r.bytes())
				r.options(sub)
				sub.SubscriptionID = r.uint32()
			}
		}
	}
	if flags&sessWill != 0 {
		w := &broker.WillRecord{HasExpiry: flags&sessWillExpiry != 0}
		w.Delay = r.uint32()
		if w.HasExpiry {
			w.Expiry = r.uint32()
		}
		if !r.err {
			m, err := broker.UnmarshalMessage(r.b)
			if err != nil {
				return nil, fmt.Errorf("%w: will: %w", ErrCorruptRecord, err)
			}
			w.Message = m
			r.b = nil
		}
		s.Will = w
	} else if flags&sessWillExpiry != 0 {
		r.fail()
	}
	if r.err || len(r.b) != 0 {
		return nil, ErrCorruptRecord
	}
	return s, nil
}

// Subscription layout (format 1), the value under its filter:
//
//	format  byte = 1
//	options byte: QoS bits 0-1, No Local bit 2, Retain As Published bit 3,
//	              Retain Handling bits 4-5
//	subid   uvarint (fits uint32)

// appendSubscription appends sub's stored form (without its filter, which
// is the key) to dst.
func appendSubscription(dst []byte, sub *broker.SubscriptionRecord) []byte {
	dst = append(dst, subscriptionFormat, subOptions(sub))
	return binary.AppendUvarint(dst, uint64(sub.SubscriptionID))
}

// subOptions packs a subscription's options into one byte.
func subOptions(sub *broker.SubscriptionRecord) byte {
	opts := sub.QoS&3 | (sub.RetainHandling&3)<<4
	if sub.NoLocal {
		opts |= 1 << 2
	}
	if sub.RetainAsPublished {
		opts |= 1 << 3
	}
	return opts
}

// decodeSubscription decodes the subscription stored under filter.
func decodeSubscription(filter string, b []byte) (broker.SubscriptionRecord, error) {
	sub := broker.SubscriptionRecord{Filter: filter}
	if len(b) < 2 || b[0] != subscriptionFormat {
		return sub, ErrCorruptRecord
	}
	r := decoder{b: b[1:]}
	r.options(&sub)
	sub.SubscriptionID = r.uint32()
	if r.err || len(r.b) != 0 {
		return sub, ErrCorruptRecord
	}
	return sub, nil
}

// Message record layout (formats 1 and 2):
//
//	format   byte: 1 body inline, 2 body shared
//	flags    byte: QoS bits 0-1, Retain bit 2, Sent bit 3, Released bit 4,
//	               share group bit 5
//	pid      uvarint (fits uint16)
//	[group name, group filter: uvarint length + bytes each]   if bit 5
//	nsubids  uvarint, then each uvarint (fits uint32)
//	format 1: message, the rest: broker.Message.AppendBinary
//	format 2: MessageID, uvarint (not 0): the body is in bucketBodies
//
// A shared record is about a dozen bytes whatever the message's size.
const (
	msgRetain   = 1 << 2
	msgSent     = 1 << 3
	msgReleased = 1 << 4
	msgGroup    = 1 << 5
	msgKnown    = 3 | msgRetain | msgSent | msgReleased | msgGroup
)

// appendMessageRecord appends m's stored form to dst: the body's id if it
// has one (MessageID), else the body itself. It fails only for a record
// with neither, which the broker never makes.
func appendMessageRecord(dst []byte, m *broker.MessageRecord) ([]byte, error) {
	if m.MessageID == 0 && m.Message == nil {
		return dst, errors.New("storage: message record has no message")
	}
	flags := m.QoS & 3
	if m.Retain {
		flags |= msgRetain
	}
	if m.Sent {
		flags |= msgSent
	}
	if m.Released {
		flags |= msgReleased
	}
	group := m.GroupName != "" || m.GroupFilter != ""
	if group {
		flags |= msgGroup
	}
	format := byte(messageFormat)
	if m.MessageID != 0 {
		format = messageFormatShared
	}
	dst = append(dst, format, flags)
	dst = binary.AppendUvarint(dst, uint64(m.PacketID))
	if group {
		dst = binary.AppendUvarint(dst, uint64(len(m.GroupName)))
		dst = append(dst, m.GroupName...)
		dst = binary.AppendUvarint(dst, uint64(len(m.GroupFilter)))
		dst = append(dst, m.GroupFilter...)
	}
	dst = binary.AppendUvarint(dst, uint64(len(m.SubIDs)))
	for _, id := range m.SubIDs {
		dst = binary.AppendUvarint(dst, uint64(id))
	}
	if m.MessageID != 0 {
		return binary.AppendUvarint(dst, m.MessageID), nil
	}
	return m.Message.AppendBinary(dst), nil
}

// decodeMessageRecord decodes a message record stored under seq. A shared
// record comes back with its MessageID and no Message: the caller looks
// the body up. It copies what it keeps, so b may be a bbolt value.
func decodeMessageRecord(seq uint64, b []byte) (*broker.MessageRecord, error) {
	m := &broker.MessageRecord{Seq: seq}
	r, ok := decodeMessageHead(b, m)
	if !ok {
		return nil, ErrCorruptRecord
	}
	if b[0] == messageFormatShared {
		m.MessageID = r.uvarint()
		if r.err || len(r.b) != 0 || m.MessageID == 0 {
			return nil, ErrCorruptRecord
		}
		return m, nil
	}
	msg, err := broker.UnmarshalMessage(r.b)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorruptRecord, err)
	}
	m.Message = msg
	return m, nil
}

// decodeMessageHead decodes the fields both record formats share into m
// (nil: skip them without allocating) and returns the decoder positioned
// at the body or its id.
func decodeMessageHead(b []byte, m *broker.MessageRecord) (decoder, bool) {
	if len(b) < 2 || (b[0] != messageFormat && b[0] != messageFormatShared) || b[1]&^msgKnown != 0 || b[1]&3 == 3 {
		return decoder{}, false
	}
	flags := b[1]
	r := decoder{b: b[2:]}
	pid := r.uvarint()
	if pid > math.MaxUint16 {
		r.fail()
	}
	var name, filter []byte
	if flags&msgGroup != 0 {
		name, filter = r.bytes(), r.bytes()
	}
	n := r.uvarint()
	if n > uint64(len(r.b)) {
		r.fail() // each id takes at least one byte
	}
	if r.err {
		return r, false
	}
	if m == nil {
		for range n {
			r.uint32()
		}
		return r, !r.err
	}
	m.QoS, m.Retain = flags&3, flags&msgRetain != 0
	m.Sent, m.Released = flags&msgSent != 0, flags&msgReleased != 0
	m.PacketID = uint16(pid)
	m.GroupName, m.GroupFilter = string(name), string(filter)
	if n > 0 {
		m.SubIDs = make([]uint32, n)
		for i := range m.SubIDs {
			m.SubIDs[i] = r.uint32()
		}
	}
	return r, !r.err
}

// recordMessageID returns the MessageID of an encoded message record, 0
// for a record that carries its body or cannot be read. It allocates
// nothing: commits call it for every record they replace or delete, to
// keep the bodies' reference counts.
func recordMessageID(b []byte) uint64 {
	if len(b) == 0 || b[0] != messageFormatShared {
		return 0
	}
	r, ok := decodeMessageHead(b, nil)
	if !ok {
		return 0
	}
	id := r.uvarint()
	if r.err || len(r.b) != 0 {
		return 0
	}
	return id
}

// decoder reads varint fields, remembering the first failure so that the
// decoders check once at the end.
type decoder struct {
	b   []byte
	err bool
}

func (d *decoder) fail() { d.err, d.b = true, nil }

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) uint32() uint32 {
	v := d.uvarint()
	if v > math.MaxUint32 {
		d.fail()
		return 0
	}
	return uint32(v)
}

func (d *decoder) byte() byte {
	if len(d.b) == 0 {
		d.fail()
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

// options decodes a subscription's options byte into sub.
func (d *decoder) options(sub *broker.SubscriptionRecord) {
	opts := d.byte()
	if opts&0xC0 != 0 || opts&3 == 3 || (opts>>4)&3 == 3 {
		d.fail()
	}
	sub.QoS = opts & 3
	sub.NoLocal = opts&(1<<2) != 0
	sub.RetainAsPublished = opts&(1<<3) != 0
	sub.RetainHandling = (opts >> 4) & 3
}

// bytes returns a length-prefixed field, aliasing the input: callers copy
// (string conversion) what they keep.
func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail()
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}
