package chaos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/linemq/linemq/broker/packet"
)

// topicRoot is the first level of every topic the load uses.
const topicRoot = "chaos"

// probePrefix starts the payload of routing probes, which the checker
// never sees.
const probePrefix = "probe/"

// Client-side timing. They are the client's view of a node, not bounds
// the cluster is judged by.
const (
	dialTimeout    = time.Second
	connackTimeout = 3 * time.Second
	writeTimeout   = 3 * time.Second
	pingEvery      = time.Second
	// silenceBound is how long a subscriber waits without hearing from its
	// node (PINGRESP included) before it gives up on the connection.
	silenceBound = 4 * time.Second
	// pubackTimeout is how long a publisher waits for one PUBACK before it
	// gives up on the connection; long enough to measure a held publish.
	pubackTimeout = 10 * time.Second
	keepAlive     = 30 // seconds, in CONNECT: the client's pings keep it alive
)

// mconn is one MQTT 5 connection. Its reader goroutine records every
// message it receives, acknowledges it, and passes other packets to ctl;
// it runs until the connection closes, even after the client has given
// up on it, so that what a node does with an abandoned connection is seen.
type mconn struct {
	id     int // index in the record's connections
	client string
	kind   string
	node   int
	nc     net.Conn
	rec    *Record

	wmu       sync.Mutex
	ctl       chan ctlPacket // PUBACK, SUBACK, PINGRESP for the owner
	done      chan struct{}  // closed when the reader has stopped
	lastHeard atomic.Int64   // unix nanoseconds of the last packet read
}

// ctlPacket is a packet for the connection's owner.
type ctlPacket struct {
	h    packet.FixedHeader
	body []byte
}

// connectResult is a CONNECT's outcome: a connection, or a refusal code,
// or an error (no answer).
type connectResult struct {
	c       *mconn
	present bool
	refused packet.ReasonCode
}

// dial connects client to the node at addr and reads its CONNACK; the
// connection is recorded and its reader started only when accepted.
func dial(ctx context.Context, rec *Record, reg *connSet, addr string, node int, client, kind string, clean bool, expiry uint32) (connectResult, error) {
	d := net.Dialer{Timeout: dialTimeout}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return connectResult{}, err
	}
	cp := packet.Connect{ProtocolName: []byte("MQTT"), Version: packet.V5, ClientID: []byte(client), CleanStart: clean, KeepAlive: keepAlive}
	if expiry > 0 {
		cp.Props.Set(packet.PropSessionExpiry)
		cp.Props.SessionExpiry = expiry
	}
	nc.SetWriteDeadline(time.Now().Add(writeTimeout))
	if _, err := nc.Write(cp.Append(nil)); err != nil {
		nc.Close()
		return connectResult{}, err
	}
	var buf []byte
	h, body, err := readPacket(nc, &buf, time.Now().Add(connackTimeout))
	if err != nil || h.Type != packet.CONNACK {
		nc.Close()
		return connectResult{}, fmt.Errorf("no CONNACK from n%d: %v", node+1, cmpErr(err, h.Type))
	}
	var ca packet.Connack
	if err := ca.Decode(packet.V5, body); err != nil {
		nc.Close()
		return connectResult{}, err
	}
	if ca.Reason != packet.Success {
		nc.Close()
		rec.refusedConnect(ca.Reason)
		return connectResult{refused: ca.Reason}, nil
	}
	nc.SetDeadline(time.Time{})
	c := &mconn{client: client, kind: kind, node: node, nc: nc, rec: rec, ctl: make(chan ctlPacket, 64), done: make(chan struct{})}
	c.id = rec.open(Conn{Client: client, Kind: kind, Node: node, Connack: time.Now(), SessionPresent: ca.SessionPresent})
	c.lastHeard.Store(time.Now().UnixNano())
	reg.add(c)
	go c.read(buf)
	return connectResult{c: c, present: ca.SessionPresent}, nil
}

func cmpErr(err error, t packet.Type) any {
	if err != nil {
		return err
	}
	return t
}

