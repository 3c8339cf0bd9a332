package packet

import "math/bits"

// This file is the v5 property codec (MQTT 5.0 section 2.2.2): the wire type
// of each property, which packets may carry which, and the block's decoder
// and encoder.

// propKind is the wire data type of a property's value.
type propKind uint8

const (
	kindNone   propKind = iota // not a property identifier
	kindByte                   // Byte
	kindU16                    // Two Byte Integer
	kindU32                    // Four Byte Integer
	kindVarint                 // Variable Byte Integer
	kindString                 // UTF-8 Encoded String
	kindBinary                 // Binary Data
	kindPair                   // UTF-8 String Pair
)

// propKinds maps each property identifier to its data type (MQTT 5.0 table
// 2-4). Indexing by a byte below 64 is safe; every identifier is below 0x2B.
var propKinds = [64]propKind{
	PropPayloadFormat:        kindByte,
	PropMessageExpiry:        kindU32,
	PropContentType:          kindString,
	PropResponseTopic:        kindString,
	PropCorrelationData:      kindBinary,
	PropSubscriptionID:       kindVarint,
	PropSessionExpiry:        kindU32,
	PropAssignedClientID:     kindString,
	PropServerKeepAlive:      kindU16,
	PropAuthMethod:           kindString,
	PropAuthData:             kindBinary,
	PropRequestProblemInfo:   kindByte,
	PropWillDelay:            kindU32,
	PropRequestResponseInfo:  kindByte,
	PropResponseInfo:         kindString,
	PropServerReference:      kindString,
	PropReasonString:         kindString,
	PropReceiveMaximum:       kindU16,
	PropTopicAliasMaximum:    kindU16,
	PropTopicAlias:           kindU16,
	PropMaximumQoS:           kindByte,
	PropRetainAvailable:      kindByte,
	PropUser:                 kindPair,
	PropMaximumPacketSize:    kindU32,
	PropWildcardSubAvailable: kindByte,
	PropSubIDAvailable:       kindByte,
	PropSharedSubAvailable:   kindByte,
}

// Which properties each packet may carry (MQTT 5.0 table 2-4), as bit sets
// over PropID like Properties.Present.
const (
	allowConnect uint64 = 1<<PropSessionExpiry | 1<<PropAuthMethod | 1<<PropAuthData |
		1<<PropRequestProblemInfo | 1<<PropRequestResponseInfo | 1<<PropReceiveMaximum |
		1<<PropTopicAliasMaximum | 1<<PropUser | 1<<PropMaximumPacketSize
	allowConnack uint64 = 1<<PropSessionExpiry | 1<<PropAssignedClientID | 1<<PropServerKeepAlive |
		1<<PropAuthMethod | 1<<PropAuthData | 1<<PropResponseInfo | 1<<PropServerReference |
		1<<PropReasonString | 1<<PropReceiveMaximum | 1<<PropTopicAliasMaximum |
		1<<PropMaximumQoS | 1<<PropRetainAvailable | 1<<PropUser | 1<<PropMaximumPacketSize |
		1<<PropWildcardSubAvailable | 1<<PropSubIDAvailable | 1<<PropSharedSubAvailable
	allowPublish uint64 = 1<<PropPayloadFormat | 1<<PropMessageExpiry | 1<<PropContentType |
		1<<PropResponseTopic | 1<<PropCorrelationData | 1<<PropSubscriptionID |
		1<<PropTopicAlias | 1<<PropUser
	allowWill uint64 = 1<<PropPayloadFormat | 1<<PropMessageExpiry | 1<<PropContentType |
		1<<PropResponseTopic | 1<<PropCorrelationData | 1<<PropWillDelay | 1<<PropUser
	allowAck         uint64 = 1<<PropReasonString | 1<<PropUser // PUBACK, PUBREC, PUBREL, PUBCOMP, SUBACK, UNSUBACK
	allowSubscribe   uint64 = 1<<PropSubscriptionID | 1<<PropUser
	allowUnsubscribe uint64 = 1 << PropUser
	allowDisconnect  uint64 = 1<<PropSessionExpiry | 1<<PropServerReference | 1<<PropReasonString | 1<<PropUser
	allowAuth        uint64 = 1<<PropAuthMethod | 1<<PropAuthData | 1<<PropReasonString | 1<<PropUser

	// knownProps is every defined identifier: the encoder ignores other bits
	// of Present.
	knownProps = allowConnect | allowConnack | allowPublish | allowWill | allowDisconnect | allowAuth
)

