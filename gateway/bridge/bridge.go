// Package bridge runs linemq's uplink bridges: each one a pair of MQTT
// clients, one inside this gateway's broker and one at a remote (site or
// cloud) broker, forwarding the topics its rules select out and in, with a
// store-and-forward queue for outbound QoS 1 messages. See docs/bridge.md.
//
// # Model
//
// The local side is an in-process client: a paho.golang client whose
// connection is a net.Pipe served by broker.Server.ServeConn, with a
// persistent session (so the broker keeps what it routed to the bridge
// across a restart) and manual acknowledgements. Its out subscriptions have
// No Local, so what the bridge publishes locally never goes back out
// through it. The remote side is a link (link.go): for MQTT 5 an autopaho
// connection manager (link5.go), for MQTT 3.1.1 a paho.mqtt.golang client
// made afresh for each connection (link311.go); both fail over between the
// addresses and reconnect with backoff.
//
// An outbound QoS 1 message takes this path:
//
//  1. The local broker routes it to the bridge's session; the publisher's
//     PUBACK waits for the session record to be on disk (the broker's own
//     rule).
//  2. The bridge writes it to its queue in the same bbolt file
//     (storage/bolt QueuePut, the same batches and group commit), waits
//     for the commit, and only then acknowledges the local delivery. At no
//     point is the message on disk nowhere.
//  3. The sender sends it to the remote and deletes it from the queue
//     when the remote's PUBACK arrives. A message sent and acknowledged
//     within one batch interval never reaches the file at all.
//
// # Order and pacing
//
// Each remote topic has its own FIFO; at most one message per topic is in
// flight, so a topic's messages reach the remote in the order they were
// published, across reconnects and restarts. Topics are served round robin,
// up to MaxInflight at once. Messages queued before the link came up are
// backlog: a token bucket paces them at DrainRate a second. Messages
// arriving while the link is up are not paced, and a topic without backlog
// never waits behind another topic's backlog, so live alarms pass hours of
// queued telemetry.
//
// # Loops
//
// With MQTT 5 every subscription on both sides has No Local, and each
// message sent out carries a user property linemq-via naming this node; a
// message coming in that already names this node is dropped (counted in
// Loops). That stops a message from going round two gateways that bridge
// the same topics to each other or through a common broker. MQTT 3.1.1 has
// neither at the remote: gateway/config refuses in and out rules
// that overlap there (the local side still has No Local).
package bridge

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/topic"
	"github.com/linemq/linemq/gateway/certs"
	"github.com/linemq/linemq/gateway/health"
)

// ViaProperty is the user property naming each node a message went out
// from, for loop prevention.
const ViaProperty = "linemq-via"

// Store is what a bridge needs of the persistence file; *bolt.Store has it.
type Store interface {
	QueuePut(queue string, seq uint64, v []byte) error
	QueueDelete(queue string, seq uint64) error
	QueueGet(queue string, seq uint64) ([]byte, error)
	QueueScan(queue string, f func(seq uint64, v []byte) error) error
	Sync(ctx context.Context) error
}

// Options are what New needs.
type Options struct {
	// Config is the bridge's configuration; New applies its defaults.
	Config Config
	// NodeID names this gateway in the linemq-via property and in the
	// default client id.
	NodeID string
	// Broker is the local broker.
	Broker *broker.Server
	// Store holds the queue.
	Store Store
	// Logger; nil discards.
	Logger *slog.Logger
	// Now is the clock for queue ages; nil is time.Now.
	Now func() time.Time
}

