package packet

// This file decodes packet bodies: the bytes after the fixed header, as
// ReadFrame delimits them. Every decoder first resets its struct, keeping the
// capacity of its slices, so a struct reused for every packet of a
// connection decodes without allocating. On error the struct's contents are
// unspecified, except where a method says otherwise.

// reasonSet is a set of reason codes, one bit per byte value.
type reasonSet [4]uint64

func newReasonSet(codes ...ReasonCode) (s reasonSet) {
	for _, c := range codes {
		s[c>>6] |= 1 << (c & 63)
	}
	return s
}

func (s *reasonSet) has(c ReasonCode) bool { return s[c>>6]&(1<<(c&63)) != 0 }

// The reason codes each packet may carry in v5 (MQTT 5.0 tables 3-1 to 3-11),
// and the SUBACK return codes of 3.1.1.
var (
	connackReasons = newReasonSet(Success, UnspecifiedError, MalformedPacket, ProtocolError,
		ImplementationSpecificError, UnsupportedProtocolVersion, ClientIDNotValid,
		BadUsernameOrPassword, NotAuthorized, ServerUnavailable, ServerBusy, Banned,
		BadAuthenticationMethod, TopicNameInvalid, PacketTooLarge, QuotaExceeded,
		PayloadFormatInvalid, RetainNotSupported, QoSNotSupported, UseAnotherServer,
		ServerMoved, ConnectionRateExceeded)
	pubackReasons = newReasonSet(Success, NoMatchingSubscribers, UnspecifiedError,
		ImplementationSpecificError, NotAuthorized, TopicNameInvalid, PacketIDInUse,
		QuotaExceeded, PayloadFormatInvalid) // PUBACK and PUBREC
	pubrelReasons = newReasonSet(Success, PacketIDNotFound) // PUBREL and PUBCOMP
	subackReasons = newReasonSet(GrantedQoS0, GrantedQoS1, GrantedQoS2, UnspecifiedError,
		ImplementationSpecificError, NotAuthorized, TopicFilterInvalid, PacketIDInUse,
		QuotaExceeded, SharedSubsNotSupported, SubIDsNotSupported, WildcardSubsNotSupported)
	subackReasonsV3 = newReasonSet(GrantedQoS0, GrantedQoS1, GrantedQoS2, UnspecifiedError)
	unsubackReasons = newReasonSet(Success, NoSubscriptionExisted, UnspecifiedError,
		ImplementationSpecificError, NotAuthorized, TopicFilterInvalid, PacketIDInUse)
	disconnectReasons = newReasonSet(NormalDisconnection, DisconnectWithWill, UnspecifiedError,
		MalformedPacket, ProtocolError, ImplementationSpecificError, NotAuthorized, ServerBusy,
		ServerShuttingDown, KeepAliveTimeout, SessionTakenOver, TopicFilterInvalid,
		TopicNameInvalid, ReceiveMaximumExceeded, TopicAliasInvalid, PacketTooLarge,
		MessageRateTooHigh, QuotaExceeded, AdministrativeAction, PayloadFormatInvalid,
		RetainNotSupported, QoSNotSupported, UseAnotherServer, ServerMoved,
		SharedSubsNotSupported, ConnectionRateExceeded, MaximumConnectTime,
		SubIDsNotSupported, WildcardSubsNotSupported)
	authReasons = newReasonSet(Success, ContinueAuthentication, ReAuthenticate)
)

// v3ConnackReasons maps a 3.1.1 CONNACK return code (section 3.2.2.3) to the
// v5 reason code that ReasonCode.V3ConnackCode maps back to it, so a decoded
// 3.1.1 CONNACK re-encodes to the same bytes.
var v3ConnackReasons = [...]ReasonCode{Success, UnsupportedProtocolVersion, ClientIDNotValid,
	ServerUnavailable, BadUsernameOrPassword, NotAuthorized}

