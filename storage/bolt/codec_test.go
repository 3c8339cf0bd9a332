package bolt

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/packet"
	"github.com/linemq/linemq/storage/storetest"
)

func sessionCases() []*broker.SessionRecord {
	full := storetest.Session("full")
	minimal := &broker.SessionRecord{ClientID: "min", Version: packet.V311}
	willNoExpiry := storetest.Session("w")
	willNoExpiry.Will.HasExpiry, willNoExpiry.Will.Expiry = false, 0
	extremes := &broker.SessionRecord{
		ClientID: "x", Version: packet.V5, ExpiryInterval: math.MaxUint32,
		Disconnected: time.Unix(0, 1),
		Subscriptions: []broker.SubscriptionRecord{
			{Filter: "", QoS: 0, RetainHandling: 0},
			{Filter: "#", QoS: 2, RetainHandling: 2, NoLocal: true, RetainAsPublished: true, SubscriptionID: math.MaxUint32},
			{Filter: "é/✓/+", QoS: 1, RetainHandling: 1},
		},
		Will: &broker.WillRecord{Message: broker.NewMessage("w", nil, 0, false), Delay: math.MaxUint32, Expiry: math.MaxUint32, HasExpiry: true},
	}
	return []*broker.SessionRecord{full, minimal, willNoExpiry, extremes}
}

func messageCases() []*broker.MessageRecord {
	plain := storetest.Message(1, 300)
	group := storetest.Message(2, 0)
	group.GroupName, group.GroupFilter, group.QoS, group.Released, group.Retain = "g", "a/+", 2, true, true
	group.PacketID, group.SubIDs = math.MaxUint16, nil
	expiring := storetest.Message(3, 10)
	expiring.Message.Expires = time.Unix(1800000000, 0)
	expiring.Message.User = []packet.UserProperty{{Key: []byte("k"), Value: []byte("v")}}
	queued := storetest.Message(4, 1)
	queued.PacketID, queued.Sent = 0, false
	shared := storetest.Message(5, 1000)
	shared.MessageID = 1 << 40
	sharedGroup := storetest.Message(6, 10)
	sharedGroup.MessageID, sharedGroup.GroupName, sharedGroup.GroupFilter, sharedGroup.SubIDs = 1, "g", "s/#", nil
	return []*broker.MessageRecord{plain, group, expiring, queued, shared, sharedGroup}
}

func TestSessionCodec(t *testing.T) {
	for _, want := range sessionCases() {
		b, err := appendSession(nil, want)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeSession(want.ClientID, b)
		if err != nil {
			t.Fatalf("%s: %v", want.ClientID, err)
		}
		// The record leaves the subscriptions out: they are stored apart.
		own := *want
		own.Subscriptions = nil
		if err := storetest.EqualSession(got, &own); err != nil {
			t.Errorf("%s: %v", want.ClientID, err)
		}
		for i := range len(b) {
			if _, err := decodeSession("c", b[:i]); err == nil {
				t.Errorf("%s: truncated to %d bytes: no error", want.ClientID, i)
			}
		}
		if _, err := decodeSession("c", append(b, 0)); err == nil && want.Will == nil {
			t.Errorf("%s: trailing byte: no error", want.ClientID)
		}

		// Schema 2's records, with the subscriptions inside, still decode.
		b1 := appendSessionV1(nil, want)
		got, err = decodeSession(want.ClientID, b1)
		if err != nil {
			t.Fatalf("%s, format 1: %v", want.ClientID, err)
		}
		if err := storetest.EqualSession(got, want); err != nil {
			t.Errorf("%s, format 1: %v", want.ClientID, err)
		}
		for i := range len(b1) {
			if _, err := decodeSession("c", b1[:i]); err == nil {
				t.Errorf("%s, format 1: truncated to %d bytes: no error", want.ClientID, i)
			}
		}
	}
	if _, err := appendSession(nil, &broker.SessionRecord{ClientID: "c", Will: &broker.WillRecord{}}); err == nil {
		t.Error("will without message: no error")
	}
}

