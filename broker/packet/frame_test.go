package packet

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
)

func TestReadFrame(t *testing.T) {
	tests := []struct {
		name    string
		buf     []byte
		maxSize int
		want    FixedHeader
		hlen    int
		err     error
	}{
		{name: "empty", buf: nil},
		{name: "type byte only", buf: []byte{0x30}},
		{name: "length continues", buf: []byte{0x30, 0x80}},
		{name: "three continuation bytes", buf: []byte{0x30, 0x80, 0x80, 0x80}},
		{name: "zero length", buf: []byte{0xC0, 0x00}, want: FixedHeader{Type: PINGREQ}, hlen: 2},
		{name: "1 byte max", buf: []byte{0x30, 0x7F}, want: FixedHeader{Type: PUBLISH, Remaining: 127}, hlen: 2},
		{name: "2 byte min", buf: []byte{0x30, 0x80, 0x01}, want: FixedHeader{Type: PUBLISH, Remaining: 128}, hlen: 3},
		{name: "2 byte max", buf: []byte{0x30, 0xFF, 0x7F}, want: FixedHeader{Type: PUBLISH, Remaining: 16_383}, hlen: 3},
		{name: "3 byte min", buf: []byte{0x30, 0x80, 0x80, 0x01}, want: FixedHeader{Type: PUBLISH, Remaining: 16_384}, hlen: 4},
		{name: "3 byte max", buf: []byte{0x30, 0xFF, 0xFF, 0x7F}, want: FixedHeader{Type: PUBLISH, Remaining: 2_097_151}, hlen: 4},
		{name: "4 byte min", buf: []byte{0x30, 0x80, 0x80, 0x80, 0x01}, want: FixedHeader{Type: PUBLISH, Remaining: 2_097_152}, hlen: 5},
		{name: "4 byte max", buf: []byte{0x30, 0xFF, 0xFF, 0xFF, 0x7F}, want: FixedHeader{Type: PUBLISH, Remaining: MaxRemainingLength}, hlen: 5},
		{name: "publish flags kept", buf: []byte{0x3D, 0x02}, want: FixedHeader{Type: PUBLISH, Flags: 0x0D, Remaining: 2}, hlen: 2},
		{name: "body bytes ignored", buf: []byte{0x40, 0x02, 0x00, 0x01, 0xFF}, want: FixedHeader{Type: PUBACK, Remaining: 2}, hlen: 2},
		// The fourth byte's continuation bit is enough: no need to wait for a fifth.
		{name: "5 byte varint", buf: []byte{0x30, 0xFF, 0xFF, 0xFF, 0xFF}, err: ErrVarintTooLong},
		{name: "5 byte varint with fifth byte", buf: []byte{0x30, 0x80, 0x80, 0x80, 0x80, 0x01}, err: ErrVarintTooLong},
		{name: "not minimal 2", buf: []byte{0x30, 0x80, 0x00}, err: ErrVarintNotMinimal},
		{name: "not minimal 4", buf: []byte{0x30, 0xFF, 0x80, 0x80, 0x00}, err: ErrVarintNotMinimal},
		{name: "type 0", buf: []byte{0x00}, err: ErrReservedType},
		{name: "max size exact", buf: []byte{0x30, 0x05}, maxSize: 7, want: FixedHeader{Type: PUBLISH, Remaining: 5}, hlen: 2},
		{name: "max size exceeded", buf: []byte{0x30, 0x06}, maxSize: 7, want: FixedHeader{Type: PUBLISH, Remaining: 6}, hlen: 2, err: ErrPacketTooLarge},
		// Rejected from the header alone: the 256 MB body never has to arrive.
		{name: "max size huge", buf: []byte{0x30, 0xFF, 0xFF, 0xFF, 0x7F}, maxSize: 1 << 20, want: FixedHeader{Type: PUBLISH, Remaining: MaxRemainingLength}, hlen: 5, err: ErrPacketTooLarge},
		{name: "max size partial header", buf: []byte{0x30, 0xFF}, maxSize: 10},
		{name: "max size counts header", buf: []byte{0x30, 0x80, 0x01}, maxSize: 130, want: FixedHeader{Type: PUBLISH, Remaining: 128}, hlen: 3, err: ErrPacketTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, n, err := ReadFrame(tt.buf, tt.maxSize)
			if err != tt.err || h != tt.want || n != tt.hlen {
				t.Fatalf("ReadFrame(% x, %d) = %+v, %d, %v; want %+v, %d, %v", tt.buf, tt.maxSize, h, n, err, tt.want, tt.hlen, tt.err)
			}
		})
	}
}

// TestReadFrameFlags checks the reserved flag rules of every type and flag
// combination (MQTT 5.0 table 2-2), from the first byte alone.
func TestReadFrameFlags(t *testing.T) {
	for typ := range Type(16) {
		for flags := range byte(16) {
			var want error
			switch typ {
			case 0:
				want = ErrReservedType
			case PUBLISH:
			case PUBREL, SUBSCRIBE, UNSUBSCRIBE:
				if flags != 0b0010 {
					want = ErrReservedFlags
				}
			default:
				if flags != 0 {
					want = ErrReservedFlags
				}
			}
			b0 := byte(typ)<<4 | flags
			if _, n, err := ReadFrame([]byte{b0}, 0); err != want || n != 0 {
				t.Errorf("ReadFrame(%#02x) with one byte: n=%d err=%v, want %v", b0, n, err, want)
			}
			h, n, err := ReadFrame([]byte{b0, 0}, 0)
			if err != want {
				t.Errorf("ReadFrame(%#02x 00): %v, want %v", b0, err, want)
			}
			if want == nil && (h != FixedHeader{Type: typ, Flags: flags} || n != 2) {
				t.Errorf("ReadFrame(%#02x 00) = %+v, %d", b0, h, n)
			}
		}
	}
}

