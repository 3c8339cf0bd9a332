package cluster

import (
	"encoding/binary"
	"errors"
	"time"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/packet"
)

// A replica batch is what an owner sends a replica in one call: a header
// (format, the owner's run, the batch's number in that run) and the Store
// writes made since the last batch, in order. Each write names its client
// id; a message body shared by several records of the batch travels once.

// replicaFormat is the version byte of a replica batch.
const replicaFormat = 1

// The kinds of replica op: the broker.Store write methods, the two marks
// that bracket a resync (every session of the owner's meant for the
// replica, sent whole), and, within one, a session kept as the replica has
// it (opKeep: the owner could not take it whole at that instant, it being
// installed or let go; its own writes, before and after, keep the copy).
const (
	opSaveSession byte = iota + 1
	opDeleteSession
	opSaveSub
	opDeleteSub
	opSaveMsg
	opDeleteMsg
	opInbound
	opResyncBegin
	opResyncEnd
	opKeep
)

// replicaOp is one Store write (or resync mark) on its way to a replica.
type replicaOp struct {
	kind    byte
	client  string
	session *broker.SessionRecord
	sub     broker.SubscriptionRecord
	filter  string
	msg     *broker.MessageRecord
	seq     uint64
	pid     uint16
	pending bool
}

// errBadBatch is returned for bytes that are not a replica batch.
var errBadBatch = errors.New("cluster: malformed replica batch")

// batchEncoder appends ops to a batch.
type batchEncoder struct {
	buf    []byte
	bodies map[uint64]struct{} // message ids whose body is in the batch
}

func (e *batchEncoder) reset(run, seq uint64) {
	e.buf = append(e.buf[:0], replicaFormat)
	e.buf = binary.AppendUvarint(e.buf, run)
	e.buf = binary.AppendUvarint(e.buf, seq)
	clear(e.bodies)
}

func (e *batchEncoder) add(op *replicaOp) {
	b := append(e.buf, op.kind)
	b = appendString(b, op.client)
	switch op.kind {
	case opSaveSession:
		s := op.session
		b = append(b, byte(s.Version))
		b = binary.AppendUvarint(b, uint64(s.ExpiryInterval))
		var at int64
		if !s.Disconnected.IsZero() {
			at = s.Disconnected.UnixNano()
		}
		b = binary.AppendVarint(b, at)
		if w := s.Will; w != nil {
			b = append(b, 1)
			b = binary.AppendUvarint(b, uint64(w.Delay))
			b = binary.AppendUvarint(b, uint64(w.Expiry))
			b = appendBool(b, w.HasExpiry)
			b = appendBytes(b, w.Message.AppendBinary(nil))
		} else {
			b = append(b, 0)
		}
	case opSaveSub:
		s := op.sub
		b = appendString(b, s.Filter)
		b = append(b, s.QoS, s.RetainHandling)
		b = appendBool(b, s.NoLocal)
		b = appendBool(b, s.RetainAsPublished)
		b = binary.AppendUvarint(b, uint64(s.SubscriptionID))
	case opDeleteSub:
		b = appendString(b, op.filter)
	case opSaveMsg:
		m := op.msg
		b = binary.AppendUvarint(b, m.Seq)
		b = binary.AppendUvarint(b, m.MessageID)
		b = append(b, m.QoS)
		b = appendBool(b, m.Retain)
		b = appendBool(b, m.Sent)
		b = appendBool(b, m.Released)
		b = binary.AppendUvarint(b, uint64(m.PacketID))
		b = appendString(b, m.GroupName)
		b = appendString(b, m.GroupFilter)
		b = binary.AppendUvarint(b, uint64(len(m.SubIDs)))
		for _, id := range m.SubIDs {
			b = binary.AppendUvarint(b, uint64(id))
		}
		_, sent := e.bodies[m.MessageID]
		if m.MessageID != 0 && sent {
			b = append(b, 0) // the body went earlier in the batch
		} else {
			b = append(b, 1)
			b = appendBytes(b, m.Message.AppendBinary(nil))
			if m.MessageID != 0 {
				if e.bodies == nil {
					e.bodies = make(map[uint64]struct{})
				}
				e.bodies[m.MessageID] = struct{}{}
			}
		}
	case opDeleteMsg:
		b = binary.AppendUvarint(b, op.seq)
	case opInbound:
		b = binary.AppendUvarint(b, uint64(op.pid))
		b = appendBool(b, op.pending)
	}
	e.buf = b
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendBytes(b, p []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(p)))
	return append(b, p...)
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

