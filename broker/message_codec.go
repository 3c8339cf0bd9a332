package broker

import (
	"encoding/binary"
	"errors"
	"time"
	"unsafe"

	"github.com/linemq/linemq/broker/packet"
)

// messageFormat is the version byte of Message's binary form. A Store keeps
// these bytes opaque, so the broker alone decides the format and can
// migrate it.
const messageFormat = 1

// ErrBadMessage is returned by UnmarshalMessage for bytes that are not a
// message in a format this broker reads.
var ErrBadMessage = errors.New("broker: malformed stored message")

// AppendBinary appends m's binary form to dst, for a Store.
func (m *Message) AppendBinary(dst []byte) []byte {
	flags := m.QoS & 3
	if m.Retain {
		flags |= 1 << 2
	}
	if !m.Expires.IsZero() {
		flags |= 1 << 3
	}
	if m.redelivery {
		flags |= 1 << 4 // ignored by readers that predate it
	}
	dst = append(dst, messageFormat, flags)
	dst = binary.AppendVarint(dst, m.Created.UnixNano())
	if !m.Expires.IsZero() {
		dst = binary.AppendVarint(dst, m.Expires.UnixNano())
	}
	dst = binary.AppendUvarint(dst, m.props)
	dst = append(dst, m.PayloadFormat)
	// Topic and Origin are written from the strings, so a Message built as
	// a literal (without NewMessage) stores the same way.
	for _, s := range [...]string{m.Topic, m.Origin} {
		dst = binary.AppendUvarint(dst, uint64(len(s)))
		dst = append(dst, s...)
	}
	for _, b := range [...][]byte{m.Payload, m.ContentType, m.ResponseTopic, m.CorrelationData} {
		dst = binary.AppendUvarint(dst, uint64(len(b)))
		dst = append(dst, b...)
	}
	dst = binary.AppendUvarint(dst, uint64(len(m.User)))
	for _, u := range m.User {
		dst = binary.AppendUvarint(dst, uint64(len(u.Key)))
		dst = append(dst, u.Key...)
		dst = binary.AppendUvarint(dst, uint64(len(u.Value)))
		dst = append(dst, u.Value...)
	}
	return dst
}

// MarshalBinary returns m's binary form.
func (m *Message) MarshalBinary() ([]byte, error) { return m.AppendBinary(nil), nil }

// UnmarshalMessage decodes a message made by AppendBinary. It copies what
// it keeps, so b may be reused (or be a bbolt value) after it returns.
func UnmarshalMessage(b []byte) (*Message, error) {
	if len(b) < 2 || b[0] != messageFormat {
		return nil, ErrBadMessage
	}
	arena := append([]byte(nil), b...)
	r := reader{b: arena[2:]}
	m := &Message{QoS: arena[1] & 3, Retain: arena[1]&(1<<2) != 0, redelivery: arena[1]&(1<<4) != 0}
	m.Created = time.Unix(0, r.varint())
	if arena[1]&(1<<3) != 0 {
		m.Expires = time.Unix(0, r.varint())
	}
	m.props = r.uvarint()
	m.PayloadFormat = r.byte()
	m.topicBytes = r.bytes()
	m.originBytes = r.bytes()
	m.Payload = r.bytes()
	m.ContentType = r.bytes()
	m.ResponseTopic = r.bytes()
	m.CorrelationData = r.bytes()
	if n := r.uvarint(); n > uint64(len(r.b)) {
		r.err = true // each pair takes at least two bytes
	} else if n > 0 {
		m.User = make([]packet.UserProperty, n)
		for i := range m.User {
			m.User[i] = packet.UserProperty{Key: r.bytes(), Value: r.bytes()}
		}
	}
	if r.err || len(r.b) != 0 || m.QoS > 2 {
		return nil, ErrBadMessage
	}
	if len(m.topicBytes) > 0 {
		m.Topic = unsafe.String(&m.topicBytes[0], len(m.topicBytes))
	}
	if len(m.originBytes) > 0 {
		m.Origin = unsafe.String(&m.originBytes[0], len(m.originBytes))
	}
	if m.Payload == nil {
		m.Payload = []byte{}
	}
	return m, nil
}

// reader reads the fields of a stored message, remembering the first error.
type reader struct {
	b   []byte
	err bool
}

func (r *reader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = true
		r.b = nil
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) varint() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.err = true
		r.b = nil
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) byte() byte {
	if len(r.b) == 0 {
		r.err = true
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *reader) bytes() []byte {
	n := r.uvarint()
	if n > uint64(len(r.b)) {
		r.err = true
		r.b = nil
		return nil
	}
	if n == 0 {
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}
