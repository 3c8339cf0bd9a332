package broker

import (
	"bytes"
	"testing"

	"github.com/linemq/linemq/broker/packet"
)

func sampleState() *SessionState {
	return &SessionState{
		Session: SessionRecord{ClientID: "plc/7", Version: packet.V5, ExpiryInterval: 3600, Subscriptions: []SubscriptionRecord{
			{Filter: "$share/g/line/#", QoS: 1},
			{Filter: "alarms/+", QoS: 2, NoLocal: true, RetainAsPublished: true, RetainHandling: 2, SubscriptionID: 42},
		}},
		Messages: []*MessageRecord{
			{Seq: 3, Message: NewMessage("line/1", []byte("a"), 1, false), QoS: 1, PacketID: 9, Sent: true, GroupName: "g", GroupFilter: "line/#"},
			{Seq: 4, Message: NewMessage("alarms/x", []byte("b"), 2, true), QoS: 2, PacketID: 10, Sent: true, Released: true, SubIDs: []uint32{42}},
			{Seq: 5, Message: NewMessage("alarms/y", []byte{}, 1, false), QoS: 1, Retain: true},
		},
		Inbound: []uint16{1, 65535},
	}
}

func TestSessionStateRoundTrip(t *testing.T) {
	want := sampleState()
	b := want.AppendBinary(nil)
	got, err := UnmarshalSessionState(b)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.AppendBinary(nil), b) {
		t.Fatal("re-encoding differs")
	}
	s := got.Session
	if s.ClientID != "plc/7" || s.Version != packet.V5 || s.ExpiryInterval != 3600 || len(s.Subscriptions) != 2 ||
		s.Subscriptions[1] != want.Session.Subscriptions[1] {
		t.Fatalf("session %+v", s)
	}
	for i, m := range got.Messages {
		w := want.Messages[i]
		if m.Seq != w.Seq || m.QoS != w.QoS || m.PacketID != w.PacketID || m.Sent != w.Sent || m.Released != w.Released ||
			m.Retain != w.Retain || m.GroupName != w.GroupName || m.GroupFilter != w.GroupFilter || len(m.SubIDs) != len(w.SubIDs) ||
			m.Message.Topic != w.Message.Topic || !bytes.Equal(m.Message.Payload, w.Message.Payload) {
			t.Fatalf("message %d: %+v, want %+v", i, m, w)
		}
	}
	if len(got.Inbound) != 2 || got.Inbound[1] != 65535 {
		t.Fatalf("inbound %v", got.Inbound)
	}
}

func TestSessionStateMalformed(t *testing.T) {
	b := sampleState().AppendBinary(nil)
	for i := range len(b) {
		if _, err := UnmarshalSessionState(b[:i]); err == nil {
			t.Fatalf("a state cut to %d of %d bytes decoded", i, len(b))
		}
	}
	for name, bad := range map[string][]byte{
		"empty":          {},
		"wrong format":   {2, 5},
		"bad version":    {stateFormat, 9, 0, 0, 0, 0, 0},
		"huge count":     {stateFormat, 5, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f},
		"trailing bytes": append(append([]byte(nil), b...), 0),
	} {
		if _, err := UnmarshalSessionState(bad); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
}

func FuzzUnmarshalSessionState(f *testing.F) {
	f.Add(sampleState().AppendBinary(nil))
	f.Add((&SessionState{Session: SessionRecord{ClientID: "c", Version: packet.V311}}).AppendBinary(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := UnmarshalSessionState(b)
		if err != nil {
			return
		}
		again, err := UnmarshalSessionState(st.AppendBinary(nil))
		if err != nil || !bytes.Equal(again.AppendBinary(nil), st.AppendBinary(nil)) {
			t.Fatalf("re-encode mismatch: %v", err)
		}
	})
}
