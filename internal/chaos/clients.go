package chaos

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/linemq/linemq/broker/packet"
)

// addrBook tells clients where the nodes' MQTT listeners are: "" for a
// node not running (a client would find its connection refused; asking
// saves it the wait).
type addrBook interface {
	mqttAddr(i int) string
}

// moveCmd asks a subscriber to take its session to node to.
type moveCmd struct {
	to            int
	from          int  // set by the subscriber: the node it left
	abrupt        bool // leave the old connection open
	expectPresent bool // both nodes are healthy: Session Present must be 1
	done          chan struct{}
}

// subscriber is one persistent QoS 1 subscriber of one kind, homed on a
// node, reconnecting wherever it can when its node goes away.
type subscriber struct {
	kind   SubKind
	client string
	rec    *Record
	reg    *connSet
	book   addrBook
	moves  chan moveCmd

	mu   sync.Mutex
	home int // the node it connects to first
	at   int // the node of its latest connection, -1 before the first
}

func (s *subscriber) homeNode() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.home
}

// node returns the node of its latest connection (its home before the
// first): a share-group member may have gone elsewhere when its home was
// away.
func (s *subscriber) node() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.at < 0 {
		return s.home
	}
	return s.at
}

// run keeps the subscriber connected until ctx ends.
func (s *subscriber) run(ctx context.Context) {
	var pending *moveCmd // a move under way: its CONNACK is checked
	avoid := -1
	for ctx.Err() == nil {
		c, present := s.connect(ctx, avoid)
		if c == nil {
			return // ctx ended
		}
		avoid = -1
		s.mu.Lock()
		s.at = c.node
		s.mu.Unlock()
		if pending != nil {
			s.rec.moved(MoveResult{Client: s.client, From: pending.from, To: pending.to, Node: c.node,
				At: time.Now(), SessionPresent: present, ExpectPresent: pending.expectPresent})
			close(pending.done)
			pending = nil
		}
		if !present && !s.subscribe(c) {
			c.close("no SUBACK")
			continue
		}
		if cmd := s.serve(ctx, c); cmd != nil {
			s.mu.Lock()
			s.home = cmd.to
			s.mu.Unlock()
			pending, avoid = cmd, cmd.from
		}
	}
	if pending != nil {
		close(pending.done)
	}
}

// connect tries the nodes in turn, home first, skipping avoid, until one
// accepts or ctx ends; an ordinary subscriber tries its home node only.
func (s *subscriber) connect(ctx context.Context, avoid int) (*mconn, bool) {
	for ctx.Err() == nil {
		home := s.homeNode()
		tries := 3
		if s.kind.Need == EverySubscriber {
			tries = 1 // an ordinary subscriber waits for its node (Plain)
		}
		for k := range tries {
			n := (home + k) % 3
			addr := s.book.mqttAddr(n)
			if n == avoid || addr == "" {
				continue
			}
			res, err := dial(ctx, s.rec, s.reg, addr, n, s.client, s.kind.Name, false, 3600)
			if err == nil && res.c != nil {
				return res.c, res.present
			}
		}
		// Every node refused or is away: a short pause, then again.
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
	return nil, false
}

// subscribe subscribes the kind's filter on a new session.
func (s *subscriber) subscribe(c *mconn) bool {
	sub := packet.Subscribe{PacketID: 1, Subs: []packet.Subscription{{Filter: []byte(s.kind.Filter), QoS: 1}}}
	if c.write(sub.Append(nil, packet.V5)) != nil {
		return false
	}
	p, err := c.waitCtl(packet.SUBACK, 1, 5*time.Second)
	if err != nil {
		return false
	}
	var sa packet.Suback
	return sa.Decode(packet.V5, p.body) == nil && len(sa.Reasons) == 1 && sa.Reasons[0] == packet.GrantedQoS1
}

// serve keeps the connection alive with pings until it closes, goes
// silent, or a move is asked for; it returns the move, if that was why.
func (s *subscriber) serve(ctx context.Context, c *mconn) *moveCmd {
	tick := time.NewTicker(pingEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-c.done:
			return nil
		case cmd := <-s.moves:
			if cmd.abrupt {
				c.abandon()
			} else {
				c.write((&packet.Disconnect{Reason: packet.NormalDisconnection}).Append(nil, packet.V5))
				c.close("DISCONNECT to move")
			}
			cmd.from = c.node
			return &cmd
		case <-tick.C:
			if c.silent(silenceBound) {
				// A frozen node: the client gives up on it but the
				// connection stays open and read (see mconn).
				c.abandon()
				return nil
			}
			c.write(packet.AppendPingreq(nil))
		}
	}
}

// publisher sends numbered QoS 1 messages to its node, one in flight at a
// time, reconnecting (clean start) when its node goes away.
type publisher struct {
	tag   string
	node  int
	rec   *Record
	reg   *connSet
	book  addrBook
	every time.Duration // pause between publishes
}

// run publishes until stop is closed; ctx ends everything at once.
func (p *publisher) run(ctx context.Context, stop <-chan struct{}) {
	topic := []byte(fmt.Sprintf("%s/%s", topicRoot, p.tag))
	client := "pub-" + p.tag
	var seq uint64
	for {
		var c *mconn
		for c == nil {
			select {
			case <-stop:
				return
			case <-ctx.Done():
				return
			default:
			}
			for k := range 3 {
				n := (p.node + k) % 3
				if addr := p.book.mqttAddr(n); addr != "" {
					if res, err := dial(ctx, p.rec, p.reg, addr, n, client, "pub", true, 0); err == nil && res.c != nil {
						c = res.c
						break
					}
				}
			}
			if c == nil {
				select {
				case <-ctx.Done():
				case <-time.After(250 * time.Millisecond):
				}
			}
		}
		for alive := true; alive; {
			select {
			case <-stop:
				c.write((&packet.Disconnect{Reason: packet.NormalDisconnection}).Append(nil, packet.V5))
				c.close("DISCONNECT at the end")
				return
			case <-ctx.Done():
				return
			case <-time.After(p.every):
			}
			seq++
			id := uint16(seq%65535 + 1)
			pub := packet.Publish{Topic: topic, QoS: 1, PacketID: id, Payload: fmt.Appendf(nil, "%s/%d", p.tag, seq)}
			i := p.rec.publish(Publish{Msg: Msg{Pub: p.tag, Seq: seq}, Node: c.node, Sent: time.Now()})
			if c.write(pub.Append(nil, packet.V5)) != nil {
				c.close("write failed")
				break
			}
			ack, err := c.waitCtl(packet.PUBACK, id, pubackTimeout)
			switch err {
			case nil:
				var a packet.Ack
				if a.Decode(packet.V5, packet.PUBACK, ack.body) == nil {
					p.rec.ack(i, a.Reason, time.Now())
				}
			case errTimeout:
				c.close("no PUBACK within " + pubackTimeout.String())
				alive = false
			default:
				alive = false
			}
		}
	}
}