// Bridge is one running bridge. Its methods may be called concurrently.
type Bridge struct {
	cfg    Config
	node   string
	queue  string // the queue's name in the store
	srv    *broker.Server
	store  Store
	log    *slog.Logger
	now    func() time.Time
	out    []Rule
	in     []Rule
	tlsCfg *tls.Config

	ctx       context.Context
	cancel    context.CancelFunc
	closeOnce sync.Once
	wg        sync.WaitGroup
	wake      chan struct{}
	synced    chan *pending // entries waiting for their commit, in order

	local  *autopaho.ConnectionManager
	remote link

	mu        sync.Mutex
	ix        *index
	state     State
	since     time.Time // when state last changed
	backlog   uint64    // Seqs up to this were queued before the link came up
	tokens    float64
	tokensAt  time.Time
	inflight  int
	lastErr   string
	lastErrAt time.Time
	c         counters
	rates     rateWindow
}

// counters are the bridge's monotonic counts.
type counters struct {
	Sent, Received, Queued, Dropped, Expired, Rejected, DroppedQoS0, Loops, Retries uint64
}

// State is a bridge's link state.
type State string

// Link states.
const (
	StateConnecting State = "connecting" // never connected since start
	StateConnected  State = "connected"
	StateDown       State = "down" // was connected, lost the link
	StateStopped    State = "stopped"
)

type pending struct {
	e   *entry
	ack func() // acknowledges the local delivery
}

// New makes a bridge and loads its queue from the store; Start runs it.
func New(o Options) (*Bridge, error) {
	cfg := o.Config.WithDefaults(o.NodeID)
	b := &Bridge{
		cfg: cfg, node: o.NodeID, queue: "bridge/" + cfg.Name, srv: o.Broker, store: o.Store,
		log: o.Logger, now: o.Now, out: cfg.Out, in: cfg.In, ix: newIndex(),
		wake: make(chan struct{}, 1), synced: make(chan *pending, 4096),
		state: StateConnecting,
	}
	if b.log == nil {
		b.log = slog.New(slog.DiscardHandler)
	}
	b.log = b.log.With("bridge", cfg.Name)
	if b.now == nil {
		b.now = time.Now
	}
	b.since = b.now()
	if t := &cfg.TLS; t.Set() || anyTLS(cfg.Addresses) {
		// The remote's certificate is checked against the clock, floored at
		// this program's build: a gateway whose clock is not yet set (no
		// real-time clock, NTP not answered) is not refused its uplink.
		c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName, Time: certs.VerifyTime()}
		if t.CAFile != "" {
			pem, err := os.ReadFile(t.CAFile)
			if err != nil {
				return nil, fmt.Errorf("bridge %s: tls.ca_file: %w", cfg.Name, err)
			}
			c.RootCAs = x509.NewCertPool()
			if !c.RootCAs.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("bridge %s: tls.ca_file: %s holds no PEM certificate", cfg.Name, t.CAFile)
			}
		}
		if t.CertFile != "" {
			pair, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
			if err != nil {
				return nil, fmt.Errorf("bridge %s: tls: %w", cfg.Name, err)
			}
			c.Certificates = []tls.Certificate{pair}
			c.Time = certs.VerifyTime(pair.Leaf.NotBefore)
		}
		b.tlsCfg = c
	}
	// Rebuild the index from the file: every entry is committed.
	err := o.Store.QueueScan(b.queue, func(seq uint64, v []byte) error {
		m, err := decodeMessage(v)
		if err != nil {
			b.log.Error("dropping an unreadable queue entry", "seq", seq, "err", err)
			return o.Store.QueueDelete(b.queue, seq)
		}
		b.ix.add(&entry{seq: seq, size: len(v), at: m.at, ready: true}, m.topic)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("bridge %s: loading the queue: %w", cfg.Name, err)
	}
	if b.ix.count > 0 {
		b.log.Info("queue loaded", "messages", b.ix.count, "bytes", b.ix.bytes)
	}
	b.backlog = b.ix.last
	return b, nil
}

func anyTLS(addrs []string) bool {
	for _, a := range addrs {
		if strings.HasPrefix(a, "tls://") || strings.HasPrefix(a, "mqtts://") || strings.HasPrefix(a, "ssl://") {
			return true
		}
	}
	return false
}

