package packet

// Type is an MQTT control packet type, the high nibble of the first byte.
type Type byte

// Control packet types (MQTT 5.0 section 2.1.2).
const (
	CONNECT     Type = 1
	CONNACK     Type = 2
	PUBLISH     Type = 3
	PUBACK      Type = 4
	PUBREC      Type = 5
	PUBREL      Type = 6
	PUBCOMP     Type = 7
	SUBSCRIBE   Type = 8
	SUBACK      Type = 9
	UNSUBSCRIBE Type = 10
	UNSUBACK    Type = 11
	PINGREQ     Type = 12
	PINGRESP    Type = 13
	DISCONNECT  Type = 14
	AUTH        Type = 15
)

var typeNames = [...]string{"RESERVED", "CONNECT", "CONNACK", "PUBLISH", "PUBACK", "PUBREC",
	"PUBREL", "PUBCOMP", "SUBSCRIBE", "SUBACK", "UNSUBSCRIBE", "UNSUBACK", "PINGREQ",
	"PINGRESP", "DISCONNECT", "AUTH"}

// String returns the packet type's name as the spec spells it.
func (t Type) String() string {
	if int(t) < len(typeNames) {
		return typeNames[t]
	}
	return "INVALID"
}

// Version is the protocol level byte of CONNECT.
type Version byte

// Protocol versions the broker speaks.
const (
	V31  Version = 3 // MQTT 3.1 ("MQIsdp"), accepted and treated as 3.1.1
	V311 Version = 4 // MQTT 3.1.1
	V5   Version = 5 // MQTT 5.0
)

// MaxRemainingLength is the largest value a variable byte integer can hold,
// and so the largest Remaining Length of any packet (MQTT-1.5.5).
const MaxRemainingLength = 268_435_455

// FixedHeader is the first byte and the Remaining Length of a packet.
type FixedHeader struct {
	Type      Type
	Flags     byte // the low nibble of the first byte
	Remaining int  // the length of the variable header and payload
}

// UserProperty is one name/value pair of the v5 User Property (0x26).
// It may appear any number of times and its order is kept.
type UserProperty struct {
	Key, Value []byte
}

// PropID identifies a v5 property (MQTT 5.0 section 2.2.2.2).
type PropID byte

// Property identifiers.
const (
	PropPayloadFormat        PropID = 0x01
	PropMessageExpiry        PropID = 0x02
	PropContentType          PropID = 0x03
	PropResponseTopic        PropID = 0x08
	PropCorrelationData      PropID = 0x09
	PropSubscriptionID       PropID = 0x0B
	PropSessionExpiry        PropID = 0x11
	PropAssignedClientID     PropID = 0x12
	PropServerKeepAlive      PropID = 0x13
	PropAuthMethod           PropID = 0x15
	PropAuthData             PropID = 0x16
	PropRequestProblemInfo   PropID = 0x17
	PropWillDelay            PropID = 0x18
	PropRequestResponseInfo  PropID = 0x19
	PropResponseInfo         PropID = 0x1A
	PropServerReference      PropID = 0x1C
	PropReasonString         PropID = 0x1F
	PropReceiveMaximum       PropID = 0x21
	PropTopicAliasMaximum    PropID = 0x22
	PropTopicAlias           PropID = 0x23
	PropMaximumQoS           PropID = 0x24
	PropRetainAvailable      PropID = 0x25
	PropUser                 PropID = 0x26
	PropMaximumPacketSize    PropID = 0x27
	PropWildcardSubAvailable PropID = 0x28
	PropSubIDAvailable       PropID = 0x29
	PropSharedSubAvailable   PropID = 0x2A
)