// Decode decodes a CONNECT body. It accepts protocol name "MQTT" with level
// 4 (3.1.1) or 5, and "MQIsdp" with level 3 (3.1); any other name is
// ErrBadProtocolName and any other level ErrUnsupportedVersion. On
// ErrUnsupportedVersion, ProtocolName and Version are set so the caller can
// answer with a CONNACK in a form the client may understand.
//
// Flag rules: reserved bit 0 set is ErrConnectReserved; will QoS 3 is
// ErrBadQoS; will QoS or will retain without the will flag is
// ErrBadWillFlags; in 3.1 and 3.1.1 a password without a user name is
// ErrPasswordNoUsername (5.0 allows it). In v5, Authentication Data without
// an Authentication Method is ErrMissingAuthMethod. A zero-length client
// identifier is accepted; whether to assign one is the broker's decision.
func (c *Connect) Decode(body []byte) error {
	props, will := c.Props, c.WillProps
	props.Reset()
	will.Reset()
	*c = Connect{Props: props, WillProps: will}

	r := reader{b: body}
	name, err := r.str()
	if err != nil {
		return err
	}
	level, err := r.u8()
	if err != nil {
		return err
	}
	c.ProtocolName, c.Version = name, Version(level)
	switch string(name) { // the conversion in a switch does not allocate
	case "MQTT":
		if c.Version != V311 && c.Version != V5 {
			return ErrUnsupportedVersion // [MQTT-3.1.2-2]
		}
	case "MQIsdp":
		if c.Version != V31 {
			return ErrUnsupportedVersion // [MQTT-3.1.2-2]
		}
	default:
		return ErrBadProtocolName // [MQTT-3.1.2-1]
	}

	flags, err := r.u8()
	if err != nil {
		return err
	}
	if flags&0x01 != 0 {
		return ErrConnectReserved // [MQTT-3.1.2-3]
	}
	c.CleanStart = flags&0x02 != 0
	c.WillFlag = flags&0x04 != 0
	c.WillQoS = flags >> 3 & 0x03
	c.WillRetain = flags&0x20 != 0
	c.PasswordFlag = flags&0x40 != 0
	c.UsernameFlag = flags&0x80 != 0
	if c.WillQoS == 3 {
		return ErrBadQoS // [MQTT-3.1.2-12] (3.1.1: [MQTT-3.1.2-14])
	}
	if !c.WillFlag && (c.WillQoS != 0 || c.WillRetain) {
		return ErrBadWillFlags // [MQTT-3.1.2-11] [MQTT-3.1.2-13] (3.1.1: [MQTT-3.1.2-13] [MQTT-3.1.2-15])
	}
	if c.Version < V5 && c.PasswordFlag && !c.UsernameFlag {
		return ErrPasswordNoUsername // 3.1.1: [MQTT-3.1.2-22]
	}
	if c.KeepAlive, err = r.u16(); err != nil {
		return err
	}
	if c.Version >= V5 {
		if err := c.Props.decode(&r, allowConnect, false); err != nil {
			return err
		}
		if c.Props.Has(PropAuthData) && !c.Props.Has(PropAuthMethod) {
			return ErrMissingAuthMethod // section 3.1.2.11.10
		}
	}

	// Payload fields, in the order [MQTT-3.1.3-1] fixes.
	if c.ClientID, err = r.str(); err != nil {
		return err // [MQTT-3.1.3-3] [MQTT-3.1.3-4]
	}
	if c.WillFlag {
		if c.Version >= V5 {
			if err := c.WillProps.decode(&r, allowWill, false); err != nil {
				return err
			}
		}
		if c.WillTopic, err = r.str(); err != nil {
			return err // [MQTT-3.1.2-9] [MQTT-3.1.3-11]
		}
		if c.WillPayload, err = r.bin(); err != nil {
			return err // [MQTT-3.1.2-9]
		}
	}
	if c.UsernameFlag {
		if c.Username, err = r.str(); err != nil {
			return err // [MQTT-3.1.2-17] [MQTT-3.1.3-12]
		}
	}
	if c.PasswordFlag {
		if c.Password, err = r.bin(); err != nil {
			return err // [MQTT-3.1.2-19]
		}
	}
	if r.left() != 0 {
		return ErrTrailingBytes // [MQTT-3.1.2-16] [MQTT-3.1.2-18]: nothing beyond what the flags announce
	}
	return nil
}

