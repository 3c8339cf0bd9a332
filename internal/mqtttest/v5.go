// Package mqtttest holds the MQTT client wrappers the tests of several
// packages share: a paho.golang v5 client whose received messages and
// server DISCONNECTs arrive on channels, with helpers that fail the test
// rather than return errors. It lives outside broker/ because the broker's
// packages, test helpers included, use nothing but the standard library.
package mqtttest

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
)

// V5 is a connected paho.golang client.
type V5 struct {
	*paho.Client
	t    testing.TB
	Msgs chan *paho.Publish    // messages received, acknowledged as they arrive
	Disc chan *paho.Disconnect // DISCONNECTs from the server
	NC   net.Conn
}

// DialV5 connects a paho.golang client to addr with cp and disconnects it
// when the test ends. tweak, if not nil, adjusts the client's configuration
// before the client is made.
func DialV5(t testing.TB, addr string, cp *paho.Connect, tweak func(*paho.ClientConfig)) (*V5, *paho.Connack) {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c := &V5{t: t, Msgs: make(chan *paho.Publish, 10000), Disc: make(chan *paho.Disconnect, 1), NC: nc}
	cfg := paho.ClientConfig{
		Conn: nc,
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
			c.Msgs <- pr.Packet
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
	if tweak != nil {
		tweak(&cfg)
	}
	c.Client = paho.NewClient(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ca, err := c.Connect(ctx, cp)
	if err != nil {
		nc.Close()
		t.Fatalf("connect %s: %v (connack %+v)", cp.ClientID, err, ca)
	}
	t.Cleanup(func() {
		c.Client.Disconnect(&paho.Disconnect{}) // fails harmlessly if already gone
		nc.Close()
		<-c.Done()
	})
	return c, ca
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
