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
// This package depends on the standard library only.
package packet
