package broker_test

import (
	"fmt"
	"testing"

	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/broker/packet"
)

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
