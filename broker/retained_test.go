package broker

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/linemq/linemq/broker/topic"
)

// TestRetainedMatchAgreesWithTopicMatch checks the retained tree against
// topic.Match, the reference, on a table of tricky cases and on random
// topics and filters: wildcards at every level, empty levels, "#" matching
// its parent, and $-topics hidden from wildcards at the first level.
func TestRetainedMatchAgreesWithTopicMatch(t *testing.T) {
	topics := []string{"a", "a/b", "a/b/c", "a//c", "/a", "/", "//", "a/", "$SYS/x", "$SYS", "b/$x", "x/y/z/w", "sport/tennis/player1", "sport"}
	filters := []string{"#", "+", "+/+", "/+", "+/#", "a/#", "a/+", "a/+/c", "a//+", "$SYS/#", "$SYS/+", "+/$x", "sport/#", "sport/+", "+/tennis/#", "a/b/c/#", "//#", "a/b/c"}
	rng := rand.New(rand.NewPCG(1, 2))
	levels := []string{"a", "b", "", "$x", "c"}
	for range 300 {
		n := 1 + rng.IntN(4)
		var tp, fl string
		for i := range n {
			if i > 0 {
				tp += "/"
				fl += "/"
			}
			tp += levels[rng.IntN(len(levels))]
			switch r := rng.IntN(6); {
			case r == 0:
				fl += "+"
			case r == 1 && i == n-1:
				fl += "#"
			default:
				fl += levels[rng.IntN(len(levels))]
			}
		}
		topics = append(topics, tp)
		filters = append(filters, fl)
	}
	var r retainedStore
	for _, tp := range topics {
		r.set(NewMessage(tp, []byte("x"), 0, true))
	}
	now := time.Now()
	for _, f := range filters {
		if topic.ValidateFilter([]byte(f)) != nil {
			continue
		}
		var want, got []string
		seen := map[string]bool{}
		for _, tp := range topics {
			if topic.Match(f, tp) && !seen[tp] {
				want = append(want, tp)
				seen[tp] = true
			}
		}
		for _, m := range r.match(f, now) {
			got = append(got, m.Topic)
		}
		slices.Sort(want)
		slices.Sort(got)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("filter %q: retained tree matched %q, topic.Match %q", f, got, want)
		}
	}
	// Clearing prunes: every topic cleared leaves an empty tree.
	for _, tp := range topics {
		r.set(NewMessage(tp, nil, 0, true))
	}
	if r.len() != 0 || len(r.root.children) != 0 {
		t.Fatalf("after clearing every topic: %d left, %d first-level nodes", r.len(), len(r.root.children))
	}
}

// BenchmarkRetainedSubscribe is the cost of the retained lookup of one new
// subscription with 500,000 retained topics, for a narrow filter: it costs
// what it matches (a scan of every topic took 45 ms).
func BenchmarkRetainedSubscribe(b *testing.B) {
	var r retainedStore
	for i := range 500_000 {
		r.set(NewMessage(fmt.Sprintf("plant/line%d/dev%d/value", i%50, i), []byte("x"), 0, true))
	}
	now := time.Now()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if len(r.match(fmt.Sprintf("plant/line%d/dev%d/+", i%50, i%500_000), now)) != 1 {
			b.Fatal("no match")
		}
	}
}
