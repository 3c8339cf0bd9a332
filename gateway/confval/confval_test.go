package confval

import "testing"

func TestSize(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want Size
		out  string
	}{
		{"0", 0, "0"}, {"1000", 1000, "1000"}, {"1024", KiB, "1KiB"}, {"64KiB", 64 * KiB, "64KiB"},
		{"1536KiB", 1536 * KiB, "1536KiB"}, {"1MiB", MiB, "1MiB"}, {"1GiB", GiB, "1GiB"},
		{"unlimited", Unlimited, "unlimited"},
	} {
		got, err := parseSize(tt.in)
		if err != nil || got != tt.want || got.String() != tt.out {
			t.Errorf("parseSize(%q) = %d (%v), %v; want %d (%s)", tt.in, got, got, err, tt.want, tt.out)
		}
	}
	for _, in := range []string{"", "MiB", "1 MiB", "1.5MiB", "1MB", "1k", "0x100", "-1KiB"} {
		if got, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q) = %v, want an error", in, got)
		}
	}
}
