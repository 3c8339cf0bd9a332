package etcdtest

import (
	"io"
	"net"
	"sync"
)

// Proxy forwards TCP connections from a loopback port to a target and can
// be cut, to simulate a partition between a client and etcd.
//
// While cut, connections already open are closed and new ones are accepted
// but never answered, as a partitioned peer looks to a client: nothing is
// refused, nothing comes back. Resume closes the silent connections so the
// client redials at once instead of waiting out its connect timeout.
type Proxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	cut     bool // cut by the test (Cut/Resume)
	down    bool // cut because the member is stopped (Etcd.Stop/Restart)
	closed  bool
	conns   map[net.Conn]struct{} // client side of every open connection
	waiting sync.WaitGroup        // accept loop and pipes
}

// NewProxy listens on 127.0.0.1 with a port the kernel chooses and forwards
// to target (host:port).
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.waiting.Add(1)
	go p.accept()
	return p, nil
}

// Endpoint returns the proxy's URL for an etcd client.
func (p *Proxy) Endpoint() string { return "http://" + p.ln.Addr().String() }

// Cut drops every connection and holds new ones silent until Resume.
func (p *Proxy) Cut() { p.setCut(true, &p.cut) }

// Resume forwards again; connections held silent are closed.
func (p *Proxy) Resume() { p.setCut(false, &p.cut) }

func (p *Proxy) setDown(down bool) { p.setCut(down, &p.down) }

func (p *Proxy) setCut(v bool, flag *bool) {
	p.mu.Lock()
	*flag = v
	conns := p.conns
	p.conns = map[net.Conn]struct{}{}
	p.mu.Unlock()
	// A change either way invalidates every open connection: forwarded
	// ones when cutting, silent ones when resuming.
	for c := range conns {
		c.Close()
	}
}

// Close stops listening and closes every connection. It waits for the
// proxy's goroutines to end.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	p.ln.Close()
	for c := range conns {
		c.Close()
	}
	p.waiting.Wait()
}

func (p *Proxy) accept() {
	defer p.waiting.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.Close()
			return
		}
		p.conns[c] = struct{}{}
		silent := p.cut || p.down
		p.waiting.Add(1)
		p.mu.Unlock()
		if silent {
			go p.hold(c)
		} else {
			go p.pipe(c)
		}
	}
}

// hold reads and discards until the connection is closed by Resume or
// Close.
func (p *Proxy) hold(c net.Conn) {
	defer p.waiting.Done()
	defer p.forget(c)
	io.Copy(io.Discard, c)
}

// forget closes c and drops it from the open connections.
func (p *Proxy) forget(c net.Conn) {
	c.Close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

func (p *Proxy) pipe(c net.Conn) {
	defer p.waiting.Done()
	defer p.forget(c)
	u, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer u.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		io.Copy(u, c)
		u.Close() // unblocks the copy below once the client side ends
	}()
	io.Copy(c, u) // an error is how a cut looks; nothing to report
	c.Close()
	<-done
}
