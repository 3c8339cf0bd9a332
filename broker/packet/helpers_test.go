package packet_test

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/linemq/linemq/broker/packet"
)

// decodePacket decodes the body of a packet with fixed header h, as a peer
// speaking version v sent it, into a fresh struct and returns a pointer to
// it. PINGREQ and PINGRESP decode to a *packet.Type.
func decodePacket(v packet.Version, h packet.FixedHeader, body []byte) (any, error) {
	switch h.Type {
	case packet.CONNECT:
		p := new(packet.Connect)
		return p, p.Decode(body)
	case packet.CONNACK:
		p := new(packet.Connack)
		return p, p.Decode(v, body)
	case packet.PUBLISH:
		p := new(packet.Publish)
		return p, p.Decode(v, h.Flags, body)
	case packet.PUBACK, packet.PUBREC, packet.PUBREL, packet.PUBCOMP:
		p := new(packet.Ack)
		return p, p.Decode(v, h.Type, body)
	case packet.SUBSCRIBE:
		p := new(packet.Subscribe)
		return p, p.Decode(v, body)
	case packet.SUBACK:
		p := new(packet.Suback)
		return p, p.Decode(v, body)
	case packet.UNSUBSCRIBE:
		p := new(packet.Unsubscribe)
		return p, p.Decode(v, body)
	case packet.UNSUBACK:
		p := new(packet.Unsuback)
		return p, p.Decode(v, body)
	case packet.DISCONNECT:
		p := new(packet.Disconnect)
		return p, p.Decode(v, body)
	case packet.AUTH:
		p := new(packet.Auth)
		return p, p.Decode(body)
	case packet.PINGREQ, packet.PINGRESP:
		t := h.Type
		return &t, packet.DecodeEmpty(body)
	}
	return nil, fmt.Errorf("no decoder for %v", h.Type)
}

// decodeInto decodes into an existing struct of the right type, to check that
// a reused (dirty) struct decodes to the same value as a fresh one.
func decodeInto(p any, v packet.Version, h packet.FixedHeader, body []byte) error {
	switch p := p.(type) {
	case *packet.Connect:
		return p.Decode(body)
	case *packet.Connack:
		return p.Decode(v, body)
	case *packet.Publish:
		return p.Decode(v, h.Flags, body)
	case *packet.Ack:
		return p.Decode(v, h.Type, body)
	case *packet.Subscribe:
		return p.Decode(v, body)
	case *packet.Suback:
		return p.Decode(v, body)
	case *packet.Unsubscribe:
		return p.Decode(v, body)
	case *packet.Unsuback:
		return p.Decode(v, body)
	case *packet.Disconnect:
		return p.Decode(v, body)
	case *packet.Auth:
		return p.Decode(body)
	case *packet.Type:
		*p = h.Type
		return packet.DecodeEmpty(body)
	}
	panic(fmt.Sprintf("decodeInto: %T", p))
}

// encodePacket appends the wire form of p (as returned by decodePacket) for
// version v.
func encodePacket(dst []byte, v packet.Version, p any) []byte {
	switch p := p.(type) {
	case *packet.Connect:
		return p.Append(dst)
	case *packet.Connack:
		return p.Append(dst, v)
	case *packet.Publish:
		return p.Append(dst, v)
	case *packet.Ack:
		return p.Append(dst, v)
	case *packet.Subscribe:
		return p.Append(dst, v)
	case *packet.Suback:
		return p.Append(dst, v)
	case *packet.Unsubscribe:
		return p.Append(dst, v)
	case *packet.Unsuback:
		return p.Append(dst, v)
	case *packet.Disconnect:
		return p.Append(dst, v)
	case *packet.Auth:
		return p.Append(dst)
	case *packet.Type:
		if *p == packet.PINGREQ {
			return packet.AppendPingreq(dst)
		}
		return packet.AppendPingresp(dst)
	}
	panic(fmt.Sprintf("encodePacket: %T", p))
}

// roundTrip decodes wire (one whole packet) as version v.
func roundTrip(v packet.Version, wire []byte) (any, error) {
	h, n, err := packet.ReadFrame(wire, 0)
	if err != nil {
		return nil, err
	}
	if n == 0 || n+h.Remaining != len(wire) {
		return nil, fmt.Errorf("frame: header %d + remaining %d != %d bytes", n, h.Remaining, len(wire))
	}
	return decodePacket(v, h, wire[n:])
}

// equalPackets is reflect.DeepEqual except that a nil slice equals an empty
// one: a decoded empty field aliases the body (non-nil, length 0) while a
// literal leaves it nil, and the two mean the same on the wire.
func equalPackets(a, b any) bool {
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	return va.Type() == vb.Type() && equalValue(va, vb)
}