// Name returns the bridge's name.
func (b *Bridge) Name() string { return b.cfg.Name }

// Start connects both sides and starts forwarding. ctx bounds nothing
// after Start returns; Close stops the bridge.
func (b *Bridge) Start() error {
	b.ctx, b.cancel = context.WithCancel(context.Background())
	var err error
	if b.local, err = autopaho.NewConnection(b.ctx, b.localConfig()); err != nil {
		b.cancel()
		return fmt.Errorf("bridge %s: local client: %w", b.cfg.Name, err)
	}
	// Outbound messages are queued before the remote is reached.
	if b.cfg.Protocol == 311 {
		b.remote, err = newLink311(b)
	} else {
		b.remote, err = newLink5(b)
	}
	if err != nil {
		b.cancel()
		<-b.local.Done()
		return fmt.Errorf("bridge %s: remote client: %w", b.cfg.Name, err)
	}
	b.wg.Add(2)
	go b.committer()
	go b.sender()
	return nil
}

// Close disconnects both sides and stops forwarding; what is queued stays
// in the store for the next start. It must be called before the broker
// shuts down and the store closes.
func (b *Bridge) Close() error {
	b.closeOnce.Do(b.close)
	return nil
}

func (b *Bridge) close() {
	if b.cancel == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if b.remote != nil {
		b.remote.disconnect(ctx)
	}
	_ = b.local.Disconnect(ctx)
	b.cancel()
	if b.remote != nil {
		<-b.remote.done()
	}
	<-b.local.Done()
	b.wg.Wait()
	b.mu.Lock()
	b.setState(StateStopped)
	b.mu.Unlock()
}

// --- the local side ---

// localAddr is the address of the bridge's in-process connection; Trusted
// recognises it.
type localAddr struct{ name string }

func (a localAddr) Network() string { return "bridge" }
func (a localAddr) String() string  { return "bridge:" + a.name }

type pipeConn struct {
	net.Conn
	addr localAddr
}

func (c pipeConn) RemoteAddr() net.Addr { return c.addr }
func (c pipeConn) LocalAddr() net.Addr  { return c.addr }

// LocalClientID is the client id of a bridge's session in the local broker.
func LocalClientID(name string) string { return "$bridge/" + name }

func (b *Bridge) localConfig() autopaho.ClientConfig {
	u, _ := url.Parse("mqtt://bridge.local")
	expiry := uint32(7 * 24 * 3600) // a week: the gateway may be off for a while
	recvMax := uint16(256)
	return autopaho.ClientConfig{
		ServerUrls:                    []*url.URL{u},
		KeepAlive:                     0,
		CleanStartOnInitialConnection: false,
		SessionExpiryInterval:         expiry,
		ReconnectBackoff:              autopaho.NewConstantBackoff(100 * time.Millisecond),
		ConnectTimeout:                5 * time.Second,
		AttemptConnection: func(ctx context.Context, _ autopaho.ClientConfig, _ *url.URL) (net.Conn, error) {
			c1, c2 := net.Pipe()
			addr := localAddr{b.cfg.Name}
			go b.srv.ServeConn(pipeConn{c2, addr})
			return packets.NewThreadSafeConn(pipeConn{c1, addr}), nil
		},
		ConnectPacketBuilder: func(c *paho.Connect, _ *url.URL) (*paho.Connect, error) {
			if c.Properties == nil {
				c.Properties = &paho.ConnectProperties{}
			}
			c.Properties.ReceiveMaximum = &recvMax
			return c, nil
		},
		OnConnectionUp: func(cm *autopaho.ConnectionManager, _ *paho.Connack) {
			if len(b.out) == 0 {
				return
			}
			s := &paho.Subscribe{}
			for _, r := range b.out {
				s.Subscriptions = append(s.Subscriptions, paho.SubscribeOptions{
					Topic: r.Filter, QoS: byte(*r.QoS), NoLocal: true, RetainAsPublished: true,
					RetainHandling: 1, // retained messages only for a new subscription, not at every restart
				})
			}
			go func() {
				if _, err := cm.Subscribe(b.ctx, s); err != nil && b.ctx.Err() == nil {
					b.fail("local subscribe", err)
				}
			}()
		},
		OnConnectError: func(err error) {
			if b.ctx.Err() == nil {
				b.fail("local connect", err)
			}
		},
		ClientConfig: paho.ClientConfig{
			ClientID:                   LocalClientID(b.cfg.Name),
			EnableManualAcknowledgment: true,
			SendAcksInterval:           5 * time.Millisecond,
			OnPublishReceived:          []func(paho.PublishReceived) (bool, error){b.fromLocal},
		},
	}
}

