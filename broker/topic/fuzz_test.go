package topic

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// FuzzValidateFilter checks ValidateFilter against a level-splitting oracle,
// and that every valid name is also a valid filter.
func FuzzValidateFilter(f *testing.F) {
	for _, tt := range matchTests {
		f.Add([]byte(tt.filter))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		err := ValidateFilter(b)
		ref := refValidFilter(string(b))
		if (err == nil) != (ref == nil) {
			t.Fatalf("ValidateFilter(%q) = %v, oracle %v", b, err, ref)
		}
		// With U+0000 the two may disagree about which fault is first.
		if !strings.Contains(string(b), "\x00") && err != ref {
			t.Fatalf("ValidateFilter(%q) = %v, oracle %v", b, err, ref)
		}
		if ValidateName(b) == nil && err != nil {
			t.Fatalf("%q is a valid name but not a valid filter: %v", b, err)
		}
		if err == nil && !Match(string(b), string(b)) && !strings.ContainsAny(string(b), "+#") {
			t.Fatalf("literal filter %q does not match itself", b)
		}
	})
}

// FuzzParseShare checks ParseShare's results against the rules they must
// satisfy.
func FuzzParseShare(f *testing.F) {
	f.Add("$share/consumer1/sport/tennis/+")
	f.Add("$share/consumer1//finance")
	f.Add("$share/workers")
	f.Fuzz(func(t *testing.T, s string) {
		group, rest, shared, err := ParseShare(s)
		if shared != strings.HasPrefix(s, SharePrefix) {
			t.Fatalf("ParseShare(%q): shared = %v", s, shared)
		}
		if !shared {
			if err != nil || group != "" || rest != s {
				t.Fatalf("ParseShare(%q) of an ordinary filter = %q, %q, %v", s, group, rest, err)
			}
			return
		}
		if err != nil {
			if !errors.Is(err, ErrBadShare) || group != "" || rest != "" {
				t.Fatalf("ParseShare(%q) = %q, %q, %v", s, group, rest, err)
			}
			return
		}
		if SharePrefix+group+"/"+rest != s {
			t.Fatalf("ParseShare(%q) = %q, %q: does not reassemble", s, group, rest)
		}
		if group == "" || strings.ContainsAny(group, "/+#\x00") {
			t.Fatalf("ParseShare(%q): bad group %q accepted", s, group)
		}
		if e := ValidateFilter([]byte(rest)); e != nil {
			t.Fatalf("ParseShare(%q): invalid filter %q accepted: %v", s, rest, e)
		}
	})
}

// FuzzMatch builds an Index from up to 16 newline-separated filters and
// checks that it agrees with Match for name: cold, warm, and after removing
// every other filter. The filters are not validated, so the Index's
// treatment of invalid filters is checked against Match's as well; Match
// itself is checked against the split-based oracle.
func FuzzMatch(f *testing.F) {
	for _, tt := range matchTests {
		f.Add(tt.filter, tt.name)
	}
	f.Fuzz(func(t *testing.T, filters, name string) {
		fs := strings.SplitN(filters, "\n", 17)
		if len(fs) > 16 {
			fs = fs[:16]
		}
		for _, fl := range fs {
			if Match(fl, name) != refMatch(fl, name) {
				t.Fatalf("Match(%q, %q) = %v, oracle disagrees", fl, name, Match(fl, name))
			}
		}
		x := NewIndex[int](4)
		var model []entry
		for i, fl := range fs {
			x.Add(fl, i)
			model = append(model, entry{fl, i})
		}
		check := func(what string) {
			for range 2 {
				if got, want := sorted(x.Match([]byte(name))), naive(model, name); !slices.Equal(got, want) {
					t.Fatalf("%s: Index.Match(%q) = %v, naive %v (filters %q)", what, name, got, want, fs)
				}
			}
		}
		check("cold")
		for i := 0; i < len(model); i += 2 {
			if !x.Remove(model[i].filter, model[i].v) {
				t.Fatalf("Remove(%q, %d) = false", model[i].filter, model[i].v)
			}
		}
		var kept []entry
		for i := 1; i < len(model); i += 2 {
			kept = append(kept, model[i])
		}
		model = kept
		check("after Remove")
		for _, e := range model {
			x.Remove(e.filter, e.v)
		}
		if !x.root.empty() || x.Len() != 0 || x.Filters() != 0 {
			t.Fatalf("not empty after removing every filter %q", fs)
		}
	})
}
