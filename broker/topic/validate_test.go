package topic

import (
	"errors"
	"strings"
	"testing"
)

func TestValidateName(t *testing.T) {
	tests := []struct {
		name string
		want error
	}{
		{"sport/tennis/player1", nil},
		{"sport", nil},
		{"/", nil},             // only the separator is valid (4.7.3)
		{"/finance", nil},      // a leading '/' makes a distinct name (4.7.3)
		{"finance/", nil},      // and so does a trailing one
		{"sport//tennis", nil}, // empty levels are levels
		{"$SYS/monitor/Clients", nil},
		{"Accounts payable", nil}, // spaces are allowed (4.7.3)
		{"ÄÖÜ/日本", nil},
		{"$share/g/x", nil},            // a name, not a subscription; policy decides
		{"", ErrEmptyName},             // [MQTT-4.7.3-1]
		{"sport/+", ErrWildcardInName}, // [MQTT-4.7.1-1]
		{"sport/#", ErrWildcardInName}, // [MQTT-4.7.1-1]
		{"+", ErrWildcardInName},
		{"#", ErrWildcardInName},
		{"sport+", ErrWildcardInName},
		{"a#b", ErrWildcardInName},
		{"a\x00b", ErrNullChar},                     // [MQTT-4.7.3-2]
		{strings.Repeat("a", MaxLen), nil},          // [MQTT-4.7.3-3]
		{strings.Repeat("a", MaxLen+1), ErrTooLong}, // [MQTT-4.7.3-3]
	}
	for _, tt := range tests {
		if got := ValidateName([]byte(tt.name)); got != tt.want {
			t.Errorf("ValidateName(%.40q) = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestValidateFilter(t *testing.T) {
	tests := []struct {
		filter string
		want   error
	}{
		// MQTT 5.0 4.7.1.2 (multi-level wildcard).
		{"sport/tennis/player1/#", nil},
		{"sport/#", nil},
		{"#", nil},
		{"sport/tennis/#", nil},
		{"sport/tennis#", ErrBadMultiLevel},
		{"sport/tennis/#/ranking", ErrBadMultiLevel},
		// MQTT 5.0 4.7.1.3 (single-level wildcard).
		{"+", nil},
		{"+/tennis/#", nil},
		{"sport+", ErrBadSingleLevel},
		{"sport/+/player1", nil},
		{"+/+", nil},
		{"/+", nil},
		{"sport/+", nil},
		// MQTT 5.0 4.7.2 ($ topics): all valid filters.
		{"$SYS/#", nil},
		{"$SYS/monitor/+", nil},
		{"+/monitor/Clients", nil},
		// 4.7.3: '/' alone, empty levels, spaces.
		{"/", nil},
		{"//", nil},
		{"/finance", nil},
		{"a//b", nil},
		{"a b/c d", nil},
		{"+//+/#", nil},
		// More bad placements.
		{"", ErrEmptyFilter}, // [MQTT-4.7.3-1]
		{"#/", ErrBadMultiLevel},
		{"##", ErrBadMultiLevel},
		{"a/#b", ErrBadMultiLevel},
		{"a/b#", ErrBadMultiLevel},
		{"#/a", ErrBadMultiLevel},
		{"++", ErrBadSingleLevel},
		{"+a", ErrBadSingleLevel},
		{"a/+b/c", ErrBadSingleLevel},
		{"a/b+/c", ErrBadSingleLevel},
		{"+#", ErrBadSingleLevel},
		{"a\x00", ErrNullChar},                         // [MQTT-4.7.3-2]
		{strings.Repeat("a/", MaxLen/2) + "#", nil},    // 65535 bytes
		{strings.Repeat("a/", MaxLen/2+1), ErrTooLong}, // [MQTT-4.7.3-3]
		// Not share-aware: these are ordinary valid filters here.
		{"$share/g/x", nil},
		{"$share/workers", nil},
	}
	for _, tt := range tests {
		if got := ValidateFilter([]byte(tt.filter)); got != tt.want {
			t.Errorf("ValidateFilter(%.40q) = %v, want %v", tt.filter, got, tt.want)
		}
	}
}

func TestParseShare(t *testing.T) {
	tests := []struct {
		filter      string
		group, rest string
		shared      bool
		want        error // matched with errors.Is
		also        error // a second error err must match
	}{
		// Ordinary filters pass through unvalidated.
		{"sport/tennis/+", "", "sport/tennis/+", false, nil, nil},
		{"$share", "", "$share", false, nil, nil},
		{"$sharex/g/a", "", "$sharex/g/a", false, nil, nil},
		{"$SHARE/g/a", "", "$SHARE/g/a", false, nil, nil}, // case-sensitive (4.7.3)
		{"share/g/a", "", "share/g/a", false, nil, nil},
		{"a/+b", "", "a/+b", false, nil, nil},
		{"", "", "", false, nil, nil},
		// MQTT 5.0 4.8.2 examples.
		{"$share/consumer1/sport/tennis/+", "consumer1", "sport/tennis/+", true, nil, nil},
		{"$share/consumer2/sport/tennis/+", "consumer2", "sport/tennis/+", true, nil, nil},
		{"$share/consumer1//finance", "consumer1", "/finance", true, nil, nil},
		// More good ones.
		{"$share/g/#", "g", "#", true, nil, nil},
		{"$share/g/+", "g", "+", true, nil, nil},
		{"$share/g//", "g", "/", true, nil, nil},
		{"$share/g/$SYS/#", "g", "$SYS/#", true, nil, nil},
		{"$share/g/$share/h/x", "g", "$share/h/x", true, nil, nil},
		{"$share/group with space/x", "group with space", "x", true, nil, nil},
		{"$share/g$/x", "g$", "x", true, nil, nil},
		// Malformed.
		{"$share/", "", "", true, ErrBadShare, nil},
		{"$share/workers", "", "", true, ErrBadShare, nil},                                 // [MQTT-4.8.2-2]
		{"$share//sensors/#", "", "", true, ErrBadShare, nil},                              // [MQTT-4.8.2-1]
		{"$share/a+b/x", "", "", true, ErrBadShare, nil},                                   // [MQTT-4.8.2-2]
		{"$share/+/x", "", "", true, ErrBadShare, nil},                                     // [MQTT-4.8.2-2]
		{"$share/#/x", "", "", true, ErrBadShare, nil},                                     // [MQTT-4.8.2-2]
		{"$share/a#/x", "", "", true, ErrBadShare, nil},                                    // [MQTT-4.8.2-2]
		{"$share/g\x00/x", "", "", true, ErrBadShare, nil},                                 // [MQTT-4.7.3-2]
		{"$share/g/", "", "", true, ErrBadShare, ErrEmptyFilter},                           // [MQTT-4.8.2-2]
		{"$share/g/a/#/b", "", "", true, ErrBadShare, ErrBadMultiLevel},                    // [MQTT-4.7.1-2]
		{"$share/g/sport+", "", "", true, ErrBadShare, ErrBadSingleLevel},                  // [MQTT-4.7.1-3]
		{"$share/g/a\x00", "", "", true, ErrBadShare, ErrNullChar},                         // [MQTT-4.7.3-2]
		{"$share/g/" + strings.Repeat("a", MaxLen), "", "", true, ErrBadShare, ErrTooLong}, // [MQTT-4.7.3-3]
	}
	for _, tt := range tests {
		group, rest, shared, err := ParseShare(tt.filter)
		if group != tt.group || rest != tt.rest || shared != tt.shared {
			t.Errorf("ParseShare(%.40q) = %q, %.40q, %v; want %q, %.40q, %v",
				tt.filter, group, rest, shared, tt.group, tt.rest, tt.shared)
		}
		if tt.want == nil && err != nil {
			t.Errorf("ParseShare(%.40q) error = %v, want nil", tt.filter, err)
		}
		if tt.want != nil && !errors.Is(err, tt.want) {
			t.Errorf("ParseShare(%.40q) error = %v, want %v", tt.filter, err, tt.want)
		}
		if tt.also != nil && !errors.Is(err, tt.also) {
			t.Errorf("ParseShare(%.40q) error = %v, want it to match %v too", tt.filter, err, tt.also)
		}
	}
}

func TestShareErrorMessage(t *testing.T) {
	_, _, _, err := ParseShare("$share/g/a/#/b")
	const want = "topic: malformed shared subscription: '#' must be alone in the last level of a filter"
	if err == nil || err.Error() != want {
		t.Fatalf("error = %v, want %q", err, want)
	}
}

// matchTests is shared by the Match and Index tests and seeds FuzzMatch.
var matchTests = []struct {
	filter, name string
	want         bool
}{
	// MQTT 5.0 4.7.1.2.
	{"sport/tennis/player1/#", "sport/tennis/player1", true},
	{"sport/tennis/player1/#", "sport/tennis/player1/ranking", true},
	{"sport/tennis/player1/#", "sport/tennis/player1/score/wimbledon", true},
	{"sport/#", "sport", true}, // [MQTT-4.7.1-2] '#' includes the parent
	{"sport/#", "sport/", true},
	{"sport/#", "sports", false},
	{"sport/#", "sport/tennis", true},
	{"#", "sport/tennis", true},
	{"#", "/", true},
	{"#", "a", true},
	{"sport/tennis/#", "sport/tennis", true},
	{"sport/tennis/#", "sport/tennisplayer", false},
	// MQTT 5.0 4.7.1.3.
	{"sport/tennis/+", "sport/tennis/player1", true},
	{"sport/tennis/+", "sport/tennis/player2", true},
	{"sport/tennis/+", "sport/tennis/player1/ranking", false},
	{"sport/+", "sport", false},
	{"sport/+", "sport/", true},
	{"+/+", "/finance", true},
	{"/+", "/finance", true},
	{"+", "/finance", false},
	{"+", "finance", true},
	{"+", "", true}, // one empty level (not a valid name, but well defined)
	{"+/tennis/#", "sport/tennis/player1", true},
	{"+/tennis/#", "sport/tennis", true},
	{"sport/+/player1", "sport/tennis/player1", true},
	{"sport/+/player1", "sport//player1", true},
	{"sport/+/player1", "sport/player1", false},
	// MQTT 5.0 4.7.2 [MQTT-4.7.2-1].
	{"#", "$SYS/monitor/Clients", false},
	{"#", "$SYS", false},
	{"#", "$", false},
	{"+/monitor/Clients", "$SYS/monitor/Clients", false},
	{"+", "$SYS", false},
	{"+/#", "$SYS/a", false},
	{"$SYS/#", "$SYS/monitor/Clients", true},
	{"$SYS/#", "$SYS", true},
	{"$SYS/monitor/+", "$SYS/monitor/Clients", true},
	{"$SYS/+/Clients", "$SYS/monitor/Clients", true},
	{"a/#", "a/$SYS", true}, // only the first level is special
	{"+/+", "a/$b", true},
	{"#", "a$", true},
	// Empty levels and separators.
	{"/finance", "/finance", true},
	{"/finance", "finance", false},
	{"finance", "/finance", false},
	{"finance/", "finance", false},
	{"finance", "finance/", false},
	{"/", "/", true},
	{"+/+", "/", true},
	{"/+", "/", true},
	{"+", "/", false},
	{"//", "//", true},
	{"+/+/+", "//", true},
	{"/#", "/", true},
	{"/#", "", true}, // "" is one empty level, and '#' includes the parent
	{"/#", "finance", false},
	{"a//b", "a//b", true},
	{"a/+/b", "a//b", true},
	{"a/#", "a//b", true},
	{"a/b", "a/b/", false},
	{"a/b/#", "a/b/", true},
	{"a/b/+", "a/b/", true},
	// Literal comparison: case, spaces, no normalisation [MQTT-4.7.3-4].
	{"Sport", "sport", false},
	{"a b", "a b", true},
	{"ÄÖÜ/+", "ÄÖÜ/x", true},
	{"a/b/c", "a/b", false},
	{"a/b", "a/b/c", false},
	{"a/+", "a/b/c", false},
	// Invalid filters follow Match's stated rules ('#' not last is
	// literal, a '+' level is wild, anything else is literal).
	{"a/#/b", "a/#/b", true},
	{"a/#/b", "a/x/b", false},
	{"#/b", "$x/b", false},
	{"a+", "a+", true},
	{"a#", "a#", true},
	{"a#", "ab", false},
}

func TestMatch(t *testing.T) {
	for _, tt := range matchTests {
		if got := Match(tt.filter, tt.name); got != tt.want {
			t.Errorf("Match(%q, %q) = %v, want %v", tt.filter, tt.name, got, tt.want)
		}
		if got := refMatch(tt.filter, tt.name); got != tt.want {
			t.Errorf("refMatch(%q, %q) = %v, want %v (the test oracle is wrong)", tt.filter, tt.name, got, tt.want)
		}
	}
}

func TestMatchNoAlloc(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() { Match("plant/+/dev1/#", "plant/line7/dev1/telemetry") }); n != 0 {
		t.Errorf("Match allocated %v times", n)
	}
}

// refMatch is a second, deliberately naive implementation of the matching
// rules written from the spec text, used to cross-check Match.
func refMatch(filter, name string) bool {
	f, n := strings.Split(filter, "/"), strings.Split(name, "/")
	if strings.HasPrefix(name, "$") && (f[0] == "+" || f[0] == "#") {
		return false
	}
	for i, lev := range f {
		if lev == "#" && i == len(f)-1 {
			return true
		}
		if i >= len(n) || (lev != "+" && lev != n[i]) {
			return false
		}
	}
	return len(f) == len(n)
}

// refValidFilter is a level-splitting implementation of the filter rules,
// used to cross-check ValidateFilter.
func refValidFilter(filter string) error {
	switch {
	case filter == "":
		return ErrEmptyFilter
	case len(filter) > MaxLen:
		return ErrTooLong
	case strings.Contains(filter, "\x00"):
		return ErrNullChar
	}
	levels := strings.Split(filter, "/")
	for i, lev := range levels {
		if strings.Contains(lev, "+") && lev != "+" {
			// ValidateFilter reports the first bad character; make
			// the oracle agree when a level has both.
			if j := strings.IndexByte(lev, '#'); j >= 0 && j < strings.IndexByte(lev, '+') {
				return ErrBadMultiLevel
			}
			return ErrBadSingleLevel
		}
		if strings.Contains(lev, "#") && (lev != "#" || i != len(levels)-1) {
			return ErrBadMultiLevel
		}
	}
	return nil
}
