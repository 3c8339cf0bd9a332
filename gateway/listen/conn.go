package listen

import (
	"crypto/tls"
	"net"
	"sync"
	"sync/atomic"
)

// PeerAddr is the remote address of a client that presented a verified
// TLS client certificate: the TCP address, and the name from the
// certificate. It is what RemoteAddr returns for such a connection, so
// that the name reaches the broker's Authenticator in
// broker.ClientInfo.RemoteAddr with no change to the broker; gateway/auth
// looks for the Identity method. String is the bare address, as logs and
// the status page expect.
type PeerAddr struct {
	Addr net.Addr // the TCP address
	ID   string   // the certificate's name, or ""
	// Anonymous is the listener's allow_anonymous, nil when it has none.
	Anonymous *bool
}

// AllowAnonymous returns the listener's anonymous policy (gateway/auth's
// ListenerPolicy), or nil.
func (a *PeerAddr) AllowAnonymous() *bool { return a.Anonymous }

// Network returns the network of the address.
func (a *PeerAddr) Network() string { return a.Addr.Network() }

// String returns the address without the name.
func (a *PeerAddr) String() string { return a.Addr.String() }

// Identity returns the certificate's name.
func (a *PeerAddr) Identity() string { return a.ID }

// Unwrap returns the TCP address, for code that needs the IP.
func (a *PeerAddr) Unwrap() net.Addr { return a.Addr }

// peerAddr returns addr with the identity and the listener's anonymous
// policy, or addr alone when there are neither.
func peerAddr(addr net.Addr, id string, anon *bool) net.Addr {
	if id == "" && anon == nil {
		return addr
	}
	return &PeerAddr{Addr: addr, ID: id, Anonymous: anon}
}

// certIdentity is the name of the verified client certificate of a TLS
// connection: its subject's common name, else its first DNS name, email
// address or URI. Empty when no certificate was verified.
func certIdentity(cs *tls.ConnectionState) string {
	if cs == nil || len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return ""
	}
	leaf := cs.VerifiedChains[0][0]
	switch {
	case leaf.Subject.CommonName != "":
		return leaf.Subject.CommonName
	case len(leaf.DNSNames) > 0:
		return leaf.DNSNames[0]
	case len(leaf.EmailAddresses) > 0:
		return leaf.EmailAddresses[0]
	case len(leaf.URIs) > 0:
		return leaf.URIs[0].String()
	}
	return ""
}

// counter counts a listener's open connections against its limit.
type counter struct {
	max  int // negative: no limit
	open atomic.Int64
}

// acquire takes a place, or reports false when the listener is full.
func (c *counter) acquire() bool {
	if n := c.open.Add(1); c.max >= 0 && n > int64(c.max) {
		c.open.Add(-1)
		return false
	}
	return true
}

func (c *counter) release() { c.open.Add(-1) }

// countedConn is an accepted TCP connection holding a place in its
// listener's count until it is closed. It embeds *net.TCPConn rather than
// net.Conn so that SyscallConn and CloseWrite stay visible: the broker
// parks idle plain connections through the descriptor, and half-closes a
// connection to deliver a last reason code.
type countedConn struct {
	*net.TCPConn
	c         *counter
	once      sync.Once
	maxPacket int      // the listener's max_packet_size, 0 for the broker's
	remote    net.Addr // a *PeerAddr when the listener has an anonymous policy, else nil
}

// MaxPacketSize implements broker.ListenerLimits.
func (c *countedConn) MaxPacketSize() int { return c.maxPacket }

// RemoteAddr returns the client's address, a *PeerAddr carrying the
// listener's anonymous policy when it has one.
func (c *countedConn) RemoteAddr() net.Addr {
	if c.remote != nil {
		return c.remote
	}
	return c.TCPConn.RemoteAddr()
}

// Close closes the connection and gives its place back.
func (c *countedConn) Close() error {
	err := c.TCPConn.Close()
	c.once.Do(c.c.release)
	return err
}

// tlsConn is a TLS connection whose handshake is done. It offers no
// SyscallConn: the broker must not poll its descriptor, since TLS may hold
// decrypted bytes the descriptor knows nothing of.
type tlsConn struct {
	*tls.Conn
	remote    net.Addr
	id        string
	maxPacket int
	forget    func() // takes it off the listener's verified connections; nil if not there
	closing   sync.Once
}

// Close closes the connection, and takes it off its listener's verified
// connections.
func (c *tlsConn) Close() error {
	if c.forget != nil {
		c.closing.Do(c.forget)
	}
	return c.Conn.Close()
}

// MaxPacketSize implements broker.ListenerLimits.
func (c *tlsConn) MaxPacketSize() int { return c.maxPacket }

// RemoteAddr returns the client's address, a *PeerAddr when it presented
// a verified certificate.
func (c *tlsConn) RemoteAddr() net.Addr { return c.remote }

// Identity returns the name of the client's verified certificate, or "".
func (c *tlsConn) Identity() string { return c.id }
