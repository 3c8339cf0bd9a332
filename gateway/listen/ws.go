package listen

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// Subprotocols are the WebSocket subprotocols accepted: "mqtt", which MQTT
// 3.1.1 and 5.0 require clients to offer, and "mqttv3.1", which some old
// 3.1 clients offer instead (the broker serves 3.1 as 3.1.1).
var Subprotocols = []string{"mqtt", "mqttv3.1"}

// wsCloseTimeout bounds the WebSocket closing handshake: a client that
// does not answer its close frame is cut off after it, so that Close never
// holds the broker up for the library's own 5 s.
const wsCloseTimeout = time.Second

// wsReadBuf is the size of the chunks a WebSocket connection reads ahead.
const wsReadBuf = 16 << 10

// serveWS upgrades a request on the listener's path to an MQTT connection
// and hands it to Accept.
func (l *Listener) serveWS(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != l.cfg.Path {
		http.NotFound(w, r)
		return
	}
	if isUpgrade(r) && !offersSubprotocol(r) {
		// [MQTT-6.0.0-3]: the client must offer "mqtt". Refused in the
		// handshake: upgraded, such a client would hold its place until
		// its first frame or the handshake timeout, and learn nothing
		// from a close it may never read.
		http.Error(w, `the WebSocket subprotocol "mqtt" is required (Sec-WebSocket-Protocol: mqtt)`, http.StatusBadRequest)
		return
	}
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{
		Subprotocols:   Subprotocols,
		OriginPatterns: l.cfg.Origins,
		// Compression costs each connection a deflate window and lets a
		// small frame inflate into a large one; MQTT payloads on a plant
		// floor are small and often binary.
		CompressionMode: websocket.CompressionDisabled,
	})
	if err != nil {
		return // Accept has answered (400, 403, 426)
	}
	remote := netAddr(r.RemoteAddr)
	id := certIdentity(r.TLS)
	nc := newWSConn(c, peerAddr(remote, id, l.cfg.AllowAnonymous), id)
	nc.maxPacket = int(l.cfg.MaxPacketSize)
	if r.TLS != nil {
		nc.forget = l.verified.add(nc, r.TLS.VerifiedChains)
	}
	select {
	case l.ready <- nc:
	case <-l.done:
		nc.Close()
	}
}

// isUpgrade reports whether r asks for a WebSocket. Other requests are
// left to websocket.Accept, which answers them (426 Upgrade Required).
func isUpgrade(r *http.Request) bool {
	return strings.EqualFold(r.Header.Get("Upgrade"), "websocket")
}

// offersSubprotocol reports whether r's Sec-WebSocket-Protocol headers
// offer one of Subprotocols (the header may be repeated, and each is a
// comma-separated list).
func offersSubprotocol(r *http.Request) bool {
	for _, v := range r.Header.Values("Sec-WebSocket-Protocol") {
		for p := range strings.SplitSeq(v, ",") {
			if slices.Contains(Subprotocols, strings.TrimSpace(p)) {
				return true
			}
		}
	}
	return false
}

// netAddr turns an http.Request's RemoteAddr back into a *net.TCPAddr,
// which is what the Authenticator tests for loopback. It is the TCP peer:
// X-Forwarded-For is not believed (anyone can send it).
func netAddr(s string) net.Addr {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return net.TCPAddrFromAddrPort(ap)
	}
	return wsAddr(s)
}

// wsAddr is a remote address that did not parse as IP:port.
type wsAddr string

func (a wsAddr) Network() string { return "websocket" }
func (a wsAddr) String() string  { return string(a) }

// wsConn is an MQTT connection over WebSocket: binary messages carry the
// byte stream.
//
// Reads go through a goroutine of its own. The library's net.Conn closes
// the whole connection when a read deadline passes during a Read, while
// the broker sets read deadlines it recovers from (the one after which it
// tries to park an idle connection), as it may with any net.Conn. So the
// goroutine reads from the library with no deadline, and Read waits for it
// under a deadline that only ends that Read. The goroutine reads one chunk
// ahead at most.
type wsConn struct {
	net.Conn // websocket.NetConn: Write, SetWriteDeadline, LocalAddr
	ws       *websocket.Conn
	remote   net.Addr
	id       string
	// maxPacket is the listener's max_packet_size, 0 for the broker's.
	maxPacket int
	// forget takes it off the listener's verified connections (wss with a
	// client certificate); nil otherwise.
	forget func()

	chunks   chan []byte   // from the read goroutine
	consumed chan struct{} // to it: the last chunk is read; cap 1
	eof      chan struct{} // closed when the read goroutine ends
	readErr  error         // why, written before eof is closed

	readMu  sync.Mutex // one Read at a time; guards pending
	pending []byte     // the rest of the current chunk
	rd      deadline

	closed    chan struct{}
	closeOnce sync.Once
}