// Properties holds the v5 properties of one packet. Present records which
// properties the packet carried (bit n set for PropID n), so a zero value
// (for example a zero Message Expiry Interval) can be told from an absent
// one. For encoding, a property is written when its bit is set with [Properties.Set]
// (User and SubscriptionIDs are written when non-empty).
//
// Which properties a packet may carry is checked by the decoder; a property
// not allowed in that packet is a malformed packet.
type Properties struct {
	Present uint64

	PayloadFormat        byte
	MessageExpiry        uint32
	ContentType          []byte
	ResponseTopic        []byte
	CorrelationData      []byte
	SubscriptionIDs      []uint32 // PUBLISH may carry several; SUBSCRIBE at most one
	SessionExpiry        uint32
	AssignedClientID     []byte
	ServerKeepAlive      uint16
	AuthMethod           []byte
	AuthData             []byte
	RequestProblemInfo   byte
	WillDelay            uint32
	RequestResponseInfo  byte
	ResponseInfo         []byte
	ServerReference      []byte
	ReasonString         []byte
	ReceiveMaximum       uint16
	TopicAliasMaximum    uint16
	TopicAlias           uint16
	MaximumQoS           byte
	RetainAvailable      byte
	User                 []UserProperty
	MaximumPacketSize    uint32
	WildcardSubAvailable byte
	SubIDAvailable       byte
	SharedSubAvailable   byte
}

// Has reports whether property id was present (decoded) or set (to encode).
func (p *Properties) Has(id PropID) bool { return p.Present&(1<<id) != 0 }

// Set marks property id as present, so the encoder writes it.
func (p *Properties) Set(id PropID) { p.Present |= 1 << id }

// Clear marks property id as absent.
func (p *Properties) Clear(id PropID) { p.Present &^= 1 << id }

// Reset empties p but keeps the capacity of its slices for reuse.
func (p *Properties) Reset() {
	user, ids := p.User[:0], p.SubscriptionIDs[:0]
	*p = Properties{User: user, SubscriptionIDs: ids}
}

// Connect is the CONNECT packet.
type Connect struct {
	ProtocolName []byte  // "MQTT", or "MQIsdp" for 3.1
	Version      Version // protocol level
	CleanStart   bool    // Clean Start (v5) or Clean Session (3.1.1)
	KeepAlive    uint16  // seconds
	Props        Properties
	ClientID     []byte

	WillFlag    bool
	WillQoS     byte
	WillRetain  bool
	WillProps   Properties
	WillTopic   []byte
	WillPayload []byte

	UsernameFlag bool
	Username     []byte
	PasswordFlag bool
	Password     []byte
}

// Connack is the CONNACK packet. For 3.1.1 the encoder maps Reason to the
// nearest 3.1.1 return code (see [ReasonCode.V3ConnackCode]).
type Connack struct {
	SessionPresent bool
	Reason         ReasonCode
	Props          Properties
}

// Publish is the PUBLISH packet.
type Publish struct {
	Dup      bool
	QoS      byte
	Retain   bool
	Topic    []byte // may be empty in v5 when a Topic Alias is set
	PacketID uint16 // only for QoS 1 and 2
	Props    Properties
	Payload  []byte
}

// Ack is PUBACK, PUBREC, PUBREL or PUBCOMP: a packet identifier, and in v5 a
// reason code and properties. Type says which.
type Ack struct {
	Type     Type
	PacketID uint16
	Reason   ReasonCode
	Props    Properties
}

// Subscription is one topic filter of SUBSCRIBE with its options.
type Subscription struct {
	Filter            []byte
	QoS               byte // maximum QoS requested
	NoLocal           bool // v5
	RetainAsPublished bool // v5
	RetainHandling    byte // v5: 0 send at subscribe, 1 only if new, 2 never
}

// Subscribe is the SUBSCRIBE packet.
type Subscribe struct {
	PacketID uint16
	Props    Properties
	Subs     []Subscription
}

// Suback is the SUBACK packet. In 3.1.1 only granted QoS 0-2 and 0x80 exist;
// the encoder writes 0x80 for any failure code.
type Suback struct {
	PacketID uint16
	Props    Properties
	Reasons  []ReasonCode
}

// Unsubscribe is the UNSUBSCRIBE packet.
type Unsubscribe struct {
	PacketID uint16
	Props    Properties
	Filters  [][]byte
}

// Unsuback is the UNSUBACK packet. 3.1.1 has no reason codes; the encoder
// omits them for that version.
type Unsuback struct {
	PacketID uint16
	Props    Properties
	Reasons  []ReasonCode
}

// Disconnect is the DISCONNECT packet. In 3.1.1 it has no body.
type Disconnect struct {
	Reason ReasonCode
	Props  Properties
}

// Auth is the v5 AUTH packet.
type Auth struct {
	Reason ReasonCode
	Props  Properties
}
