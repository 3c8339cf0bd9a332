package broker

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/linemq/linemq/broker/packet"
)

// Read buffer sizes: a connection starts small so that idle clients cost
// little, grows (doubling) to fit bursts or large packets, and shrinks back
// after a run of short reads.
const (
	minReadBuf     = 512
	maxIdleReadBuf = 64 << 10
	shortsToShrink = 4
	maxSpareWrite  = 64 << 10
)

// conn is one network connection of a client. Its reader goroutine runs
// serve: it frames and decodes packets in place over the read buffer and
// handles them. Its writer goroutine writes what deliveries and replies
// appended to out, coalescing everything appended since its last write into
// one syscall.
type conn struct {
	srv *Server
	nc  net.Conn

	// Set while handling CONNECT, read-only afterwards.
	version     packet.Version
	clientID    string
	info        ClientInfo
	sess        *session
	keepAlive   time.Duration
	sendMax     uint16 // the client's Receive Maximum: our send window
	maxOut      uint32 // the client's Maximum Packet Size, 0 for none
	aliasMaxOut uint16 // the client's Topic Alias Maximum
	problemInfo bool   // the client's Request Problem Information
	will        *will  // nil when CONNECT had none
	// readCheck, if set, must pass every topic sent to the client
	// (ReadChecker).
	readCheck func(topic string) bool

	// Owned by the reader goroutine (or the parker, while parked).
	rbuf       []byte    // the read buffer; nil while parked with nothing half-read
	shorts     int       // consecutive short reads, to shrink rbuf
	kaDeadline time.Time // keep-alive deadline; zero when none is running
	partial    int64     // when (srv.mono) the packet still incomplete in rbuf began to arrive; 0 when none
	parkFD     int       // the socket's descriptor while parked, else -1
	noPark     bool      // the connection cannot be parked (no descriptor)
	rxc        *rxClock  // the timestamping reader; nil while parked, or for a socket without timestamps
	rxState    uint8     // rxUnknown, rxOn or rxOff
	rx         int64     // the kernel's receive time of the last read (Unix ns), 0 when unknown
	sc         *scratch  // decode structs, borrowed from the server for one read
	aliasIn    []string  // inbound topic aliases, grown to the highest used
	r          *router
	held       []heldAck // acknowledgements waiting for the Store

	pubRate rateBucket // the reader's bucket for MaxPublishRate (limits.go)

	// maxIn is the largest packet accepted from the client: the broker's
	// MaxPacketSize, or its listener's if smaller (ListenerLimits).
	maxIn int
	// unknownBytes is what the read buffer counts in the server's
	// connecting total while the client is not known (no CONNECT accepted
	// yet); 0 from then on.
	unknownBytes int64

	deniedLogged bool // a publish denied by the Authenticator was logged

	serial uint64 // names the connection in Message.echoConn; never 0
	ackSeq uint64 // the reader's count of publish acknowledgements, numbering heldAck.seq

	// The acknowledgements on their way out, in order, once one had to
	// wait (sendAcks); nil until then, so an idle connection pays nothing.
	acks atomic.Pointer[ackQueue]

	unackedIn atomic.Int32 // QoS 1 publishes received and not yet acknowledged
	syncing   atomic.Int32 // batches of this connection's acks waiting in the syncer
	needSync  bool         // this read wrote to the Store
	scratch   []byte
	expiryIn  uint32 // Session Expiry Interval after CONNECT, for DISCONNECT rules
	connected bool   // CONNACK accepting the client was sent

	// Guarded by the session's mu: the outbound topic aliases.
	aliasOut  map[string]uint16
	nextAlias uint16

	// The writer side, guarded by wmu.
	wmu          sync.Mutex
	out          []byte
	counted      int32 // bytes of out (and of the write in progress) counted in the server's pending total
	inWrite      int32 // bytes handed to the socket by the write in progress
	spare        []byte
	closing      bool          // no more writes; the writer closes nc after flushing
	linger       bool          // a DISCONNECT or refusing CONNACK was queued: close gently so it arrives
	refill       bool          // a delivery was held back by MaxPendingBytes
	takeover     bool          // the session was taken over by another connection
	takenByClean bool          // ... by one with Clean Start, which ends the old session
	writing      bool          // a writer goroutine is running
	wclosed      bool          // the writer closed the socket; wdone is closed
	writeErr     error         // why a write failed while the connection was open; the cause of its end
	wdone        chan struct{} // closed once the socket is closed by the writer
	acksOut      uint64        // the highest heldAck.seq written
	echo         *echoBuf      // the client's own messages waiting for their acknowledgements; nil when none

	// readable is signalled when a 3.1.1 publisher paused for holding too
	// many unacknowledged publishes gets one acknowledged. Made at CONNECT
	// for 3.1.1 clients only (v5 clients are held to Receive Maximum).
	readable chan struct{}
}