// Decode decodes a CONNACK body. For v3 and 3.1.1 the return code 0-5 is
// stored as the v5 reason code that V3ConnackCode maps back to it; other
// values are ErrBadReasonCode.
func (c *Connack) Decode(v Version, body []byte) error {
	c.SessionPresent, c.Reason = false, Success
	c.Props.Reset()

	r := reader{b: body}
	flags, err := r.u8()
	if err != nil {
		return err
	}
	if flags&0xFE != 0 {
		return ErrConnackReserved // [MQTT-3.2.2-1]
	}
	c.SessionPresent = flags&0x01 != 0
	code, err := r.u8()
	if err != nil {
		return err
	}
	if v < V5 {
		if int(code) >= len(v3ConnackReasons) {
			return ErrBadReasonCode // 3.1.1 section 3.2.2.3: 6-255 reserved
		}
		c.Reason = v3ConnackReasons[code]
	} else {
		c.Reason = ReasonCode(code)
		if !connackReasons.has(c.Reason) {
			return ErrBadReasonCode // [MQTT-3.2.2-8]
		}
		if err := c.Props.decode(&r, allowConnack, false); err != nil {
			return err
		}
	}
	if c.SessionPresent && c.Reason.IsError() {
		return ErrConnackSessionPresent // [MQTT-3.2.2-6] (3.1.1: [MQTT-3.2.2-4])
	}
	if r.left() != 0 {
		return ErrTrailingBytes
	}
	return nil
}

// Decode decodes a PUBLISH body; flags is the low nibble of the first byte.
// QoS 3 is ErrBadQoS, DUP on QoS 0 is ErrDupOnQoS0, a zero packet identifier
// is ErrZeroPacketID. An empty topic is ErrEmptyTopicNoAlias unless a v5
// Topic Alias is present; a Topic Alias of 0 is ErrZeroTopicAlias. Topic
// validity beyond UTF-8 (wildcards, length, alias range) and a Subscription
// Identifier sent by a client ([MQTT-3.3.4-6]) are left to the broker, which
// knows the direction and the negotiated limits.
//
// Topic, Payload and property values alias body.
func (p *Publish) Decode(v Version, flags byte, body []byte) error {
	p.Dup = flags&0x08 != 0
	p.QoS = flags >> 1 & 0x03
	p.Retain = flags&0x01 != 0
	p.Topic, p.PacketID, p.Payload = nil, 0, nil
	p.Props.Reset()
	if p.QoS == 3 {
		return ErrBadQoS // [MQTT-3.3.1-4]
	}
	if p.Dup && p.QoS == 0 {
		return ErrDupOnQoS0 // [MQTT-3.3.1-2]
	}

	r := reader{b: body}
	var err error
	if p.Topic, err = r.str(); err != nil {
		return err // [MQTT-3.3.2-1]
	}
	if p.QoS > 0 {
		if p.PacketID, err = r.u16(); err != nil {
			return err
		}
		if p.PacketID == 0 {
			return ErrZeroPacketID // [MQTT-2.2.1-3] [MQTT-2.2.1-4] (3.1.1: [MQTT-2.3.1-1])
		}
	}
	if v >= V5 {
		if err := p.Props.decode(&r, allowPublish, true); err != nil {
			return err
		}
	}
	if len(p.Topic) == 0 && (v < V5 || !p.Props.Has(PropTopicAlias)) {
		return ErrEmptyTopicNoAlias // section 3.3.2.1; 3.1.1: [MQTT-4.7.3-1]
	}
	p.Payload = r.rest() // section 3.3.3: may be empty
	return nil
}

// Decode decodes a PUBACK, PUBREC, PUBREL or PUBCOMP body of type t (any
// other t is ErrWrongType). In v5 a body of 2 bytes means reason Success and
// no properties, and 3 bytes a reason code without properties
// (section 3.4.2.1); the reason must be one the spec lists for t.
func (a *Ack) Decode(v Version, t Type, body []byte) error {
	a.Type, a.PacketID, a.Reason = t, 0, Success
	a.Props.Reset()
	var allowed *reasonSet
	switch t {
	case PUBACK, PUBREC:
		allowed = &pubackReasons
	case PUBREL, PUBCOMP:
		allowed = &pubrelReasons
	default:
		return ErrWrongType
	}

	r := reader{b: body}
	var err error
	if a.PacketID, err = r.u16(); err != nil {
		return err
	}
	if a.PacketID == 0 {
		return ErrZeroPacketID // [MQTT-2.2.1-5]: it echoes a non-zero PUBLISH identifier
	}
	if v < V5 || r.left() == 0 {
		return a.end(&r)
	}
	code, _ := r.u8() // left() > 0
	a.Reason = ReasonCode(code)
	if !allowed.has(a.Reason) {
		return ErrBadReasonCode // [MQTT-3.4.2-1] [MQTT-3.5.2-1] [MQTT-3.6.2-1] [MQTT-3.7.2-1]
	}
	if r.left() == 0 {
		return nil // "If the Remaining Length is less than 4 there is no Property Length"
	}
	if err := a.Props.decode(&r, allowAck, false); err != nil {
		return err
	}
	return a.end(&r)
}