// fromLocal handles a message the local broker routed to the bridge: QoS 0
// goes out at once if the link is up; QoS 1 is queued, and acknowledged to
// the local broker once the queue entry is committed.
func (b *Bridge) fromLocal(pr paho.PublishReceived) (bool, error) {
	p := pr.Packet
	ack := func() { _ = pr.Client.Ack(p) }
	r := matchRule(b.out, p.Topic)
	if r == nil {
		ack()
		return true, nil
	}
	m := &message{at: b.now(), topic: r.Map(p.Topic), retain: p.Retain && *r.Retain, qos: min(p.QoS, byte(*r.QoS)), payload: p.Payload}
	if pp := p.Properties; pp != nil {
		m.ctype = pp.ContentType
		for _, u := range pp.User {
			m.user = append(m.user, [2]string{u.Key, u.Value})
		}
	}
	for _, kv := range m.user {
		if kv[0] == ViaProperty && kv[1] == b.node {
			// It went out from this node before and came back in through
			// another bridge or client: stop it here.
			b.mu.Lock()
			b.c.Loops++
			b.mu.Unlock()
			ack()
			return true, nil
		}
	}
	m.user = append(m.user, [2]string{ViaProperty, b.node})
	if m.qos == 0 {
		b.mu.Lock()
		up := b.state == StateConnected
		if !up {
			b.c.DroppedQoS0++
		}
		b.mu.Unlock()
		if up {
			if _, err := b.remote.publish(b.ctx, m); err != nil {
				b.mu.Lock()
				b.c.DroppedQoS0++
				b.mu.Unlock()
			} else {
				b.mu.Lock()
				b.c.Sent++
				b.mu.Unlock()
			}
		}
		ack()
		return true, nil
	}
	v := m.encode(nil)
	b.mu.Lock()
	b.ix.last++
	e := &entry{seq: b.ix.last, size: len(v), at: m.at}
	err := b.store.QueuePut(b.queue, e.seq, v)
	if err == nil {
		b.ix.add(e, m.topic)
		b.c.Queued++
		b.enforceLocked()
	}
	b.mu.Unlock()
	if err != nil {
		// Not acknowledged: the local broker keeps it and resends it when
		// the bridge reconnects.
		b.fail("queue", err)
		return true, nil
	}
	select {
	case b.synced <- &pending{e: e, ack: ack}:
	case <-b.ctx.Done():
	}
	return true, nil
}

// committer waits for queued entries to be committed, a group at a time,
// then acknowledges them to the local broker (in order) and lets the
// sender have them.
func (b *Bridge) committer() {
	defer b.wg.Done()
	var group []*pending
	for {
		select {
		case p := <-b.synced:
			group = append(group[:0], p)
		case <-b.ctx.Done():
			return
		}
	more:
		for {
			select {
			case p := <-b.synced:
				group = append(group, p)
			default:
				break more
			}
		}
		for {
			err := b.store.Sync(b.ctx)
			if err == nil {
				break
			}
			if b.ctx.Err() != nil {
				return
			}
			b.fail("queue commit", err)
			select {
			case <-time.After(time.Second):
			case <-b.ctx.Done():
				return
			}
		}
		b.mu.Lock()
		for _, p := range group {
			p.e.ready = true
		}
		b.mu.Unlock()
		for _, p := range group {
			p.ack()
		}
		b.poke()
	}
}

