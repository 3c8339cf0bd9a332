package sparkplug

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// fixture is one entry of testdata/fixtures/fixtures.json: payloads encoded
// by Eclipse Tahu's sparkplug-payload (testdata/tahu/fixtures.js), with
// what they hold.
type fixture struct {
	Name      string  `json:"name"`
	TopicType string  `json:"topicType"`
	Timestamp *string `json:"timestamp"`
	Seq       *uint64 `json:"seq"`
	BdSeq     *uint64 `json:"bdSeq"`
	Metrics   []struct {
		Name string `json:"name"`
	} `json:"metrics"`
}

// TestDecodeTahuFixtures cross-checks the decoder against an independent
// encoder.
func TestDecodeTahuFixtures(t *testing.T) {
	b, err := os.ReadFile("testdata/fixtures/fixtures.json")
	if err != nil {
		t.Fatal(err)
	}
	var fs []fixture
	if err := json.Unmarshal(b, &fs); err != nil {
		t.Fatal(err)
	}
	if len(fs) < 10 {
		t.Fatalf("only %d fixtures", len(fs))
	}
	for _, f := range fs {
		t.Run(f.Name, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join("testdata/fixtures", f.Name))
			if err != nil {
				t.Fatal(err)
			}
			p, err := Decode(raw, true)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if f.Timestamp != nil {
				ts, _ := strconv.ParseUint(*f.Timestamp, 10, 64)
				if !p.HasTimestamp || p.Timestamp != ts {
					t.Errorf("timestamp %d (%v), want %d", p.Timestamp, p.HasTimestamp, ts)
				}
			} else if p.HasTimestamp {
				t.Errorf("timestamp %d, want none", p.Timestamp)
			}
			if (f.Seq != nil) != p.HasSeq || (f.Seq != nil && *f.Seq != p.Seq) {
				t.Errorf("seq %d (%v), want %v", p.Seq, p.HasSeq, f.Seq)
			}
			if (f.BdSeq != nil) != p.HasBdSeq || (f.BdSeq != nil && *f.BdSeq != p.BdSeq) {
				t.Errorf("bdSeq %d (%v), want %v", p.BdSeq, p.HasBdSeq, f.BdSeq)
			}
			if p.Metrics != len(f.Metrics) {
				t.Errorf("%d metrics, want %d", p.Metrics, len(f.Metrics))
			}
		})
	}
}

func TestDecodeMalformed(t *testing.T) {
	for _, b := range [][]byte{
		{0x08},                   // a varint cut short
		{0x12, 0x05, 0x0a},       // metrics longer than the payload
		{0x12, 0x02, 0x0a, 0x05}, // a metric's name longer than the metric
		[]byte("hello, world"),
		{0x0f}, // field 1, wire type 7
	} {
		if _, err := Decode(b, true); err == nil {
			t.Errorf("Decode(% x) accepted", b)
		}
	}
}

func TestRebirthCommandRoundTrip(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_123)
	b := RebirthCommand(now)
	p, err := Decode(b, true)
	if err != nil || !p.HasTimestamp || p.Timestamp != 1_700_000_000_123 || p.Metrics != 1 || p.HasSeq {
		t.Fatalf("Decode(RebirthCommand) = %+v, %v", p, err)
	}
	want, err := os.ReadFile("testdata/fixtures/ncmd_rebirth.bin")
	if err != nil {
		t.Fatal(err)
	}
	tahu, err := Decode(want, false)
	if err != nil || tahu.Metrics != 1 {
		t.Fatalf("the Tahu NCMD: %+v, %v", tahu, err)
	}
}

func TestDecodeAllocatesNothing(t *testing.T) {
	raw, err := os.ReadFile("testdata/fixtures/nbirth.bin")
	if err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = Decode(raw, true) }); n != 0 {
		t.Errorf("Decode allocates %v times", n)
	}
}

// FuzzDecode: the decoder never panics, and what it accepts it reads the
// same way twice.
func FuzzDecode(f *testing.F) {
	names, _ := filepath.Glob("testdata/fixtures/*.bin")
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add(RebirthCommand(time.UnixMilli(1)))
	f.Fuzz(func(t *testing.T, b []byte) {
		p1, err1 := Decode(b, true)
		p2, err2 := Decode(b, true)
		if (err1 == nil) != (err2 == nil) || p1 != p2 {
			t.Fatalf("two reads differ: %+v %v / %+v %v", p1, err1, p2, err2)
		}
		// Without bdSeq the metrics are not looked into: what is accepted
		// with it is accepted without, and read the same.
		q, err := Decode(b, false)
		if err1 == nil && (err != nil || q.Seq != p1.Seq || q.Metrics != p1.Metrics || q.Timestamp != p1.Timestamp) {
			t.Fatalf("with and without bdSeq differ: %+v / %+v, %v", q, p1, err)
		}
	})
}

// FuzzParseTopic: never panics; what it accepts names a kind and its ids.
func FuzzParseTopic(f *testing.F) {
	for _, s := range []string{"spBv1.0/G/NBIRTH/E", "spBv1.0/G/DDATA/E/D", "spBv1.0/STATE/h", "STATE/h", "spBv1.0//x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tp, ok := ParseTopic(s)
		if ok && tp.Kind == NotSparkplug {
			t.Fatalf("%q accepted with no kind", s)
		}
		if ok && tp.Kind != STATE && (tp.Group == "" || tp.Edge == "") {
			t.Fatalf("%q accepted without group or edge: %+v", s, tp)
		}
	})
}