func newConn(srv *Server, nc net.Conn) *conn {
	c := &conn{
		srv:         srv,
		nc:          nc,
		version:     packet.V311,
		sendMax:     65535,
		problemInfo: true,
		parkFD:      -1,
		wdone:       make(chan struct{}),
		maxIn:       srv.opts.MaxPacketSize,
		serial:      srv.connSerial.Add(1),
	}
	if ll, ok := nc.(ListenerLimits); ok {
		if n := ll.MaxPacketSize(); n > 0 {
			c.maxIn = min(c.maxIn, n)
		}
	}
	return c
}

// errKeepAlive is the cause recorded when a client stays silent for longer
// than one and a half keep alive periods [MQTT-3.1.2-22].
var errKeepAlive = errors.New("broker: keep alive timeout")

// errWriteTimeout is the cause recorded when one write to a client blocks
// for longer than Options.WriteTimeout: the client has stopped reading.
var errWriteTimeout = errors.New("write timeout")

// writeFailure is the cause of a connection whose write failed with err,
// after a write deadline of timeout.
func writeFailure(err error, timeout time.Duration) error {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("%w: a write blocked for %v: the client is not reading (mqtt.write_timeout)", errWriteTimeout, timeout)
	}
	return fmt.Errorf("write failed: %w", err)
}

// errConnectTimeout: the connection did not send CONNECT in time.
var errConnectTimeout = errors.New("broker: no CONNECT within the connect timeout")

// errTooManyConnecting: the connections that have not completed CONNECT
// hold all the buffer they may, together.
var errTooManyConnecting = errors.New("broker: too many unfinished CONNECTs buffered (mqtt.max_connecting_bytes)")

// serve runs the connection from its first byte to its teardown.
func (c *conn) serve() {
	c.reserveUnknown(minReadBuf) // the bound cannot refuse its first few hundred bytes
	c.rbuf = make([]byte, 0, minReadBuf)
	// Network deadlines use the real clock: they are the kernel's business.
	c.nc.SetReadDeadline(time.Now().Add(c.srv.opts.ConnectTimeout))
	c.run()
}

// run reads until the connection ends, or until it is parked (then the
// parker calls run again on a new goroutine when the client sends).
func (c *conn) run() {
	reason, cause := c.readLoop()
	if cause == errParked {
		return
	}
	c.releaseUnknown()
	if reason == 0 && cause != errClientDisconnect {
		// The writer that closed the socket knows why; the read that
		// failed next does not.
		c.wmu.Lock()
		if c.writeErr != nil {
			cause = c.writeErr
		}
		c.wmu.Unlock()
	}
	c.teardown(reason, cause)
	c.srv.untrack(c)
}

// errParked ends a read loop whose connection was handed to the parker.
var errParked = errors.New("broker: connection parked")

