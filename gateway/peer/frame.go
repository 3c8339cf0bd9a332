package peer

import (
	"encoding/binary"
	"errors"
	"math"
	"time"

	"github.com/linemq/linemq/broker"
)

// A frame is what one Stream.Send carries: a version byte, in version 2 the
// sender's clock when it wrote the frame (a signed varint of nanoseconds),
// and then records, each a kind byte, a 4-byte big-endian body length and
// the body. The length lets a receiver skip a kind it does not know, so a
// newer node can add kinds without breaking an older one.
//
// Version 2 adds the clock readings a receiver needs to tell how old a
// record is (the frame's write time; a deliver's and a ping's send time
// and timeout) and the expired answer. A node writes version 2 only to a
// peer whose Hello says it reads it (Hello.Version), so an older node
// keeps getting version 1; were it ever sent version 2, its decoder would
// refuse the frame as malformed and end the stream, never misread it.
// Version 3 adds to a forward and a deliver the sending node's view when it
// routed the message (broker.Message.View, the registry revision its routes
// reflected), by which a node that adopted a session from its replica
// tells a message routed before the sender saw the adoption; it too goes
// only to a peer that reads it.
// Clock readings are the sender's own (see Mesh's clock): only their
// differences on one node mean anything.
const (
	frameVersion1 = 1
	frameVersion2 = 2
	frameVersion3 = 3
	// frameVersion is the newest version this node reads and writes.
	frameVersion = frameVersion3
	recHeader    = 5 // kind + length

	// frameTarget is the size at which the writer closes a frame and
	// starts another, so one huge batch does not become one huge gRPC
	// message (and one huge allocation on the receiving node).
	frameTarget = 256 << 10
)

// kind is a record's kind.
type kind uint8

const (
	// kindForward: a message for the receiving node's ordinary
	// subscribers. Body: in version 3 the sender's view (uvarint), then
	// the message's binary form (broker.Message).
	kindForward kind = iota + 1
	// kindDeliver: a message for one client of one share group. Body:
	// uvarint seq, in version 2 the send time (varint, the sender's clock
	// when Deliver queued it) and the delivery's timeout (uvarint
	// nanoseconds), then group, filter and client (each a uvarint length
	// and bytes), in version 3 the sender's view (uvarint), then the
	// message's binary form.
	kindDeliver
	// kindAnswer: the receiving node's answer to a kindDeliver. Body:
	// uvarint seq, a status byte, then (for statusError) the error text.
	kindAnswer
	// kindPing and kindPong: liveness and round trip time. Body: uvarint
	// seq; a pong echoes its ping's. In version 2 a ping adds its send
	// time (varint) and the sender's ping timeout (uvarint nanoseconds):
	// a pong later than that makes the sender give up on every delivery
	// it is waiting for.
	kindPing
	kindPong
	// kindCall: a request for the receiving node's Caller. Body: uvarint
	// seq, the method (uvarint length and bytes), then the argument.
	kindCall
	// kindResult: the answer to a kindCall. Body: uvarint seq, a status
	// byte (statusAccepted: the result follows; statusError: the error
	// text follows).
	kindResult
	// kindRetain: a retained message (or a clear) for the receiving node
	// to keep, not to route. Body: the message's binary form.
	kindRetain

	lastKind = kindRetain
)

// The status of an answer.
const (
	statusAccepted = 1
	statusNotHere  = 2
	statusError    = 3
	// statusExpired: the delivery reached the receiving node after its
	// sender had given up on it (or too late to be answered in time), so
	// it was not delivered. Sent only in reply to a version 2 deliver.
	statusExpired = 4
)

// errMalformed is returned for a frame or record that does not decode.
var errMalformed = errors.New("peer: malformed frame")

// outRec is one record waiting in a link's queue. Encoding happens on the
// writer goroutine, so the publish path only appends a small struct.
type outRec struct {
	kind    kind
	status  uint8
	seq     uint64
	sent    int64         // a deliver's or ping's send time on this node's clock
	timeout time.Duration // a deliver's timeout, a ping's pong timeout
	msg     *broker.Message
	to      Target
	text    string // the error text of a statusError answer; a call's method
	body    []byte // a call's argument or result
}

// appendFrameHeader starts a frame of version v written at now.
func appendFrameHeader(dst []byte, v uint8, now int64) []byte {
	dst = append(dst, v)
	if v >= frameVersion2 {
		dst = binary.AppendVarint(dst, now)
	}
	return dst
}

