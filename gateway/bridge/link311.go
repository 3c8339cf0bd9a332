package bridge

import (
	"context"
	"sync"
	"time"

	"github.com/eclipse/paho.golang/paho"
	mqtt "github.com/eclipse/paho.mqtt.golang"
)

// link311 is an MQTT 3.1.1 remote, on paho.mqtt.golang. Each connection is
// a new client (Clean Session off, so the remote keeps the in
// subscriptions and their messages while the link is down); the link
// itself does the reconnecting, with failover between the addresses
// (paho.mqtt.golang tries them in order) and exponential backoff.
//
// Why a client per connection rather than paho.mqtt.golang's own
// reconnect: with Clean Session off that library keeps unacknowledged
// PUBLISHes in its memory store and resends them itself on reconnect,
// completing the first send's token as if acknowledged; the bridge would
// then delete from its queue a message the remote may never get if the
// gateway stops. Here the queue alone decides what is sent again: a send
// whose connection is lost fails, and the message goes again, from the
// queue, on the next connection.
//
// 3.1.1 has no user properties (the linemq-via mark is not sent) and no
// No Local; gateway/config keeps in and out rules from meeting at
// the remote, which is the loop rule for this protocol.
type link311 struct {
	b      *Bridge
	opts   *mqtt.ClientOptions
	doneCh chan struct{}

	mu     sync.Mutex
	client mqtt.Client   // the connected client; nil while down
	lost   chan struct{} // closed when client's connection is lost
}

func newLink311(b *Bridge) (link, error) {
	urls, err := b.remoteURLs()
	if err != nil {
		return nil, err
	}
	o := mqtt.NewClientOptions()
	for _, u := range urls {
		o.AddBroker(u.String())
	}
	o.SetClientID(b.cfg.ClientID).
		SetUsername(b.cfg.Username).SetPassword(b.cfg.Password).
		SetCleanSession(false).
		SetAutoReconnect(false).SetConnectRetry(false).
		SetKeepAlive(time.Duration(b.cfg.KeepAlive)).
		SetConnectTimeout(10 * time.Second).
		SetWriteTimeout(10 * time.Second).
		SetOrderMatters(true). // in messages reach fromRemote one at a time, in order
		SetAutoAckDisabled(true).
		SetProtocolVersion(4) // 3.1.1, no fallback to 3.1
	if b.tlsCfg != nil {
		o.SetTLSConfig(b.tlsCfg)
	}
	l := &link311{b: b, opts: o, doneCh: make(chan struct{})}
	go l.run()
	return l, nil
}

// run connects, waits for the connection to be lost, and connects again,
// until the bridge closes.
func (l *link311) run() {
	defer close(l.doneCh)
	b := l.b
	first, longest := b.reconnectDelays()
	delay := first
	for b.ctx.Err() == nil {
		lost := make(chan struct{})
		var once sync.Once
		o := *l.opts
		o.SetConnectionLostHandler(func(_ mqtt.Client, err error) {
			once.Do(func() { close(lost) })
			if b.ctx.Err() == nil {
				b.fail("connection lost", err)
			}
		})
		// Messages for the in rules may arrive before SUBSCRIBE is answered
		// (the remote resumes the session): the default handler takes them
		// all, and fromRemote matches them against the rules.
		o.SetDefaultPublishHandler(func(_ mqtt.Client, m mqtt.Message) {
			b.fromRemote(&paho.Publish{Topic: m.Topic(), QoS: m.Qos(), Retain: m.Retained(), Payload: m.Payload()})
			m.Ack()
		})
		c := mqtt.NewClient(&o)
		tok := c.Connect()
		if !l.wait(tok) {
			c.Disconnect(0)
			return
		}
		if err := tok.Error(); err != nil {
			c.Disconnect(0)
			b.fail("connect", err)
			select {
			case <-time.After(delay):
			case <-b.ctx.Done():
				return
			}
			delay = min(2*delay, longest)
			continue
		}
		delay = first
		l.mu.Lock()
		l.client, l.lost = c, lost
		l.mu.Unlock()
		b.linkUp(tok.(*mqtt.ConnectToken).SessionPresent())
		if len(b.in) > 0 {
			filters := make(map[string]byte, len(b.in))
			for _, r := range b.in {
				filters[r.Filter] = byte(*r.QoS)
			}
			st := c.SubscribeMultiple(filters, nil)
			go func() {
				if l.wait(st) && st.Error() != nil {
					b.fail("remote subscribe", st.Error())
				}
			}()
		}
		select {
		case <-lost:
		case <-b.ctx.Done():
		}
		l.mu.Lock()
		l.client, l.lost = nil, nil
		l.mu.Unlock()
		if b.ctx.Err() != nil {
			c.Disconnect(250)
			return
		}
		c.Disconnect(0) // releases the client's goroutines
		b.linkDown()
	}
}

// wait waits for tok, or for the bridge to close (false).
func (l *link311) wait(tok mqtt.Token) bool {
	select {
	case <-tok.Done():
		return true
	case <-l.b.ctx.Done():
		return false
	}
}

func (l *link311) publish(ctx context.Context, m *message) (byte, error) {
	l.mu.Lock()
	c, lost := l.client, l.lost
	l.mu.Unlock()
	if c == nil {
		return 0, errLinkDown
	}
	tok := c.Publish(m.topic, m.qos, m.retain, m.payload)
	select {
	case <-tok.Done():
		return 0, tok.Error()
	case <-lost:
		return 0, errLinkDown
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// disconnect: run disconnects when the bridge's context ends, which Close
// does right after.
func (l *link311) disconnect(context.Context) {}

func (l *link311) done() <-chan struct{} { return l.doneCh }
