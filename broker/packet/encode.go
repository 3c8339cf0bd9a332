package packet

// This file encodes packets. Every encoder appends the complete packet, fixed
// header included, to dst and returns the extended slice, so a writer can
// build many packets into one pooled buffer; with enough capacity in dst
// nothing is allocated. Each encoder computes the Remaining Length first and
// then writes the fields once, so nothing is moved after the fact.
//
// Encoders do not validate: they write the packet the caller built for the
// given version, leaving out what that version cannot carry (properties and
// reason codes before v5). The caller is responsible for values the wire
// cannot represent: strings and binary fields over 65,535 bytes, a packet
// over MaxRemainingLength (AppendVarint panics), QoS 3.

// Protocol names written when Connect.ProtocolName is empty.
var (
	protoMQTT   = []byte("MQTT")
	protoMQIsdp = []byte("MQIsdp")
)

// Append appends the CONNECT packet for c.Version. An empty ProtocolName is
// written as "MQIsdp" for V31 and "MQTT" otherwise. The flag fields decide
// which payload fields are written (WillFlag, UsernameFlag, PasswordFlag), so
// an empty password can be sent; will QoS and retain are written only with
// the will flag, since anything else is malformed ([MQTT-3.1.2-11]).
func (c *Connect) Append(dst []byte) []byte {
	v5 := c.Version >= V5
	name := c.ProtocolName
	if len(name) == 0 {
		name = protoMQTT
		if c.Version == V31 {
			name = protoMQIsdp
		}
	}
	flags := boolBit(c.CleanStart, 0x02) | boolBit(c.UsernameFlag, 0x80) | boolBit(c.PasswordFlag, 0x40)
	n := 2 + len(name) + 1 + 1 + 2 + 2 + len(c.ClientID)
	var ps, wps int
	if v5 {
		ps = c.Props.Size()
		n += blockSize(ps)
	}
	if c.WillFlag {
		flags |= 0x04 | (c.WillQoS&0x03)<<3 | boolBit(c.WillRetain, 0x20)
		if v5 {
			wps = c.WillProps.Size()
			n += blockSize(wps)
		}
		n += 2 + len(c.WillTopic) + 2 + len(c.WillPayload)
	}
	if c.UsernameFlag {
		n += 2 + len(c.Username)
	}
	if c.PasswordFlag {
		n += 2 + len(c.Password)
	}

	dst = appendFixedHeader(dst, CONNECT, 0, n)
	dst = appendBin(dst, name)
	dst = append(dst, byte(c.Version), flags)
	dst = appendU16(dst, c.KeepAlive)
	if v5 {
		dst = c.Props.appendSized(dst, ps)
	}
	dst = appendBin(dst, c.ClientID)
	if c.WillFlag {
		if v5 {
			dst = c.WillProps.appendSized(dst, wps)
		}
		dst = appendBin(dst, c.WillTopic)
		dst = appendBin(dst, c.WillPayload)
	}
	if c.UsernameFlag {
		dst = appendBin(dst, c.Username)
	}
	if c.PasswordFlag {
		dst = appendBin(dst, c.Password)
	}
	return dst
}

// Append appends the CONNACK packet. Before v5 the body is the two bytes of
// 3.1.1: Reason is mapped by ReasonCode.V3ConnackCode and properties are
// dropped.
func (c *Connack) Append(dst []byte, v Version) []byte {
	flags := boolBit(c.SessionPresent, 0x01)
	if v < V5 {
		dst = appendFixedHeader(dst, CONNACK, 0, 2)
		return append(dst, flags, c.Reason.V3ConnackCode())
	}
	ps := c.Props.Size()
	dst = appendFixedHeader(dst, CONNACK, 0, 2+blockSize(ps))
	dst = append(dst, flags, byte(c.Reason))
	return c.Props.appendSized(dst, ps)
}

