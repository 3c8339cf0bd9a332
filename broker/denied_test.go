package broker_test

import (
	"testing"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/broker/packet"
)

// noSubscribe refuses subscriptions to test/nosubscribe, as the Paho
// interoperability suites expect.
type noSubscribe struct{ broker.AllowAll }

func (noSubscribe) CanSubscribe(_ broker.ClientInfo, filter string) bool {
	return filter != "test/nosubscribe"
}

// TestDeniedSubscriptionReason: a refused filter gets 0x87 in MQTT 5 by
// default, 0x80 when DeniedSubscriptionReason says so, and 0x80 in 3.1.1
// either way.
func TestDeniedSubscriptionReason(t *testing.T) {
	for _, tc := range []struct {
		opt  packet.ReasonCode
		v    packet.Version
		want packet.ReasonCode
	}{
		{0, packet.V5, packet.NotAuthorized},
		{packet.UnspecifiedError, packet.V5, packet.UnspecifiedError},
		{0, packet.V311, packet.UnspecifiedError},
	} {
		_, addr := brokertest.RunServer(t, broker.Options{Auth: noSubscribe{}, DeniedSubscriptionReason: tc.opt})
		c, _ := brokertest.Connect(t, addr, &packet.Connect{Version: tc.v, ClientID: []byte("c"), CleanStart: true})
		sa := c.Subscribe(&packet.Subscribe{Subs: []packet.Subscription{{Filter: []byte("test/nosubscribe"), QoS: 1}, {Filter: []byte("test/ok"), QoS: 1}}})
		if len(sa.Reasons) != 2 || sa.Reasons[0] != tc.want || sa.Reasons[1] != packet.GrantedQoS1 {
			t.Errorf("option 0x%02X, v%d: SUBACK %v, want [%v granted 1]", byte(tc.opt), tc.v, sa.Reasons, tc.want)
		}
	}
	if err := (&broker.Options{DeniedSubscriptionReason: packet.QuotaExceeded}).Validate(); err == nil {
		t.Error("DeniedSubscriptionReason 0x97 accepted")
	}
}
