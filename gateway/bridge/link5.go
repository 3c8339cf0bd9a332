package bridge

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"
)

// link5 is an MQTT 5 remote: an autopaho connection manager with a
// persistent session, manual acknowledgements and No Local on the in
// subscriptions.
type link5 struct {
	cm *autopaho.ConnectionManager
}

func newLink5(b *Bridge) (link, error) {
	urls, err := b.remoteURLs()
	if err != nil {
		return nil, err
	}
	first, longest := b.reconnectDelays()
	recvMax := uint16(256)
	cfg := autopaho.ClientConfig{
		ServerUrls:                    urls,
		TlsCfg:                        b.tlsCfg,
		KeepAlive:                     uint16(time.Duration(b.cfg.KeepAlive) / time.Second),
		CleanStartOnInitialConnection: false,
		SessionExpiryInterval:         uint32(time.Duration(b.cfg.SessionExpiry) / time.Second),
		ReconnectBackoff:              autopaho.NewExponentialBackoff(first, longest, first+1, 2),
		ConnectTimeout:                10 * time.Second,
		ConnectUsername:               b.cfg.Username,
		ConnectPassword:               []byte(b.cfg.Password),
		ConnectPacketBuilder: func(c *paho.Connect, _ *url.URL) (*paho.Connect, error) {
			if c.Properties == nil {
				c.Properties = &paho.ConnectProperties{}
			}
			c.Properties.ReceiveMaximum = &recvMax
			return c, nil
		},
		OnConnectionUp: func(cm *autopaho.ConnectionManager, ca *paho.Connack) {
			b.linkUp(ca.SessionPresent)
			if len(b.in) == 0 {
				return
			}
			s := &paho.Subscribe{}
			for _, r := range b.in {
				s.Subscriptions = append(s.Subscriptions, paho.SubscribeOptions{
					Topic: r.Filter, QoS: byte(*r.QoS), NoLocal: true, RetainAsPublished: true, RetainHandling: 1,
				})
			}
			go func() {
				if _, err := cm.Subscribe(b.ctx, s); err != nil && b.ctx.Err() == nil {
					b.fail("remote subscribe", err)
				}
			}()
		},
		OnConnectionDown: func() bool {
			b.linkDown()
			return true
		},
		OnConnectError: func(err error) {
			if b.ctx.Err() == nil {
				b.fail("connect", err)
			}
		},
		ClientConfig: paho.ClientConfig{
			ClientID:                   b.cfg.ClientID,
			EnableManualAcknowledgment: true,
			SendAcksInterval:           5 * time.Millisecond,
			OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
				b.fromRemote(pr.Packet)
				_ = pr.Client.Ack(pr.Packet)
				return true, nil
			}},
			OnServerDisconnect: func(d *paho.Disconnect) {
				b.fail("remote disconnected", fmt.Errorf("DISCONNECT reason 0x%02X", d.ReasonCode))
			},
		},
	}
	cm, err := autopaho.NewConnection(b.ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &link5{cm: cm}, nil
}

func (l *link5) publish(ctx context.Context, m *message) (byte, error) {
	resp, err := l.cm.Publish(ctx, m.publish())
	if err != nil && resp != nil && resp.ReasonCode >= 0x80 {
		return resp.ReasonCode, err
	}
	return 0, err
}

func (l *link5) disconnect(ctx context.Context) { _ = l.cm.Disconnect(ctx) }

func (l *link5) done() <-chan struct{} { return l.cm.Done() }

// publish returns m as an MQTT 5 PUBLISH, with its content type and user
// properties (the via marks included).
func (m *message) publish() *paho.Publish {
	p := &paho.Publish{Topic: m.topic, QoS: m.qos, Retain: m.retain, Payload: m.payload,
		Properties: &paho.PublishProperties{ContentType: m.ctype}}
	for _, kv := range m.user {
		p.Properties.User = append(p.Properties.User, paho.UserProperty{Key: kv[0], Value: kv[1]})
	}
	return p
}