func TestVarint(t *testing.T) {
	for _, n := range []int{0, 1, 127, 128, 16_383, 16_384, 2_097_151, 2_097_152, MaxRemainingLength} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			b := AppendVarint([]byte{0xAA}, n)[1:]
			if len(b) != VarintSize(n) {
				t.Fatalf("AppendVarint wrote %d bytes, VarintSize says %d", len(b), VarintSize(n))
			}
			got, size, err := readVarint(b)
			if err != nil || got != n || size != len(b) {
				t.Fatalf("readVarint(% x) = %d, %d, %v", b, got, size, err)
			}
			// Every proper prefix asks for more bytes rather than failing.
			for k := range len(b) {
				if _, size, err := readVarint(b[:k]); size != 0 || err != nil {
					t.Fatalf("readVarint(% x) = size %d, %v; want need-more", b[:k], size, err)
				}
			}
		})
	}
	if VarintSize(MaxRemainingLength+1) != 5 {
		t.Errorf("VarintSize(max+1) = %d, want 5", VarintSize(MaxRemainingLength+1))
	}
	for _, n := range []int{-1, MaxRemainingLength + 1} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("AppendVarint(%d) did not panic", n)
				}
			}()
			AppendVarint(nil, n)
		}()
	}
}

func TestPropertiesEncode(t *testing.T) {
	p := Properties{
		MessageExpiry:   7,
		ContentType:     []byte("ct"),
		User:            []UserProperty{{[]byte("b"), []byte("2")}, {[]byte("a"), []byte("1")}},
		SubscriptionIDs: []uint32{300, 1},
	}
	p.Set(PropMessageExpiry)
	p.Set(PropContentType)
	p.Present |= 1 << 4 // not a property identifier: ignored
	p.Set(PropAuthData) // present but empty: written with length 0
	p.Clear(PropUser)   // User is written because it is non-empty
	want := []byte{
		0x02, 0x00, 0x00, 0x00, 0x07,
		0x03, 0x00, 0x02, 'c', 't',
		0x0B, 0xAC, 0x02, // 300
		0x0B, 0x01,
		0x16, 0x00, 0x00,
		0x26, 0x00, 0x01, 'b', 0x00, 0x01, '2',
		0x26, 0x00, 0x01, 'a', 0x00, 0x01, '1',
	}
	if p.Size() != len(want) {
		t.Fatalf("Size() = %d, want %d", p.Size(), len(want))
	}
	got := p.Append(nil)
	if !bytes.Equal(got, append([]byte{byte(len(want))}, want...)) {
		t.Fatalf("Append:\n got % x\nwant %02x % x", got, len(want), want)
	}

	var q Properties
	r := reader{b: got}
	if err := q.decode(&r, allowPublish|allowConnect, true); err != nil {
		t.Fatal(err)
	}
	if q.MessageExpiry != 7 || string(q.ContentType) != "ct" || len(q.AuthData) != 0 || !q.Has(PropAuthData) ||
		len(q.User) != 2 || string(q.User[0].Key) != "b" || len(q.SubscriptionIDs) != 2 || q.SubscriptionIDs[0] != 300 {
		t.Fatalf("decoded %+v", q)
	}

	var empty Properties
	if empty.Size() != 0 || !bytes.Equal(empty.Append(nil), []byte{0}) {
		t.Fatalf("empty properties: Size %d, Append % x", empty.Size(), empty.Append(nil))
	}
}

// TestPropertyTables checks that the per-packet allowed sets only name
// defined properties and that every defined property is allowed somewhere.
func TestPropertyTables(t *testing.T) {
	var defined uint64
	for id, k := range propKinds {
		if k != kindNone {
			defined |= 1 << id
		}
	}
	for _, set := range []uint64{allowConnect, allowConnack, allowPublish, allowWill, allowAck,
		allowSubscribe, allowUnsubscribe, allowDisconnect, allowAuth} {
		if set&^defined != 0 {
			t.Errorf("allowed set %#x names undefined identifiers %#x", set, set&^defined)
		}
	}
	if knownProps != defined {
		t.Errorf("knownProps %#x, defined %#x", knownProps, defined)
	}
}

func TestReaderAliasesWithoutCapacity(t *testing.T) {
	// A decoded field must not be appendable into the bytes that follow it.
	body := []byte{0x00, 0x01, 'a', 'X'}
	r := reader{b: body[:3]}
	s, err := r.str()
	if err != nil {
		t.Fatal(err)
	}
	if cap(s) != 1 {
		t.Fatalf("cap %d, want 1", cap(s))
	}
	_ = append(s, 'Y')
	rest := (&reader{b: body[:3], i: 3}).rest()
	_ = append(rest, 'Z')
	if body[3] != 'X' {
		t.Fatal("append through a decoded slice overwrote the next byte")
	}
	if !errors.Is(ErrVarintNotMinimal, MalformedPacket) {
		t.Fatal("ErrVarintNotMinimal does not unwrap to MalformedPacket")
	}
}
