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

// v5 is a paho.golang client on an established connection.
type v5 struct {
	*paho.Client
	msgs chan *paho.Publish
}

// connectV5 runs a paho.golang client over nc (through viaTCP unless nc
// is TCP) and returns it with the CONNACK's reason code; the client is
// connected only when that is 0.
func connectV5(t *testing.T, nc net.Conn, cp *paho.Connect) (*v5, byte) {
	t.Helper()
	if _, ok := nc.(*net.TCPConn); !ok {
		nc = viaTCP(t, nc) // see viaTCP: paho's packets must not interleave
	}
	c := &v5{msgs: make(chan *paho.Publish, 100)}
	c.Client = paho.NewClient(paho.ClientConfig{
		Conn: nc,
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
			c.msgs <- pr.Packet
			return true, nil
		}},
		OnClientError: func(error) {},
	})
	if cp.KeepAlive == 0 {
		cp.KeepAlive = 30
	}
	cp.CleanStart = true
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ca, err := c.Connect(ctx, cp)
	t.Cleanup(func() {
		c.Disconnect(&paho.Disconnect{})
		nc.Close()
		<-c.Done()
	})
	if ca == nil {
		t.Fatalf("connect %s: %v", cp.ClientID, err)
	}
	return c, ca.ReasonCode
}

// roundTrip subscribes to topic, publishes to it and waits for the message.
func (c *v5) roundTrip(t *testing.T, topic string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sa, err := c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: topic, QoS: 1}}})
	if err != nil {
		t.Fatalf("subscribe %s: %v (%+v)", topic, err, sa)
	}
	if _, err := c.Publish(ctx, &paho.Publish{Topic: topic, QoS: 1, Payload: []byte("ping")}); err != nil {
		t.Fatalf("publish %s: %v", topic, err)
	}
	select {
	case m := <-c.msgs:
		if m.Topic != topic {
			t.Fatalf("got %s", m.Topic)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("no message on %s", topic)
	}
}

// publishCode publishes at QoS 1 and returns the PUBACK reason code.
func (c *v5) publishCode(t *testing.T, topic string) byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := c.Publish(ctx, &paho.Publish{Topic: topic, QoS: 1, Payload: []byte("x")})
	if r == nil {
		t.Fatalf("publish %s: %v", topic, err)
	}
	return r.ReasonCode
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
	c, rc := connectV5(t, nc, &paho.Connect{ClientID: "plain"})
	if rc != 0 {
		t.Fatalf("CONNACK 0x%02X", rc)
	}
	c.roundTrip(t, "a/b")
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