// MaxPacketSize implements broker.ListenerLimits.
func (c *wsConn) MaxPacketSize() int { return c.maxPacket }

func newWSConn(c *websocket.Conn, remote net.Addr, id string) *wsConn {
	nc := &wsConn{
		Conn:     websocket.NetConn(context.Background(), c, websocket.MessageBinary),
		ws:       c,
		remote:   remote,
		id:       id,
		chunks:   make(chan []byte),
		consumed: make(chan struct{}, 1),
		eof:      make(chan struct{}),
		rd:       newDeadline(),
		closed:   make(chan struct{}),
	}
	go nc.readLoop()
	return nc
}

// readLoop reads the stream ahead of Read, one chunk at a time.
func (c *wsConn) readLoop() {
	defer close(c.eof)
	buf := make([]byte, wsReadBuf)
	for {
		n, err := c.Conn.Read(buf)
		if n > 0 {
			select {
			case c.chunks <- buf[:n]:
			case <-c.closed:
				c.readErr = net.ErrClosed
				return
			}
			select {
			case <-c.consumed: // buf is free again
			case <-c.closed:
				c.readErr = net.ErrClosed
				return
			}
		}
		if err != nil {
			c.readErr = err
			return
		}
	}
}

// Read reads the stream; past the read deadline it returns
// os.ErrDeadlineExceeded and the connection stays usable.
func (c *wsConn) Read(p []byte) (int, error) {
	c.readMu.Lock()
	defer c.readMu.Unlock()
	if len(c.pending) == 0 {
		select {
		case c.pending = <-c.chunks:
		case <-c.eof:
			return 0, c.readErr
		case <-c.closed:
			return 0, net.ErrClosed
		case <-c.rd.done():
			return 0, os.ErrDeadlineExceeded
		}
	}
	n := copy(p, c.pending)
	c.pending = c.pending[n:]
	if len(c.pending) == 0 {
		c.consumed <- struct{}{}
	}
	return n, nil
}

// SetReadDeadline sets the deadline of Read.
func (c *wsConn) SetReadDeadline(t time.Time) error {
	c.rd.set(t)
	return nil
}

// SetDeadline sets both deadlines.
func (c *wsConn) SetDeadline(t time.Time) error {
	c.rd.set(t)
	return c.Conn.SetWriteDeadline(t)
}

// RemoteAddr returns the client's TCP address, a *PeerAddr when it
// presented a verified certificate.
func (c *wsConn) RemoteAddr() net.Addr { return c.remote }

// Identity returns the name of the client's verified certificate, or "".
func (c *wsConn) Identity() string { return c.id }

// Close closes the connection with a WebSocket close frame, waiting at
// most wsCloseTimeout for the client's answer, and waits for the read
// goroutine to end.
func (c *wsConn) Close() error {
	var err error
	c.closeOnce.Do(func() {
		if c.forget != nil {
			c.forget()
		}
		close(c.closed)
		done := make(chan error, 1)
		go func() { done <- c.Conn.Close() }()
		t := time.NewTimer(wsCloseTimeout)
		select {
		case err = <-done:
		case <-t.C:
			c.ws.CloseNow()
			err = <-done
		}
		t.Stop()
		<-c.eof
		c.rd.set(time.Time{})
	})
	return err
}

// deadline is a settable deadline whose channel closes when it passes,
// for a Read that waits on channels rather than on a socket.
type deadline struct {
	mu    sync.Mutex
	timer *time.Timer
	gen   uint64        // counts sets, so that a stale timer does nothing
	ch    chan struct{} // closed once the deadline has passed
}

func newDeadline() deadline { return deadline{ch: make(chan struct{})} }

// set moves the deadline to t; the zero time means none.
func (d *deadline) set(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.gen++
	if d.timer != nil {
		d.timer.Stop() // if it fired already, gen stops it closing ch
		d.timer = nil
	}
	expired := false
	select {
	case <-d.ch:
		expired = true
	default:
	}
	if expired {
		d.ch = make(chan struct{})
	}
	if t.IsZero() {
		return
	}
	wait := time.Until(t)
	if wait <= 0 {
		close(d.ch)
		return
	}
	gen := d.gen
	d.timer = time.AfterFunc(wait, func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.gen == gen {
			close(d.ch)
		}
	})
}

// done returns the channel that closes when the current deadline passes.
func (d *deadline) done() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.ch
}