// readLoop reads and handles packets until the connection ends; it returns
// the reason code to send in a server DISCONNECT (or 0 for none) and the
// cause.
func (c *conn) readLoop() (packet.ReasonCode, error) {
	parkAfter := c.srv.opts.IdleParkAfter
	for {
		if c.connected {
			c.releaseUnknown()
			if err := c.pauseWhileHeld(); err != nil {
				return 0, err
			}
			c.armDeadline(parkAfter)
		}
		buf := c.rbuf
		if len(buf) == cap(buf) {
			n := max(minReadBuf, 2*cap(buf))
			if !c.connected && !c.reserveUnknown(int64(n-cap(buf))) {
				return 0, errTooManyConnecting
			}
			buf = grow(buf, n)
		}
		n, err := c.read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		c.rbuf = buf
		if n > 0 {
			c.kaDeadline = time.Time{} // data arrived: the keep alive starts again
			c.sc = c.srv.scratch.Get().(*scratch)
			off, rerr := c.frames(buf)
			c.srv.scratch.Put(c.sc)
			c.sc = nil
			c.releaseAcks()
			c.flush()
			if rerr == errClientDisconnect || rerr == errRefused {
				return 0, rerr
			}
			if rerr != nil {
				return packet.CodeOf(rerr), rerr
			}
			// Keep only the incomplete tail, at the front.
			rest := copy(buf, buf[off:])
			buf = buf[:rest]
			switch {
			case rest == 0:
				c.partial = 0
			case off > 0 || c.partial == 0:
				c.partial = c.srv.mono() // a new packet began in this read
			}
			if n < cap(buf)/4 {
				c.shorts++
			} else {
				c.shorts = 0
			}
			if c.shorts >= shortsToShrink && cap(buf) > minReadBuf && rest < minReadBuf/2 {
				buf = append(make([]byte, 0, max(minReadBuf, cap(buf)/2)), buf...)
				c.shorts = 0
			}
			c.rbuf = buf
		}
		if err != nil {
			if c.idle(err) {
				if c.srv.parker.park(c) {
					return 0, errParked
				}
				if !c.isClosing() {
					continue // not parked this time: keep reading
				}
			}
			return c.readError(err)
		}
		if c.srv.closed.Load() {
			return packet.ServerShuttingDown, nil
		}
	}
}

// Whether a connection's reads carry the kernel's receive time.
const (
	rxUnknown uint8 = iota // not tried yet
	rxOn                   // SO_TIMESTAMPNS is set on the socket
	rxOff                  // not a TCP socket, or the option failed
)

// read reads from the socket, noting in c.rx when the kernel received what
// it read (arrival.go).
func (c *conn) read(p []byte) (int, error) {
	if c.rxc == nil && c.rxState != rxOff {
		if c.rxc = newRxClock(c.nc, c.rxState == rxUnknown); c.rxc != nil {
			c.rxState = rxOn
		} else {
			c.rxState = rxOff
		}
	}
	if c.rxc == nil {
		c.rx = 0
		return c.nc.Read(p)
	}
	n, ts, err := c.rxc.read(p)
	c.rx = ts
	return n, err
}

// armDeadline sets the read deadline of a connected client: its keep-alive
// deadline (one and a half keep alive periods after the last bytes it
// sent), or, when that is later, the moment it counts as idle and may be
// parked.
func (c *conn) armDeadline(parkAfter time.Duration) {
	now := time.Now()
	if c.keepAlive > 0 && c.kaDeadline.IsZero() {
		c.kaDeadline = now.Add(c.keepAlive * 3 / 2)
	}
	d := c.kaDeadline // zero: no keep alive [MQTT-3.1.2-22]
	if to := c.srv.opts.PartialPacketTimeout; to > 0 && c.partial != 0 {
		// Half a packet: it must be completed in time, and the connection
		// is not parked meanwhile (its read buffer is in use).
		if p := c.srv.monoTime(c.partial).Add(to); d.IsZero() || p.Before(d) {
			d = p
		}
		c.nc.SetReadDeadline(d)
		return
	}
	if parkAfter > 0 && !c.noPark && c.srv.parker != nil {
		if p := now.Add(parkAfter); d.IsZero() || p.Before(d) {
			d = p
		}
	}
	c.nc.SetReadDeadline(d)
}

// idle reports whether a read error is the idle deadline of a connected
// client rather than its keep-alive deadline or a real failure.
func (c *conn) idle(err error) bool {
	if !c.connected || !errors.Is(err, os.ErrDeadlineExceeded) || c.partial != 0 {
		return false
	}
	return c.kaDeadline.IsZero() || time.Now().Before(c.kaDeadline)
}

// resume runs the connection again after the parker saw it readable, its
// keep alive run out, or its socket being closed.
func (c *conn) resume() {
	if c.rbuf == nil {
		c.rbuf = make([]byte, 0, minReadBuf)
	}
	c.run()
}

func (c *conn) readError(err error) (packet.ReasonCode, error) {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		switch {
		case !c.connected:
			return 0, errConnectTimeout
		case c.isClosing():
		case c.partial != 0 && c.srv.opts.PartialPacketTimeout > 0 &&
			!time.Now().Before(c.srv.monoTime(c.partial).Add(c.srv.opts.PartialPacketTimeout)):
			return errPartialPacket.Code, errPartialPacket
		case c.keepAlive > 0:
			return packet.KeepAliveTimeout, errKeepAlive
		}
	}
	return 0, err
}

