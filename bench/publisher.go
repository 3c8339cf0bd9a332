package bench

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/linemq/linemq/broker/packet"
)

// batchBytes is roughly how much one write carries when publishing
// unpaced: enough packets to make the syscall cheap per message, few enough
// that the broker sees a steady stream rather than bursts.
const batchBytes = 32 << 10

// publisher is one publishing connection. Its sender goroutine (send)
// encodes PUBLISH packets in batches into one reused buffer and writes each
// batch at once; its reader goroutine (readLoop) takes the acknowledgements,
// answers PUBREC with PUBREL, and returns window credit.
type publisher struct {
	c        *client
	idx      int
	topic    []byte
	qos      byte
	tag      uint32
	size     int
	limit    uint64  // messages to send: Config.Count, or maxCounter
	interval float64 // nanoseconds between messages when paced, else 0
	window   int32   // unacknowledged QoS 1/2 PUBLISH packets allowed

	inflight atomic.Int32
	wake     chan struct{} // cap 1: the reader freed a batch worth of window, or all of it
	ids      [65536 / 64]atomic.Uint64
	nextID   uint16 // sender only

	sent    atomic.Int64
	acked   atomic.Int64 // QoS 1/2 flows completed with success
	refused atomic.Int64 // QoS 1/2 flows the broker answered with an error reason
	nomatch atomic.Int64 // successes with reason 0x10 No matching subscribers
}

// send publishes from start (clock time) until stop is closed or the limit
// is reached.
func (p *publisher) send(start int64, stop <-chan struct{}) error {
	v, clk := p.c.v, p.c.clock
	pk := packet.Publish{QoS: p.qos, Topic: p.topic, Payload: newPayload(p.size, p.tag)}
	pktSize := pk.Size(v)
	batch := uint64(max(1, min(256, batchBytes/pktSize)))
	buf := make([]byte, 0, int(batch)*pktSize)
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for n := uint64(0); n < p.limit; {
		select {
		case <-stop:
			return nil
		default:
		}
		k := min(batch, p.limit-n)
		now := clk.now()
		if p.interval > 0 {
			// Send everything due by now in one batch, then sleep until
			// the next message is due: exact on average without a timer
			// per message.
			due := uint64(float64(now-start)/p.interval) + 1
			if due <= n {
				d := time.Duration(start + int64(float64(n)*p.interval) - now)
				if timer == nil {
					timer = time.NewTimer(d)
				} else {
					timer.Reset(d)
				}
				select {
				case <-timer.C:
				case <-stop:
					return nil
				}
				continue
			}
			k = min(k, due-n)
		}
		if p.qos > 0 {
			// Wait for a quarter of the window (or what is left to send)
			// rather than for one free slot: against a broker that
			// acknowledges packet by packet, refilling slot by slot would
			// cost a wake-up and a write per message.
			avail := p.window - p.inflight.Load()
			if avail <= 0 || uint64(avail) < min(uint64(p.refill()), k) {
				select {
				case <-p.wake:
				case <-stop:
					return nil
				}
				continue
			}
			k = min(k, uint64(avail))
			p.inflight.Add(int32(k))
		}
		buf = p.encode(buf[:0], &pk, n, k, start, now)
		n += k
		if err := p.c.write(buf); err != nil {
			return fmt.Errorf("bench: %s: %w", p.c.id, err)
		}
		p.sent.Add(int64(k))
	}
	return nil
}

// refill is how much of the window must be free before the sender writes
// again: a quarter of it.
func (p *publisher) refill() int32 { return max(1, p.window/4) }

// encode appends k PUBLISH packets, messages n to n+k-1, to dst. Only the
// payload's sequence number and time and the packet identifier change from
// one to the next; pk is reused for all of them.
func (p *publisher) encode(dst []byte, pk *packet.Publish, n, k uint64, start, now int64) []byte {
	for i := n; i < n+k; i++ {
		sent := now
		if p.interval > 0 {
			// The scheduled time, not the time it finally goes out: a
			// publisher held back by a full window or a slow socket
			// shows up as latency instead of hiding it (coordinated
			// omission).
			sent = start + int64(float64(i)*p.interval)
		}
		putPayload(pk.Payload, uint64(p.idx)<<seqShift|i, sent)
		if p.qos > 0 {
			pk.PacketID = p.allocID()
		}
		dst = pk.Append(dst, p.c.v)
	}
	return dst
}