// remaining returns the PUBLISH Remaining Length and the property size.
func (p *Publish) remaining(v Version) (rem, ps int) {
	rem = 2 + len(p.Topic) + len(p.Payload)
	if p.QoS > 0 {
		rem += 2
	}
	if v >= V5 {
		ps = p.Props.Size()
		rem += blockSize(ps)
	}
	return rem, ps
}

// Append appends the PUBLISH packet. The packet identifier is written only
// for QoS 1 and 2, properties only for v5.
func (p *Publish) Append(dst []byte, v Version) []byte {
	return append(p.AppendHeader(dst, v), p.Payload...)
}

// AppendHeader appends everything but the payload; the Remaining Length still
// counts len(p.Payload). A writer fanning one message out to many
// subscribers builds a small header per subscriber and sends it with the
// shared payload in one writev, instead of copying the payload each time.
func (p *Publish) AppendHeader(dst []byte, v Version) []byte {
	rem, ps := p.remaining(v)
	flags := boolBit(p.Dup, 0x08) | (p.QoS&0x03)<<1 | boolBit(p.Retain, 0x01)
	dst = appendFixedHeader(dst, PUBLISH, flags, rem)
	dst = appendBin(dst, p.Topic)
	if p.QoS > 0 {
		dst = appendU16(dst, p.PacketID)
	}
	if v >= V5 {
		dst = p.Props.appendSized(dst, ps)
	}
	return dst
}

// Size returns the encoded size of the whole packet (fixed header and
// payload) without encoding it or allocating, so the broker can honour a
// client's Maximum Packet Size ([MQTT-3.1.2-24]) before building the packet.
func (p *Publish) Size(v Version) int {
	rem, _ := p.remaining(v)
	return 1 + VarintSize(rem) + rem
}

// Append appends the PUBACK, PUBREC, PUBREL or PUBCOMP packet a.Type says
// (PUBREL with its fixed flags 0b0010, [MQTT-3.6.1-1]). In v5 the reason and
// properties are omitted when Reason is Success and there are no properties,
// and the property length when there are no properties (section 3.4.2.1),
// so the common acknowledgement stays 4 bytes.
func (a *Ack) Append(dst []byte, v Version) []byte {
	var flags byte
	if a.Type == PUBREL {
		flags = 0b0010
	}
	if v < V5 {
		dst = appendFixedHeader(dst, a.Type, flags, 2)
		return appendU16(dst, a.PacketID)
	}
	ps := a.Props.Size()
	switch {
	case ps == 0 && a.Reason == Success:
		dst = appendFixedHeader(dst, a.Type, flags, 2)
		return appendU16(dst, a.PacketID)
	case ps == 0:
		dst = appendFixedHeader(dst, a.Type, flags, 3)
		return append(appendU16(dst, a.PacketID), byte(a.Reason))
	}
	dst = appendFixedHeader(dst, a.Type, flags, 3+blockSize(ps))
	dst = append(appendU16(dst, a.PacketID), byte(a.Reason))
	return a.Props.appendSized(dst, ps)
}

// Append appends the SUBSCRIBE packet. Before v5 only the QoS of each
// subscription is written; the v5 options (No Local, Retain As Published,
// Retain Handling) do not exist there.
func (s *Subscribe) Append(dst []byte, v Version) []byte {
	n := 2
	var ps int
	if v >= V5 {
		ps = s.Props.Size()
		n += blockSize(ps)
	}
	for i := range s.Subs {
		n += 2 + len(s.Subs[i].Filter) + 1
	}
	dst = appendFixedHeader(dst, SUBSCRIBE, 0b0010, n) // [MQTT-3.8.1-1]
	dst = appendU16(dst, s.PacketID)
	if v >= V5 {
		dst = s.Props.appendSized(dst, ps)
	}
	for i := range s.Subs {
		sub := &s.Subs[i]
		o := sub.QoS & 0x03
		if v >= V5 {
			o |= boolBit(sub.NoLocal, 0x04) | boolBit(sub.RetainAsPublished, 0x08) | (sub.RetainHandling&0x03)<<4
		}
		dst = append(appendBin(dst, sub.Filter), o)
	}
	return dst
}