// enforceLocked drops the oldest entries beyond the byte bound and those
// older than the age bound.
func (b *Bridge) enforceLocked() {
	for b.ix.bytes > int64(b.cfg.Queue.MaxBytes) {
		e := b.ix.oldest()
		if e == nil {
			break
		}
		b.dropLocked(e)
		b.c.Dropped++
	}
	if b.cfg.Queue.MaxAge > 0 {
		cut := b.now().Add(-time.Duration(b.cfg.Queue.MaxAge))
		for {
			e := b.ix.oldest()
			if e == nil || !e.at.Before(cut) {
				break
			}
			b.dropLocked(e)
			b.c.Expired++
		}
	}
}

func (b *Bridge) dropLocked(e *entry) {
	b.ix.remove(e)
	if err := b.store.QueueDelete(b.queue, e.seq); err != nil {
		b.failLocked("queue delete", err)
	}
}

// --- the remote side ---

// linkUp records that the link is up: what is queued now is backlog.
func (b *Bridge) linkUp(sessionPresent bool) {
	b.mu.Lock()
	b.backlog = b.ix.last
	b.tokens, b.tokensAt = 0, b.now()
	b.setState(StateConnected)
	b.mu.Unlock()
	b.log.Info("connected to the remote", "session_present", sessionPresent)
	b.poke()
}

// linkDown records that the link went down.
func (b *Bridge) linkDown() {
	b.mu.Lock()
	if b.state == StateConnected {
		b.setState(StateDown)
	}
	b.mu.Unlock()
	b.log.Warn("lost the remote")
}

// fromRemote handles a message from the remote: loops are dropped, the
// rest published locally. It returns once the local broker has
// acknowledged a QoS 1 message (it is then on disk for every persistent
// local subscriber) or the bridge is closing; the link acknowledges it to
// the remote after that.
func (b *Bridge) fromRemote(p *paho.Publish) {
	r := matchRule(b.in, p.Topic)
	if r == nil {
		return
	}
	lp := &paho.Publish{Topic: r.Map(p.Topic), QoS: min(p.QoS, byte(*r.QoS)), Retain: p.Retain && *r.Retain, Payload: p.Payload}
	if pp := p.Properties; pp != nil {
		for _, u := range pp.User {
			if u.Key == ViaProperty && u.Value == b.node {
				b.mu.Lock()
				b.c.Loops++
				b.mu.Unlock()
				return
			}
		}
		lp.Properties = &paho.PublishProperties{ContentType: pp.ContentType, User: pp.User, CorrelationData: pp.CorrelationData,
			ResponseTopic: pp.ResponseTopic, PayloadFormat: pp.PayloadFormat, MessageExpiry: pp.MessageExpiry}
	}
	for {
		_, err := b.local.Publish(b.ctx, lp)
		if err == nil {
			b.mu.Lock()
			b.c.Received++
			b.mu.Unlock()
			return
		}
		if b.ctx.Err() != nil {
			return
		}
		// The local broker refused it (0x97 while its disk fails, say):
		// retry, holding the remote's acknowledgement back.
		b.fail("local publish", err)
		select {
		case <-time.After(time.Second):
		case <-b.ctx.Done():
			return
		}
	}
}

