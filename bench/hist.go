package bench

import (
	"math"
	"math/bits"
)

// Histogram layout: values in microseconds, exact below 128 µs, and above
// that 64 buckets per power of two, so any recorded value is within 1/64
// (1.6 %) of the value reported for its bucket. The layout is HDR
// Histogram's with the precision fixed, which makes recording a shift, an
// add and an increment into a fixed array: nothing allocates per message.
const (
	histSubBits = 7
	histSub     = 1 << histSubBits // exact range, and sub-buckets per magnitude ×2
	histHalf    = histSub / 2
	histMaxBits = 32 // values up to 2^32 µs (71 minutes); larger ones are clamped
	histBuckets = histSub + (histMaxBits-histSubBits)*histHalf
)

// histogram counts latencies. It is not safe for concurrent use: each
// receiver owns one and the run merges them after the receivers stop.
type histogram struct {
	counts [histBuckets]uint64
	n      uint64
	max    uint64
}

func histBucket(v uint64) int {
	if v < histSub {
		return int(v)
	}
	if v >= 1<<histMaxBits {
		v = 1<<histMaxBits - 1
	}
	shift := bits.Len64(v) - histSubBits
	return shift*histHalf + int(v>>shift)
}

// histValue is the value reported for bucket b: the middle of the range of
// values it holds.
func histValue(b int) uint64 {
	if b < histSub {
		return uint64(b)
	}
	shift := b/histHalf - 1
	lo := uint64(b%histHalf+histHalf) << shift
	return lo + (1<<shift-1)/2
}

// record adds one latency of us microseconds.
func (h *histogram) record(us uint64) {
	h.counts[histBucket(us)]++
	h.n++
	h.max = max(h.max, us)
}

// merge adds o's counts to h.
func (h *histogram) merge(o *histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.max = max(h.max, o.max)
}

// quantile returns the value at quantile q (0 < q <= 1) in microseconds: the
// smallest bucket value with at least q of the samples at or below it.
func (h *histogram) quantile(q float64) uint64 {
	if h.n == 0 {
		return 0
	}
	// The epsilon keeps 0.99*100 from rounding up to rank 100.
	rank := uint64(math.Ceil(q*float64(h.n) - 1e-9))
	rank = min(max(rank, 1), h.n)
	var seen uint64
	for b, c := range h.counts {
		seen += c
		if seen >= rank {
			return min(histValue(b), h.max)
		}
	}
	return h.max
}
