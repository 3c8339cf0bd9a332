package broker_test

import (
	"testing"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/broker/packet"
)

func TestRawSmoke(t *testing.T) {
	_, addr := brokertest.RunServer(t, broker.Options{})
	sub, ack := brokertest.Connect(t, addr, &packet.Connect{ClientID: []byte("sub"), CleanStart: true})
	if ack.Reason != packet.Success {
		t.Fatalf("connack %v", ack.Reason)
	}
	sa := sub.Subscribe(&packet.Subscribe{Subs: []packet.Subscription{{Filter: []byte("a/+"), QoS: 1}}})
	if len(sa.Reasons) != 1 || sa.Reasons[0] != packet.GrantedQoS1 {
		t.Fatalf("suback %v", sa.Reasons)
	}
	pub, _ := brokertest.Connect(t, addr, &packet.Connect{ClientID: []byte("pub"), CleanStart: true})
	pub.Publish(&packet.Publish{Topic: []byte("a/b"), QoS: 1, PacketID: 7, Payload: []byte("hello")})
	var pa packet.Ack
	pub.Expect(packet.PUBACK, &pa)
	if pa.PacketID != 7 || pa.Reason != packet.Success {
		t.Fatalf("puback %+v", pa)
	}
	var p packet.Publish
	sub.Expect(packet.PUBLISH, &p)
	if string(p.Topic) != "a/b" || string(p.Payload) != "hello" || p.QoS != 1 {
		t.Fatalf("got %+v", p)
	}
}
