package packet_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/linemq/linemq/broker/packet"
)

// Fuzz targets, one per decoder. Their seeds are testdata/fuzz/<Target>/,
// generated from the golden corpus (see TestFuzzSeeds) plus any crasher a
// fuzzing run found. Each target checks that decoding never panics, that
// every error carries a reason code, and that a packet that decodes
// re-encodes to bytes that decode to the same packet (and encode to the same
// bytes again), also when decoded into a struct left dirty by another packet.
//
// Run one with: go test -run='^$' -fuzz='^FuzzPublish$' -fuzztime=60s ./broker/packet/

// checkDecode is the property every decoder target checks.
func checkDecode(t *testing.T, v packet.Version, h packet.FixedHeader, body []byte) {
	p, err := decodePacket(v, h, body)
	if err != nil {
		var pe *packet.Error
		if !errors.As(err, &pe) || !packet.CodeOf(err).IsError() {
			t.Fatalf("error %v is not a *packet.Error with a failure reason code", err)
		}
		return
	}
	wire := encodePacket(nil, v, p)
	p2, err := roundTrip(v, wire)
	if err != nil {
		t.Fatalf("re-encoded packet does not decode: %v\npacket: %s\n  wire: % x", err, dumpPacket(p), wire)
	}
	if !equalPackets(p, p2) {
		t.Fatalf("re-decoded packet differs\nfirst:  %s\nsecond: %s\n  wire: % x", dumpPacket(p), dumpPacket(p2), wire)
	}
	if wire2 := encodePacket(nil, v, p2); !bytes.Equal(wire, wire2) {
		t.Fatalf("encoding is not stable\nfirst:  % x\nsecond: % x", wire, wire2)
	}
	// p2 now holds another packet's slices and capacity; decoding the
	// original body into it must give the same result as a fresh struct.
	if err := decodeInto(p2, v, h, body); err != nil || !equalPackets(p, p2) {
		t.Fatalf("decoding into a used struct: %v\nfresh: %s\nused:  %s", err, dumpPacket(p), dumpPacket(p2))
	}
}

func FuzzReadFrame(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte, maxSize int) {
		h, n, err := packet.ReadFrame(data, maxSize)
		if err != nil {
			if !packet.CodeOf(err).IsError() {
				t.Fatalf("error %v without a failure reason code", err)
			}
			if errors.Is(err, packet.ErrPacketTooLarge) {
				if maxSize <= 0 || n == 0 || n+h.Remaining <= maxSize {
					t.Fatalf("ErrPacketTooLarge with maxSize %d, header %d, remaining %d", maxSize, n, h.Remaining)
				}
			} else if n != 0 || h != (packet.FixedHeader{}) {
				t.Fatalf("error %v with header %+v, length %d", err, h, n)
			}
			return
		}
		if n == 0 {
			if len(data) > 4 || h != (packet.FixedHeader{}) {
				t.Fatalf("need-more for %d bytes, header %+v", len(data), h)
			}
			return
		}
		if n < 2 || n > 5 || n > len(data) || h.Remaining < 0 || h.Remaining > packet.MaxRemainingLength {
			t.Fatalf("header length %d, remaining %d for % x", n, h.Remaining, data)
		}
		if maxSize > 0 && n+h.Remaining > maxSize {
			t.Fatalf("accepted %d bytes over maxSize %d", n+h.Remaining, maxSize)
		}
		// Only minimal encodings are accepted, so the header re-encodes exactly.
		if hdr := packet.AppendVarint([]byte{data[0]}, h.Remaining); !bytes.Equal(hdr, data[:n]) {
			t.Fatalf("header % x re-encodes as % x", data[:n], hdr)
		}
		// Any shorter prefix of a valid header asks for more bytes.
		for k := range n {
			if _, m, err := packet.ReadFrame(data[:k], maxSize); m != 0 || err != nil {
				t.Fatalf("prefix of %d bytes: length %d, %v", k, m, err)
			}
		}
	})
}

func FuzzConnect(f *testing.F) {
	f.Fuzz(func(t *testing.T, body []byte) {
		checkDecode(t, packet.V5, packet.FixedHeader{Type: packet.CONNECT}, body)
	})
}

func FuzzConnack(f *testing.F) {
	f.Fuzz(func(t *testing.T, v byte, body []byte) {
		checkDecode(t, packet.Version(v), packet.FixedHeader{Type: packet.CONNACK}, body)
	})
}

func FuzzPublish(f *testing.F) {
	f.Fuzz(func(t *testing.T, v, flags byte, body []byte) {
		checkDecode(t, packet.Version(v), packet.FixedHeader{Type: packet.PUBLISH, Flags: flags & 0x0F}, body)
	})
}

// FuzzAck covers PUBACK (t%4==0), PUBREC, PUBREL and PUBCOMP.
func FuzzAck(f *testing.F) {
	f.Fuzz(func(t *testing.T, v, typ byte, body []byte) {
		checkDecode(t, packet.Version(v), packet.FixedHeader{Type: packet.PUBACK + packet.Type(typ%4)}, body)
	})
}

func FuzzSubscribe(f *testing.F) {
	f.Fuzz(func(t *testing.T, v byte, body []byte) {
		checkDecode(t, packet.Version(v), packet.FixedHeader{Type: packet.SUBSCRIBE, Flags: 0b0010}, body)
	})
}

func FuzzSuback(f *testing.F) {
	f.Fuzz(func(t *testing.T, v byte, body []byte) {
		checkDecode(t, packet.Version(v), packet.FixedHeader{Type: packet.SUBACK}, body)
	})
}

func FuzzUnsubscribe(f *testing.F) {
	f.Fuzz(func(t *testing.T, v byte, body []byte) {
		checkDecode(t, packet.Version(v), packet.FixedHeader{Type: packet.UNSUBSCRIBE, Flags: 0b0010}, body)
	})
}

func FuzzUnsuback(f *testing.F) {
	f.Fuzz(func(t *testing.T, v byte, body []byte) {
		checkDecode(t, packet.Version(v), packet.FixedHeader{Type: packet.UNSUBACK}, body)
	})
}

// FuzzDisconnectAuth covers PINGREQ (t%4==0), PINGRESP, DISCONNECT and AUTH:
// the packets whose body may be empty.
func FuzzDisconnectAuth(f *testing.F) {
	f.Fuzz(func(t *testing.T, v, typ byte, body []byte) {
		checkDecode(t, packet.Version(v), packet.FixedHeader{Type: packet.PINGREQ + packet.Type(typ%4)}, body)
	})
}
