// Package packet is the MQTT 3.1.1 and 5.0 wire format: framing, a decoder and
// an encoder for every control packet, the v5 properties and the reason codes.
//
// # Model
//
// The broker reads bytes into a per-connection buffer, asks [ReadFrame] where
// the first complete packet ends, and decodes that packet's body into a struct
// it owns and reuses (for example one [Publish] per connection). Encoders are
// Append methods that append the wire form to a caller's slice, so a writer
// can build many packets into one pooled buffer.
//
// # Caveats
//
// Decoded []byte fields (topics, payloads, client identifiers, property
// values) alias the body that was decoded. They are valid only until the
// caller reuses or overwrites that buffer; a caller that keeps a value past
// that point must copy it. Writing into them writes into the read buffer.
//
// Decoders reuse the capacity of slice fields already present in the
// destination struct (User properties, subscription lists, reason codes), so
// decoding into a reused struct does not allocate in steady state.
//
// Decode errors are *[Error] values that carry the reason code the spec asks
// for ([MalformedPacket] or [ProtocolError]); [CodeOf] extracts it.
//
// # Versions
//
// Decoders and encoders take the connection's protocol [Version]. 3.1 and
// 3.1.1 share one wire format apart from CONNECT, so every version below [V5]
// is handled as 3.1.1 and [V5] as 5.0. Encoders leave out what the version
// cannot carry (properties, most reason codes, subscription options), so one
// decoded PUBLISH can be forwarded to subscribers of either version.
//
// # What is checked where
//
// The decoders enforce every rule that can be checked from the packet alone:
// framing, field lengths, UTF-8, reserved bits and flags, QoS values, packet
// identifiers, which properties a packet may carry and how often, property
// value ranges, and which reason codes a packet may carry. Rules that need
// connection state or the direction of the packet are the broker's: topic
// name and filter syntax, Topic Alias against the negotiated maximum,
// Maximum QoS and Receive Maximum, a Subscription Identifier sent by a
// client, No Local on a shared subscription, Session Expiry in DISCONNECT
// after a zero one in CONNECT, and an AUTH method matching the CONNECT.
//
// Encoders do not validate; they write what the caller built.
//
// This package depends on the standard library only.
package packet
