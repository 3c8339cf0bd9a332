package packet_test

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/linemq/linemq/broker/packet"
)

func bs(s string) []byte { return []byte(s) }

// present marks ids as present in p, as a decoder would, and returns it.
func present(p packet.Properties, ids ...packet.PropID) packet.Properties {
	for _, id := range ids {
		p.Set(id)
	}
	return p
}

func user(kv ...string) []packet.UserProperty {
	var u []packet.UserProperty
	for i := 0; i+1 < len(kv); i += 2 {
		u = append(u, packet.UserProperty{Key: bs(kv[i]), Value: bs(kv[i+1])})
	}
	return u
}

// roundTripV311 and roundTripV5 are packets as a decoder of that version
// produces them: encoding and decoding one must give it back unchanged.
var roundTripV311 = []any{
	&packet.Connect{ProtocolName: bs("MQTT"), Version: packet.V311, CleanStart: true, KeepAlive: 60, ClientID: bs("client-1")},
	&packet.Connect{ProtocolName: bs("MQIsdp"), Version: packet.V31, KeepAlive: 1, ClientID: bs("old"),
		WillFlag: true, WillQoS: 2, WillRetain: true, WillTopic: bs("lwt"), WillPayload: bs("\x00dead"),
		UsernameFlag: true, Username: bs("ü"), PasswordFlag: true, Password: bs("\xff")},
	&packet.Connect{ProtocolName: bs("MQTT"), Version: packet.V311, UsernameFlag: true, Username: bs(""), PasswordFlag: true, Password: bs("")},
	&packet.Connack{SessionPresent: true, Reason: packet.Success},
	&packet.Connack{Reason: packet.UnsupportedProtocolVersion},
	&packet.Connack{Reason: packet.ClientIDNotValid},
	&packet.Connack{Reason: packet.ServerUnavailable},
	&packet.Connack{Reason: packet.BadUsernameOrPassword},
	&packet.Connack{Reason: packet.NotAuthorized},
	&packet.Publish{Topic: bs("a/b"), Payload: bs("x")},
	&packet.Publish{Retain: true, Topic: bs("a"), Payload: nil},
	&packet.Publish{QoS: 1, Topic: bs("t"), PacketID: 1, Payload: bytes.Repeat(bs("p"), 300)},
	&packet.Publish{Dup: true, QoS: 2, Retain: true, Topic: bs("$SYS/x"), PacketID: 65535, Payload: bs("\x00")},
	&packet.Ack{Type: packet.PUBACK, PacketID: 1},
	&packet.Ack{Type: packet.PUBREC, PacketID: 2},
	&packet.Ack{Type: packet.PUBREL, PacketID: 3},
	&packet.Ack{Type: packet.PUBCOMP, PacketID: 4},
	&packet.Subscribe{PacketID: 9, Subs: []packet.Subscription{{Filter: bs("a/#"), QoS: 2}, {Filter: bs("+/b"), QoS: 0}}},
	&packet.Suback{PacketID: 9, Reasons: []packet.ReasonCode{packet.GrantedQoS2, packet.GrantedQoS0, packet.UnspecifiedError}},
	&packet.Unsubscribe{PacketID: 10, Filters: [][]byte{bs("a/#"), bs("x")}},
	&packet.Unsuback{PacketID: 10},
	&packet.Disconnect{},
	ptr(packet.PINGREQ),
	ptr(packet.PINGRESP),
}

func ptr(t packet.Type) *packet.Type { return &t }

