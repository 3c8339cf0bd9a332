package peer

import (
	"bytes"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/linemq/linemq/broker"
)

func TestFrameRoundTrip(t *testing.T) {
	for _, v := range []uint8{frameVersion1, frameVersion2, frameVersion3} {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) { testFrameRoundTrip(t, v) })
	}
}

func testFrameRoundTrip(t *testing.T, v uint8) {
	m := broker.NewMessage("line/3/temp", []byte("21.5"), 1, true)
	m.SetView(1 << 40)
	recs := []outRec{
		{kind: kindForward, msg: m},
		{kind: kindDeliver, seq: 7, msg: m, to: Target{Group: "workers", Filter: "line/+/temp", Client: "plc/7"},
			sent: -5_000_000_000, timeout: 2 * time.Second},
		{kind: kindAnswer, seq: 7, status: statusAccepted},
		{kind: kindAnswer, seq: 8, status: statusNotHere},
		{kind: kindAnswer, seq: 9, status: statusError, text: "disk full"},
		{kind: kindAnswer, seq: 10, status: statusExpired},
		{kind: kindPing, seq: 1, sent: 1 << 62, timeout: time.Second},
		{kind: kindPong, seq: 1},
		{kind: kindCall, seq: 5, text: "handover", body: []byte("plc/7")},
		{kind: kindResult, seq: 5, status: statusAccepted, body: []byte("state")},
		{kind: kindResult, seq: 6, status: statusError, text: "gone"},
		{kind: kindRetain, msg: m},
	}
	frame := appendFrameHeader(nil, v, -42)
	for i := range recs {
		frame = appendRecord(frame, &recs[i], v)
	}
	fr, err := newFrameReader(frame)
	if err != nil {
		t.Fatal(err)
	}
	if fr.v != v || (v >= frameVersion2 && fr.written != -42) {
		t.Fatalf("frame version %d written %d", fr.v, fr.written)
	}
	var got []inRec
	for {
		var r inRec
		ok, err := fr.next(&r)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		got = append(got, r)
	}
	if len(got) != len(recs) {
		t.Fatalf("decoded %d records, want %d", len(got), len(recs))
	}
	for i, r := range got {
		w := recs[i]
		if r.kind != w.kind || r.seq != w.seq {
			t.Errorf("record %d: kind %d seq %d, want %d %d", i, r.kind, r.seq, w.kind, w.seq)
		}
		timed := v >= frameVersion2 && (w.kind == kindDeliver || w.kind == kindPing)
		var view uint64
		if v >= frameVersion3 && (w.kind == kindDeliver || w.kind == kindForward) {
			view = m.View()
		}
		if r.view != view {
			t.Errorf("record %d: view %d, want %d", i, r.view, view)
		}
		if r.timed != timed || (timed && (r.sent != w.sent || r.timeout != int64(w.timeout))) {
			t.Errorf("record %d: timed %v sent %d timeout %d, want %v %d %d", i, r.timed, r.sent, r.timeout, timed, w.sent, w.timeout)
		}
		switch r.kind {
		case kindCall:
			if string(r.to[0]) != w.text || string(r.body) != string(w.body) {
				t.Errorf("record %d: call %q(%q)", i, r.to[0], r.body)
			}
		case kindResult:
			want := string(w.body)
			if w.status == statusError {
				want = w.text
			}
			if r.status != w.status || string(r.body) != want {
				t.Errorf("record %d: result %d %q", i, r.status, r.body)
			}
		case kindForward, kindDeliver, kindRetain:
			dm, err := broker.UnmarshalMessage(r.body)
			if err != nil || dm.Topic != m.Topic || !bytes.Equal(dm.Payload, m.Payload) || !dm.Retain {
				t.Errorf("record %d: message %+v, %v", i, dm, err)
			}
			if r.kind == kindDeliver && (string(r.to[0]) != w.to.Group || string(r.to[1]) != w.to.Filter || string(r.to[2]) != w.to.Client) {
				t.Errorf("record %d: target %q", i, r.to)
			}
		case kindAnswer:
			if r.status != w.status || string(r.body) != w.text {
				t.Errorf("record %d: answer %d %q", i, r.status, r.body)
			}
		}
	}
}