func TestSubscriptionCodec(t *testing.T) {
	for _, s := range sessionCases() {
		for _, want := range s.Subscriptions {
			b := appendSubscription(nil, &want)
			got, err := decodeSubscription(want.Filter, b)
			if err != nil || got != want {
				t.Errorf("%+v: decoded %+v, %v", want, got, err)
			}
			for i := range len(b) {
				if _, err := decodeSubscription(want.Filter, b[:i]); err == nil {
					t.Errorf("%+v: truncated to %d bytes: no error", want, i)
				}
			}
			if _, err := decodeSubscription(want.Filter, append(b, 0)); err == nil {
				t.Errorf("%+v: trailing byte: no error", want)
			}
		}
	}
}

func TestMessageRecordCodec(t *testing.T) {
	for _, want := range messageCases() {
		b, err := appendMessageRecord(nil, want)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeMessageRecord(want.Seq, b)
		if err != nil {
			t.Fatalf("seq %d: %v", want.Seq, err)
		}
		if want.MessageID != 0 {
			// A shared record holds the id; Load looks the body up.
			if got.Message != nil || got.MessageID != want.MessageID {
				t.Fatalf("seq %d: shared record decoded with id %d, message %v", want.Seq, got.MessageID, got.Message)
			}
			got.Message = want.Message
		}
		if err := storetest.EqualMessage(got, want); err != nil {
			t.Errorf("seq %d: %v", want.Seq, err)
		}
		if id := recordMessageID(b); id != want.MessageID {
			t.Errorf("seq %d: recordMessageID %d, want %d", want.Seq, id, want.MessageID)
		}
		for i := range len(b) {
			if _, err := decodeMessageRecord(1, b[:i]); err == nil {
				t.Errorf("seq %d: truncated to %d bytes: no error", want.Seq, i)
			}
			if id := recordMessageID(b[:i]); id != 0 && want.MessageID != 0 {
				t.Errorf("seq %d: recordMessageID of %d bytes: %d", want.Seq, i, id)
			}
		}
	}
}

// TestCodecRejects: unknown formats and flags are refused, not guessed at.
func TestCodecRejects(t *testing.T) {
	s, _ := appendSession(nil, storetest.Session("c"))
	m, _ := appendMessageRecord(nil, storetest.Message(1, 1))
	shared := storetest.Message(1, 1)
	shared.MessageID = 9
	sh, _ := appendMessageRecord(nil, shared)
	sub := appendSubscription(nil, &broker.SubscriptionRecord{Filter: "f", QoS: 1})
	session := func(b []byte) error { _, err := decodeSession("c", b); return err }
	message := func(b []byte) error { _, err := decodeMessageRecord(1, b); return err }
	subscription := func(b []byte) error { _, err := decodeSubscription("f", b); return err }
	for name, c := range map[string]struct {
		b      []byte
		decode func([]byte) error
	}{
		"session format 3":       {append([]byte{3}, s[1:]...), session},
		"session flag 8":         {append([]byte{s[0], s[1], s[2] | 8}, s[3:]...), session},
		"message format 0":       {append([]byte{0}, m[1:]...), message},
		"message format 3":       {append([]byte{3}, m[1:]...), message},
		"message flag 64":        {append([]byte{m[0], m[1] | 64}, m[2:]...), message},
		"message QoS 3":          {append([]byte{m[0], m[1] | 3}, m[2:]...), message},
		"shared id 0":            {append(sh[:len(sh)-1:len(sh)-1], 0), message},
		"shared trailing byte":   {append(sh[:len(sh):len(sh)], 0), message},
		"subscription format 2":  {[]byte{2, sub[1], sub[2]}, subscription},
		"subscription QoS 3":     {[]byte{sub[0], 3, sub[2]}, subscription},
		"subscription RH 3":      {[]byte{sub[0], 3 << 4, sub[2]}, subscription},
		"subscription bits 6, 7": {[]byte{sub[0], 0x40, sub[2]}, subscription},
	} {
		if err := c.decode(c.b); !errors.Is(err, ErrCorruptRecord) {
			t.Errorf("%s: %v, want ErrCorruptRecord", name, err)
		}
	}
}