// Field accessors shared by the decoder and the encoder, so that the mapping
// from identifier to struct field is written once per data type.

func (p *Properties) bytePtr(id PropID) *byte {
	switch id {
	case PropPayloadFormat:
		return &p.PayloadFormat
	case PropRequestProblemInfo:
		return &p.RequestProblemInfo
	case PropRequestResponseInfo:
		return &p.RequestResponseInfo
	case PropMaximumQoS:
		return &p.MaximumQoS
	case PropRetainAvailable:
		return &p.RetainAvailable
	case PropWildcardSubAvailable:
		return &p.WildcardSubAvailable
	case PropSubIDAvailable:
		return &p.SubIDAvailable
	case PropSharedSubAvailable:
		return &p.SharedSubAvailable
	}
	panic("packet: not a byte property")
}

func (p *Properties) u16Ptr(id PropID) *uint16 {
	switch id {
	case PropServerKeepAlive:
		return &p.ServerKeepAlive
	case PropReceiveMaximum:
		return &p.ReceiveMaximum
	case PropTopicAliasMaximum:
		return &p.TopicAliasMaximum
	case PropTopicAlias:
		return &p.TopicAlias
	}
	panic("packet: not a two byte integer property")
}

func (p *Properties) u32Ptr(id PropID) *uint32 {
	switch id {
	case PropMessageExpiry:
		return &p.MessageExpiry
	case PropSessionExpiry:
		return &p.SessionExpiry
	case PropWillDelay:
		return &p.WillDelay
	case PropMaximumPacketSize:
		return &p.MaximumPacketSize
	}
	panic("packet: not a four byte integer property")
}

func (p *Properties) bytesPtr(id PropID) *[]byte {
	switch id {
	case PropContentType:
		return &p.ContentType
	case PropResponseTopic:
		return &p.ResponseTopic
	case PropCorrelationData:
		return &p.CorrelationData
	case PropAssignedClientID:
		return &p.AssignedClientID
	case PropAuthMethod:
		return &p.AuthMethod
	case PropAuthData:
		return &p.AuthData
	case PropResponseInfo:
		return &p.ResponseInfo
	case PropServerReference:
		return &p.ServerReference
	case PropReasonString:
		return &p.ReasonString
	}
	panic("packet: not a string or binary property")
}

// decode reads a property block (Property Length, then the properties) from
// r into p, which the caller has Reset. allowed is the set of properties the
// packet may carry; multiSubID lets the Subscription Identifier repeat, as it
// may in PUBLISH. String and binary values alias the body.
func (p *Properties) decode(r *reader, allowed uint64, multiSubID bool) error {
	n, err := r.varint()
	if err != nil {
		return err
	}
	if r.left() < n {
		return ErrShortBuffer
	}
	pr := reader{b: r.b[r.i : r.i+n]}
	r.i += n
	for pr.left() > 0 {
		// The identifier is a Variable Byte Integer (section 2.2.2.2); every
		// defined one fits in a byte, so anything longer is unknown.
		v, err := pr.varint()
		if err != nil {
			return err
		}
		if v >= len(propKinds) || propKinds[v] == kindNone {
			return ErrUnknownProperty // section 2.2.2.2
		}
		id := PropID(v)
		bit := uint64(1) << id
		if allowed&bit == 0 {
			return ErrPropertyNotAllowed // section 2.2.2.2: not valid for this packet type
		}
		if p.Present&bit != 0 && id != PropUser && !(id == PropSubscriptionID && multiSubID) {
			return ErrDuplicateProperty // each property section: "It is a Protocol Error to include ... more than once"
		}
		p.Present |= bit
		switch propKinds[id] {
		case kindByte:
			c, err := pr.u8()
			if err != nil {
				return err
			}
			// Every byte property is a 0/1 indicator (payload format,
			// request flags, availability flags, Maximum QoS).
			if c > 1 {
				return ErrBadPropertyValue // sections 3.1.2.11.6-7, 3.2.2.3.4-5, 3.2.2.3.11-13, 3.3.2.3.2
			}
			*p.bytePtr(id) = c
		case kindU16:
			x, err := pr.u16()
			if err != nil {
				return err
			}
			if x == 0 {
				switch id {
				case PropReceiveMaximum:
					return ErrBadPropertyValue // sections 3.1.2.11.3, 3.2.2.3.3
				case PropTopicAlias:
					return ErrZeroTopicAlias // [MQTT-3.3.2-8]
				}
			}
			*p.u16Ptr(id) = x
		case kindU32:
			x, err := pr.u32()
			if err != nil {
				return err
			}
			if x == 0 && id == PropMaximumPacketSize {
				return ErrBadPropertyValue // sections 3.1.2.11.4, 3.2.2.3.6
			}
			*p.u32Ptr(id) = x
		case kindVarint: // only the Subscription Identifier
			x, err := pr.varint()
			if err != nil {
				return err
			}
			// 1..268,435,455; the upper bound is the varint's own limit.
			if x == 0 {
				return ErrZeroSubscriptionID // sections 3.3.2.3.8, 3.8.2.1.2
			}
			p.SubscriptionIDs = append(p.SubscriptionIDs, uint32(x))
		case kindString:
			s, err := pr.str()
			if err != nil {
				return err
			}
			*p.bytesPtr(id) = s
		case kindBinary:
			b, err := pr.bin()
			if err != nil {
				return err
			}
			*p.bytesPtr(id) = b
		case kindPair:
			k, err := pr.str()
			if err != nil {
				return err
			}
			v, err := pr.str()
			if err != nil {
				return err // [MQTT-1.5.7-1] both strings must be valid
			}
			p.User = append(p.User, UserProperty{Key: k, Value: v})
		}
	}
	return nil
}

