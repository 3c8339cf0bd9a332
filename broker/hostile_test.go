package broker_test

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/broker/packet"
)

// alive reports whether the broker still serves c: a PINGREQ is answered
// (true) or the connection ends (false). Whatever the broker sent before
// (CONNACK, PUBLISH, DISCONNECT 0x8E) is skipped. A connection that neither
// answers nor closes within 5 s fails the test: that is a broken session.
func alive(t *testing.T, c *brokertest.Client) bool {
	t.Helper()
	c.Conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Conn.Write(packet.AppendPingreq(nil)); err != nil {
		return false
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		h, _, err := c.Read(time.Until(deadline))
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatal("a connection neither answers PINGREQ nor closes")
			}
			return false
		}
		if h.Type == packet.PINGRESP {
			return true
		}
	}
}

// TestTakeoverRaceOneConnectionPerID sends several CONNECTs with one client
// id at the same moment, at a client that holds 1,000 subscriptions, and
// asserts that exactly one connection survives [MQTT-3.1.4-3]: the others
// are closed, none is left open and deaf.
func TestTakeoverRaceOneConnectionPerID(t *testing.T) {
	for _, tc := range []struct {
		name  string
		v     packet.Version
		clean bool
	}{
		{"v311-clean", packet.V311, true},
		{"v5-resume", packet.V5, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, addr := brokertest.RunServer(t, broker.Options{})
			const rounds, racers = 40, 3
			subs := make([]packet.Subscription, 1000)
			for i := range subs {
				subs[i] = packet.Subscription{Filter: fmt.Appendf(nil, "race/%d/+", i), QoS: 1}
			}
			for round := range rounds {
				id := fmt.Sprintf("dup-%s-%d", tc.name, round)
				cp := &packet.Connect{Version: tc.v, ClientID: []byte(id), CleanStart: tc.clean, KeepAlive: 60}
				if tc.v >= packet.V5 {
					withExpiry(cp, 60)
				}
				holder, _ := brokertest.Connect(t, addr, cp)
				holder.Subscribe(&packet.Subscribe{PacketID: 1, Subs: subs})

				connects := srv.Stats().Connects
				clients := []*brokertest.Client{holder}
				var start, ready sync.WaitGroup
				start.Add(1)
				for range racers {
					c := brokertest.Dial(t, addr, tc.v)
					clients = append(clients, c)
					ready.Add(1)
					go func() {
						defer ready.Done()
						frame := (&packet.Connect{Version: tc.v, ProtocolName: []byte("MQTT"), ClientID: []byte(id),
							CleanStart: tc.clean, KeepAlive: 60, Props: cp.Props}).Append(nil)
						start.Wait()
						c.Conn.Write(frame)
					}()
				}
				start.Done()
				ready.Wait()
				// Every racer's CONNECT is accepted (each takes the session
				// over from the one before); then one connection is left.
				brokertest.Eventually(t, 10*time.Second, "every CONNECT handled, one connection left", func() bool {
					st := srv.Stats()
					return st.Connects == connects+racers && st.ClientsConnected == 1
				})
				open := 0
				for _, c := range clients {
					if alive(t, c) {
						open++
					}
				}
				if open != 1 {
					t.Fatalf("round %d: %d connections open for client id %q, want exactly 1", round, open, id)
				}
				for _, c := range clients {
					c.Conn.Close()
				}
				brokertest.Eventually(t, 10*time.Second, "round torn down", func() bool {
					return srv.Stats().ClientsConnected == 0
				})
			}
		})
	}
}