// appendRecord appends r's encoding in frame version v to dst.
func appendRecord(dst []byte, r *outRec, v uint8) []byte {
	dst = append(dst, byte(r.kind), 0, 0, 0, 0)
	start := len(dst)
	switch r.kind {
	case kindForward, kindRetain:
		if r.kind == kindForward && v >= frameVersion3 {
			dst = binary.AppendUvarint(dst, r.msg.View())
		}
		dst = r.msg.AppendBinary(dst)
	case kindDeliver:
		dst = binary.AppendUvarint(dst, r.seq)
		if v >= frameVersion2 {
			dst = binary.AppendVarint(dst, r.sent)
			dst = binary.AppendUvarint(dst, uint64(max(r.timeout, 0)))
		}
		dst = appendString(dst, r.to.Group)
		dst = appendString(dst, r.to.Filter)
		dst = appendString(dst, r.to.Client)
		if v >= frameVersion3 {
			dst = binary.AppendUvarint(dst, r.msg.View())
		}
		dst = r.msg.AppendBinary(dst)
	case kindAnswer:
		dst = binary.AppendUvarint(dst, r.seq)
		dst = append(dst, r.status)
		dst = append(dst, r.text...)
	case kindPing:
		dst = binary.AppendUvarint(dst, r.seq)
		if v >= frameVersion2 {
			dst = binary.AppendVarint(dst, r.sent)
			dst = binary.AppendUvarint(dst, uint64(max(r.timeout, 0)))
		}
	case kindPong:
		dst = binary.AppendUvarint(dst, r.seq)
	case kindCall:
		dst = binary.AppendUvarint(dst, r.seq)
		dst = appendString(dst, r.text)
		dst = append(dst, r.body...)
	case kindResult:
		dst = binary.AppendUvarint(dst, r.seq)
		dst = append(dst, r.status)
		if r.status == statusError {
			dst = append(dst, r.text...)
		} else {
			dst = append(dst, r.body...)
		}
	}
	binary.BigEndian.PutUint32(dst[start-4:start], uint32(len(dst)-start))
	return dst
}

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

// inRec is one decoded record. Its slices alias the frame.
type inRec struct {
	kind   kind
	seq    uint64
	status uint8
	// timed: a version 2 deliver or ping, with the sender's send time
	// (its clock) and timeout (nanoseconds).
	timed   bool
	sent    int64
	timeout int64
	to      [3][]byte // group, filter, client; a call's method in to[0]
	view    uint64    // version 3 forward or deliver: the sender's view
	body    []byte    // the message (forward, deliver), error text (answer), a call's argument or result
}

// frameReader walks the records of one frame.
type frameReader struct {
	b       []byte
	v       uint8 // the frame's version
	written int64 // version 2: the sender's clock when it wrote the frame
}

// newFrameReader checks the frame's version (1 to 3) and reads its header.
func newFrameReader(frame []byte) (frameReader, error) {
	if len(frame) == 0 || frame[0] < frameVersion1 || frame[0] > frameVersion3 {
		return frameReader{}, errMalformed
	}
	f := frameReader{b: frame[1:], v: frame[0]}
	if f.v >= frameVersion2 {
		w, n := binary.Varint(f.b)
		if n <= 0 {
			return frameReader{}, errMalformed
		}
		f.written, f.b = w, f.b[n:]
	}
	return f, nil
}

// next decodes the next record into r. It returns false at the end of the
// frame, and an error for a record that does not decode; a record of a
// kind it does not know is skipped.
func (f *frameReader) next(r *inRec) (bool, error) {
	for len(f.b) > 0 {
		if len(f.b) < recHeader {
			return false, errMalformed
		}
		k := kind(f.b[0])
		n := binary.BigEndian.Uint32(f.b[1:recHeader])
		if uint64(n) > uint64(len(f.b)-recHeader) {
			return false, errMalformed
		}
		body := f.b[recHeader : recHeader+int(n)]
		f.b = f.b[recHeader+int(n):]
		if k < kindForward || k > lastKind {
			continue // a newer node's kind: skip it
		}
		*r = inRec{kind: k}
		if err := r.decode(body, f.v); err != nil {
			return false, err
		}
		return true, nil
	}
	return false, nil
}

// decode reads a record's body as frame version v lays it out.
func (r *inRec) decode(b []byte, v uint8) error {
	if r.kind == kindForward || r.kind == kindRetain {
		if r.kind == kindForward && v >= frameVersion3 {
			view, n := binary.Uvarint(b)
			if n <= 0 {
				return errMalformed
			}
			r.view, b = view, b[n:]
		}
		r.body = b
		return nil
	}
	seq, n := binary.Uvarint(b)
	if n <= 0 {
		return errMalformed
	}
	r.seq, b = seq, b[n:]
	if v >= frameVersion2 && (r.kind == kindDeliver || r.kind == kindPing) {
		sent, n := binary.Varint(b)
		if n <= 0 {
			return errMalformed
		}
		b = b[n:]
		timeout, n := binary.Uvarint(b)
		if n <= 0 || timeout > math.MaxInt64 {
			return errMalformed
		}
		r.timed, r.sent, r.timeout, b = true, sent, int64(timeout), b[n:]
	}
	switch r.kind {
	case kindDeliver:
		for i := range r.to {
			l, n := binary.Uvarint(b)
			if n <= 0 || l > uint64(len(b)-n) {
				return errMalformed
			}
			r.to[i], b = b[n:n+int(l)], b[n+int(l):]
		}
		if v >= frameVersion3 {
			view, n := binary.Uvarint(b)
			if n <= 0 {
				return errMalformed
			}
			r.view, b = view, b[n:]
		}
		r.body = b
	case kindAnswer:
		if len(b) == 0 || b[0] < statusAccepted || b[0] > statusExpired {
			return errMalformed
		}
		r.status, r.body = b[0], b[1:]
	case kindCall:
		l, n := binary.Uvarint(b)
		if n <= 0 || l > uint64(len(b)-n) {
			return errMalformed
		}
		r.to[0], r.body = b[n:n+int(l)], b[n+int(l):]
	case kindResult:
		if len(b) == 0 || (b[0] != statusAccepted && b[0] != statusError) {
			return errMalformed
		}
		r.status, r.body = b[0], b[1:]
	default: // ping, pong
		if len(b) != 0 {
			return errMalformed
		}
	}
	return nil
}
