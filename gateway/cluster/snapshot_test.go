package cluster

import (
	"bytes"
	"testing"

	"github.com/linemq/linemq/broker"
)

func TestRetainedSnapshotRoundTrip(t *testing.T) {
	in := []*broker.Message{
		broker.NewMessage("line/1/recipe", []byte("r42"), 1, true),
		broker.NewMessage("line/2/recipe", []byte{}, 0, true), // a clear
	}
	out, err := parseRetained(appendRetained(nil, in))
	if err != nil || len(out) != 2 {
		t.Fatalf("%d messages, %v", len(out), err)
	}
	for i := range in {
		if out[i].Topic != in[i].Topic || !bytes.Equal(out[i].Payload, in[i].Payload) || !out[i].Created.Equal(in[i].Created) {
			t.Errorf("message %d: %+v, want %+v", i, out[i], in[i])
		}
	}
	if _, err := parseRetained([]byte{0xff}); err == nil {
		t.Error("a truncated snapshot decoded")
	}
}

func FuzzParseRetained(f *testing.F) {
	f.Add(appendRetained(nil, []*broker.Message{broker.NewMessage("t", []byte("x"), 1, true)}))
	f.Fuzz(func(t *testing.T, b []byte) {
		ms, err := parseRetained(b)
		if err != nil {
			return
		}
		again, err := parseRetained(appendRetained(nil, ms))
		if err != nil || len(again) != len(ms) {
			t.Fatalf("re-encoding: %d of %d, %v", len(again), len(ms), err)
		}
	})
}