// errPartialPacket ends a connection that began a packet and did not finish
// it within PartialPacketTimeout.
var errPartialPacket = &packet.Error{Code: packet.ImplementationSpecificError, Reason: "packet not completed within the partial packet timeout"}

// pauseWhileHeld stops reading from a 3.1.1 client while it has
// ReceiveMaximum publishes unacknowledged (held for the Store or by a share
// group's backpressure). A v5 client is told the maximum and disconnected
// past it; a 3.1.1 client never was, so it is slowed the way TCP slows a
// sender: its bytes wait in the socket until acknowledgements go out. This
// bounds what one publisher can pin behind a stuck group.
func (c *conn) pauseWhileHeld() error {
	max := int32(c.srv.opts.ReceiveMaximum)
	for c.version < packet.V5 && c.unackedIn.Load() >= max {
		c.nc.SetReadDeadline(time.Time{})
		select {
		case <-c.readable:
		case <-c.wdone:
			return net.ErrClosed
		}
	}
	return nil
}

// reserveUnknown counts n more bytes of read buffer against the server's
// bound for clients not yet known (Options.MaxConnectingBytes), and
// reports false, counting nothing, when that would pass it. The very first
// reservation always succeeds: the bound is on growth.
func (c *conn) reserveUnknown(n int64) bool {
	srv := c.srv
	if total := srv.connecting.Add(n); total > srv.opts.MaxConnectingBytes && c.unknownBytes > 0 {
		srv.connecting.Add(-n)
		return false
	}
	c.unknownBytes += n
	return true
}

// releaseUnknown stops counting the connection's buffer as a stranger's:
// its CONNECT was accepted, or it ended.
func (c *conn) releaseUnknown() {
	if c.unknownBytes != 0 {
		c.srv.connecting.Add(-c.unknownBytes)
		c.unknownBytes = 0
	}
}

// grow returns buf with capacity at least n, keeping its contents.
func grow(buf []byte, n int) []byte {
	if cap(buf) >= n {
		return buf
	}
	return append(make([]byte, 0, n), buf...)
}

// frames handles every complete packet at the start of buf and returns how
// many bytes they used. A packet that is not complete yet makes sure buf can
// hold it whole and waits for more bytes.
func (c *conn) frames(buf []byte) (int, error) {
	off := 0
	for off < len(buf) {
		limit := c.maxIn
		if !c.connected {
			// Whoever sends it is not known yet (Options.MaxConnectSize).
			limit = min(limit, c.srv.opts.MaxConnectSize)
		}
		h, hl, err := packet.ReadFrame(buf[off:], limit)
		if err != nil {
			return off, err
		}
		if hl == 0 {
			return off, nil
		}
		end := off + hl + h.Remaining
		if end > len(buf) {
			return off, nil
		}
		if err := c.handle(h, buf[off+hl:end]); err != nil {
			return end, err
		}
		off = end
	}
	return off, nil
}

// flush wakes the writer of every connection this read delivered to, once
// each, rather than once per message, and its own.
func (c *conn) flush() {
	if c.r != nil {
		c.r.flush()
	}
	c.signal()
}

// signal makes sure a writer goroutine is running while the connection
// has bytes to write (or has to be closed). The writer exists only while
// there is work: an idle connection costs one goroutine, not two, and holds
// no output buffer.
func (c *conn) signal() {
	c.wmu.Lock()
	start := !c.writing && !c.wclosed && (len(c.out) > 0 || c.closing)
	if start {
		c.writing = true
	}
	c.wmu.Unlock()
	if start {
		go c.writeLoop()
	}
}

