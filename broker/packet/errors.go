package packet

// Decode errors added alongside the ones in reason.go. Like those, they are
// package-level values so that returning one does not allocate; compare with
// errors.Is or read the reason code with CodeOf.
var (
	// ErrVarintNotMinimal is a Variable Byte Integer that uses more bytes than
	// its value needs, for example 0x80 0x00 for zero. The rule is written in
	// MQTT 5.0 only, but the framer does not know the version and no 3.1.1
	// client sends such encodings, so it is applied to every version.
	ErrVarintNotMinimal = malformed("variable byte integer not minimally encoded") // [MQTT-1.5.5-1]

	// ErrConnackReserved is a CONNACK whose acknowledge flags have any of bits
	// 7-1 set.
	ErrConnackReserved = malformed("CONNACK reserved acknowledge flags set") // [MQTT-3.2.2-1]

	// ErrConnackSessionPresent is a CONNACK that refuses the connection but
	// still claims a session is present.
	ErrConnackSessionPresent = protocolError("CONNACK with a failure reason and session present set") // [MQTT-3.2.2-6] (3.1.1: [MQTT-3.2.2-4])

	// ErrMissingAuthMethod is v5 Authentication Data without an Authentication
	// Method in CONNECT, or an AUTH packet with a body but no Authentication
	// Method.
	ErrMissingAuthMethod = protocolError("authentication data or AUTH without an authentication method") // sections 3.1.2.11.10, 3.15.2.2.2

	// ErrBadSubscriptionQoS is a v5 SUBSCRIBE whose Maximum QoS option is 3.
	// MQTT 5.0 calls this a protocol error; MQTT 3.1.1 calls it malformed and
	// gets ErrBadQoS instead.
	ErrBadSubscriptionQoS = protocolError("subscription maximum QoS 3") // section 3.8.3.1

	// ErrNoReasonCodes is a SUBACK, or a v5 UNSUBACK, whose payload has no
	// reason codes: there is one per topic filter, and a request has at least
	// one filter.
	ErrNoReasonCodes = malformed("SUBACK or UNSUBACK without reason codes") // section 2.4

	// ErrWrongType is returned by a decoder that serves several packet types
	// (Ack.Decode) when it is handed a type it does not decode: a caller bug,
	// not something a peer can cause.
	ErrWrongType = malformed("packet type does not match the decoder")
)
