// Package mqtttest holds the MQTT 5 client the tests of several packages
// share: a paho.golang client that counts the messages it receives and
// (unless told to only count) hands them over on a channel, hands server
// DISCONNECTs over on another, and whose helpers fail the test rather than
// return errors, except where a refusal is what a test checks. It lives
// outside broker/ because the broker's packages, test helpers included, use
// nothing but the standard library; tests that need exact bytes on the wire
// use the packet-level brokertest.Client instead.
package mqtttest

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
)

// V5 is a paho.golang client whose traffic a test can wait for and check.
type V5 struct {
	*paho.Client
	t    testing.TB
	Msgs chan *paho.Publish    // messages received (unless Options.CountOnly)
	Disc chan *paho.Disconnect // DISCONNECTs from the server
	NC   net.Conn              // the connection, to drop it without a DISCONNECT

	// Received counts every message received, so load tests can wait for a
	// total without draining Msgs (with Options.CountOnly, Msgs stays empty).
	Received atomic.Int64
	// Acking, with Options.ManualAck, says whether messages are still
	// acknowledged: storing false makes the client stop like a wedged
	// worker, its receive maximum filling up. It starts true.
	Acking atomic.Bool
}

// Options are the client behaviours few tests need, beyond DialV5's.
type Options struct {
	// CountOnly only counts messages in Received and leaves Msgs empty, for
	// tests that receive more messages than Msgs holds and never read them.
	CountOnly bool
	// ManualAck acknowledges messages only while Acking is true, so a test
	// can wedge the client mid-stream.
	ManualAck bool
	// Tweak, if not nil, adjusts the client's configuration before the
	// client is made.
	Tweak func(*paho.ClientConfig)
}

// DialV5 connects a paho.golang client to addr with cp and disconnects it
// when the test ends. tweak, if not nil, adjusts the client's configuration
// before the client is made.
func DialV5(t testing.TB, addr string, cp *paho.Connect, tweak func(*paho.ClientConfig)) (*V5, *paho.Connack) {
	t.Helper()
	return DialV5Opts(t, addr, cp, Options{Tweak: tweak})
}

// DialV5Opts is DialV5 for the clients that need Options.
func DialV5Opts(t testing.TB, addr string, cp *paho.Connect, o Options) (*V5, *paho.Connack) {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c, ca, err := start(t, nc, cp, o)
	if err != nil {
		t.Fatalf("connect %s: %v (connack %+v)", cp.ClientID, err, ca)
	}
	return c, ca
}

// ConnectV5 runs a client over nc, a connection the test set up itself (a
// WebSocket, a TLS session), and returns it with the CONNACK even when the
// CONNACK refuses, so that tests of refusals can check the reason code; the
// client is connected only when that code is 0. It fails the test only when
// no CONNACK arrives. nc is closed when the test ends.
//
// paho.golang writes a packet in several Writes, possibly from two
// goroutines at once: nc must keep each Write whole and not interleave them
// (a TCP connection does; a WebSocket connection, one message a Write, does
// not).
func ConnectV5(t testing.TB, nc net.Conn, cp *paho.Connect, o Options) (*V5, *paho.Connack) {
	t.Helper()
	c, ca, err := start(t, nc, cp, o)
	if ca == nil {
		t.Fatalf("connect %s: %v", cp.ClientID, err)
	}
	return c, ca
}

// start makes the client over nc and sends cp; whatever the outcome, the
// client is disconnected and nc closed when the test ends.
func start(t testing.TB, nc net.Conn, cp *paho.Connect, o Options) (*V5, *paho.Connack, error) {
	c := &V5{t: t, Msgs: make(chan *paho.Publish, 10000), Disc: make(chan *paho.Disconnect, 1), NC: nc}
	c.Acking.Store(true)
	cfg := paho.ClientConfig{
		Conn: nc,
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
			c.Received.Add(1)
			if !o.CountOnly {
				c.Msgs <- pr.Packet
			}
			if o.ManualAck && c.Acking.Load() {
				pr.Client.Ack(pr.Packet)
			}
			return true, nil
		}},
		OnServerDisconnect: func(d *paho.Disconnect) {
			select {
			case c.Disc <- d:
			default:
			}
		},
		OnClientError: func(error) {},
	}
	if o.ManualAck {
		cfg.EnableManualAcknowledgment = true
		cfg.SendAcksInterval = 5 * time.Millisecond
	}
	if o.Tweak != nil {
		o.Tweak(&cfg)
	}
	c.Client = paho.NewClient(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ca, err := c.Connect(ctx, cp)
	// A failed Connect has closed nc and ended the client already; the
	// Disconnect then fails harmlessly, as it does after the server left.
	t.Cleanup(func() {
		c.Client.Disconnect(&paho.Disconnect{})
		nc.Close()
		<-c.Done()
	})
	return c, ca, err
}

// Sub subscribes to filter at qos.
func (c *V5) Sub(filter string, qos byte) {
	c.t.Helper()
	c.SubOpts(nil, paho.SubscribeOptions{Topic: filter, QoS: qos})
}

// SubOpts subscribes with full options and returns the SUBACK.
func (c *V5) SubOpts(props *paho.SubscribeProperties, opts ...paho.SubscribeOptions) *paho.Suback {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sa, err := c.Subscribe(ctx, &paho.Subscribe{Subscriptions: opts, Properties: props})
	if err != nil {
		c.t.Fatalf("subscribe: %v (%+v)", err, sa)
	}
	return sa
}

// Pub publishes payload to topic and waits for the acknowledgement, if any.
func (c *V5) Pub(topic string, qos byte, retain bool, payload string) *paho.PublishResponse {
	c.t.Helper()
	return c.PubProps(&paho.Publish{Topic: topic, QoS: qos, Retain: retain, Payload: []byte(payload)})
}

// PubProps publishes p and waits for the acknowledgement, if any.
func (c *V5) PubProps(p *paho.Publish) *paho.PublishResponse {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := c.Publish(ctx, p)
	if err != nil {
		c.t.Fatalf("publish %s: %v", p.Topic, err)
	}
	return r
}

// Puback publishes payload to topic at QoS 1 and returns the PUBACK's
// reason code, refusals included, where Pub would fail the test on one.
func (c *V5) Puback(topic, payload string) byte {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := c.Publish(ctx, &paho.Publish{Topic: topic, QoS: 1, Payload: []byte(payload)})
	if r == nil {
		c.t.Fatalf("publish %s: %v", topic, err)
	}
	return r.ReasonCode
}

// Next returns the next message received, failing after 5 s.
func (c *V5) Next() *paho.Publish {
	c.t.Helper()
	select {
	case m := <-c.Msgs:
		return m
	case <-time.After(5 * time.Second):
		c.t.Fatal("no message within 5s")
		return nil
	}
}

// None fails if a message arrives within d.
func (c *V5) None(d time.Duration) {
	c.t.Helper()
	select {
	case m := <-c.Msgs:
		c.t.Fatalf("unexpected message %s %q", m.Topic, m.Payload)
	case <-time.After(d):
	}
}