// writeLoop writes whatever has been appended to out, one syscall for all
// of it, until out stays empty; then it exits. When the connection is
// closing it closes the socket after the last write.
func (c *conn) writeLoop() {
	for {
		c.wmu.Lock()
		buf, closing := c.out, c.closing
		if len(buf) == 0 {
			// The spare buffer stays for the next burst; the parker takes
			// it away once the connection goes idle.
			c.writing = false
			if closing {
				c.wclosed = true
				// Held echoes die with the connection: they are in
				// flight and go again to its next one.
				c.echo = nil
				c.accountLocked()
			}
			c.wmu.Unlock()
			if closing {
				c.lingerClose()
				close(c.wdone)
			}
			return
		}
		c.out = c.spare[:0]
		c.spare = nil
		c.inWrite = int32(len(buf))
		c.wmu.Unlock()

		c.nc.SetWriteDeadline(time.Now().Add(c.srv.opts.WriteTimeout))
		if _, err := c.nc.Write(buf); err != nil {
			c.wmu.Lock()
			if !c.closing {
				// The write failed on its own (not because the reader is
				// tearing the connection down): it is why the connection
				// ends. Recorded before the socket is closed, since the
				// reader then fails with "use of closed network
				// connection", which says nothing.
				c.writeErr = writeFailure(err, c.srv.opts.WriteTimeout)
			}
			c.closing, c.wclosed, c.writing = true, true, false
			c.out, c.echo = nil, nil
			c.inWrite = 0
			c.accountLocked()
			c.wmu.Unlock()
			c.closeSocket()
			close(c.wdone)
			return
		}

		c.wmu.Lock()
		c.inWrite = 0
		c.accountLocked()
		if cap(buf) <= maxSpareWrite {
			c.spare = buf[:0]
		}
		refill := c.refill && !c.closing
		c.refill = false
		c.wmu.Unlock()
		if refill && c.sess != nil {
			// Deliveries stopped at the pending-bytes limit: the write made
			// room, so move queued messages into flight again.
			s := c.sess
			s.mu.Lock()
			if s.conn == c {
				s.pumpLocked()
			}
			s.mu.Unlock()
		}
	}
}

// overPending reports whether the output buffer holds MaxPendingBytes or
// more. The next write then refills the send window from the queue.
func (c *conn) overPending() bool {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.fullLocked() {
		c.refill = true
		return true
	}
	return false
}

// fullLocked reports whether the connection holds MaxPendingBytes waiting
// to be written (the write in progress included: a client that stops
// reading pins it too), or the server its MaxPendingBytesTotal with this
// connection holding some of it.
func (c *conn) fullLocked() bool {
	n := len(c.out) + int(c.inWrite) + c.echoLenLocked()
	if n >= c.srv.opts.MaxPendingBytes {
		return true
	}
	limit := c.srv.opts.MaxPendingBytesTotal
	return limit > 0 && n > 0 && c.srv.pending.Load() >= int64(limit)
}

// accountLocked brings the server's count of bytes waiting to be written
// up to date with this connection's.
func (c *conn) accountLocked() {
	n := int32(len(c.out)+c.echoLenLocked()) + c.inWrite
	if d := n - c.counted; d != 0 {
		c.srv.pending.Add(int64(d))
		c.counted = n
	}
}

func (c *conn) isClosing() bool {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.closing
}

// kick ends the connection from the broker's side: a v5 client is sent
// DISCONNECT with reason first [MQTT-4.13.2-1]; then the writer flushes and
// closes the socket, which ends the reader.
func (c *conn) kick(reason packet.ReasonCode) { c.kickWith(reason, "") }

// kickWith is kick with a Reason String explaining the reason code. A
// DISCONNECT may carry one even when the client asked for no problem
// information [MQTT-3.1.2-29].
func (c *conn) kickWith(reason packet.ReasonCode, text string) {
	c.wmu.Lock()
	if !c.closing {
		if c.version >= packet.V5 && c.connected && reason != 0 {
			d := packet.Disconnect{Reason: reason}
			if text != "" {
				d.Props.Set(packet.PropReasonString)
				d.Props.ReasonString = []byte(text)
			}
			c.out = d.Append(c.out, c.version)
			c.linger = true
		}
		c.closing = true
	}
	c.wmu.Unlock()
	c.signal()
}

