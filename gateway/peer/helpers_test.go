package peer

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/brokertest"
)

// TestMain fails the package if a goroutine outlives the tests: a Mesh,
// stream or transport that Close did not stop.
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(runChild()) // a node in a process of its own, for stopping (stop_test.go)
	}
	code := m.Run()
	if code == 0 {
		deadline := time.Now().Add(10 * time.Second)
		for {
			err := goleak.Find()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				fmt.Fprintf(os.Stderr, "goroutines outlived the tests: %v\n", err)
				code = 1
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	os.Exit(code)
}

// fast are timings that keep the failure tests short; the bound tests use
// the defaults.
func fast(o Options) Options {
	o.PingInterval = 50 * time.Millisecond
	o.PingTimeout = 250 * time.Millisecond
	o.DeliverTimeout = 400 * time.Millisecond
	o.OpenTimeout = 200 * time.Millisecond
	o.ReconnectMax = 200 * time.Millisecond
	return o
}

// received is one record a handler got.
type received struct {
	from string
	to   Target
	m    *broker.Message
}

// handler records what arrives. Deliveries are accepted unless deliver is
// set; forwards go to a buffered channel (a test that sends more than its
// capacity uses count instead).
type handler struct {
	forwards  chan received
	delivered chan received
	count     atomic.Int64 // forwards and deliveries
	forward   func(from string, m *broker.Message)
	deliver   func(from string, to Target, m *broker.Message, r Reply)
}

func newHandler() *handler {
	return &handler{forwards: make(chan received, 4096), delivered: make(chan received, 4096)}
}

func (h *handler) Forward(from string, m *broker.Message) {
	h.count.Add(1)
	if h.forward != nil {
		h.forward(from, m)
		return
	}
	select {
	case h.forwards <- received{from: from, m: m}:
	default:
	}
}

func (h *handler) Deliver(from string, to Target, m *broker.Message, r Reply) {
	h.count.Add(1)
	if h.deliver != nil {
		h.deliver(from, to, m, r)
		return
	}
	select {
	case h.delivered <- received{from: from, to: to, m: m}:
	default:
	}
	r.Done(true, nil)
}

// node is a Mesh on a loopback listener with a recording handler.
type node struct {
	*Mesh
	name string
	addr string
	h    *handler
}

// startNode starts a Mesh named name on 127.0.0.1 (at addr if given, to
// come back where a killed node was). Close runs at cleanup.
func startNode(t testing.TB, name string, o Options, addr ...string) *node {
	t.Helper()
	at := "127.0.0.1:0"
	if len(addr) > 0 {
		at = addr[0]
	}
	ln, err := listenRetry(at)
	if err != nil {
		t.Fatal(err)
	}
	h := newHandler()
	o.Node = name
	if o.Handler == nil {
		o.Handler = h
	}
	m, err := New(o)
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	if err := m.Start(ln); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return &node{Mesh: m, name: name, addr: ln.Addr().String(), h: h}
}

// listenRetry listens on addr; a port just released may take a moment.
func listenRetry(addr string) (net.Listener, error) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		ln, err := net.Listen("tcp", addr)
		if err == nil || time.Now().After(deadline) {
			return ln, err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// connect makes every node a peer of every other.
func connect(nodes ...*node) {
	peers := map[string]string{}
	for _, n := range nodes {
		peers[n.name] = n.addr
	}
	for _, n := range nodes {
		n.SetPeers(peers)
	}
}

// waitAvailable waits until from sees to as available (or not).
func waitAvailable(t testing.TB, from *node, to string, want bool) {
	t.Helper()
	brokertest.Eventually(t, 10*time.Second, fmt.Sprintf("%s sees %s available=%v", from.name, to, want), func() bool {
		return from.Available(to) == want
	})
}

// stats returns from's figures for peer.
func stats(t testing.TB, from *node, peer string) PeerStats {
	t.Helper()
	for _, s := range from.Stats() {
		if s.Node == peer {
			return s
		}
	}
	t.Fatalf("%s has no peer %s", from.name, peer)
	return PeerStats{}
}

// deliver calls Deliver and returns a channel with its outcome, whether
// immediate or through done.
func deliver(n *node, ctx context.Context, peer string, to Target, m *broker.Message) <-chan error {
	ch := make(chan error, 1)
	if err := n.Deliver(ctx, peer, to, m, func(err error) { ch <- err }); err != nil {
		ch <- err
	}
	return ch
}

// outcome waits for a delivery's outcome, failing the test after within.
func outcome(t testing.TB, ch <-chan error, within time.Duration) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(within):
		t.Fatalf("no outcome within %v", within)
		return nil
	}
}