// sender sends queued messages while the link is up: round robin over the
// topics, one in flight per topic, MaxInflight in all, backlog paced.
func (b *Bridge) sender() {
	defer b.wg.Done()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	sample := b.now()
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-b.wake:
		case <-tick.C:
		}
		b.mu.Lock()
		now := b.now()
		if now.Sub(sample) >= time.Second {
			sample = now
			b.rates.add(now, b.c.Sent, b.c.Received)
			b.enforceLocked()
		}
		if b.state == StateConnected {
			b.refillLocked(now)
			for b.inflight < int(b.cfg.MaxInflight) {
				e := b.ix.next(b.backlog, b.takeToken)
				if e == nil {
					break
				}
				e.inflight = true
				b.inflight++
				b.wg.Add(1)
				go b.send(e)
			}
		}
		b.mu.Unlock()
	}
}

func (b *Bridge) refillLocked(now time.Time) {
	if b.cfg.DrainRate < 0 {
		return
	}
	rate := float64(b.cfg.DrainRate)
	burst := max(1, rate/10) // a tenth of a second's worth
	b.tokens = min(burst, b.tokens+now.Sub(b.tokensAt).Seconds()*rate)
	b.tokensAt = now
}

// takeToken spends a backlog token, if one is left (always, unlimited).
func (b *Bridge) takeToken() bool {
	if b.cfg.DrainRate < 0 {
		return true
	}
	if b.tokens >= 1 {
		b.tokens--
		return true
	}
	return false
}

// send sends one queued message and waits for the remote's PUBACK.
func (b *Bridge) send(e *entry) {
	defer b.wg.Done()
	defer b.poke()
	v, err := b.store.QueueGet(b.queue, e.seq)
	var m *message
	if err == nil && v != nil {
		m, err = decodeMessage(v)
	}
	b.mu.Lock()
	if err != nil || v == nil {
		// Unreadable, or deleted meanwhile: nothing to send.
		if err != nil {
			b.failLocked("queue read", err)
		}
		e.inflight = false
		b.inflight--
		b.dropLocked(e)
		b.mu.Unlock()
		return
	}
	b.mu.Unlock()

	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	rc, err := b.remote.publish(ctx, m)
	cancel()

	b.mu.Lock()
	defer b.mu.Unlock()
	e.inflight = false
	b.inflight--
	switch {
	case err == nil:
		b.c.Sent++
		b.dropLocked(e)
	case permanent(rc):
		// The remote will never take it (not authorised, bad topic, too
		// large): dropped and counted rather than blocking its topic.
		b.c.Rejected++
		b.failLocked("remote refused "+m.topic, err)
		b.dropLocked(e)
	default:
		// The link broke or the remote is busy: the message stays at the
		// head of its topic and goes again.
		b.c.Retries++
		if b.ctx.Err() == nil {
			b.failLocked("publish", err)
		}
	}
}

// permanent reports PUBACK reason codes a resend cannot fix.
func permanent(rc byte) bool {
	switch rc {
	case 0x87, 0x90, 0x95, 0x99: // not authorized, topic name invalid, packet too large, payload format invalid
		return true
	}
	return false
}

// matchRule returns the first rule whose filter matches t.
func matchRule(rs []Rule, t string) *Rule {
	for i := range rs {
		if topic.Match(rs[i].Filter, t) {
			return &rs[i]
		}
	}
	return nil
}

func (b *Bridge) poke() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

func (b *Bridge) setState(s State) {
	if b.state != s {
		b.state, b.since = s, b.now()
	}
}

func (b *Bridge) fail(what string, err error) {
	b.mu.Lock()
	b.failLocked(what, err)
	b.mu.Unlock()
}

func (b *Bridge) failLocked(what string, err error) {
	msg := what
	if err != nil {
		msg += ": " + err.Error()
	}
	if msg != b.lastErr {
		b.log.Warn("bridge", "err", msg)
	}
	b.lastErr, b.lastErrAt = msg, b.now()
}

// --- status ---