// teardown runs once on the reader goroutine after the read loop ended.
func (c *conn) teardown(reason packet.ReasonCode, cause error) {
	if c.connected && reason != 0 {
		c.kickWith(reason, reasonText(cause))
	} else if reason != 0 && c.version >= packet.V5 && !c.connected && cause != errConnectTimeout {
		// A v5 client whose CONNECT was refused before acceptance learns
		// why through the CONNACK [MQTT-4.13.1-1].
		c.wmu.Lock()
		if !c.closing {
			ca := packet.Connack{Reason: reason}
			c.out = ca.Append(c.out, c.version)
			c.closing, c.linger = true, true
		}
		c.wmu.Unlock()
		c.signal()
	} else {
		c.kick(0)
	}

	// Give the writer a bounded time to flush the last packets, then make
	// sure the socket is closed whatever it is doing.
	t := time.NewTimer(2 * time.Second)
	select {
	case <-c.wdone:
	case <-t.C:
	}
	t.Stop()
	c.closeSocket()
	<-c.wdone

	if c.connected {
		// Counted as gone before its will goes out, so that whoever sees
		// the will also sees the client gone.
		c.srv.stats.connected.Add(-1)
	}
	if c.sess != nil {
		c.srv.detach(c, reason)
	}
	if c.connected {
		if ev := c.srv.opts.Events; ev != nil {
			ev.ClientDisconnected(c.info, reason, cause)
		}
		c.srv.logConn("client disconnected", "client", c.clientID, "addr", addrString(c.info.RemoteAddr),
			"cause", disconnectCause(reason, cause))
	}
}

// lingerTime bounds how long a connection that was sent a DISCONNECT or a
// refusing CONNACK is kept half-open.
const lingerTime = time.Second

// lingerClose closes the socket after the last packets were written. When
// those carry a reason (a DISCONNECT, a refusing CONNACK), it first
// half-closes the connection and discards what the client still sends, for
// at most lingerTime: closing a socket with unread bytes makes the kernel
// send a reset, and a client that was still writing (a PUBREL, the next
// PUBLISH) would lose the reason code with it.
func (c *conn) lingerClose() {
	c.wmu.Lock()
	linger := c.linger
	c.wmu.Unlock()
	type closeWriter interface{ CloseWrite() error }
	if cw, ok := c.nc.(closeWriter); ok && linger && cw.CloseWrite() == nil {
		c.nc.SetReadDeadline(time.Now().Add(lingerTime))
		var sink [512]byte
		for {
			if _, err := c.nc.Read(sink[:]); err != nil {
				break
			}
		}
	}
	c.closeSocket()
}

// closeSocket closes the network connection. A parked connection is
// unparked first, so that its reader runs again, sees the socket closed and
// tears the connection down: closing a descriptor silently drops it from
// the parker's epoll set, which would otherwise leave it parked forever.
func (c *conn) closeSocket() {
	c.srv.parker.unpark(c)
	c.nc.Close()
}

// reasonText returns the human-readable detail of a decode or protocol
// error, for a Reason String.
func reasonText(err error) string {
	var pe *packet.Error
	if errors.As(err, &pe) {
		return pe.Reason
	}
	return ""
}

// write appends an already-encoded packet.
func (c *conn) writeBytes(b []byte) {
	c.wmu.Lock()
	if !c.closing {
		c.out = append(c.out, b...)
	}
	c.wmu.Unlock()
}

// writeAck appends a PUBACK, PUBREC, PUBREL or PUBCOMP.
func (c *conn) writeAck(t packet.Type, pid uint16, reason packet.ReasonCode) {
	c.writeAckSeq(t, pid, reason, 0)
}

// writeHeldAck appends a held acknowledgement, and after it the client's
// own messages that waited for it.
func (c *conn) writeHeldAck(a *heldAck) { c.writeAckSeq(a.t, a.pid, a.rc, a.seq) }

func (c *conn) writeAckSeq(t packet.Type, pid uint16, reason packet.ReasonCode, seq uint64) {
	if t == packet.PUBACK && c.unackedIn.Add(-1) < int32(c.srv.opts.ReceiveMaximum) && c.version < packet.V5 {
		select {
		case c.readable <- struct{}{}: // made at CONNECT for 3.1.1 clients
		default:
		}
	}
	a := packet.Ack{Type: t, PacketID: pid, Reason: reason}
	if reason.IsError() && c.problemInfo && c.version >= packet.V5 {
		// Problem information only when the client did not turn it off [MQTT-3.1.2-29].
		a.Props.Set(packet.PropReasonString)
		a.Props.ReasonString = []byte(reason.String())
	}
	c.wmu.Lock()
	if !c.closing {
		c.out = a.Append(c.out, c.version)
		if seq > c.acksOut {
			c.acksOut = seq
			if c.echo != nil {
				c.releaseEchoLocked()
			}
		}
	}
	c.wmu.Unlock()
}

// echoBuf holds PUBLISH packets of a client's own messages, encoded, until
// the acknowledgements of the publishes they came from are written: a
// client subscribed to what it publishes gets its PUBACK first, as from a
// broker that acknowledges before it routes, even when the acknowledgement
// waits for the Store. Messages of other publishers do not wait.
type echoBuf struct {
	b     []byte
	marks []echoMark // in order of gate
}