// readPacket reads one packet from nc into buf (which keeps what was read
// past it) by deadline.
func readPacket(nc net.Conn, buf *[]byte, deadline time.Time) (packet.FixedHeader, []byte, error) {
	nc.SetReadDeadline(deadline)
	tmp := make([]byte, 4096)
	for {
		h, hl, err := packet.ReadFrame(*buf, 0)
		if err != nil {
			return h, nil, err
		}
		if hl > 0 && len(*buf) >= hl+h.Remaining {
			body := append([]byte(nil), (*buf)[hl:hl+h.Remaining]...)
			*buf = append((*buf)[:0], (*buf)[hl+h.Remaining:]...)
			return h, body, nil
		}
		n, err := nc.Read(tmp)
		*buf = append(*buf, tmp[:n]...)
		if err != nil && n == 0 {
			return h, nil, err
		}
	}
}

// read is the connection's reader; see mconn.
func (c *mconn) read(buf []byte) {
	defer close(c.done)
	for {
		h, body, err := readPacket(c.nc, &buf, time.Time{})
		if err != nil {
			c.rec.closed(c.id, "connection closed", time.Now())
			c.nc.Close()
			return
		}
		now := time.Now()
		c.lastHeard.Store(now.UnixNano())
		switch h.Type {
		case packet.PUBLISH:
			var p packet.Publish
			if err := p.Decode(packet.V5, h.Flags, body); err != nil {
				c.rec.closed(c.id, "client: bad PUBLISH: "+err.Error(), now)
				c.nc.Close()
				return
			}
			c.received(&p, now)
			if p.QoS > 0 {
				// Acknowledged at once, as a client that has processed it.
				c.write((&packet.Ack{Type: packet.PUBACK, PacketID: p.PacketID}).Append(nil, packet.V5))
			}
		case packet.DISCONNECT:
			var d packet.Disconnect
			d.Decode(packet.V5, body)
			c.rec.closed(c.id, fmt.Sprintf("DISCONNECT 0x%02x", byte(d.Reason)), now)
			c.nc.Close()
			return
		default:
			select {
			case c.ctl <- ctlPacket{h, body}:
			default: // an owner that has left its connection reads no more
			}
		}
	}
}

// received records one message.
func (c *mconn) received(p *packet.Publish, at time.Time) {
	s := string(p.Payload)
	if strings.HasPrefix(s, probePrefix) {
		c.rec.probe(c.client)
		return
	}
	pub, seq, ok := strings.Cut(s, "/")
	n, err := strconv.ParseUint(seq, 10, 64)
	if !ok || err != nil {
		return // not ours
	}
	c.rec.deliver(Delivery{Msg: Msg{Pub: pub, Seq: n}, Kind: c.kind, Client: c.client, Conn: c.id, Dup: p.Dup, At: at})
}

func (c *mconn) write(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.nc.SetWriteDeadline(time.Now().Add(writeTimeout))
	_, err := c.nc.Write(b)
	return err
}

// close ends the connection from the client's side, saying why.
func (c *mconn) close(how string) {
	c.rec.closed(c.id, "client: "+how, time.Now())
	c.nc.Close()
}

// abandon leaves the connection open and still read, but no longer used.
func (c *mconn) abandon() { c.rec.abandoned(c.id, time.Now()) }

// silent reports whether nothing came from the node for longer than d.
func (c *mconn) silent(d time.Duration) bool {
	return time.Since(time.Unix(0, c.lastHeard.Load())) > d
}

// waitCtl waits for a packet of type t (and, if id != 0, that packet id)
// for the owner, until timeout or the connection ends.
func (c *mconn) waitCtl(t packet.Type, id uint16, timeout time.Duration) (ctlPacket, error) {
	tm := time.NewTimer(timeout)
	defer tm.Stop()
	for {
		select {
		case p := <-c.ctl:
			if p.h.Type != t {
				continue
			}
			if id != 0 && len(p.body) >= 2 && uint16(p.body[0])<<8|uint16(p.body[1]) != id {
				continue
			}
			return p, nil
		case <-c.done:
			return ctlPacket{}, errClosed
		case <-tm.C:
			return ctlPacket{}, errTimeout
		}
	}
}

var (
	errClosed  = errors.New("connection closed")
	errTimeout = errors.New("timed out")
)

// connSet holds every connection of a run, to close them at its end.
type connSet struct {
	mu sync.Mutex
	cs []*mconn
}

func (s *connSet) add(c *mconn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cs = append(s.cs, c)
}

// closeAll closes every connection still open and waits for the readers;
// the record notes them closed by the client at the end of the run.
func (s *connSet) closeAll() {
	s.mu.Lock()
	cs := append([]*mconn(nil), s.cs...)
	s.mu.Unlock()
	for _, c := range cs {
		c.close("end of run")
	}
	for _, c := range cs {
		<-c.done
	}
}
