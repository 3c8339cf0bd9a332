package bench

import (
	"encoding/binary"
	"sync/atomic"
)

// Payload layout (big endian):
//
//	[0:8]   sequence number: publisher index << 40 | per-publisher counter
//	[8:16]  send time, nanoseconds since the run started (see clock)
//	[16:20] the run's tag, when the payload has room for it
//	[20:]   zero padding up to the payload size
//
// The tag lets receivers ignore messages that are not this run's (retained
// messages, another bench on the same broker) instead of counting them as
// losses or duplicates.
const (
	seqShift   = 40
	seqMask    = 1<<seqShift - 1
	tagOffset  = 16
	tagMinSize = tagOffset + 4
)

func putPayload(p []byte, seq uint64, sent int64) {
	binary.BigEndian.PutUint64(p[0:8], seq)
	binary.BigEndian.PutUint64(p[8:16], uint64(sent))
}

func newPayload(size int, tag uint32) []byte {
	p := make([]byte, size)
	if size >= tagMinSize {
		binary.BigEndian.PutUint32(p[tagOffset:], tag)
	}
	return p
}

// parsePayload returns the publisher index, its counter and the send time of
// a payload, and false when the payload is not this run's.
func parsePayload(p []byte, tag uint32, publishers int) (pub int, n uint64, sent int64, ok bool) {
	if len(p) < MinPayloadSize {
		return 0, 0, 0, false
	}
	if len(p) >= tagMinSize && binary.BigEndian.Uint32(p[tagOffset:]) != tag {
		return 0, 0, 0, false
	}
	seq := binary.BigEndian.Uint64(p[0:8])
	pub, n = int(seq>>seqShift), seq&seqMask
	if pub >= publishers || n >= maxCounter {
		return 0, 0, 0, false
	}
	return pub, n, int64(binary.BigEndian.Uint64(p[8:16])), true
}

// The seen set: one bit per (publisher, counter), in chunks allocated on
// first use, so memory follows the messages actually sent, nothing is
// allocated per message, and the receivers of a share group can share one
// set without a lock (a duplicate delivered to two different workers is
// still a duplicate).
const (
	seenChunkBits  = 1 << 20
	seenChunkWords = seenChunkBits / 64
	seenChunks     = 1024
	// maxCounter is how many messages one publisher can send in a run
	// (2^30); a publisher stops there.
	maxCounter = seenChunks * seenChunkBits
)

type seenChunk [seenChunkWords]atomic.Uint64

type seenPub struct {
	chunks [seenChunks]atomic.Pointer[seenChunk]
}

// seenSet records which messages have arrived. It is safe for concurrent
// use.
type seenSet struct {
	pubs []seenPub
}

func newSeenSet(publishers int) *seenSet {
	return &seenSet{pubs: make([]seenPub, publishers)}
}

// add marks message n of publisher pub and reports whether it was new.
func (s *seenSet) add(pub int, n uint64) bool {
	slot := &s.pubs[pub].chunks[n/seenChunkBits]
	c := slot.Load()
	if c == nil {
		c = new(seenChunk)
		if !slot.CompareAndSwap(nil, c) {
			c = slot.Load()
		}
	}
	bit := uint64(1) << (n % 64)
	return c[n%seenChunkBits/64].Or(bit)&bit == 0
}
