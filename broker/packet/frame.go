package packet

// This file finds packet boundaries in a read buffer (the fixed header) and
// holds the Variable Byte Integer codec that the fixed header, property
// lengths and subscription identifiers share.

// maxVarintLen is the longest Variable Byte Integer MQTT allows.
const maxVarintLen = 4

// ReadFrame parses the fixed header at the start of buf. headerLen==0 with
// err==nil means buf does not yet hold the whole fixed header (need more
// bytes). Otherwise the packet occupies buf[headerLen : headerLen+h.Remaining]
// (the caller checks it has that many bytes).
//
// maxSize>0: if headerLen+Remaining > maxSize, ReadFrame returns
// ErrPacketTooLarge as soon as the length is known; h and headerLen are then
// filled in so the caller can log the size. Any other error returns a zero h
// and headerLen.
//
// The type and flags are checked from the first byte alone, so a bad first
// byte is reported without waiting for the length: ErrReservedType for type
// 0, ErrReservedFlags when PUBREL, SUBSCRIBE or UNSUBSCRIBE flags are not
// 0b0010 or another non-PUBLISH type's flags are not 0. PUBLISH flags carry
// DUP, QoS and RETAIN and are checked by Publish.Decode. A length needing a
// fifth byte is ErrVarintTooLong; one not minimally encoded is
// ErrVarintNotMinimal.
//
// ReadFrame does not allocate.
func ReadFrame(buf []byte, maxSize int) (h FixedHeader, headerLen int, err error) {
	if len(buf) == 0 {
		return FixedHeader{}, 0, nil
	}
	t, flags := Type(buf[0]>>4), buf[0]&0x0F
	switch t {
	case 0:
		return FixedHeader{}, 0, ErrReservedType // [MQTT-2.1.2] type 0 is reserved
	case PUBLISH:
		// DUP/QoS/RETAIN: validated by Publish.Decode, which knows the QoS rules.
	case PUBREL, SUBSCRIBE, UNSUBSCRIBE:
		if flags != 0b0010 {
			return FixedHeader{}, 0, ErrReservedFlags // [MQTT-3.6.1-1] [MQTT-3.8.1-1] [MQTT-3.10.1-1]
		}
	default:
		if flags != 0 {
			return FixedHeader{}, 0, ErrReservedFlags // [MQTT-2.1.3-1] [MQTT-3.14.1-1] [MQTT-3.15.1-1]
		}
	}
	n, size, err := readVarint(buf[1:])
	if err != nil || size == 0 {
		return FixedHeader{}, 0, err
	}
	h = FixedHeader{Type: t, Flags: flags, Remaining: n}
	headerLen = 1 + size
	if maxSize > 0 && headerLen+n > maxSize {
		return h, headerLen, ErrPacketTooLarge // [MQTT-3.2.2-15] checked before the body is read
	}
	return h, headerLen, nil
}

// readVarint decodes the Variable Byte Integer at the start of b. size==0 with
// err==nil means b ends before the integer does. It rejects a fourth byte with
// the continuation bit set without waiting for a fifth, and an encoding longer
// than the value needs. Both limits keep a peer from making the reader wait
// for, or mis-size, a length that cannot be valid.
func readVarint(b []byte) (n, size int, err error) {
	for i := 0; i < maxVarintLen; i++ {
		if i >= len(b) {
			return 0, 0, nil
		}
		c := b[i]
		n |= int(c&0x7F) << (7 * i)
		if c&0x80 == 0 {
			if i > 0 && c == 0 {
				// A multi-byte encoding whose last group is zero would
				// fit in fewer bytes.
				return 0, 0, ErrVarintNotMinimal // [MQTT-1.5.5-1]
			}
			return n, i + 1, nil
		}
	}
	return 0, 0, ErrVarintTooLong // [MQTT-1.5.5-1] at most four bytes
}

// VarintSize returns the number of bytes AppendVarint writes for n: 1 to 4
// for 0..MaxRemainingLength. It returns 5 for a larger n, which no packet can
// carry, so a size computed from it is always over any real limit.
func VarintSize(n int) int {
	switch {
	case n < 1<<7:
		return 1
	case n < 1<<14:
		return 2
	case n < 1<<21:
		return 3
	case n <= MaxRemainingLength:
		return 4
	}
	return 5
}

// AppendVarint appends n as a Variable Byte Integer (MQTT 5.0 section 1.5.5)
// in the minimum number of bytes. n must be in 0..MaxRemainingLength; a value
// outside that range has no valid encoding and AppendVarint panics, because
// writing it anyway would corrupt the stream for every later packet. Callers
// that build packets from peer-supplied sizes check them with Size first.
func AppendVarint(dst []byte, n int) []byte {
	if n < 0 || n > MaxRemainingLength {
		panic("packet: variable byte integer out of range")
	}
	for n >= 0x80 {
		dst = append(dst, byte(n)|0x80)
		n >>= 7
	}
	return append(dst, byte(n))
}

// appendFixedHeader appends the first byte and the Remaining Length.
func appendFixedHeader(dst []byte, t Type, flags byte, remaining int) []byte {
	dst = append(dst, byte(t)<<4|flags)
	return AppendVarint(dst, remaining)
}
