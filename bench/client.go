package bench

// This file is the minimal MQTT client the scenarios run on: a net.Conn, a
// frame reader over one reusable buffer, and a write mutex. It speaks just
// enough of the protocol (CONNECT, SUBSCRIBE, the QoS flows, PINGREQ,
// DISCONNECT) for a load generator, in 3.1.1 and 5.0 alike, so that both
// versions are measured through the same code path and the generator's own
// cost per message stays small and predictable.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/linemq/linemq/broker/packet"
)

// maxFrame bounds the packets the client accepts. Nothing the broker sends a
// bench client is near it; a larger length means a broken stream, and
// rejecting it keeps the read buffer from growing without limit.
const maxFrame = 16 << 20

// client is one MQTT connection. Writes from several goroutines (a
// publisher's sender and its ack reader, the keep-alive pinger) go through
// write, which serialises them; reading belongs to one goroutine at a time.
type client struct {
	nc      net.Conn
	v       packet.Version
	id      string
	timeout time.Duration // how long one write may block
	clock   *clock

	wmu       sync.Mutex
	lastWrite atomic.Int64 // clock nanoseconds of the last write, for the pinger

	// From CONNACK; read-only after dial.
	receiveMax uint16        // the broker's Receive Maximum (65535 when absent)
	maxPacket  uint32        // the broker's Maximum Packet Size, 0 for none
	maxQoS     byte          // the broker's Maximum QoS (2 when absent)
	sharedSubs bool          // Shared Subscription Available (true when absent)
	keepAlive  time.Duration // the keep alive in force: 0 unless the broker imposed one

	fr *frameReader // nil for idle connections once the handshake is done
}

// dialOptions say how to open a connection.
type dialOptions struct {
	version    packet.Version
	id         string
	receiveMax uint16 // advertised in a v5 CONNECT when non-zero
	expiry     uint32 // session expiry; non-zero asks for a persistent session
	bufSize    int    // initial read buffer; small for idle connections
	timeout    time.Duration
	clock      *clock
}

// dial connects to addr, sends CONNECT and waits for an accepting CONNACK,
// all within o.timeout, so an unreachable or silent broker is an error and
// never a hang.
func dial(ctx context.Context, addr string, o dialOptions) (*client, error) {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("bench: %s: %w", o.id, err)
	}
	c := &client{
		nc: nc, v: o.version, id: o.id, timeout: o.timeout, clock: o.clock,
		receiveMax: 65535, maxQoS: 2, sharedSubs: true,
		fr: newFrameReader(nc, o.bufSize, o.clock),
	}
	if err := c.handshake(ctx, o); err != nil {
		nc.Close()
		return nil, fmt.Errorf("bench: %s: %w", o.id, err)
	}
	return c, nil
}