// A kind this node does not know is skipped, so a newer peer can add some.
func TestFrameSkipsUnknownKinds(t *testing.T) {
	frame := []byte{frameVersion1}
	frame = append(frame, 99, 0, 0, 0, 3, 'x', 'y', 'z')
	frame = appendRecord(frame, &outRec{kind: kindPing, seq: 5}, frameVersion1)
	fr, _ := newFrameReader(frame)
	var r inRec
	if ok, err := fr.next(&r); !ok || err != nil || r.kind != kindPing || r.seq != 5 {
		t.Fatalf("got %v %v %+v", ok, err, r)
	}
	if ok, err := fr.next(&r); ok || err != nil {
		t.Fatalf("past the end: %v %v", ok, err)
	}
}

func TestFrameMalformed(t *testing.T) {
	ping := appendRecord(nil, &outRec{kind: kindPing, seq: 1}, frameVersion1)
	v2 := appendFrameHeader(nil, frameVersion2, 7)
	for name, frame := range map[string][]byte{
		"empty":               {},
		"wrong version":       {3},
		"version 0":           {0},
		"v2 without time":     {frameVersion2},
		"v2 time cut":         {frameVersion2, 0x80},
		"v3 forward no view":  {frameVersion3, 0, byte(kindForward), 0, 0, 0, 0},
		"v3 view cut":         {frameVersion3, 0, byte(kindForward), 0, 0, 0, 1, 0x80},
		"version 4":           {4, 0},
		"v2 ping, v1 body":    append(slices.Clip(v2), ping...),
		"v2 ping no time":     append(slices.Clip(v2), byte(kindPing), 0, 0, 0, 2, 1, 0x80),
		"v2 ping timeout cut": append(slices.Clip(v2), byte(kindPing), 0, 0, 0, 3, 1, 2, 0x80),
		"v2 ping huge timeout": append(slices.Clip(v2), byte(kindPing), 0, 0, 0, 12, 1, 2,
			0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01),
		"v2 deliver cut":    append(slices.Clip(v2), byte(kindDeliver), 0, 0, 0, 4, 1, 2, 3, 5),
		"answer status 5":   {frameVersion1, byte(kindAnswer), 0, 0, 0, 2, 1, 5},
		"short header":      {frameVersion1, byte(kindPing), 0, 0},
		"length past end":   {frameVersion1, byte(kindPing), 0, 0, 0, 9, 1},
		"ping without seq":  {frameVersion1, byte(kindPing), 0, 0, 0, 0},
		"ping with extra":   {frameVersion1, byte(kindPing), 0, 0, 0, 2, 1, 1},
		"answer bad status": {frameVersion1, byte(kindAnswer), 0, 0, 0, 2, 1, 9},
		"deliver cut":       {frameVersion1, byte(kindDeliver), 0, 0, 0, 3, 1, 5, 'g'},
		"trailing garbage":  append(append([]byte{frameVersion1}, ping...), 1, 2),
	} {
		fr, err := newFrameReader(frame)
		for err == nil {
			var r inRec
			var ok bool
			ok, err = fr.next(&r)
			if !ok && err == nil {
				t.Errorf("%s: decoded without error", name)
				break
			}
		}
	}
}

// A version 2 frame is refused whole by a version 1 decoder (whose
// check was frame[0] != 1), never misread; a version 1 frame still
// decodes, its deliveries and pings without clock readings.
func TestFrameVersions(t *testing.T) {
	m := broker.NewMessage("t", []byte("p"), 1, false)
	d := outRec{kind: kindDeliver, seq: 1, msg: m, sent: 5, timeout: time.Second}
	v2 := appendRecord(appendFrameHeader(nil, frameVersion2, 9), &d, frameVersion2)
	if v2[0] == frameVersion1 {
		t.Fatal("a version 2 frame starts with 1: a version 1 decoder would read it")
	}
	v1 := appendRecord(appendFrameHeader(nil, frameVersion1, 9), &d, frameVersion1)
	if !bytes.Equal(v1, append([]byte{frameVersion1}, appendRecord(nil, &outRec{kind: kindDeliver, seq: 1, msg: m}, frameVersion1)...)) {
		t.Fatal("version 1 is not what it was")
	}
	fr, err := newFrameReader(v1)
	var r inRec
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := fr.next(&r); !ok || err != nil || r.timed || r.kind != kindDeliver {
		t.Fatalf("version 1 deliver: %v %v %+v", ok, err, r)
	}
}