func (a *Ack) end(r *reader) error {
	if r.left() != 0 {
		return ErrTrailingBytes
	}
	return nil
}

// Decode decodes a SUBSCRIBE body. In 3.1 and 3.1.1 only the two QoS bits
// of the options byte may be set (ErrSubscribeReserved), and QoS 3 is
// ErrBadQoS. In v5 bits 6-7 are reserved (ErrSubscribeReserved), QoS 3 is
// ErrBadSubscriptionQoS and Retain Handling 3 is ErrBadRetainHandling. A
// SUBSCRIBE without filters is ErrNoSubscriptions. Filter syntax, and No
// Local on a shared subscription ([MQTT-3.8.3-4]), are checked by the broker.
func (s *Subscribe) Decode(v Version, body []byte) error {
	s.PacketID = 0
	s.Props.Reset()
	s.Subs = s.Subs[:0]

	r := reader{b: body}
	var err error
	if s.PacketID, err = r.u16(); err != nil {
		return err
	}
	if s.PacketID == 0 {
		return ErrZeroPacketID // [MQTT-2.2.1-3] (3.1.1: [MQTT-2.3.1-1])
	}
	if v >= V5 {
		if err := s.Props.decode(&r, allowSubscribe, false); err != nil {
			return err
		}
	}
	for r.left() > 0 {
		filter, err := r.str()
		if err != nil {
			return err // [MQTT-3.8.3-1]
		}
		o, err := r.u8()
		if err != nil {
			return err // every filter is followed by its options byte
		}
		if v < V5 {
			if o&0xFC != 0 {
				return ErrSubscribeReserved // 3.1.1: [MQTT-3.8.3-4]
			}
			if o&0x03 == 3 {
				return ErrBadQoS // 3.1.1: [MQTT-3.8.3-4]
			}
		} else {
			if o&0xC0 != 0 {
				return ErrSubscribeReserved // [MQTT-3.8.3-5]
			}
			if o&0x03 == 3 {
				return ErrBadSubscriptionQoS // section 3.8.3.1
			}
			if o>>4&0x03 == 3 {
				return ErrBadRetainHandling // section 3.8.3.1
			}
		}
		s.Subs = append(s.Subs, Subscription{
			Filter:            filter,
			QoS:               o & 0x03,
			NoLocal:           o&0x04 != 0,
			RetainAsPublished: o&0x08 != 0,
			RetainHandling:    o >> 4 & 0x03,
		})
	}
	if len(s.Subs) == 0 {
		return ErrNoSubscriptions // [MQTT-3.8.3-2] (3.1.1: [MQTT-3.8.3-3])
	}
	return nil
}

// Decode decodes a SUBACK body. Each reason code must be one SUBACK allows:
// 0x00-0x02 or 0x80 in 3.1.1, table 3-8 in v5.
func (s *Suback) Decode(v Version, body []byte) error {
	s.PacketID = 0
	s.Props.Reset()
	s.Reasons = s.Reasons[:0]

	r := reader{b: body}
	var err error
	if s.PacketID, err = r.u16(); err != nil {
		return err
	}
	if s.PacketID == 0 {
		return ErrZeroPacketID // [MQTT-2.2.1-6]
	}
	allowed := &subackReasonsV3
	if v >= V5 {
		allowed = &subackReasons
		if err := s.Props.decode(&r, allowAck, false); err != nil {
			return err
		}
	}
	for _, c := range r.rest() {
		if !allowed.has(ReasonCode(c)) {
			return ErrBadReasonCode // [MQTT-3.9.3-2] (3.1.1: [MQTT-3.9.3-2])
		}
		s.Reasons = append(s.Reasons, ReasonCode(c))
	}
	if len(s.Reasons) == 0 {
		return ErrNoReasonCodes // section 2.4
	}
	return nil
}

