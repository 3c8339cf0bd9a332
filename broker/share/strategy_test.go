package share

import (
	"errors"
	"strings"
	"testing"
)

func TestParseStrategy(t *testing.T) {
	for s := range numStrategies {
		name := s.String()
		got, err := ParseStrategy(name)
		if err != nil || got != s {
			t.Errorf("ParseStrategy(%q) = %v, %v; want %v", name, got, err, s)
		}
		text, err := s.MarshalText()
		if err != nil || string(text) != name {
			t.Errorf("%v.MarshalText() = %q, %v", s, text, err)
		}
		var back Strategy
		if err := back.UnmarshalText(text); err != nil || back != s {
			t.Errorf("UnmarshalText(%q) = %v, %v", text, back, err)
		}
	}

	want := []string{"round_robin", "random", "sticky", "hash_clientid", "hash_topic", "prefer_local"}
	for i, name := range want {
		if got := Strategy(i).String(); got != name {
			t.Errorf("Strategy(%d).String() = %q, want %q", i, got, name)
		}
	}

	for _, bad := range []string{"", "roundrobin", "Round_Robin", "local", " random"} {
		_, err := ParseStrategy(bad)
		if !errors.Is(err, ErrUnknownStrategy) {
			t.Errorf("ParseStrategy(%q) error = %v, want ErrUnknownStrategy", bad, err)
			continue
		}
		// The message must tell the operator what would have been valid.
		for _, name := range want {
			if !strings.Contains(err.Error(), name) {
				t.Errorf("ParseStrategy(%q) error %q does not name %q", bad, err, name)
			}
		}
	}
	var s Strategy = PreferLocal
	if err := s.UnmarshalText([]byte("nope")); err == nil || s != PreferLocal {
		t.Errorf("UnmarshalText(nope) = %v, left %v; want error and value unchanged", err, s)
	}

	if got := Strategy(42).String(); got != "Strategy(42)" {
		t.Errorf("Strategy(42).String() = %q", got)
	}
	if _, err := Strategy(42).MarshalText(); !errors.Is(err, ErrUnknownStrategy) {
		t.Errorf("Strategy(42).MarshalText() error = %v", err)
	}
	if err := (Options{Strategy: 42}).Validate(); !errors.Is(err, ErrUnknownStrategy) {
		t.Errorf("Validate(42) = %v", err)
	}
	if err := (Options{Strategy: HashTopic}).Validate(); err != nil {
		t.Errorf("Validate(HashTopic) = %v", err)
	}
}

func TestVerdictString(t *testing.T) {
	for v, want := range map[Verdict]string{Take: "take", Full: "full", Skip: "skip", 7: "Verdict(7)"} {
		if got := v.String(); got != want {
			t.Errorf("Verdict(%d).String() = %q, want %q", v, got, want)
		}
	}
}