// Append appends the SUBACK packet. Before v5 any failure code (0x80 and
// above) is written as 0x80, the only failure 3.1.1 has ([MQTT-3.9.3-2]).
func (s *Suback) Append(dst []byte, v Version) []byte {
	n := 2 + len(s.Reasons)
	var ps int
	if v >= V5 {
		ps = s.Props.Size()
		n += blockSize(ps)
	}
	dst = appendFixedHeader(dst, SUBACK, 0, n)
	dst = appendU16(dst, s.PacketID)
	if v >= V5 {
		dst = s.Props.appendSized(dst, ps)
	}
	for _, r := range s.Reasons {
		if v < V5 && r.IsError() {
			r = UnspecifiedError // 0x80, "Failure" in 3.1.1
		}
		dst = append(dst, byte(r))
	}
	return dst
}

// Append appends the UNSUBSCRIBE packet.
func (u *Unsubscribe) Append(dst []byte, v Version) []byte {
	n := 2
	var ps int
	if v >= V5 {
		ps = u.Props.Size()
		n += blockSize(ps)
	}
	for _, f := range u.Filters {
		n += 2 + len(f)
	}
	dst = appendFixedHeader(dst, UNSUBSCRIBE, 0b0010, n) // [MQTT-3.10.1-1]
	dst = appendU16(dst, u.PacketID)
	if v >= V5 {
		dst = u.Props.appendSized(dst, ps)
	}
	for _, f := range u.Filters {
		dst = appendBin(dst, f)
	}
	return dst
}

// Append appends the UNSUBACK packet. Before v5 it is only the packet
// identifier: 3.1.1 has no reason codes or properties here.
func (u *Unsuback) Append(dst []byte, v Version) []byte {
	if v < V5 {
		dst = appendFixedHeader(dst, UNSUBACK, 0, 2)
		return appendU16(dst, u.PacketID)
	}
	ps := u.Props.Size()
	dst = appendFixedHeader(dst, UNSUBACK, 0, 2+blockSize(ps)+len(u.Reasons))
	dst = appendU16(dst, u.PacketID)
	dst = u.Props.appendSized(dst, ps)
	for _, r := range u.Reasons {
		dst = append(dst, byte(r))
	}
	return dst
}

// Append appends the DISCONNECT packet. Before v5 the body is empty. In v5
// it is empty when Reason is NormalDisconnection and there are no
// properties, and just the reason byte when there are no properties
// (section 3.14.2.2.1).
func (d *Disconnect) Append(dst []byte, v Version) []byte {
	if v < V5 {
		return appendFixedHeader(dst, DISCONNECT, 0, 0)
	}
	ps := d.Props.Size()
	switch {
	case ps == 0 && d.Reason == NormalDisconnection:
		return appendFixedHeader(dst, DISCONNECT, 0, 0)
	case ps == 0:
		return append(appendFixedHeader(dst, DISCONNECT, 0, 1), byte(d.Reason))
	}
	dst = appendFixedHeader(dst, DISCONNECT, 0, 1+blockSize(ps))
	dst = append(dst, byte(d.Reason))
	return d.Props.appendSized(dst, ps)
}

// Append appends the v5 AUTH packet: empty when Reason is Success and there
// are no properties, otherwise the reason and the property block (AUTH has
// no reason-only form).
func (a *Auth) Append(dst []byte) []byte {
	ps := a.Props.Size()
	if ps == 0 && a.Reason == Success {
		return appendFixedHeader(dst, AUTH, 0, 0)
	}
	dst = appendFixedHeader(dst, AUTH, 0, 1+blockSize(ps))
	dst = append(dst, byte(a.Reason))
	return a.Props.appendSized(dst, ps)
}

// AppendPingreq appends a PINGREQ packet.
func AppendPingreq(dst []byte) []byte { return append(dst, byte(PINGREQ)<<4, 0) }

// AppendPingresp appends a PINGRESP packet.
func AppendPingresp(dst []byte) []byte { return append(dst, byte(PINGRESP)<<4, 0) }
