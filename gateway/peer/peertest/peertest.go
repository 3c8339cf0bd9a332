// Package peertest is the conformance suite for peer.Transport: every
// implementation (the gRPC one, and any other wire) must pass it, so the
// Mesh can rely on the contract written on the interface.
//
//	func TestMyTransport(t *testing.T) {
//		peertest.TestTransport(t, func(t *testing.T) peer.Transport { return mine.New() })
//	}
package peertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/linemq/linemq/gateway/peer"
)

// wait bounds every step of the suite: on loopback each is milliseconds.
const wait = 5 * time.Second

// TestTransport runs the suite. newTransport makes a fresh transport; the
// suite closes each one it makes. Transports must be able to dial their
// own kind: each test dials one from another.
func TestTransport(t *testing.T, newTransport func(t *testing.T) peer.Transport) {
	t.Run("Handshake", func(t *testing.T) { testHandshake(t, newTransport) })
	t.Run("FramesInOrder", func(t *testing.T) { testFramesInOrder(t, newTransport) })
	t.Run("SendDoesNotKeepFrame", func(t *testing.T) { testSendDoesNotKeep(t, newTransport) })
	t.Run("LargeFrame", func(t *testing.T) { testLargeFrame(t, newTransport) })
	t.Run("Refused", func(t *testing.T) { testRefused(t, newTransport) })
	t.Run("CloseEndsBothEnds", func(t *testing.T) { testClose(t, newTransport) })
	t.Run("TransportCloseEndsStreams", func(t *testing.T) { testTransportClose(t, newTransport) })
	t.Run("DialBoundedByContext", func(t *testing.T) { testDialDeadline(t, newTransport) })
}

// server is a transport serving on a loopback port, handing accepted
// streams to a channel.
type server struct {
	tr       peer.Transport
	addr     string
	self     peer.Hello
	accepted chan accepted
	refuse   error
	done     chan error
	once     sync.Once
}

type accepted struct {
	hello peer.Hello
	s     peer.Stream
}

func serve(t *testing.T, newTransport func(t *testing.T) peer.Transport, name string) *server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &server{
		tr:       newTransport(t),
		addr:     ln.Addr().String(),
		self:     peer.Hello{Cluster: "line", Node: name},
		accepted: make(chan accepted, 16),
		done:     make(chan error, 1),
	}
	go func() {
		srv.done <- srv.tr.Serve(ln, srv.self, func(h peer.Hello, s peer.Stream) error {
			if srv.refuse != nil {
				return srv.refuse
			}
			srv.accepted <- accepted{h, s}
			return nil
		})
	}()
	t.Cleanup(func() { srv.close(t) })
	return srv
}

// close closes the transport and checks that Serve returned nil.
func (srv *server) close(t *testing.T) {
	t.Helper()
	srv.once.Do(func() {
		srv.tr.Close()
		select {
		case err := <-srv.done:
			if err != nil {
				t.Errorf("Serve returned %v after Close, want nil", err)
			}
		case <-time.After(wait):
			t.Error("Serve did not return after Close")
		}
	})
}

func (srv *server) accept(t *testing.T) accepted {
	t.Helper()
	select {
	case a := <-srv.accepted:
		t.Cleanup(func() { a.s.Close() })
		return a
	case <-time.After(wait):
		t.Fatal("no stream accepted")
		return accepted{}
	}
}