func equalValue(a, b reflect.Value) bool {
	switch a.Kind() {
	case reflect.Pointer:
		if a.IsNil() || b.IsNil() {
			return a.IsNil() == b.IsNil()
		}
		return equalValue(a.Elem(), b.Elem())
	case reflect.Struct:
		for i := range a.NumField() {
			if !equalValue(a.Field(i), b.Field(i)) {
				return false
			}
		}
		return true
	case reflect.Slice:
		if a.Len() != b.Len() {
			return false
		}
		for i := range a.Len() {
			if !equalValue(a.Index(i), b.Index(i)) {
				return false
			}
		}
		return true
	default:
		return a.Equal(b)
	}
}

var propNames = map[packet.PropID]string{
	packet.PropPayloadFormat: "PayloadFormat", packet.PropMessageExpiry: "MessageExpiry",
	packet.PropContentType: "ContentType", packet.PropResponseTopic: "ResponseTopic",
	packet.PropCorrelationData: "CorrelationData", packet.PropSubscriptionID: "SubID",
	packet.PropSessionExpiry: "SessionExpiry", packet.PropAssignedClientID: "AssignedClientID",
	packet.PropServerKeepAlive: "ServerKeepAlive", packet.PropAuthMethod: "AuthMethod",
	packet.PropAuthData: "AuthData", packet.PropRequestProblemInfo: "RequestProblemInfo",
	packet.PropWillDelay: "WillDelay", packet.PropRequestResponseInfo: "RequestResponseInfo",
	packet.PropResponseInfo: "ResponseInfo", packet.PropServerReference: "ServerReference",
	packet.PropReasonString: "ReasonString", packet.PropReceiveMaximum: "ReceiveMaximum",
	packet.PropTopicAliasMaximum: "TopicAliasMaximum", packet.PropTopicAlias: "TopicAlias",
	packet.PropMaximumQoS: "MaximumQoS", packet.PropRetainAvailable: "RetainAvailable",
	packet.PropUser: "User", packet.PropMaximumPacketSize: "MaximumPacketSize",
	packet.PropWildcardSubAvailable: "WildcardSubAvailable", packet.PropSubIDAvailable: "SubIDAvailable",
	packet.PropSharedSubAvailable: "SharedSubAvailable",
}

// dumpProps renders the present properties in identifier order, the way the
// golden corpus spells them: " props{Name=value ...}", or "" when none.
func dumpProps(p *packet.Properties) string {
	if p.Present == 0 && len(p.User) == 0 && len(p.SubscriptionIDs) == 0 {
		return ""
	}
	var parts []string
	for id := packet.PropID(0); id < 64; id++ {
		name, ok := propNames[id]
		if !ok || !p.Has(id) {
			continue
		}
		var val string
		switch id {
		case packet.PropPayloadFormat:
			val = fmt.Sprint(p.PayloadFormat)
		case packet.PropMessageExpiry:
			val = fmt.Sprint(p.MessageExpiry)
		case packet.PropContentType:
			val = fmt.Sprintf("%q", p.ContentType)
		case packet.PropResponseTopic:
			val = fmt.Sprintf("%q", p.ResponseTopic)
		case packet.PropCorrelationData:
			val = fmt.Sprintf("%q", p.CorrelationData)
		case packet.PropSubscriptionID:
			val = fmt.Sprint(p.SubscriptionIDs)
		case packet.PropSessionExpiry:
			val = fmt.Sprint(p.SessionExpiry)
		case packet.PropAssignedClientID:
			val = fmt.Sprintf("%q", p.AssignedClientID)
		case packet.PropServerKeepAlive:
			val = fmt.Sprint(p.ServerKeepAlive)
		case packet.PropAuthMethod:
			val = fmt.Sprintf("%q", p.AuthMethod)
		case packet.PropAuthData:
			val = fmt.Sprintf("%q", p.AuthData)
		case packet.PropRequestProblemInfo:
			val = fmt.Sprint(p.RequestProblemInfo)
		case packet.PropWillDelay:
			val = fmt.Sprint(p.WillDelay)
		case packet.PropRequestResponseInfo:
			val = fmt.Sprint(p.RequestResponseInfo)
		case packet.PropResponseInfo:
			val = fmt.Sprintf("%q", p.ResponseInfo)
		case packet.PropServerReference:
			val = fmt.Sprintf("%q", p.ServerReference)
		case packet.PropReasonString:
			val = fmt.Sprintf("%q", p.ReasonString)
		case packet.PropReceiveMaximum:
			val = fmt.Sprint(p.ReceiveMaximum)
		case packet.PropTopicAliasMaximum:
			val = fmt.Sprint(p.TopicAliasMaximum)
		case packet.PropTopicAlias:
			val = fmt.Sprint(p.TopicAlias)
		case packet.PropMaximumQoS:
			val = fmt.Sprint(p.MaximumQoS)
		case packet.PropRetainAvailable:
			val = fmt.Sprint(p.RetainAvailable)
		case packet.PropUser:
			var kv []string
			for _, u := range p.User {
				kv = append(kv, fmt.Sprintf("%q:%q", u.Key, u.Value))
			}
			val = "[" + strings.Join(kv, " ") + "]"
		case packet.PropMaximumPacketSize:
			val = fmt.Sprint(p.MaximumPacketSize)
		case packet.PropWildcardSubAvailable:
			val = fmt.Sprint(p.WildcardSubAvailable)
		case packet.PropSubIDAvailable:
			val = fmt.Sprint(p.SubIDAvailable)
		case packet.PropSharedSubAvailable:
			val = fmt.Sprint(p.SharedSubAvailable)
		}
		parts = append(parts, name+"="+val)
	}
	return " props{" + strings.Join(parts, " ") + "}"
}