// TestRecordSize keeps an eye on the bytes a typical record costs: a
// shared record must stay small whatever the message's size, since a
// fan-out writes one per session.
func TestRecordSize(t *testing.T) {
	m := storetest.Message(1, 300)
	b, _ := appendMessageRecord(nil, m)
	overhead := len(b) - len(m.Message.AppendBinary(nil))
	if overhead > 16 {
		t.Errorf("message record adds %d bytes to the message", overhead)
	}
	m = storetest.Message(1, 100000)
	m.MessageID = 123456
	if b, _ := appendMessageRecord(nil, m); len(b) > 16 {
		t.Errorf("shared message record is %d bytes", len(b))
	}
	if b := appendSubscription(nil, &broker.SubscriptionRecord{Filter: "a/b", QoS: 1, SubscriptionID: 100}); len(b) > 4 {
		t.Errorf("subscription record is %d bytes", len(b))
	}
}

func FuzzDecodeSession(f *testing.F) {
	for _, s := range sessionCases() {
		b, _ := appendSession(nil, s)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := decodeSession("c", b)
		if err != nil {
			return
		}
		// What decodes re-encodes, and that encoding is stable.
		b1, err := appendSession(nil, s)
		if err != nil {
			t.Fatal(err)
		}
		s2, err := decodeSession("c", b1)
		if err != nil {
			t.Fatalf("re-encoded record does not decode: %v", err)
		}
		if b2, _ := appendSession(nil, s2); !bytes.Equal(b1, b2) {
			t.Fatalf("unstable encoding:\n%x\n%x", b1, b2)
		}
	})
}

func FuzzDecodeMessageRecord(f *testing.F) {
	for _, m := range messageCases() {
		b, _ := appendMessageRecord(nil, m)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMessageRecord(1, b)
		if err != nil {
			return
		}
		b1, err := appendMessageRecord(nil, m)
		if err != nil {
			t.Fatal(err)
		}
		m2, err := decodeMessageRecord(1, b1)
		if err != nil {
			t.Fatalf("re-encoded record does not decode: %v", err)
		}
		if b2, _ := appendMessageRecord(nil, m2); !bytes.Equal(b1, b2) {
			t.Fatalf("unstable encoding:\n%x\n%x", b1, b2)
		}
	})
}

func FuzzDecodeSubscription(f *testing.F) {
	for _, s := range sessionCases() {
		for _, sub := range s.Subscriptions {
			f.Add(appendSubscription(nil, &sub))
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		sub, err := decodeSubscription("f", b)
		if err != nil {
			return
		}
		// What decodes re-encodes to the same subscription.
		b1 := appendSubscription(nil, &sub)
		sub2, err := decodeSubscription("f", b1)
		if err != nil || sub2 != sub {
			t.Fatalf("re-encoded %x decodes as %+v, %v; want %+v", b1, sub2, err, sub)
		}
	})
}

var writeSeeds = flag.Bool("write-fuzz-seeds", false, "rewrite testdata/fuzz seed corpora from the codec test cases")

// TestWriteFuzzSeeds regenerates the checked-in seed corpora (run with
// -write-fuzz-seeds after changing a record format): the seeds are the
// encodings of the test cases, so the fuzzers start from real records.
func TestWriteFuzzSeeds(t *testing.T) {
	if !*writeSeeds {
		t.Skip("run with -write-fuzz-seeds to rewrite testdata/fuzz")
	}
	write := func(target string, i int, b []byte) {
		dir := filepath.Join("testdata", "fuzz", target)
		must(t, os.MkdirAll(dir, 0o755))
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%+q)\n", b)
		must(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed-%d", i)), []byte(body), 0o644))
	}
	for i, s := range sessionCases() {
		b, _ := appendSession(nil, s)
		write("FuzzDecodeSession", i, b)
	}
	for i, m := range messageCases() {
		b, _ := appendMessageRecord(nil, m)
		write("FuzzDecodeMessageRecord", i, b)
	}
	// Schema 2's session records, which a migration still reads.
	for i, s := range sessionCases() {
		write("FuzzDecodeSession", len(sessionCases())+i, appendSessionV1(nil, s))
	}
}