// dial opens a stream from a fresh transport named "dialer" to srv.
func dial(t *testing.T, newTransport func(t *testing.T) peer.Transport, srv *server) (peer.Stream, peer.Hello) {
	t.Helper()
	tr := newTransport(t)
	t.Cleanup(func() { tr.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	s, h, err := tr.Dial(ctx, srv.self.Node, srv.addr, peer.Hello{Cluster: "line", Node: "dialer"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, h
}

// recv receives one frame (copied), failing the test after wait.
func recv(t *testing.T, s peer.Stream) []byte {
	t.Helper()
	type result struct {
		b   []byte
		err error
	}
	ch := make(chan result, 1)
	go func() {
		b, err := s.Recv()
		ch <- result{bytes.Clone(b), err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("Recv: %v", r.err)
		}
		return r.b
	case <-time.After(wait):
		t.Fatal("Recv: nothing within the bound")
		return nil
	}
}

// ends waits for s.Recv to fail.
func ends(t *testing.T, s peer.Stream, what string) {
	t.Helper()
	ch := make(chan error, 1)
	go func() {
		for {
			if _, err := s.Recv(); err != nil {
				ch <- err
				return
			}
		}
	}()
	select {
	case <-ch:
	case <-time.After(wait):
		t.Fatalf("%s: Recv still blocked", what)
	}
}

func testHandshake(t *testing.T, newTransport func(t *testing.T) peer.Transport) {
	srv := serve(t, newTransport, "acceptor")
	_, remote := dial(t, newTransport, srv)
	if remote != srv.self {
		t.Fatalf("Dial returned the acceptor's Hello as %+v, want %+v", remote, srv.self)
	}
	if a := srv.accept(t); a.hello != (peer.Hello{Cluster: "line", Node: "dialer"}) {
		t.Fatalf("the acceptor got the dialer's Hello as %+v", a.hello)
	}
}

func testFramesInOrder(t *testing.T, newTransport func(t *testing.T) peer.Transport) {
	srv := serve(t, newTransport, "acceptor")
	d, _ := dial(t, newTransport, srv)
	a := srv.accept(t).s
	const n = 500
	var wg sync.WaitGroup
	for _, dir := range [][2]peer.Stream{{d, a}, {a, d}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range n {
				if err := dir[0].Send(fmt.Appendf(nil, "frame %d", i)); err != nil {
					t.Errorf("Send: %v", err)
					return
				}
			}
		}()
	}
	for _, dir := range [][2]peer.Stream{{d, a}, {a, d}} {
		for i := range n {
			if got, want := recv(t, dir[1]), fmt.Sprintf("frame %d", i); string(got) != want {
				t.Fatalf("got %q, want %q", got, want)
			}
		}
	}
	wg.Wait()
}

func testSendDoesNotKeep(t *testing.T, newTransport func(t *testing.T) peer.Transport) {
	srv := serve(t, newTransport, "acceptor")
	d, _ := dial(t, newTransport, srv)
	a := srv.accept(t).s
	const n = 20
	got := make(chan []byte, n)
	go func() {
		for range n {
			b, err := a.Recv()
			if err != nil {
				close(got)
				return
			}
			got <- bytes.Clone(b)
		}
	}()
	buf := bytes.Repeat([]byte("a"), 64<<10)
	for i := range n {
		if err := d.Send(buf); err != nil {
			t.Fatal(err)
		}
		for j := range buf {
			buf[j] = byte('b' + i) // the caller reuses its buffer at once
		}
	}
	for i := range n {
		var frame []byte
		select {
		case frame = <-got:
		case <-time.After(wait):
			t.Fatalf("frame %d did not arrive", i)
		}
		want := byte('a')
		if i > 0 {
			want = byte('b' + i - 1)
		}
		if len(frame) != len(buf) || bytes.Count(frame, []byte{want}) != len(frame) {
			t.Fatalf("frame %d changed after Send", i)
		}
	}
}

func testLargeFrame(t *testing.T, newTransport func(t *testing.T) peer.Transport) {
	srv := serve(t, newTransport, "acceptor")
	d, _ := dial(t, newTransport, srv)
	a := srv.accept(t).s
	// 16 MiB, sent while the other end reads (flow control); what
	// arrives is checked rather than Send's result.
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<20)
	go d.Send(big) //nolint:errcheck
	if got := recv(t, a); !bytes.Equal(got, big) {
		t.Fatalf("a %d-byte frame arrived as %d bytes", len(big), len(got))
	}
}

func testRefused(t *testing.T, newTransport func(t *testing.T) peer.Transport) {
	srv := serve(t, newTransport, "acceptor")
	srv.refuse = errors.New("node dialer is not a peer")
	tr := newTransport(t)
	defer tr.Close()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	s, _, err := tr.Dial(ctx, "acceptor", srv.addr, peer.Hello{Cluster: "line", Node: "dialer"})
	if err == nil {
		s.Close()
		t.Fatal("Dial succeeded though the acceptor refused")
	}
	if !strings.Contains(err.Error(), "node dialer is not a peer") {
		t.Fatalf("Dial failed with %q, want the acceptor's reason", err)
	}
}

func testClose(t *testing.T, newTransport func(t *testing.T) peer.Transport) {
	for _, closer := range []string{"dialer", "acceptor"} {
		t.Run(closer, func(t *testing.T) {
			srv := serve(t, newTransport, "acceptor")
			d, _ := dial(t, newTransport, srv)
			a := srv.accept(t).s
			mine, theirs := d, a
			if closer == "acceptor" {
				mine, theirs = a, d
			}
			// A Recv in progress on the closing side returns too.
			blocked := make(chan error, 1)
			go func() {
				_, err := mine.Recv()
				blocked <- err
			}()
			if err := mine.Close(); err != nil {
				t.Fatal(err)
			}
			mine.Close() // more than once
			select {
			case err := <-blocked:
				if err == nil {
					t.Fatal("Recv returned no error after Close")
				}
			case <-time.After(wait):
				t.Fatal("Close did not end a Recv in progress")
			}
			ends(t, theirs, "the other end after Close")
			if err := mine.Send([]byte("x")); err == nil {
				t.Fatal("Send succeeded after Close")
			}
		})
	}
}

func testTransportClose(t *testing.T, newTransport func(t *testing.T) peer.Transport) {
	srv := serve(t, newTransport, "acceptor")
	d, _ := dial(t, newTransport, srv)
	srv.accept(t)
	srv.close(t)
	ends(t, d, "the dialer after the acceptor's transport closed")
}

// A peer that accepts TCP connections but never answers (a hung process
// keeps its listen backlog) must not hold Dial past its context.
func testDialDeadline(t *testing.T, newTransport func(t *testing.T) peer.Transport) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	tr := newTransport(t)
	defer tr.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	s, _, err := tr.Dial(ctx, "hung", ln.Addr().String(), peer.Hello{Cluster: "line", Node: "dialer"})
	if err == nil {
		s.Close()
		t.Fatal("Dial succeeded to a peer that never answered")
	}
	if took := time.Since(start); took > 300*time.Millisecond+time.Second {
		t.Fatalf("Dial returned after %v, its context allowed 300ms", took)
	}
}