func FuzzFrame(f *testing.F) {
	m := broker.NewMessage("t", []byte("p"), 1, false)
	recs := []outRec{
		{kind: kindForward, msg: m},
		{kind: kindDeliver, seq: 1, msg: m, to: Target{Group: "g", Filter: "f", Client: "c"}, sent: 123456789, timeout: 2 * time.Second},
		{kind: kindAnswer, seq: 1, status: statusError, text: "e"},
		{kind: kindAnswer, seq: 2, status: statusExpired},
		{kind: kindPing, seq: 2, sent: -1, timeout: time.Second},
		{kind: kindPong, seq: 2},
		{kind: kindCall, seq: 3, text: "handover", body: []byte("plc/7")},
		{kind: kindResult, seq: 3, status: statusAccepted, body: []byte{1, 2, 3}},
		{kind: kindResult, seq: 4, status: statusError, text: "no"},
		{kind: kindRetain, msg: m},
	}
	m.SetView(77)
	for _, v := range []uint8{frameVersion1, frameVersion2, frameVersion3} {
		seed := appendFrameHeader(nil, v, 1_000_000_007)
		for _, r := range recs {
			seed = appendRecord(seed, &r, v)
		}
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		fr, err := newFrameReader(frame)
		if err != nil {
			return
		}
		for range len(frame) + 1 { // each record consumes at least its header
			var r inRec
			ok, err := fr.next(&r)
			if !ok || err != nil {
				return
			}
			if r.kind == kindForward || r.kind == kindDeliver || r.kind == kindRetain {
				broker.UnmarshalMessage(r.body) //nolint:errcheck // must not panic
			}
		}
		t.Fatal("the reader did not reach the end")
	})
}

func TestInflightRing(t *testing.T) {
	var f inflight
	now := time.Now()
	var done []uint64
	mk := func(seq uint64) pending {
		return pending{seq: seq, deadline: now.Add(time.Duration(seq) * time.Millisecond),
			done: func(error) { done = append(done, seq) }, report: func(error) {}}
	}
	if !f.push(mk(10)) {
		t.Fatal("the first push is the head")
	}
	for seq := uint64(11); seq < 50; seq++ { // grows the ring past 16
		if f.push(mk(seq)) {
			t.Fatal("only the first is the head")
		}
	}
	if _, ok := f.take(9); ok {
		t.Fatal("took a sequence number never pushed")
	}
	if p, ok := f.take(30); !ok || p.seq != 30 {
		t.Fatal("take 30")
	}
	if _, ok := f.take(30); ok {
		t.Fatal("took 30 twice")
	}
	// Answer the head: the ring moves on to the next still waiting.
	f.take(10)
	f.take(11)
	if at, _ := f.next(); !at.Equal(now.Add(12 * time.Millisecond)) {
		t.Fatalf("next deadline %v", at.Sub(now))
	}
	exp := f.expire(now.Add(31*time.Millisecond), nil) // 12..31 but 30, taken before
	if len(exp) != 19 || exp[0].seq != 12 || exp[len(exp)-1].seq != 31 {
		t.Fatalf("expired %d, %d..%d", len(exp), exp[0].seq, exp[len(exp)-1].seq)
	}
	if f.len() != 18 { // 32..49
		t.Fatalf("spans %d", f.len())
	}
	// Wrap around: push past the ring's end while its head is mid-way.
	for seq := uint64(50); seq < 60; seq++ {
		f.push(mk(seq))
	}
	for seq := uint64(32); seq < 60; seq++ {
		if p, ok := f.take(seq); !ok || p.seq != seq {
			t.Fatalf("take %d after the wrap", seq)
		}
	}
	if f.len() != 0 {
		t.Fatalf("spans %d when empty", f.len())
	}
	// Empty: any sequence number may start it again.
	f.push(mk(100))
	f.push(mk(101))
	if d := f.drain(nil); len(d) != 2 || f.len() != 0 {
		t.Fatalf("drained %d, spans %d", len(d), f.len())
	}
}