func b01(b bool) int {
	if b {
		return 1
	}
	return 0
}

func reasons(rs []packet.ReasonCode) string {
	var s []string
	for _, r := range rs {
		s = append(s, fmt.Sprintf("0x%02x", byte(r)))
	}
	return "[" + strings.Join(s, " ") + "]"
}

// dumpPacket renders a decoded packet on one line, every field in a fixed
// order, so the golden corpus can state the expected decode as text.
func dumpPacket(p any) string {
	switch p := p.(type) {
	case *packet.Connect:
		s := fmt.Sprintf("CONNECT name=%q v=%d clean=%d keepalive=%d id=%q",
			p.ProtocolName, p.Version, b01(p.CleanStart), p.KeepAlive, p.ClientID)
		if p.WillFlag {
			s += fmt.Sprintf(" will{qos=%d retain=%d topic=%q payload=%q%s}",
				p.WillQoS, b01(p.WillRetain), p.WillTopic, p.WillPayload, dumpProps(&p.WillProps))
		}
		if p.UsernameFlag {
			s += fmt.Sprintf(" user=%q", p.Username)
		}
		if p.PasswordFlag {
			s += fmt.Sprintf(" pass=%q", p.Password)
		}
		return s + dumpProps(&p.Props)
	case *packet.Connack:
		return fmt.Sprintf("CONNACK present=%d reason=0x%02x%s", b01(p.SessionPresent), byte(p.Reason), dumpProps(&p.Props))
	case *packet.Publish:
		return fmt.Sprintf("PUBLISH dup=%d qos=%d retain=%d topic=%q id=%d%s payload=%q",
			b01(p.Dup), p.QoS, b01(p.Retain), p.Topic, p.PacketID, dumpProps(&p.Props), p.Payload)
	case *packet.Ack:
		return fmt.Sprintf("%v id=%d reason=0x%02x%s", p.Type, p.PacketID, byte(p.Reason), dumpProps(&p.Props))
	case *packet.Subscribe:
		s := fmt.Sprintf("SUBSCRIBE id=%d%s", p.PacketID, dumpProps(&p.Props))
		for _, sub := range p.Subs {
			s += fmt.Sprintf(" [%q qos=%d nl=%d rap=%d rh=%d]", sub.Filter, sub.QoS,
				b01(sub.NoLocal), b01(sub.RetainAsPublished), sub.RetainHandling)
		}
		return s
	case *packet.Suback:
		return fmt.Sprintf("SUBACK id=%d%s reasons=%s", p.PacketID, dumpProps(&p.Props), reasons(p.Reasons))
	case *packet.Unsubscribe:
		s := fmt.Sprintf("UNSUBSCRIBE id=%d%s", p.PacketID, dumpProps(&p.Props))
		for _, f := range p.Filters {
			s += fmt.Sprintf(" %q", f)
		}
		return s
	case *packet.Unsuback:
		return fmt.Sprintf("UNSUBACK id=%d%s reasons=%s", p.PacketID, dumpProps(&p.Props), reasons(p.Reasons))
	case *packet.Disconnect:
		return fmt.Sprintf("DISCONNECT reason=0x%02x%s", byte(p.Reason), dumpProps(&p.Props))
	case *packet.Auth:
		return fmt.Sprintf("AUTH reason=0x%02x%s", byte(p.Reason), dumpProps(&p.Props))
	case *packet.Type:
		return p.String()
	}
	return fmt.Sprintf("%T", p)
}
