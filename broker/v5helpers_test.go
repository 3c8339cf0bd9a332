package broker_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/broker/packet"
)

// v5 is a paho.golang client with its received messages and server
// DISCONNECTs on channels.
type v5 struct {
	*paho.Client
	t    testing.TB
	msgs chan *paho.Publish
	disc chan *paho.Disconnect
	nc   net.Conn
}

// dialV5 connects a paho.golang client. tweak may adjust the client config
// before the client is made.
func dialV5(t testing.TB, addr string, cp *paho.Connect, tweak func(*paho.ClientConfig)) (*v5, *paho.Connack) {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c := &v5{t: t, msgs: make(chan *paho.Publish, 10000), disc: make(chan *paho.Disconnect, 1), nc: nc}
	cfg := paho.ClientConfig{
		Conn: nc,
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
			c.msgs <- pr.Packet
			return true, nil
		}},
		OnServerDisconnect: func(d *paho.Disconnect) { c.disc <- d },
		OnClientError:      func(error) {},
	}
	if tweak != nil {
		tweak(&cfg)
	}
	c.Client = paho.NewClient(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ca, err := c.Connect(ctx, cp)
	if err != nil {
		t.Fatalf("connect %s: %v (connack %+v)", cp.ClientID, err, ca)
	}
	t.Cleanup(func() {
		c.Client.Disconnect(&paho.Disconnect{})
		nc.Close()
	})
	return c, ca
}

func (c *v5) sub(filter string, qos byte) {
	c.t.Helper()
	c.subOpts(nil, paho.SubscribeOptions{Topic: filter, QoS: qos})
}

func (c *v5) subOpts(props *paho.SubscribeProperties, opts ...paho.SubscribeOptions) *paho.Suback {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sa, err := c.Subscribe(ctx, &paho.Subscribe{Subscriptions: opts, Properties: props})
	if err != nil {
		c.t.Fatalf("subscribe: %v (%+v)", err, sa)
	}
	return sa
}

func (c *v5) pub(topic string, qos byte, retain bool, payload string) *paho.PublishResponse {
	c.t.Helper()
	return c.pubProps(&paho.Publish{Topic: topic, QoS: qos, Retain: retain, Payload: []byte(payload)})
}

func (c *v5) pubProps(p *paho.Publish) *paho.PublishResponse {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := c.Publish(ctx, p)
	if err != nil {
		c.t.Fatalf("publish %s: %v", p.Topic, err)
	}
	return r
}

// next returns the next message received, failing after 5 s.
func (c *v5) next() *paho.Publish {
	c.t.Helper()
	select {
	case m := <-c.msgs:
		return m
	case <-time.After(5 * time.Second):
		c.t.Fatal("no message within 5s")
		return nil
	}
}

// none fails if a message arrives within d.
func (c *v5) none(d time.Duration) {
	c.t.Helper()
	select {
	case m := <-c.msgs:
		c.t.Fatalf("unexpected message %s %q", m.Topic, m.Payload)
	case <-time.After(d):
	}
}

func u32(v uint32) *uint32 { return &v }

// rawV5 is a v5 CONNECT for the raw client.
func rawV5(id string, clean bool) *packet.Connect {
	return &packet.Connect{Version: packet.V5, ClientID: []byte(id), CleanStart: clean}
}

// withExpiry sets a Session Expiry Interval on a raw CONNECT.
func withExpiry(c *packet.Connect, secs uint32) *packet.Connect {
	c.Props.Set(packet.PropSessionExpiry)
	c.Props.SessionExpiry = secs
	return c
}

// codes formats reason codes as numbers, for comparisons in tests.
func codes(rs []packet.ReasonCode) string {
	b := make([]byte, len(rs))
	for i, r := range rs {
		b[i] = byte(r)
	}
	return fmt.Sprint(b)
}

// windowSub connects a raw v5 client that advertises Receive Maximum window
// (with a Session Expiry Interval expiry, 0 for none) and subscribes it to
// filter at QoS 1: the "slow worker" of many tests.
func windowSub(t testing.TB, addr, id, filter string, window uint16, expiry uint32) *brokertest.Client {
	t.Helper()
	cp := withExpiry(rawV5(id, true), expiry)
	cp.Props.Set(packet.PropReceiveMaximum)
	cp.Props.ReceiveMaximum = window
	c, _ := brokertest.Connect(t, addr, cp)
	c.Subscribe(&packet.Subscribe{Subs: []packet.Subscription{{Filter: []byte(filter), QoS: 1}}})
	return c
}