// recv waits for one record on ch.
func recv(t testing.TB, ch <-chan received) received {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(5 * time.Second):
		t.Fatal("nothing received within 5s")
		return received{}
	}
}

func msg(topic, payload string) *broker.Message {
	return broker.NewMessage(topic, []byte(payload), 1, false)
}

// proxy forwards TCP connections to a target and can be paused: while
// paused it reads nothing more from either side and writes nothing, as a
// SIGSTOPped process would, without closing anything.
type proxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	paused bool
	resume chan struct{} // closed by Resume
	conns  []net.Conn
	wg     sync.WaitGroup
}

func newProxy(t testing.TB, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target, resume: make(chan struct{})}
	close(p.resume)
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(p.close)
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		u, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, u)
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(c, u)
		go p.pipe(u, c)
	}
}

func (p *proxy) pipe(src, dst net.Conn) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			gate := p.resume
			p.mu.Unlock()
			<-gate
			if _, werr := dst.Write(buf[:n]); werr != nil {
				src.Close()
				return
			}
		}
		if err != nil {
			dst.Close()
			return
		}
	}
}

// pause holds every byte in flight from now on.
func (p *proxy) pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.paused {
		p.paused, p.resume = true, make(chan struct{})
	}
}

func (p *proxy) unpause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.paused {
		p.paused = false
		close(p.resume)
	}
}

func (p *proxy) close() {
	p.ln.Close()
	p.unpause()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// gated wraps a Transport so a test can hold every Send: between hold
// and release, a writer that reaches Send waits there (and says so on
// entered).
type gated struct {
	Transport
	mu      sync.Mutex
	open    chan struct{} // closed while sends pass
	entered chan struct{}
}

func newGated(tls *tls.Config) *gated {
	g := &gated{Transport: NewGRPC(GRPCOptions{TLS: tls}), open: make(chan struct{}), entered: make(chan struct{}, 1)}
	close(g.open)
	return g
}

// hold makes the next Sends wait.
func (g *gated) hold() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
		g.open = make(chan struct{})
	default:
	}
	select {
	case <-g.entered: // a stale notice
	default:
	}
}

// release lets the Sends through; a test registers it as a cleanup after
// starting its nodes, so a failing test does not leave a writer stuck.
func (g *gated) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
	default:
		close(g.open)
	}
}

func (g *gated) Dial(ctx context.Context, node, addr string, self Hello) (Stream, Hello, error) {
	s, h, err := g.Transport.Dial(ctx, node, addr, self)
	if err != nil {
		return nil, h, err
	}
	return &gatedStream{Stream: s, g: g}, h, nil
}

func (g *gated) Serve(l net.Listener, self Hello, accept Acceptor) error {
	return g.Transport.Serve(l, self, func(remote Hello, s Stream) error {
		return accept(remote, &gatedStream{Stream: s, g: g})
	})
}

type gatedStream struct {
	Stream
	g *gated
}

func (s *gatedStream) Send(frame []byte) error {
	s.g.mu.Lock()
	open := s.g.open
	s.g.mu.Unlock()
	select {
	case <-open:
	default:
		select {
		case s.g.entered <- struct{}{}:
		default:
		}
		<-open
	}
	return s.Stream.Send(frame)
}