// allocID returns a packet identifier not in flight. Identifiers are taken
// in turn, skipping any still unacknowledged: acknowledgements normally
// come back in order, but nothing requires a broker to send them so.
// The window (< 65535) guarantees a free one.
func (p *publisher) allocID() uint16 {
	for {
		p.nextID++
		if p.nextID == 0 {
			p.nextID = 1 // [MQTT-2.2.1-3] packet identifiers are non-zero
		}
		id := p.nextID
		bit := uint64(1) << (id % 64)
		if p.ids[id/64].Or(bit)&bit == 0 {
			return id
		}
	}
}

// release frees packet identifier id, reporting false if it was not in
// flight (an acknowledgement for nothing we sent).
func (p *publisher) release(id uint16) bool {
	bit := uint64(1) << (id % 64)
	return p.ids[id/64].And(^bit)&bit != 0
}

// readLoop handles what the broker sends a publisher until the connection
// ends.
func (p *publisher) readLoop() error {
	v, fr := p.c.v, p.c.fr
	var (
		in  packet.Ack
		rel = packet.Ack{Type: packet.PUBREL}
		out = make([]byte, 0, 1024)
		// Counted locally and published once per read.
		freed, acked, refused, nomatch int64
	)
	for {
		h, body, err := fr.next()
		if err != nil {
			return fmt.Errorf("bench: %s: %w", p.c.id, err)
		}
		switch h.Type {
		case packet.PUBACK, packet.PUBREC, packet.PUBCOMP:
			if err := in.Decode(v, h.Type, body); err != nil {
				return fmt.Errorf("bench: %s: %v: %w", p.c.id, h.Type, err)
			}
			want := packet.PUBACK
			if p.qos == 2 {
				want = packet.PUBREC
				if h.Type == packet.PUBCOMP {
					want = packet.PUBCOMP
				}
			}
			if p.qos == 0 || h.Type != want {
				return fmt.Errorf("bench: %s: unexpected %v for a QoS %d publish", p.c.id, h.Type, p.qos)
			}
			if h.Type == packet.PUBREC && !in.Reason.IsError() {
				// The flow goes on: the identifier stays in flight until
				// PUBCOMP [MQTT-4.3.3-3].
				rel.PacketID = in.PacketID
				out = rel.Append(out, v)
				if in.Reason == packet.NoMatchingSubscribers {
					nomatch++
				}
				break
			}
			// PUBACK, PUBCOMP, or a PUBREC refusing the message (which
			// ends the flow [MQTT-4.3.3-4]).
			if !p.release(in.PacketID) {
				return fmt.Errorf("bench: %s: %v for packet identifier %d, which is not in flight", p.c.id, h.Type, in.PacketID)
			}
			freed++
			switch {
			case in.Reason.IsError():
				refused++
			case h.Type == packet.PUBACK && in.Reason == packet.NoMatchingSubscribers:
				nomatch++
				acked++
			default:
				acked++
			}
		case packet.PINGRESP:
		case packet.DISCONNECT:
			return disconnectError(p.c, body)
		default:
			return fmt.Errorf("bench: %s: unexpected %v from the broker", p.c.id, h.Type)
		}
		if !fr.buffered() {
			if len(out) > 0 {
				if err := p.c.write(out); err != nil {
					return fmt.Errorf("bench: %s: %w", p.c.id, err)
				}
				out = out[:0]
			}
			if freed > 0 {
				p.acked.Add(acked)
				p.refused.Add(refused)
				// Wake the sender only when it can send a batch (see
				// send), or when nothing is in flight: it may be waiting
				// for the last few messages of its count.
				if n := p.inflight.Add(-int32(freed)); n == 0 || p.window-n >= p.refill() {
					select {
					case p.wake <- struct{}{}:
					default:
					}
				}
				freed, acked, refused = 0, 0, 0
			}
			if nomatch > 0 {
				p.nomatch.Add(nomatch)
				nomatch = 0
			}
		}
	}
}