// echoMark says that echoBuf.b up to end waits for acknowledgement gate.
type echoMark struct {
	gate uint64
	end  int
}

// appendEchoLocked holds p, encoded, until acknowledgement gate is
// written.
func (c *conn) appendEchoLocked(p *packet.Publish, gate uint64) {
	e := c.echo
	if e == nil {
		e = new(echoBuf)
		c.echo = e
	}
	e.b = p.Append(e.b, c.version)
	if n := len(e.marks); n > 0 && e.marks[n-1].gate == gate {
		e.marks[n-1].end = len(e.b)
		return
	}
	e.marks = append(e.marks, echoMark{gate: gate, end: len(e.b)})
}

// releaseEchoLocked moves the held messages whose acknowledgements are
// written to out.
func (c *conn) releaseEchoLocked() {
	e := c.echo
	n, end := 0, 0
	for n < len(e.marks) && e.marks[n].gate <= c.acksOut {
		end = e.marks[n].end
		n++
	}
	if n == 0 {
		return
	}
	c.out = append(c.out, e.b[:end]...)
	if n == len(e.marks) {
		c.echo = nil // the common case: nothing else waits
		return
	}
	e.b = e.b[:copy(e.b, e.b[end:])]
	e.marks = e.marks[:copy(e.marks, e.marks[n:])]
	for i := range e.marks {
		e.marks[i].end -= end
	}
}

// echoLenLocked is the number of bytes held in echo.
func (c *conn) echoLenLocked() int {
	if c.echo == nil {
		return 0
	}
	return len(c.echo.b)
}

// writeResult says what became of a PUBLISH handed to writePublish.
type writeResult uint8

const (
	written    writeResult = iota // appended to the output
	tooLarge                      // larger than the client's Maximum Packet Size: never sendable
	busy                          // connection closing, or QoS 0 over the pending limit
	expiredMsg                    // the message expired while it waited
	deniedMsg                     // the client may not read its topic (ReadChecker)
)

// writePublish appends p, applying an outbound topic alias when the client
// allows them. A client's own message (gate > 0) waits for the gate-th
// publish acknowledgement when that is not written yet (conn.echo). The
// caller holds the session's mu.
func (c *conn) writePublish(p *packet.Publish, topic string, qos0 bool, gate uint64) writeResult {
	// A message near the protocol's size limit could exceed it once this
	// client's subscription identifiers are added; the encoder cannot
	// represent that, so it is treated as too large for the client.
	if size := p.Size(c.version); size > packet.MaxRemainingLength || (c.maxOut > 0 && size > int(c.maxOut)) {
		return tooLarge
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.closing || (qos0 && c.fullLocked()) {
		return busy
	}
	defer c.accountLocked()
	if gate > c.acksOut {
		// Held back, it uses only aliases already sent: a new one would be
		// defined after later packets that already use it.
		if a, ok := c.aliasOut[topic]; ok && c.aliasMaxOut > 0 {
			p.Topic = p.Topic[:0]
			p.Props.Set(packet.PropTopicAlias)
			p.Props.TopicAlias = a
		}
		c.appendEchoLocked(p, gate)
		return written
	}
	if c.aliasMaxOut > 0 {
		if a, ok := c.aliasOut[topic]; ok {
			p.Topic = p.Topic[:0]
			p.Props.Set(packet.PropTopicAlias)
			p.Props.TopicAlias = a
		} else if c.nextAlias < c.aliasMaxOut {
			// The first PUBLISH of a topic carries both the topic and its
			// new alias; later ones carry only the alias.
			c.nextAlias++
			if c.aliasOut == nil {
				c.aliasOut = make(map[string]uint16)
			}
			c.aliasOut[topic] = c.nextAlias
			p.Props.Set(packet.PropTopicAlias)
			p.Props.TopicAlias = c.nextAlias
		}
	}
	c.out = p.Append(c.out, c.version)
	return written
}

// scratch holds the structs a reader decodes packets into. They keep the
// capacity of their slices between uses, so decoding does not allocate.
type scratch struct {
	pub   packet.Publish
	ack   packet.Ack
	sub   packet.Subscribe
	unsub packet.Unsubscribe
}
