package brokertest

import (
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/linemq/linemq/broker/packet"
)

// Client is a packet-level MQTT client over a real TCP connection. It sends
// exactly the bytes it is told to and decodes what comes back, so tests can
// drive protocol errors and check every field of the broker's answers.
//
// A Client made as a literal, with only Conn and Version, has no test to
// fail: use just Read and Write on it. That suits connections to a process
// that may die at any moment, where a failed write or read means reconnect,
// not a failed test.
type Client struct {
	t       testing.TB
	Conn    net.Conn
	Version packet.Version
	buf     []byte
}

// Dial connects to addr without sending anything.
func Dial(t testing.TB, addr string, v packet.Version) *Client {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { nc.Close() })
	return &Client{t: t, Conn: nc, Version: v}
}

// Connect dials addr, sends c (its Version is set from v) and returns the
// client and the CONNACK.
func Connect(t testing.TB, addr string, c *packet.Connect) (*Client, *packet.Connack) {
	t.Helper()
	if c.Version == 0 {
		c.Version = packet.V5
	}
	if len(c.ProtocolName) == 0 {
		c.ProtocolName = []byte("MQTT")
	}
	cl := Dial(t, addr, c.Version)
	cl.Send(c.Append(nil))
	ack := new(packet.Connack)
	cl.Expect(packet.CONNACK, ack)
	return cl, ack
}

// Send writes raw bytes.
func (c *Client) Send(b []byte) {
	c.t.Helper()
	if err := c.Write(b); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// Write writes raw bytes like Send but returns the error instead of failing
// the test, for connections expected to break (see Read).
func (c *Client) Write(b []byte) error {
	c.Conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
	_, err := c.Conn.Write(b)
	return err
}

// Publish sends a PUBLISH.
func (c *Client) Publish(p *packet.Publish) { c.t.Helper(); c.Send(p.Append(nil, c.Version)) }

// Subscribe sends SUBSCRIBE and returns the SUBACK.
func (c *Client) Subscribe(s *packet.Subscribe) *packet.Suback {
	c.t.Helper()
	if s.PacketID == 0 {
		s.PacketID = 1
	}
	c.Send(s.Append(nil, c.Version))
	ack := new(packet.Suback)
	c.Expect(packet.SUBACK, ack)
	return ack
}

// Read returns the next packet's header and body, or an error (io.EOF when
// the broker closed the connection) within timeout. It never fails the test
// itself, so code that expects connections to die (crash tests) can use it.
func (c *Client) Read(timeout time.Duration) (packet.FixedHeader, []byte, error) {
	c.Conn.SetReadDeadline(time.Now().Add(timeout))
	for {
		h, hl, err := packet.ReadFrame(c.buf, 0)
		if err != nil {
			return h, nil, err
		}
		if hl > 0 && len(c.buf) >= hl+h.Remaining {
			body := append([]byte(nil), c.buf[hl:hl+h.Remaining]...)
			c.buf = c.buf[hl+h.Remaining:]
			return h, body, nil
		}
		tmp := make([]byte, 4096)
		n, err := c.Conn.Read(tmp)
		c.buf = append(c.buf, tmp[:n]...)
		if err != nil && n == 0 {
			return h, nil, err
		}
	}
}

// Expect reads the next packet, fails unless it is of type t, and decodes it
// into into (a *packet.Connack, *packet.Publish, *packet.Ack, *packet.Suback,
// *packet.Unsuback or *packet.Disconnect; nil to skip decoding).
func (c *Client) Expect(t packet.Type, into any) packet.FixedHeader {
	c.t.Helper()
	h, body, err := c.Read(5 * time.Second)
	if err != nil {
		c.t.Fatalf("expecting %v: %v", t, err)
	}
	if h.Type != t {
		c.t.Fatalf("expecting %v, got %v (% x)", t, h.Type, body)
	}
	if err := decode(c.Version, h, body, into); err != nil {
		c.t.Fatalf("decoding %v: %v", t, err)
	}
	return h
}

func decode(v packet.Version, h packet.FixedHeader, body []byte, into any) error {
	switch p := into.(type) {
	case nil:
		return nil
	case *packet.Connack:
		return p.Decode(v, body)
	case *packet.Publish:
		return p.Decode(v, h.Flags, body)
	case *packet.Ack:
		return p.Decode(v, h.Type, body)
	case *packet.Suback:
		return p.Decode(v, body)
	case *packet.Unsuback:
		return p.Decode(v, body)
	case *packet.Disconnect:
		return p.Decode(v, body)
	default:
		return fmt.Errorf("cannot decode into %T", into)
	}
}

// ExpectDisconnect waits for the broker to end the connection. For v5 it
// expects a DISCONNECT with reason rc first (pass 0 to accept any reason);
// for 3.1.1 just the close. It returns the reason seen.
func (c *Client) ExpectDisconnect(rc packet.ReasonCode) packet.ReasonCode {
	c.t.Helper()
	var got packet.ReasonCode
	if c.Version >= packet.V5 {
		var d packet.Disconnect
		c.Expect(packet.DISCONNECT, &d)
		got = d.Reason
		if rc != 0 && d.Reason != rc {
			c.t.Fatalf("DISCONNECT reason %#x (%v), want %#x (%v)", byte(d.Reason), d.Reason, byte(rc), rc)
		}
	}
	c.ExpectClosed()
	return got
}

// ExpectClosed waits for the connection to be closed by the broker.
func (c *Client) ExpectClosed() {
	c.t.Helper()
	for {
		h, _, err := c.Read(5 * time.Second)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				c.t.Fatalf("connection still open after 5s")
			}
			if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || isReset(err) {
				return
			}
			return
		}
		c.t.Fatalf("expected the connection to close, got %v", h.Type)
	}
}

func isReset(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe)
}

// ExpectNothing fails if a packet arrives within d.
func (c *Client) ExpectNothing(d time.Duration) {
	c.t.Helper()
	h, body, err := c.Read(d)
	if err == nil {
		c.t.Fatalf("expected nothing, got %v (% x)", h.Type, body)
	}
}
