package broker

import (
	"reflect"
	"testing"
	"time"

	"github.com/linemq/linemq/broker/packet"
)

func TestMessageBinaryRoundTrip(t *testing.T) {
	p := packet.Publish{QoS: 2, Retain: true, Payload: []byte("payload")}
	p.Props.Set(packet.PropContentType)
	p.Props.ContentType = []byte("text/plain")
	p.Props.Set(packet.PropMessageExpiry)
	p.Props.MessageExpiry = 60
	p.Props.Set(packet.PropPayloadFormat)
	p.Props.PayloadFormat = 1
	p.Props.User = []packet.UserProperty{{Key: []byte("k"), Value: []byte("v")}}
	m := newMessage(&p, []byte("a/b"), "origin", time.Unix(1700000000, 5))
	got, err := UnmarshalMessage(m.AppendBinary(nil))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.AppendBinary(nil), m.AppendBinary(nil)) || got.Topic != "a/b" || got.Origin != "origin" ||
		!got.Expires.Equal(m.Expires) || !got.Created.Equal(m.Created) {
		t.Fatalf("round trip: %+v != %+v", got, m)
	}
	for i := range len(m.AppendBinary(nil)) - 1 {
		if _, err := UnmarshalMessage(m.AppendBinary(nil)[:i]); err == nil {
			t.Fatalf("truncated at %d: no error", i)
		}
	}
}

func FuzzUnmarshalMessage(f *testing.F) {
	m := NewMessage("t", []byte("x"), 1, false)
	f.Add(m.AppendBinary(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := UnmarshalMessage(b)
		if err != nil {
			return
		}
		again, err := UnmarshalMessage(m.AppendBinary(nil))
		if err != nil || !reflect.DeepEqual(again.AppendBinary(nil), m.AppendBinary(nil)) {
			t.Fatalf("re-encode mismatch: %v", err)
		}
	})
}
