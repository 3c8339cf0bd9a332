package etcdembed

import (
	"errors"
	"io"
	"net"
	"runtime"
	"testing"
	"time"
)

// TestPeerEndpointsMatch: a connection is a peer connection when its far
// end is another member's peer address, or its near end one of this
// member's peer listeners (a wildcard listener takes every local address).
func TestPeerEndpointsMatch(t *testing.T) {
	addr := func(s string) *net.TCPAddr { a, _ := net.ResolveTCPAddr("tcp", s); return a }
	eps := peerEndpoints{
		listen: []*net.TCPAddr{addr("0.0.0.0:2380"), addr("10.0.0.1:2381")},
		remote: []*net.TCPAddr{addr("10.0.0.2:2380"), addr("[fd00::3]:2380")},
	}
	for _, c := range []struct {
		local, remote string
		want          bool
	}{
		{"10.0.0.1:40000", "10.0.0.2:2380", true},  // dialled to a member
		{"10.0.0.1:40000", "[fd00::3]:2380", true}, // ... over IPv6
		{"10.0.0.1:2380", "10.0.0.2:41000", true},  // accepted on the wildcard listener
		{"10.0.0.1:2381", "10.0.0.9:41000", true},  // accepted on a bound listener
		{"10.0.0.5:2381", "10.0.0.9:41000", false}, // same port, another address
		{"10.0.0.1:1883", "10.0.0.2:41000", false}, // an MQTT client
		{"10.0.0.1:40000", "10.0.0.2:7946", false}, // the gateways' own mesh
	} {
		if got := eps.matches(addr(c.local), addr(c.remote)); got != c.want {
			t.Errorf("%s -> %s: matches %v, want %v", c.local, c.remote, got, c.want)
		}
	}
}

// TestShutdownPeerConns: the connections to and from the peer addresses
// end (their reader sees end of file), and the others do not.
func TestShutdownPeerConns(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("peer connections are found through /proc/self/fd on Linux only")
	}
	peer := listen(t)          // stands for another member's peer listener
	own := listen(t)           // this member's peer listener
	other := listen(t)         // anything else: an MQTT listener
	out := dial(t, peer)       // this member's stream to the other
	in := dial(t, own)         // the other member's stream to this one...
	inServer := accept(t, own) // ... as this member accepted it
	bystander := dial(t, other)
	eps := peerEndpoints{
		listen: []*net.TCPAddr{own.Addr().(*net.TCPAddr)},
		remote: []*net.TCPAddr{peer.Addr().(*net.TCPAddr)},
	}
	n, err := shutdownPeerConns(eps)
	if err != nil {
		t.Fatal(err)
	}
	// Two descriptors: the dialled stream and the accepted one (whose
	// dialling end, in this process too, sees the shutdown as the other
	// member would).
	if n != 2 {
		t.Errorf("shut down %d connections, want 2", n)
	}
	for name, c := range map[string]net.Conn{"outbound": out, "inbound": inServer, "inbound's far end": in} {
		if !ended(c) {
			t.Errorf("%s connection still open", name)
		}
	}
	if ended(bystander) {
		t.Error("a connection to another port was shut down")
	}
}

func listen(t *testing.T) net.Listener {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func dial(t *testing.T, l net.Listener) net.Conn {
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func accept(t *testing.T, l net.Listener) net.Conn {
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// ended reports whether a read on c ends at once with end of file (or a
// reset) rather than waiting for data.
func ended(c net.Conn) bool {
	c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	return errors.Is(err, io.EOF) || (err != nil && !(errors.As(err, &ne) && ne.Timeout()))
}