func (c *client) handshake(ctx context.Context, o dialOptions) error {
	deadline, _ := ctx.Deadline()
	c.nc.SetDeadline(deadline)
	// A cancelled context (Ctrl-C while 10,000 connections open) must not
	// wait for the deadline.
	stop := context.AfterFunc(ctx, func() { c.nc.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	// Keep alive 0: the bench's connections live for one run and the pinger
	// covers a broker that imposes a Server Keep Alive.
	cp := packet.Connect{Version: o.version, CleanStart: true, ClientID: []byte(o.id)}
	if o.expiry > 0 {
		if o.version >= packet.V5 {
			cp.Props.Set(packet.PropSessionExpiry)
			cp.Props.SessionExpiry = o.expiry
		} else {
			cp.CleanStart = false // each run's client ids are new, so nothing is resumed
		}
	}
	if o.version >= packet.V5 && o.receiveMax > 0 {
		cp.Props.Set(packet.PropReceiveMaximum)
		cp.Props.ReceiveMaximum = o.receiveMax
	}
	if _, err := c.nc.Write(cp.Append(nil)); err != nil {
		return err
	}
	h, body, err := c.fr.next()
	if err != nil {
		var ne net.Error
		switch {
		case errors.Is(err, io.EOF):
			return errors.New("connection closed before CONNACK")
		case errors.As(err, &ne) && ne.Timeout() && ctx.Err() != context.Canceled:
			return fmt.Errorf("no CONNACK within %v", o.timeout)
		}
		return fmt.Errorf("waiting for CONNACK: %w", err)
	}
	if h.Type != packet.CONNACK {
		return fmt.Errorf("expected CONNACK, got %v", h.Type) // [MQTT-3.2.0-1]
	}
	if o.version >= packet.V5 && len(body) == 2 && body[1] == 0x01 {
		// A 3.1.1 broker refuses level 5 with the 3.1.1 return code 1 in the
		// 3.1.1 CONNACK form [MQTT-3.1.2-2].
		return errors.New("the broker does not speak MQTT 5 (CONNACK return code 1); try MQTT 3.1.1")
	}
	var ca packet.Connack
	if err := ca.Decode(o.version, body); err != nil {
		return fmt.Errorf("CONNACK: %w", err)
	}
	if ca.Reason != packet.Success {
		return fmt.Errorf("connection refused: %w", ca.Reason)
	}
	if o.version >= packet.V5 {
		p := &ca.Props
		if p.Has(packet.PropReceiveMaximum) {
			c.receiveMax = p.ReceiveMaximum
		}
		if p.Has(packet.PropMaximumPacketSize) {
			c.maxPacket = p.MaximumPacketSize
		}
		if p.Has(packet.PropMaximumQoS) {
			c.maxQoS = p.MaximumQoS
		}
		if p.Has(packet.PropSharedSubAvailable) {
			c.sharedSubs = p.SharedSubAvailable == 1
		}
		if p.Has(packet.PropServerKeepAlive) {
			c.keepAlive = time.Duration(p.ServerKeepAlive) * time.Second // [MQTT-3.2.2-21]
		}
	}
	// Disarm the cancellation hook before clearing the deadline, or it
	// could fire in between and break a connection that is in use.
	if !stop() {
		return ctx.Err()
	}
	c.nc.SetDeadline(time.Time{})
	c.lastWrite.Store(c.clock.now())
	return nil
}

// write sends b whole. It is safe for concurrent use; one call is one
// syscall in the common case, which is why callers batch packets into b.
func (c *client) write(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	// The deadline turns a broker that stopped reading into an error
	// instead of a run that never ends.
	c.nc.SetWriteDeadline(time.Now().Add(c.timeout))
	_, err := c.nc.Write(b)
	c.lastWrite.Store(c.clock.now())
	return err
}

// disconnect sends DISCONNECT (best effort: the run is over either way) and
// closes the connection, which ends its reader.
func (c *client) disconnect() {
	var d packet.Disconnect
	c.wmu.Lock()
	c.nc.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	c.nc.Write(d.Append(nil, c.v))
	c.wmu.Unlock()
	c.nc.Close()
}

// pingDue reports whether the keep alive the broker imposed asks for a
// PINGREQ now: half the interval without a write leaves ample margin before
// the broker's one and a half intervals [MQTT-3.1.2-22].
func (c *client) pingDue(now int64) bool {
	return c.keepAlive > 0 && now-c.lastWrite.Load() >= int64(c.keepAlive/2)
}

var pingreq = packet.AppendPingreq(nil)

// frameReader frames MQTT packets out of a connection's byte stream over a
// single buffer that grows only for a packet larger than it.
type frameReader struct {
	nc    io.Reader
	clock *clock
	buf   []byte
	r, w  int   // buf[r:w] is read but not yet framed
	at    int64 // clock nanoseconds of the last read that returned bytes
}

func newFrameReader(nc io.Reader, size int, clk *clock) *frameReader {
	return &frameReader{nc: nc, clock: clk, buf: make([]byte, max(size, 64))}
}

// next returns the next packet. The body aliases the read buffer and is
// valid only until the following call.
func (f *frameReader) next() (packet.FixedHeader, []byte, error) {
	for {
		if f.w > f.r {
			h, hl, err := packet.ReadFrame(f.buf[f.r:f.w], maxFrame)
			if err != nil {
				return h, nil, err
			}
			if hl > 0 {
				end := f.r + hl + h.Remaining
				if end <= f.w {
					body := f.buf[f.r+hl : end]
					f.r = end
					return h, body, nil
				}
				if hl+h.Remaining > len(f.buf) {
					nb := make([]byte, hl+h.Remaining)
					f.w = copy(nb, f.buf[f.r:f.w])
					f.r, f.buf = 0, nb
				}
			}
		}
		// Compact only when more bytes are needed: bodies handed out
		// earlier have been consumed by then.
		if f.r > 0 {
			f.w = copy(f.buf, f.buf[f.r:f.w])
			f.r = 0
		}
		n, err := f.nc.Read(f.buf[f.w:])
		if n > 0 {
			f.w += n
			f.at = f.clock.now()
		}
		if err != nil && n == 0 {
			return packet.FixedHeader{}, nil, err
		}
	}
}

// buffered reports whether a complete packet is already in the buffer, so
// next will not block. Callers flush their acknowledgements when it is
// false: once per read, not once per packet.
func (f *frameReader) buffered() bool {
	if f.w == f.r {
		return false
	}
	h, hl, err := packet.ReadFrame(f.buf[f.r:f.w], maxFrame)
	return err != nil || (hl > 0 && f.r+hl+h.Remaining <= f.w)
}

// clock is the run's time base: nanoseconds since the run started, from the
// monotonic clock. Payload timestamps use it, so a wall-clock step during a
// run cannot distort latencies; publisher and receivers share the process.
type clock struct{ base time.Time }

func (c *clock) now() int64 { return int64(time.Since(c.base)) }