var roundTripV5 = []any{
	&packet.Connect{ProtocolName: bs("MQTT"), Version: packet.V5, CleanStart: true, KeepAlive: 30, ClientID: bs(""),
		Props: present(packet.Properties{SessionExpiry: 0xFFFFFFFF, ReceiveMaximum: 10, MaximumPacketSize: 1 << 20,
			TopicAliasMaximum: 5, RequestResponseInfo: 1, RequestProblemInfo: 0, AuthMethod: bs("x"), AuthData: bs("\x00"),
			User: user("a", "1", "a", "2")},
			packet.PropSessionExpiry, packet.PropReceiveMaximum, packet.PropMaximumPacketSize, packet.PropTopicAliasMaximum,
			packet.PropRequestResponseInfo, packet.PropRequestProblemInfo, packet.PropAuthMethod, packet.PropAuthData, packet.PropUser),
		WillFlag: true, WillQoS: 1, WillTopic: bs("will"), WillPayload: bs("gone"),
		WillProps: present(packet.Properties{WillDelay: 10, PayloadFormat: 1, MessageExpiry: 60, ContentType: bs("t"),
			ResponseTopic: bs("r"), CorrelationData: bs("c"), User: user("k", "v")},
			packet.PropWillDelay, packet.PropPayloadFormat, packet.PropMessageExpiry, packet.PropContentType,
			packet.PropResponseTopic, packet.PropCorrelationData, packet.PropUser),
		PasswordFlag: true, Password: bs("secret")},
	&packet.Connack{Reason: packet.Success},
	&packet.Connack{SessionPresent: true, Reason: packet.Success,
		Props: present(packet.Properties{AssignedClientID: bs("auto-1"), ServerKeepAlive: 20, MaximumQoS: 1,
			RetainAvailable: 0, WildcardSubAvailable: 1, SubIDAvailable: 1, SharedSubAvailable: 0, TopicAliasMaximum: 16,
			ReceiveMaximum: 100, MaximumPacketSize: 65536, ResponseInfo: bs("resp/"), ReasonString: bs("welcome")},
			packet.PropAssignedClientID, packet.PropServerKeepAlive, packet.PropMaximumQoS, packet.PropRetainAvailable,
			packet.PropWildcardSubAvailable, packet.PropSubIDAvailable, packet.PropSharedSubAvailable,
			packet.PropTopicAliasMaximum, packet.PropReceiveMaximum, packet.PropMaximumPacketSize,
			packet.PropResponseInfo, packet.PropReasonString)},
	&packet.Connack{Reason: packet.ServerMoved, Props: present(packet.Properties{ServerReference: bs("other:1883")}, packet.PropServerReference)},
	&packet.Publish{Topic: bs("a/b"), Payload: bs("x")},
	&packet.Publish{QoS: 1, PacketID: 7, Topic: bs(""), Payload: bytes.Repeat(bs("p"), 300),
		Props: present(packet.Properties{TopicAlias: 3, MessageExpiry: 5, SubscriptionIDs: []uint32{1, 268_435_455, 1},
			User: user("z", "", "", "y")},
			packet.PropTopicAlias, packet.PropMessageExpiry, packet.PropSubscriptionID, packet.PropUser)},
	&packet.Publish{QoS: 2, PacketID: 8, Retain: true, Topic: bs("t"),
		Props: present(packet.Properties{PayloadFormat: 0, ContentType: bs(""), ResponseTopic: bs("r/1"), CorrelationData: bs("")},
			packet.PropPayloadFormat, packet.PropContentType, packet.PropResponseTopic, packet.PropCorrelationData)},
	&packet.Ack{Type: packet.PUBACK, PacketID: 1},
	&packet.Ack{Type: packet.PUBACK, PacketID: 1, Reason: packet.NoMatchingSubscribers},
	&packet.Ack{Type: packet.PUBREC, PacketID: 2, Reason: packet.QuotaExceeded,
		Props: present(packet.Properties{ReasonString: bs("full"), User: user("k", "v")}, packet.PropReasonString, packet.PropUser)},
	&packet.Ack{Type: packet.PUBREL, PacketID: 3, Reason: packet.PacketIDNotFound},
	&packet.Ack{Type: packet.PUBCOMP, PacketID: 4, Props: present(packet.Properties{ReasonString: bs("")}, packet.PropReasonString)},
	&packet.Subscribe{PacketID: 9, Props: present(packet.Properties{SubscriptionIDs: []uint32{99}, User: user("u", "v")},
		packet.PropSubscriptionID, packet.PropUser),
		Subs: []packet.Subscription{
			{Filter: bs("a/#"), QoS: 2, NoLocal: true, RetainAsPublished: true, RetainHandling: 2},
			{Filter: bs("$share/g/x"), QoS: 1, RetainHandling: 1},
		}},
	&packet.Suback{PacketID: 9, Props: present(packet.Properties{ReasonString: bs("r")}, packet.PropReasonString),
		Reasons: []packet.ReasonCode{packet.GrantedQoS1, packet.SharedSubsNotSupported, packet.WildcardSubsNotSupported}},
	&packet.Unsubscribe{PacketID: 10, Props: present(packet.Properties{User: user("a", "b")}, packet.PropUser), Filters: [][]byte{bs("a/#")}},
	&packet.Unsuback{PacketID: 10, Reasons: []packet.ReasonCode{packet.Success, packet.NoSubscriptionExisted}},
	&packet.Disconnect{},
	&packet.Disconnect{Reason: packet.DisconnectWithWill},
	&packet.Disconnect{Reason: packet.ServerShuttingDown, Props: present(packet.Properties{SessionExpiry: 0, ReasonString: bs("bye"),
		ServerReference: bs("s"), User: user("k", "v")}, packet.PropSessionExpiry, packet.PropReasonString, packet.PropServerReference, packet.PropUser)},
	&packet.Disconnect{Props: present(packet.Properties{ReasonString: bs("normal")}, packet.PropReasonString)},
	&packet.Auth{},
	&packet.Auth{Reason: packet.ContinueAuthentication, Props: present(packet.Properties{AuthMethod: bs("SCRAM-SHA-1"), AuthData: bs("\x01\x02")},
		packet.PropAuthMethod, packet.PropAuthData)},
	ptr(packet.PINGREQ),
	ptr(packet.PINGRESP),
}

func TestRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		v       packet.Version
		packets []any
	}{{packet.V311, roundTripV311}, {packet.V5, roundTripV5}} {
		for i, p := range tc.packets {
			t.Run(fmt.Sprintf("v%d/%d/%s", tc.v, i, dumpPacket(p)[:min(20, len(dumpPacket(p)))]), func(t *testing.T) {
				wire := encodePacket(nil, tc.v, p)
				got, err := roundTrip(tc.v, wire)
				if err != nil {
					t.Fatalf("decode(% x): %v", wire, err)
				}
				if !equalPackets(p, got) {
					t.Fatalf("round trip changed the packet\n  in: %s\n out: %s\nwire: % x", dumpPacket(p), dumpPacket(got), wire)
				}
				// Appending after existing bytes leaves them alone.
				prefixed := encodePacket([]byte("xy"), tc.v, p)
				if string(prefixed[:2]) != "xy" || !bytes.Equal(prefixed[2:], wire) {
					t.Fatalf("append to a non-empty slice: % x", prefixed)
				}
			})
		}
	}
}

// TestEncodeDowngrade checks what a v5 value loses when written for 3.1.1.
func TestEncodeDowngrade(t *testing.T) {
	props := present(packet.Properties{ReasonString: bs("r"), User: user("k", "v")}, packet.PropReasonString)
	tests := []struct {
		name string
		p    any
		want string // hex
	}{
		{"connack banned -> not authorized", &packet.Connack{Reason: packet.Banned, Props: props}, "20 02 00 05"},
		{"connack busy -> server unavailable", &packet.Connack{Reason: packet.ServerBusy}, "20 02 00 03"},
		{"connack bad auth method -> not authorized", &packet.Connack{Reason: packet.BadAuthenticationMethod}, "20 02 00 05"},
		{"suback failures -> 0x80", &packet.Suback{PacketID: 1, Props: props,
			Reasons: []packet.ReasonCode{packet.GrantedQoS1, packet.NotAuthorized, packet.QuotaExceeded}}, "90 05 00 01 01 80 80"},
		{"unsuback no reasons", &packet.Unsuback{PacketID: 1, Props: props, Reasons: []packet.ReasonCode{packet.NoSubscriptionExisted}}, "b0 02 00 01"},
		{"puback no reason", &packet.Ack{Type: packet.PUBACK, PacketID: 1, Reason: packet.QuotaExceeded, Props: props}, "40 02 00 01"},
		{"pubrel flags", &packet.Ack{Type: packet.PUBREL, PacketID: 1}, "62 02 00 01"},
		{"disconnect empty", &packet.Disconnect{Reason: packet.ServerShuttingDown, Props: props}, "e0 00"},
		{"subscribe options dropped", &packet.Subscribe{PacketID: 1, Props: props,
			Subs: []packet.Subscription{{Filter: bs("a"), QoS: 1, NoLocal: true, RetainAsPublished: true, RetainHandling: 2}}}, "82 06 00 01 00 01 61 01"},
		{"publish props dropped", &packet.Publish{Topic: bs("a"), Props: props, Payload: bs("p")}, "30 04 00 01 61 70"},
		{"connect will qos without will flag dropped", &packet.Connect{Version: packet.V311, WillQoS: 2, WillRetain: true, ClientID: bs("c")},
			"10 0d 00 04 4d 51 54 54 04 00 00 00 00 01 63"},
		{"connect v31 default name", &packet.Connect{Version: packet.V31, ClientID: bs("c")},
			"10 0f 00 06 4d 51 49 73 64 70 03 00 00 00 00 01 63"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := fmt.Sprintf("% x", encodePacket(nil, packet.V311, tt.p))
			if got != tt.want {
				t.Fatalf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}

// TestEncodeV5Forms checks the short forms the v5 encoders choose.
func TestEncodeV5Forms(t *testing.T) {
	rs := present(packet.Properties{ReasonString: bs("r")}, packet.PropReasonString)
	tests := []struct {
		name string
		p    any
		want string
	}{
		{"puback success", &packet.Ack{Type: packet.PUBACK, PacketID: 1}, "40 02 00 01"},
		{"puback reason only", &packet.Ack{Type: packet.PUBACK, PacketID: 1, Reason: packet.NotAuthorized}, "40 03 00 01 87"},
		{"puback success with props", &packet.Ack{Type: packet.PUBACK, PacketID: 1, Props: rs}, "40 08 00 01 00 04 1f 00 01 72"},
		{"pubrel reason only", &packet.Ack{Type: packet.PUBREL, PacketID: 1, Reason: packet.PacketIDNotFound}, "62 03 00 01 92"},
		{"disconnect normal", &packet.Disconnect{}, "e0 00"},
		{"disconnect reason only", &packet.Disconnect{Reason: packet.KeepAliveTimeout}, "e0 01 8d"},
		{"disconnect normal with props", &packet.Disconnect{Props: rs}, "e0 06 00 04 1f 00 01 72"},
		{"auth success", &packet.Auth{}, "f0 00"},
		{"auth reason keeps property length", &packet.Auth{Reason: packet.ReAuthenticate}, "f0 02 19 00"},
		{"connack", &packet.Connack{Reason: packet.NotAuthorized}, "20 03 00 87 00"},
		{"unsuback", &packet.Unsuback{PacketID: 2, Reasons: []packet.ReasonCode{packet.Success}}, "b0 04 00 02 00 00"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := fmt.Sprintf("% x", encodePacket(nil, packet.V5, tt.p))
			if got != tt.want {
				t.Fatalf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}

func TestAckWrongType(t *testing.T) {
	var a packet.Ack
	for _, typ := range []packet.Type{packet.CONNECT, packet.PUBLISH, packet.SUBACK, packet.AUTH, 0} {
		if err := a.Decode(packet.V5, typ, []byte{0, 1}); !errors.Is(err, packet.ErrWrongType) {
			t.Errorf("Ack.Decode(type %v) = %v, want ErrWrongType", typ, err)
		}
	}
}

// TestConnectUnsupportedVersionFields checks that on ErrUnsupportedVersion
// the caller still learns what the client asked for.
func TestConnectUnsupportedVersionFields(t *testing.T) {
	var c packet.Connect
	err := c.Decode([]byte{0, 4, 'M', 'Q', 'T', 'T', 6, 2, 0, 0})
	if !errors.Is(err, packet.ErrUnsupportedVersion) || c.Version != 6 || string(c.ProtocolName) != "MQTT" {
		t.Fatalf("err %v, version %d, name %q", err, c.Version, c.ProtocolName)
	}
}

// TestDecodeAliasesBody documents the caveat in doc.go: decoded fields point
// into the body.
func TestDecodeAliasesBody(t *testing.T) {
	wire := []byte{0x30, 0x07, 0x00, 0x03, 'a', '/', 'b', 'h', 'i'}
	var p packet.Publish
	if err := p.Decode(packet.V311, 0, wire[2:]); err != nil {
		t.Fatal(err)
	}
	wire[4], wire[7] = 'X', 'Y'
	if string(p.Topic) != "X/b" || string(p.Payload) != "Yi" {
		t.Fatalf("topic %q payload %q: decoded fields do not alias the body", p.Topic, p.Payload)
	}
}
