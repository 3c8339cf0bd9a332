package packet

import (
	"bytes"
	"unicode/utf8"
)

// This file holds the primitive field codecs (MQTT 5.0 section 1.5): integers,
// UTF-8 Encoded Strings, Binary Data. Decoding walks a packet body with a
// reader; encoding appends to a caller's slice.

// reader walks a packet body. It is a small value type so that it stays on
// the caller's stack; every read checks bounds and returns ErrShortBuffer
// rather than panicking, because the body comes from the network.
type reader struct {
	b []byte
	i int
}

// left returns the number of unread bytes.
func (r *reader) left() int { return len(r.b) - r.i }

// rest returns the unread bytes (aliasing the body) and consumes them.
func (r *reader) rest() []byte {
	b := r.b[r.i:len(r.b):len(r.b)] // cap limited: the read buffer goes on with the next packet
	r.i = len(r.b)
	return b
}

func (r *reader) u8() (byte, error) {
	if r.i >= len(r.b) {
		return 0, ErrShortBuffer
	}
	c := r.b[r.i]
	r.i++
	return c, nil
}

func (r *reader) u16() (uint16, error) {
	if r.left() < 2 {
		return 0, ErrShortBuffer
	}
	v := uint16(r.b[r.i])<<8 | uint16(r.b[r.i+1])
	r.i += 2
	return v, nil
}

func (r *reader) u32() (uint32, error) {
	if r.left() < 4 {
		return 0, ErrShortBuffer
	}
	b := r.b[r.i : r.i+4]
	r.i += 4
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]), nil
}

// varint reads a Variable Byte Integer that must be complete within the body:
// running out of body here is a short packet, not a request for more bytes.
func (r *reader) varint() (int, error) {
	n, size, err := readVarint(r.b[r.i:])
	if err != nil {
		return 0, err
	}
	if size == 0 {
		return 0, ErrShortBuffer
	}
	r.i += size
	return n, nil
}

// bin reads Binary Data (section 1.5.6): a two-byte length and that many
// bytes, returned as a slice of the body. A length past the end of the body
// is ErrShortBuffer.
func (r *reader) bin() ([]byte, error) {
	n, err := r.u16()
	if err != nil {
		return nil, err
	}
	if r.left() < int(n) {
		return nil, ErrShortBuffer
	}
	b := r.b[r.i : r.i+int(n) : r.i+int(n)] // cap limited so an append by the caller cannot overwrite the next field
	r.i += int(n)
	return b, nil
}

// str reads a UTF-8 Encoded String (section 1.5.4): Binary Data whose bytes
// must also be well-formed UTF-8 without U+0000.
func (r *reader) str() ([]byte, error) {
	b, err := r.bin()
	if err != nil {
		return nil, err
	}
	if err := checkUTF8(b); err != nil {
		return nil, err
	}
	return b, nil
}

// checkUTF8 applies the two MUSTs for UTF-8 Encoded Strings. utf8.Valid
// already rejects surrogate halves (U+D800..U+DFFF) and overlong forms, which
// is what "well-formed" means in RFC 3629. The SHOULD-NOT code points
// (controls, non-characters) are allowed: the spec lets the receiver choose
// and rejecting them would break clients that use them in topic names.
func checkUTF8(s []byte) error {
	if bytes.IndexByte(s, 0) >= 0 {
		return ErrNullInString // [MQTT-1.5.4-2] (3.1.1: [MQTT-1.5.3-2])
	}
	if !utf8.Valid(s) {
		return ErrInvalidUTF8 // [MQTT-1.5.4-1] (3.1.1: [MQTT-1.5.3-1])
	}
	return nil
}

// Encoding helpers. They do not validate: encoders write what the caller
// built, and the broker only builds packets from values it decoded or chose.
// A string or binary field longer than 65,535 bytes cannot be represented and
// must be prevented by the caller; its length would be written truncated.

func appendU16(dst []byte, v uint16) []byte { return append(dst, byte(v>>8), byte(v)) }

func appendU32(dst []byte, v uint32) []byte {
	return append(dst, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
}

// appendBin appends a two-byte length and b: the wire form of both Binary
// Data and UTF-8 Encoded Strings.
func appendBin(dst, b []byte) []byte {
	dst = appendU16(dst, uint16(len(b)))
	return append(dst, b...)
}

func boolBit(b bool, bit byte) byte {
	if b {
		return bit
	}
	return 0
}
