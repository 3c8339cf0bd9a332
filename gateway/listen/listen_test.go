package listen

import (
	"context"
	"errors"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/gateway/auth"
	"github.com/linemq/linemq/internal/mqtttest"
)

func TestMain(m *testing.M) { brokertest.Main(m) }

// listen opens a listener on 127.0.0.1:0 and closes it when the test ends.
func listen(t *testing.T, cfg Config, opts Options) *Listener {
	t.Helper()
	if cfg.Address == "" {
		cfg.Address = "127.0.0.1:0"
	}
	l, err := Listen(context.Background(), cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// serve runs a broker with a on the listeners until the test ends.
func serve(t *testing.T, a broker.Authenticator, bo broker.Options, ls ...*Listener) *broker.Server {
	t.Helper()
	bo.Auth = a
	srv, err := broker.New(bo)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{}, len(ls))
	for _, l := range ls {
		go func() {
			srv.Serve(l)
			done <- struct{}{}
		}()
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		for range ls {
			<-done
		}
	})
	return srv
}

// roundTrip subscribes to topic, publishes to it and waits for the message.
func roundTrip(t *testing.T, c *mqtttest.V5, topic string) {
	t.Helper()
	c.Sub(topic, 1)
	c.Pub(topic, 1, false, "ping")
	if m := c.Next(); m.Topic != topic {
		t.Fatalf("got %s", m.Topic)
	}
}

func newAuth(t *testing.T, cfg auth.Config) *auth.Authenticator {
	t.Helper()
	a, err := auth.New(cfg, auth.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestTCPListenerWithBroker(t *testing.T) {
	l := listen(t, Config{Type: TCP}, Options{})
	serve(t, newAuth(t, auth.Config{}), broker.Options{}, l)
	nc, err := net.DialTimeout("tcp", l.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c, ca := mqtttest.ConnectV5(t, nc, &paho.Connect{ClientID: "plain", KeepAlive: 30, CleanStart: true}, mqtttest.Options{})
	if ca.ReasonCode != 0 {
		t.Fatalf("CONNACK 0x%02X", ca.ReasonCode)
	}
	roundTrip(t, c, "a/b")
	if got := l.URL(); got != "mqtt://"+l.Addr().String() {
		t.Errorf("URL %s", got)
	}
}

// TestConnectionLimit: connections beyond max_connections are closed at
// once, and a place freed is usable again.
func TestConnectionLimit(t *testing.T) {
	l := listen(t, Config{MaxConnections: 2}, Options{})
	accepted := make(chan net.Conn, 10)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	dial := func() net.Conn {
		c, err := net.DialTimeout("tcp", l.Addr().String(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	dial()
	dial()
	a1, a2 := <-accepted, <-accepted
	third := dial()
	third.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := third.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("third connection not closed: %v", err)
	}
	brokertest.Eventually(t, 5*time.Second, "refusal counted", func() bool { return l.Refused() == 1 })
	if l.Conns() != 2 {
		t.Errorf("open %d", l.Conns())
	}
	a1.Close()
	a1.Close() // a second Close gives nothing back twice
	brokertest.Eventually(t, 5*time.Second, "place freed", func() bool { return l.Conns() == 1 })
	dial()
	select {
	case <-accepted:
	case <-time.After(5 * time.Second):
		t.Fatal("no place after one was freed")
	}
	a2.Close()
	// Parking needs the descriptor: a plain connection keeps SyscallConn.
	if _, ok := a2.(syscall.Conn); !ok {
		t.Error("a tcp connection lost SyscallConn")
	}
	if _, ok := a2.(interface{ CloseWrite() error }); !ok {
		t.Error("a tcp connection lost CloseWrite")
	}
}
