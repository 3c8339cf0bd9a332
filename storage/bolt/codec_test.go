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
	return []*broker.MessageRecord{plain, group, expiring, queued}
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
		if err := storetest.EqualSession(got, want); err != nil {
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
	}
	if _, err := appendSession(nil, &broker.SessionRecord{ClientID: "c", Will: &broker.WillRecord{}}); err == nil {
		t.Error("will without message: no error")
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
		if err := storetest.EqualMessage(got, want); err != nil {
			t.Errorf("seq %d: %v", want.Seq, err)
		}
		for i := range len(b) {
			if _, err := decodeMessageRecord(1, b[:i]); err == nil {
				t.Errorf("seq %d: truncated to %d bytes: no error", want.Seq, i)
			}
		}
	}
}

// TestCodecRejects: unknown formats and flags are refused, not guessed at.
func TestCodecRejects(t *testing.T) {
	s, _ := appendSession(nil, storetest.Session("c"))
	m, _ := appendMessageRecord(nil, storetest.Message(1, 1))
	for name, b := range map[string][]byte{
		"session format 2": append([]byte{2}, s[1:]...),
		"session flag 8":   append([]byte{s[0], s[1], s[2] | 8}, s[3:]...),
		"message format 0": append([]byte{0}, m[1:]...),
		"message flag 64":  append([]byte{m[0], m[1] | 64}, m[2:]...),
		"message QoS 3":    append([]byte{m[0], m[1] | 3}, m[2:]...),
	} {
		var err error
		if name[0] == 's' {
			_, err = decodeSession("c", b)
		} else {
			_, err = decodeMessageRecord(1, b)
		}
		if !errors.Is(err, ErrCorruptRecord) {
			t.Errorf("%s: %v, want ErrCorruptRecord", name, err)
		}
	}
}

// TestRecordSize keeps an eye on the bytes a typical record costs.
func TestRecordSize(t *testing.T) {
	m := storetest.Message(1, 300)
	b, _ := appendMessageRecord(nil, m)
	overhead := len(b) - len(m.Message.AppendBinary(nil))
	if overhead > 16 {
		t.Errorf("message record adds %d bytes to the message", overhead)
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
}
