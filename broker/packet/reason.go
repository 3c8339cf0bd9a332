package packet

import "errors"

// ReasonCode is an MQTT 5.0 reason code (section 2.4). It implements error,
// so a handler can return one and the session edge writes its byte.
type ReasonCode byte

// Reason codes. Several share a value (0x00 is Success, Normal disconnection
// and Granted QoS 0); the name says the context.
const (
	Success                     ReasonCode = 0x00
	NormalDisconnection         ReasonCode = 0x00
	GrantedQoS0                 ReasonCode = 0x00
	GrantedQoS1                 ReasonCode = 0x01
	GrantedQoS2                 ReasonCode = 0x02
	DisconnectWithWill          ReasonCode = 0x04
	NoMatchingSubscribers       ReasonCode = 0x10
	NoSubscriptionExisted       ReasonCode = 0x11
	ContinueAuthentication      ReasonCode = 0x18
	ReAuthenticate              ReasonCode = 0x19
	UnspecifiedError            ReasonCode = 0x80
	MalformedPacket             ReasonCode = 0x81
	ProtocolError               ReasonCode = 0x82
	ImplementationSpecificError ReasonCode = 0x83
	UnsupportedProtocolVersion  ReasonCode = 0x84
	ClientIDNotValid            ReasonCode = 0x85
	BadUsernameOrPassword       ReasonCode = 0x86
	NotAuthorized               ReasonCode = 0x87
	ServerUnavailable           ReasonCode = 0x88
	ServerBusy                  ReasonCode = 0x89
	Banned                      ReasonCode = 0x8A
	ServerShuttingDown          ReasonCode = 0x8B
	BadAuthenticationMethod     ReasonCode = 0x8C
	KeepAliveTimeout            ReasonCode = 0x8D
	SessionTakenOver            ReasonCode = 0x8E
	TopicFilterInvalid          ReasonCode = 0x8F
	TopicNameInvalid            ReasonCode = 0x90
	PacketIDInUse               ReasonCode = 0x91
	PacketIDNotFound            ReasonCode = 0x92
	ReceiveMaximumExceeded      ReasonCode = 0x93
	TopicAliasInvalid           ReasonCode = 0x94
	PacketTooLarge              ReasonCode = 0x95
	MessageRateTooHigh          ReasonCode = 0x96
	QuotaExceeded               ReasonCode = 0x97
	AdministrativeAction        ReasonCode = 0x98
	PayloadFormatInvalid        ReasonCode = 0x99
	RetainNotSupported          ReasonCode = 0x9A
	QoSNotSupported             ReasonCode = 0x9B
	UseAnotherServer            ReasonCode = 0x9C
	ServerMoved                 ReasonCode = 0x9D
	SharedSubsNotSupported      ReasonCode = 0x9E
	ConnectionRateExceeded      ReasonCode = 0x9F
	MaximumConnectTime          ReasonCode = 0xA0
	SubIDsNotSupported          ReasonCode = 0xA1
	WildcardSubsNotSupported    ReasonCode = 0xA2
)

var reasonNames = map[ReasonCode]string{
	0x00: "success", 0x01: "granted QoS 1", 0x02: "granted QoS 2",
	0x04: "disconnect with will message", 0x10: "no matching subscribers",
	0x11: "no subscription existed", 0x18: "continue authentication", 0x19: "re-authenticate",
	0x80: "unspecified error", 0x81: "malformed packet", 0x82: "protocol error",
	0x83: "implementation specific error", 0x84: "unsupported protocol version",
	0x85: "client identifier not valid", 0x86: "bad user name or password",
	0x87: "not authorized", 0x88: "server unavailable", 0x89: "server busy", 0x8A: "banned",
	0x8B: "server shutting down", 0x8C: "bad authentication method", 0x8D: "keep alive timeout",
	0x8E: "session taken over", 0x8F: "topic filter invalid", 0x90: "topic name invalid",
	0x91: "packet identifier in use", 0x92: "packet identifier not found",
	0x93: "receive maximum exceeded", 0x94: "topic alias invalid", 0x95: "packet too large",
	0x96: "message rate too high", 0x97: "quota exceeded", 0x98: "administrative action",
	0x99: "payload format invalid", 0x9A: "retain not supported", 0x9B: "QoS not supported",
	0x9C: "use another server", 0x9D: "server moved", 0x9E: "shared subscriptions not supported",
	0x9F: "connection rate exceeded", 0xA0: "maximum connect time",
	0xA1: "subscription identifiers not supported", 0xA2: "wildcard subscriptions not supported",
}

// String returns the reason code's name in lower case, as a log line wants it.
func (r ReasonCode) String() string {
	if s, ok := reasonNames[r]; ok {
		return s
	}
	return "unknown reason code"
}

// Error makes a reason code usable as an error.
func (r ReasonCode) Error() string { return "mqtt: " + r.String() }

// IsError reports whether r signals failure (0x80 and above).
func (r ReasonCode) IsError() bool { return r >= 0x80 }

