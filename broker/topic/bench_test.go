package topic

import (
	"fmt"
	"testing"
)

// plant returns about n filters shaped like a factory: per device a literal
// telemetry subscription, per device index a cross-line wildcard, per line
// an alarms wildcard, and a few broad ones. It also returns the topic names
// devices publish to.
func plant(n int) (filters []string, names [][]byte) {
	const devs = 100
	lines := n / devs
	for k := range lines {
		for i := range devs {
			filters = append(filters, fmt.Sprintf("plant/line%d/dev%d/telemetry", k, i))
			names = append(names,
				fmt.Appendf(nil, "plant/line%d/dev%d/telemetry", k, i),
				fmt.Appendf(nil, "plant/line%d/dev%d/alarms", k, i))
		}
		filters = append(filters, fmt.Sprintf("plant/line%d/+/alarms", k))
	}
	for i := range devs {
		filters = append(filters, fmt.Sprintf("plant/+/dev%d/#", i))
	}
	filters = append(filters, "plant/#", "plant/+/+/alarms", "#", "$SYS/#", "plant/line0/#")
	return filters, names
}

func plantIndex(b *testing.B, n int, cached bool) (*Index[int], [][]byte) {
	b.Helper()
	filters, names := plant(n)
	x := newIndexNoCache[int]()
	if cached {
		x = NewIndex[int](0)
	}
	for i, f := range filters {
		x.Add(f, i)
	}
	// Spread names so a hot set is not all one line.
	step := len(names)/997 + 1
	spread := make([][]byte, 0, len(names))
	for s := range step {
		for i := s; i < len(names); i += step {
			spread = append(spread, names[i])
		}
	}
	return x, spread
}

func benchMatch(b *testing.B, n int) {
	// cached: 256 hot topics, all cache hits after the first round.
	b.Run("cached", func(b *testing.B) {
		x, names := plantIndex(b, n, true)
		hot := names[:256]
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; b.Loop(); i++ {
			x.Match(hot[i&255])
		}
	})
	// parallel: the same hot set from every P at once.
	b.Run("cached-parallel", func(b *testing.B) {
		x, names := plantIndex(b, n, true)
		hot := names[:256]
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for i := 0; pb.Next(); i++ {
				x.Match(hot[i&255])
			}
		})
	})
	// rotating: every topic in turn through the default 1024-entry cache,
	// so nearly all are misses that also pay for the store and eviction.
	b.Run("rotating", func(b *testing.B) {
		x, names := plantIndex(b, n, true)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; b.Loop(); i++ {
			x.Match(names[i%len(names)])
		}
	})
	// nocache: the trie walk and result allocation alone.
	b.Run("nocache", func(b *testing.B) {
		x, names := plantIndex(b, n, false)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; b.Loop(); i++ {
			x.Match(names[i%len(names)])
		}
	})
}

func BenchmarkMatch10k(b *testing.B)  { benchMatch(b, 10_000) }
func BenchmarkMatch100k(b *testing.B) { benchMatch(b, 100_000) }

// BenchmarkAdd measures Add into a growing plant index (cache empty, as at
// start-up), and an Add/Remove pair against a full cache, which is where
// invalidation costs: a literal filter deletes one key, a wildcard filter
// scans the 1024 cached names.
func BenchmarkAdd(b *testing.B) {
	filters, _ := plant(100_000)
	b.Run("plant", func(b *testing.B) {
		b.ReportAllocs()
		x := NewIndex[int](0)
		for i := 0; b.Loop(); i++ {
			if i%len(filters) == 0 {
				x = NewIndex[int](0)
			}
			x.Add(filters[i%len(filters)], i)
		}
	})
	for _, f := range []string{"plant/line7/dev7/telemetry", "plant/+/dev7/#"} {
		b.Run("warm-cache/"+f, func(b *testing.B) {
			x, names := plantIndex(b, 10_000, true)
			for _, n := range names[:4096] {
				x.Match(n)
			}
			if got := x.cache.len(); got < DefaultCacheSize/2 {
				b.Fatalf("cache holds only %d names", got)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				x.Add(f, -1)
				x.Remove(f, -1)
			}
		})
	}
}