// Decode decodes an UNSUBSCRIBE body. One without filters is
// ErrNoSubscriptions.
func (u *Unsubscribe) Decode(v Version, body []byte) error {
	u.PacketID = 0
	u.Props.Reset()
	u.Filters = u.Filters[:0]

	r := reader{b: body}
	var err error
	if u.PacketID, err = r.u16(); err != nil {
		return err
	}
	if u.PacketID == 0 {
		return ErrZeroPacketID // [MQTT-2.2.1-3] (3.1.1: [MQTT-2.3.1-1])
	}
	if v >= V5 {
		if err := u.Props.decode(&r, allowUnsubscribe, false); err != nil {
			return err
		}
	}
	for r.left() > 0 {
		f, err := r.str()
		if err != nil {
			return err // [MQTT-3.10.3-1]
		}
		u.Filters = append(u.Filters, f)
	}
	if len(u.Filters) == 0 {
		return ErrNoSubscriptions // [MQTT-3.10.3-2]
	}
	return nil
}

// Decode decodes an UNSUBACK body. In 3.1.1 it is only the packet
// identifier; in v5 it has properties and one reason code per filter, each
// from table 3-9.
func (u *Unsuback) Decode(v Version, body []byte) error {
	u.PacketID = 0
	u.Props.Reset()
	u.Reasons = u.Reasons[:0]

	r := reader{b: body}
	var err error
	if u.PacketID, err = r.u16(); err != nil {
		return err
	}
	if u.PacketID == 0 {
		return ErrZeroPacketID // [MQTT-2.2.1-6]
	}
	if v < V5 {
		if r.left() != 0 {
			return ErrTrailingBytes
		}
		return nil
	}
	if err := u.Props.decode(&r, allowAck, false); err != nil {
		return err
	}
	for _, c := range r.rest() {
		if !unsubackReasons.has(ReasonCode(c)) {
			return ErrBadReasonCode // [MQTT-3.11.3-2]
		}
		u.Reasons = append(u.Reasons, ReasonCode(c))
	}
	if len(u.Reasons) == 0 {
		return ErrNoReasonCodes // section 2.4
	}
	return nil
}

// Decode decodes a DISCONNECT body. In 3.1.1 the body must be empty. In v5
// an empty body is NormalDisconnection and a one-byte body a reason code
// without properties (section 3.14.2.2.1); the reason must be from table
// 3-10. A non-zero Session Expiry after a zero one in CONNECT is a protocol
// error the broker checks, since it needs the CONNECT.
func (d *Disconnect) Decode(v Version, body []byte) error {
	d.Reason = NormalDisconnection
	d.Props.Reset()
	if v < V5 || len(body) == 0 {
		return DecodeEmpty(body)
	}
	r := reader{b: body}
	code, _ := r.u8() // len(body) > 0
	d.Reason = ReasonCode(code)
	if !disconnectReasons.has(d.Reason) {
		return ErrBadReasonCode // [MQTT-3.14.2-1]
	}
	if r.left() == 0 {
		return nil
	}
	if err := d.Props.decode(&r, allowDisconnect, false); err != nil {
		return err
	}
	if r.left() != 0 {
		return ErrTrailingBytes
	}
	return nil
}

// Decode decodes a v5 AUTH body. An empty body is reason Success without
// properties (section 3.15.2.1). Otherwise the reason must be from table
// 3-11, the property block must follow (unlike DISCONNECT, AUTH has no
// reason-only form) and it must carry an Authentication Method
// (ErrMissingAuthMethod).
func (a *Auth) Decode(body []byte) error {
	a.Reason = Success
	a.Props.Reset()
	if len(body) == 0 {
		return nil
	}
	r := reader{b: body}
	code, _ := r.u8() // len(body) > 0
	a.Reason = ReasonCode(code)
	if !authReasons.has(a.Reason) {
		return ErrBadReasonCode // [MQTT-3.15.2-1]
	}
	if err := a.Props.decode(&r, allowAuth, false); err != nil {
		return err
	}
	if r.left() != 0 {
		return ErrTrailingBytes
	}
	if !a.Props.Has(PropAuthMethod) {
		return ErrMissingAuthMethod // section 3.15.2.2.2: "a Protocol Error to omit the Authentication Method"
	}
	return nil
}

// DecodeEmpty checks the body of a packet that has none: PINGREQ, PINGRESP,
// and a 3.1.1 DISCONNECT. Any byte is ErrTrailingBytes.
func DecodeEmpty(body []byte) error {
	if len(body) != 0 {
		return ErrTrailingBytes
	}
	return nil
}