// V3ConnackCode maps a v5 CONNACK reason code to the 3.1.1 return code
// (MQTT 3.1.1 section 3.2.2.3).
func (r ReasonCode) V3ConnackCode() byte {
	switch r {
	case Success:
		return 0x00
	case UnsupportedProtocolVersion:
		return 0x01
	case ClientIDNotValid:
		return 0x02
	case BadUsernameOrPassword:
		return 0x04
	case NotAuthorized, Banned, BadAuthenticationMethod:
		return 0x05
	default:
		return 0x03 // server unavailable
	}
}

// Error is a decode error: what is wrong, and the reason code the spec asks
// the receiver to close the connection with.
type Error struct {
	Code   ReasonCode // MalformedPacket, ProtocolError, PacketTooLarge, ...
	Reason string     // human-readable detail
}

// Error returns the detail, prefixed with the package name.
func (e *Error) Error() string { return "packet: " + e.Reason }

// Unwrap lets errors.Is(err, packet.MalformedPacket) work.
func (e *Error) Unwrap() error { return e.Code }

// CodeOf returns the reason code carried by err: the code of an *Error or a
// ReasonCode anywhere in its chain, or UnspecifiedError.
func CodeOf(err error) ReasonCode {
	var pe *Error
	if errors.As(err, &pe) {
		return pe.Code
	}
	var rc ReasonCode
	if errors.As(err, &rc) {
		return rc
	}
	return UnspecifiedError
}

func malformed(reason string) *Error     { return &Error{Code: MalformedPacket, Reason: reason} }
func protocolError(reason string) *Error { return &Error{Code: ProtocolError, Reason: reason} }

// Decode errors. They are package-level values so that returning one does not
// allocate; compare with errors.Is or read the code with CodeOf.
var (
	ErrVarintTooLong      = malformed("variable byte integer longer than 4 bytes")                         // [MQTT-1.5.5-1]
	ErrShortBuffer        = malformed("packet shorter than its fields")                                    // truncated field
	ErrTrailingBytes      = malformed("bytes left over after the last field")                              // length mismatch
	ErrInvalidUTF8        = malformed("string is not well-formed UTF-8")                                   // [MQTT-1.5.4-1]
	ErrNullInString       = malformed("string contains U+0000")                                            // [MQTT-1.5.4-2]
	ErrReservedFlags      = malformed("reserved fixed-header flags are not as the spec requires")          // [MQTT-2.1.3-1]
	ErrReservedType       = malformed("reserved packet type 0")                                            // [MQTT-2.1.2]
	ErrBadQoS             = malformed("QoS 3 is not a valid QoS")                                          // [MQTT-3.3.1-4]
	ErrDupOnQoS0          = malformed("DUP flag set on a QoS 0 PUBLISH")                                   // [MQTT-3.3.1-2]
	ErrZeroPacketID       = malformed("packet identifier 0")                                               // [MQTT-2.2.1-3]
	ErrDuplicateProperty  = protocolError("property appears more than once")                               // [MQTT-2.2.2-2]
	ErrPropertyNotAllowed = malformed("property not allowed in this packet")                               // section 2.2.2.2
	ErrUnknownProperty    = malformed("unknown property identifier")                                       // section 2.2.2.2
	ErrBadPropertyValue   = protocolError("property value out of range")                                   // e.g. Receive Maximum 0
	ErrBadProtocolName    = protocolError("protocol name is not MQTT")                                     // [MQTT-3.1.2-1]
	ErrUnsupportedVersion = &Error{Code: UnsupportedProtocolVersion, Reason: "unsupported protocol level"} // [MQTT-3.1.2-2]
	ErrConnectReserved    = malformed("CONNECT reserved flag set")                                         // [MQTT-3.1.2-3]
	ErrBadWillFlags       = malformed("will QoS or will retain set without the will flag")                 // [MQTT-3.1.2-11..15]
	ErrPasswordNoUsername = malformed("password flag without user name flag in MQTT 3.1.1")                // [MQTT-3.1.2-22]
	ErrNoSubscriptions    = protocolError("SUBSCRIBE or UNSUBSCRIBE with no topic filter")                 // [MQTT-3.8.3-3] [MQTT-3.10.3-2]
	ErrSubscribeReserved  = malformed("reserved bits of the subscription options set")                     // [MQTT-3.8.3-5]
	ErrBadRetainHandling  = protocolError("retain handling 3")                                             // [MQTT-3.8.3-5]
	ErrPacketTooLarge     = &Error{Code: PacketTooLarge, Reason: "packet exceeds the maximum packet size"}
	ErrBadReasonCode      = malformed("reason code not valid for this packet")
	ErrEmptyTopicNoAlias  = protocolError("PUBLISH with an empty topic and no topic alias") // [MQTT-3.3.2-1]
	ErrZeroTopicAlias     = protocolError("topic alias 0")                                  // [MQTT-3.3.2-8]
	ErrZeroSubscriptionID = protocolError("subscription identifier 0")                      // [MQTT-3.3.4-6]
)