// Stats is a snapshot of a bridge, for the status page and metrics.
type Stats struct {
	Name    string    `json:"name"`
	State   State     `json:"state"`
	Since   time.Time `json:"since"` // when State last changed
	Remote  []string  `json:"remote"`
	Version int       `json:"protocol"`

	Queued      int           `json:"queued"`       // messages in the queue (depth)
	QueuedBytes int64         `json:"queued_bytes"` // their bytes as stored
	OldestAge   time.Duration `json:"oldest_age"`   // age of the oldest queued message
	Inflight    int           `json:"inflight"`     // sent, PUBACK awaited

	Sent        uint64 `json:"sent"`         // messages the remote acknowledged (QoS 1) or was sent (QoS 0)
	Received    uint64 `json:"received"`     // messages from the remote published locally
	Enqueued    uint64 `json:"enqueued"`     // QoS 1 messages queued
	Dropped     uint64 `json:"dropped"`      // oldest dropped at queue.max_bytes
	Expired     uint64 `json:"expired"`      // dropped at queue.max_age
	Rejected    uint64 `json:"rejected"`     // refused by the remote for good (0x87, 0x90, 0x95, 0x99)
	DroppedQoS0 uint64 `json:"dropped_qos0"` // QoS 0 messages while the link was down
	Loops       uint64 `json:"loops"`        // incoming messages that had been out from this node
	Retries     uint64 `json:"retries"`      // sends that failed and will be repeated

	SentRate     float64 `json:"sent_rate"`     // messages a second, over the last 10 s
	ReceivedRate float64 `json:"received_rate"` // messages a second, over the last 10 s

	LastError   string    `json:"last_error,omitempty"`
	LastErrorAt time.Time `json:"last_error_at,omitzero"`
}

// Stats returns the bridge's state and counters.
func (b *Bridge) Stats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	s := Stats{
		Name: b.cfg.Name, State: b.state, Since: b.since, Remote: b.cfg.Addresses, Version: b.cfg.Protocol,
		Queued: b.ix.count, QueuedBytes: b.ix.bytes, Inflight: b.inflight,
		Sent: b.c.Sent, Received: b.c.Received, Enqueued: b.c.Queued, Dropped: b.c.Dropped, Expired: b.c.Expired,
		Rejected: b.c.Rejected, DroppedQoS0: b.c.DroppedQoS0, Loops: b.c.Loops, Retries: b.c.Retries,
		LastError: b.lastErr, LastErrorAt: b.lastErrAt,
	}
	if at := b.ix.oldestAt(); !at.IsZero() {
		s.OldestAge = now.Sub(at)
	}
	s.SentRate, s.ReceivedRate = b.rates.rates(now, b.c.Sent, b.c.Received)
	return s
}

// Check is the bridge's health check: degraded while the link is down (the
// gateway works on, queueing), with the queue's depth and the last error.
func (b *Bridge) Check(context.Context) error {
	s := b.Stats()
	if s.State == StateConnected {
		return nil
	}
	msg := fmt.Sprintf("%s since %s, %d queued", s.State, s.Since.Format(time.RFC3339), s.Queued)
	if s.LastError != "" {
		msg += ", last error: " + s.LastError
	}
	return health.Degrade(errors.New(msg))
}

// rateWindow keeps a sample a second of the counters, for rates over the
// last ten seconds.
type rateWindow struct {
	at         [11]time.Time
	sent, recv [11]uint64
	n, i       int
}

func (w *rateWindow) add(at time.Time, sent, recv uint64) {
	w.at[w.i], w.sent[w.i], w.recv[w.i] = at, sent, recv
	w.i = (w.i + 1) % len(w.at)
	w.n = min(w.n+1, len(w.at))
}

func (w *rateWindow) rates(now time.Time, sent, recv uint64) (float64, float64) {
	if w.n == 0 {
		return 0, 0
	}
	old := (w.i - w.n + len(w.at)) % len(w.at)
	d := now.Sub(w.at[old]).Seconds()
	if d <= 0 {
		return 0, 0
	}
	return float64(sent-w.sent[old]) / d, float64(recv-w.recv[old]) / d
}
