package share

import (
	"fmt"
	"testing"
)

// BenchmarkPick measures one Pick per iteration with every member taking,
// the steady state of a healthy group. Half the members are remote so the
// candidate list has both parts. Keys vary per iteration so the hash
// strategies do not hit one member every time.
func BenchmarkPick(b *testing.B) {
	keys := make([]Key, 256)
	for i := range keys {
		keys[i] = Key{ClientID: fmt.Appendf(nil, "meter-%05d", i), Topic: fmt.Appendf(nil, "site/%d/meter/%d", i%7, i)}
	}
	accept := func(Member[int]) Verdict { return Take }
	for s := range numStrategies {
		for _, n := range []int{4, 64} {
			b.Run(fmt.Sprintf("%s/%d", s, n), func(b *testing.B) {
				g := NewGroup[int]("bench", "site/#", Options{Strategy: s, SkipFull: true})
				for i := range n {
					g.Join(Member[int]{ID: fmt.Sprintf("worker-%02d", i), Local: i%2 == 0, Value: i})
				}
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					g.Pick(keys[i&255], accept)
					i++
				}
			})
		}
	}
}