// replicaBatch is a decoded batch.
type replicaBatch struct {
	run, seq uint64
	ops      []replicaOp
}

// decodeBatch reads a batch. It copies what it keeps, and checks every
// length against what is left, so hostile bytes cannot make it allocate
// much or panic.
func decodeBatch(p []byte) (*replicaBatch, error) {
	if len(p) == 0 || p[0] != replicaFormat {
		return nil, errBadBatch
	}
	d := batchDecoder{b: p[1:]}
	bt := &replicaBatch{run: d.uvarint(), seq: d.uvarint()}
	bodies := map[uint64]*broker.Message{}
	for d.err == nil && len(d.b) > 0 {
		op := replicaOp{kind: d.byte(), client: d.string()}
		switch op.kind {
		case opSaveSession:
			s := &broker.SessionRecord{ClientID: op.client, Version: packet.Version(d.byte())}
			s.ExpiryInterval = uint32(d.uvarint())
			if at := d.varint(); at != 0 {
				s.Disconnected = time.Unix(0, at)
			}
			if d.bool() {
				w := &broker.WillRecord{Delay: uint32(d.uvarint()), Expiry: uint32(d.uvarint()), HasExpiry: d.bool()}
				w.Message = d.message()
				s.Will = w
			}
			op.session = s
		case opSaveSub:
			op.sub = broker.SubscriptionRecord{Filter: d.string(), QoS: d.byte(), RetainHandling: d.byte(),
				NoLocal: d.bool(), RetainAsPublished: d.bool(), SubscriptionID: uint32(d.uvarint())}
		case opDeleteSub:
			op.filter = d.string()
		case opSaveMsg:
			m := &broker.MessageRecord{Seq: d.uvarint(), MessageID: d.uvarint(), QoS: d.byte(),
				Retain: d.bool(), Sent: d.bool(), Released: d.bool(), PacketID: uint16(d.uvarint())}
			m.GroupName, m.GroupFilter = d.string(), d.string()
			n := d.uvarint()
			if n > uint64(len(d.b)) {
				d.err = errBadBatch
				break
			}
			for range n {
				m.SubIDs = append(m.SubIDs, uint32(d.uvarint()))
			}
			if d.bool() {
				m.Message = d.message()
				if m.MessageID != 0 && m.Message != nil {
					bodies[m.MessageID] = m.Message
				}
			} else if m.Message = bodies[m.MessageID]; m.Message == nil {
				d.err = errBadBatch // a body it never sent
			}
			op.msg = m
		case opDeleteMsg:
			op.seq = d.uvarint()
		case opInbound:
			op.pid, op.pending = uint16(d.uvarint()), d.bool()
		case opDeleteSession, opResyncBegin, opResyncEnd, opKeep:
		default:
			d.err = errBadBatch
		}
		if d.err == nil {
			bt.ops = append(bt.ops, op)
		}
	}
	if d.err != nil {
		return nil, d.err
	}
	return bt, nil
}

// batchDecoder reads a batch; its first error sticks.
type batchDecoder struct {
	b   []byte
	err error
}

func (d *batchDecoder) fail() { d.err, d.b = errBadBatch, nil }

func (d *batchDecoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *batchDecoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *batchDecoder) byte() byte {
	if len(d.b) == 0 {
		d.fail()
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *batchDecoder) bool() bool { return d.byte() == 1 }

func (d *batchDecoder) bytes() []byte {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail()
		return nil
	}
	p := d.b[:n]
	d.b = d.b[n:]
	return p
}

func (d *batchDecoder) string() string { return string(d.bytes()) }

func (d *batchDecoder) message() *broker.Message {
	p := d.bytes()
	if d.err != nil {
		return nil
	}
	m, err := broker.UnmarshalMessage(p)
	if err != nil {
		d.fail()
		return nil
	}
	return m
}
