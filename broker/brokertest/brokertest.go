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
	srv, err := broker.New(opts)
	if err != nil {
		t.Fatalf("broker.New: %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(l)
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		<-done
	})
	return srv, l.Addr().String()
}

// Eventually polls cond every few milliseconds until it returns true, and
// fails the test if it has not within timeout. msg says what was awaited.
func Eventually(t testing.TB, timeout time.Duration, msg string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	wait := time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for: %s", timeout, msg)
		}
		time.Sleep(wait)
		wait = min(2*wait, 50*time.Millisecond)
	}
}