// encodeMask is the set of properties the encoder writes: those marked
// present, with User and SubscriptionIDs decided by whether they hold values.
func (p *Properties) encodeMask() uint64 {
	m := p.Present & knownProps &^ (1<<PropUser | 1<<PropSubscriptionID)
	if len(p.User) > 0 {
		m |= 1 << PropUser
	}
	if len(p.SubscriptionIDs) > 0 {
		m |= 1 << PropSubscriptionID
	}
	return m
}

// Size returns the encoded length of the property block without its own
// Property Length prefix: the value Append writes as that prefix.
func (p *Properties) Size() int {
	n := 0
	for m := p.encodeMask(); m != 0; m &= m - 1 {
		id := PropID(bits.TrailingZeros64(m))
		switch propKinds[id] {
		case kindByte:
			n += 2
		case kindU16:
			n += 3
		case kindU32:
			n += 5
		case kindString, kindBinary:
			n += 3 + len(*p.bytesPtr(id))
		case kindVarint:
			for _, s := range p.SubscriptionIDs {
				n += 1 + VarintSize(int(s))
			}
		case kindPair:
			for _, u := range p.User {
				n += 5 + len(u.Key) + len(u.Value)
			}
		}
	}
	return n
}

// Append appends the property block: the Property Length, then every
// present property in identifier order. User pairs keep their order (the
// server must preserve it, [MQTT-3.3.2-18]) and each Subscription Identifier
// is written as its own 0x0B property. A Subscription Identifier above
// MaxRemainingLength cannot be encoded and makes Append panic.
func (p *Properties) Append(dst []byte) []byte {
	return p.appendSized(dst, p.Size())
}

// appendSized is Append for a caller that already computed Size, which every
// packet encoder does to work out the Remaining Length.
func (p *Properties) appendSized(dst []byte, size int) []byte {
	dst = AppendVarint(dst, size)
	for m := p.encodeMask(); m != 0; m &= m - 1 {
		id := PropID(bits.TrailingZeros64(m))
		switch propKinds[id] {
		case kindByte:
			dst = append(dst, byte(id), *p.bytePtr(id))
		case kindU16:
			dst = appendU16(append(dst, byte(id)), *p.u16Ptr(id))
		case kindU32:
			dst = appendU32(append(dst, byte(id)), *p.u32Ptr(id))
		case kindString, kindBinary:
			dst = appendBin(append(dst, byte(id)), *p.bytesPtr(id))
		case kindVarint:
			for _, s := range p.SubscriptionIDs {
				dst = AppendVarint(append(dst, byte(id)), int(s))
			}
		case kindPair:
			for _, u := range p.User {
				dst = append(dst, byte(id))
				dst = appendBin(dst, u.Key)
				dst = appendBin(dst, u.Value)
			}
		}
	}
	return dst
}

// blockSize is the size of a whole property block: prefix plus properties.
func blockSize(propsSize int) int { return VarintSize(propsSize) + propsSize }
