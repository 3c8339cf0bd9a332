// Package brokertest runs brokers and raw MQTT clients for tests: a server
// on a loopback port chosen by the OS, a packet-level client that can send
// anything (including what a well-behaved client library never would), and
// Eventually, a poll-with-deadline helper that replaces sleeps.
package brokertest

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/linemq/linemq/broker"
)

// RunServer starts a broker with opts on 127.0.0.1:0 and shuts it down when
// the test ends. It returns the server and its address.
func RunServer(t testing.TB, opts broker.Options) (*broker.Server, string) {
	t.Helper()
	s := Start(t, opts, nil)
	return s.Server, s.Addr
}

// Eventually polls cond every few milliseconds until it returns true, and
// fails the test if it has not within timeout. msg says what was awaited.
func Eventually(t testing.TB, timeout time.Duration, msg string, cond func() bool) {
	t.Helper()
	if !Until(timeout, cond) {
		t.Fatalf("timed out after %v waiting for: %s", timeout, msg)
	}
}

// Until polls cond every few milliseconds until it returns true (true) or
// timeout passes (false): Eventually for a caller that reports the
// failure itself, with what it found.
func Until(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	wait := time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(wait)
		wait = min(2*wait, 50*time.Millisecond)
	}
	return true
}

// Server is a broker that a test can stop and start again on the same
// Store, as a restart of the daemon would. Make one with Start.
type Server struct {
	*broker.Server
	Addr string // host:port of its listener; a restart listens anew

	t     testing.TB
	opts  broker.Options
	open  func() (broker.Store, func() error)
	close func() error
	done  chan struct{}
}

// Start runs a broker with opts on 127.0.0.1:0. open, if not nil, opens
// its Store (and returns the function that closes it) at every start, so a
// restart reads what the last run wrote. The server is stopped when the
// test ends.
func Start(t testing.TB, opts broker.Options, open func() (broker.Store, func() error)) *Server {
	t.Helper()
	s := &Server{t: t, opts: opts, open: open}
	s.start()
	t.Cleanup(s.Stop)
	return s
}

func (s *Server) start() {
	s.t.Helper()
	o := s.opts
	if s.open != nil {
		st, closeStore := s.open()
		o.Store, s.close = st, closeStore
	}
	srv, err := broker.New(o)
	if err != nil {
		if s.close != nil {
			s.close()
		}
		s.t.Fatalf("broker.New: %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		s.t.Fatalf("listen: %v", err)
	}
	s.Server, s.Addr, s.done = srv, l.Addr().String(), make(chan struct{})
	go func() {
		defer close(s.done)
		srv.Serve(l)
	}()
}

// Stop shuts the broker down (clients are disconnected, wills published)
// and closes its Store. Stopping a stopped server does nothing.
func (s *Server) Stop() {
	if s.Server == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s.Server.Shutdown(ctx)
	<-s.done
	if s.close != nil {
		if err := s.close(); err != nil {
			s.t.Errorf("closing the store: %v", err)
		}
	}
	s.Server = nil
}

// Run starts a stopped broker again on the same Store (Stop, then Run, lets
// a test act while the broker is down).
func (s *Server) Run() {
	s.t.Helper()
	if s.Server == nil {
		s.start()
	}
}

// Restart stops the broker and starts it again on the same Store.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	s.start()
}
