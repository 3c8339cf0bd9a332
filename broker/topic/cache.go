package topic

import (
	"hash/maphash"
	"sync"
	"unsafe"
)

// DefaultCacheSize is the number of topic names an [Index] caches results
// for when NewIndex is given a size of zero or less. It is NATS's
// slCacheMax: enough for the hot topics of a busy broker, small enough that
// invalidating it by scanning stays cheap.
const DefaultCacheSize = 1024

const (
	maxShards   = 16 // enough to spread hits over cores; more only costs memory
	minPerShard = 8  // below this a shard evicts too often to be useful
)

// cache is a bounded map from topic name to match result, split into shards
// so that concurrent hits on different names do not share one lock's cache
// line. A hit is a hash, a read lock and a map lookup with a string(b) key,
// which Go does not allocate for.
type cache[V comparable] struct {
	seed   maphash.Seed
	mask   uint64
	per    int // entries per shard before it evicts
	shards []cacheShard[V]
}

type cacheShard[V comparable] struct {
	mu sync.RWMutex
	m  map[string]cached[V]
	// Pad to two cache lines so that neighbouring shards' locks do not
	// share one (adjacent-line prefetch makes 128 the safe distance). The
	// size is worked out, not written down: a map is 4 bytes on armv7.
	_ [128 - (unsafe.Sizeof(sync.RWMutex{})+unsafe.Sizeof(uintptr(0)))%128]byte
}

// cached is a match result (nil for "no subscribers") and the index
// generation it was computed at.
type cached[V comparable] struct {
	r   []V
	gen uint64
}

func newCache[V comparable](size int) *cache[V] {
	n := maxShards
	for n > 1 && size/n < minPerShard {
		n /= 2
	}
	c := &cache[V]{
		seed:   maphash.MakeSeed(),
		mask:   uint64(n - 1),
		per:    max(size/n, 1),
		shards: make([]cacheShard[V], n),
	}
	for i := range c.shards {
		c.shards[i].m = make(map[string]cached[V], c.per)
	}
	return c
}

func (c *cache[V]) shard(h uint64) *cacheShard[V] { return &c.shards[h&c.mask] }

// get returns the cached result for name and whether there was one, and the
// name's hash for a following put.
func (c *cache[V]) get(name []byte) (e cached[V], ok bool, h uint64) {
	h = maphash.Bytes(c.seed, name)
	s := c.shard(h)
	s.mu.RLock()
	e, ok = s.m[string(name)]
	s.mu.RUnlock()
	return e, ok, h
}

// put stores a result. A full shard first drops half its entries, picked by
// Go's randomised map iteration: random eviction as in NATS, which costs no
// bookkeeping on the hit path (an LRU would write on every hit).
func (c *cache[V]) put(h uint64, name []byte, e cached[V]) {
	s := c.shard(h)
	s.mu.Lock()
	if len(s.m) >= c.per {
		for k := range s.m {
			delete(s.m, k)
			if len(s.m) <= c.per/2 {
				break
			}
		}
	}
	s.m[string(name)] = e
	s.mu.Unlock()
}

// invalidate drops every cached name that filter matches, because adding or
// removing a value under filter changes exactly those results.
//
// A literal filter (most device subscriptions) matches only the name equal
// to it, so that is one delete. A wildcard filter needs a scan of the whole
// cache with Match: about 30 µs for 1024 cached names on the development
// machine (BenchmarkAdd/warm-cache). Clearing the cache instead would be
// O(1) here, but each of the up to 1024 hot names would then miss once, at
// 0.5-1 µs and an allocation per miss (BenchmarkMatch*/rotating), so
// 0.5-1 ms of re-walking per subscription change, and a steady trickle of
// subscribes would keep the cache cold. Scanning is cheaper whenever the
// cache is doing its job.
func (c *cache[V]) invalidate(filter string) {
	if isLiteral(filter) {
		s := c.shard(maphash.String(c.seed, filter))
		s.mu.Lock()
		delete(s.m, filter)
		s.mu.Unlock()
		return
	}
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		for k := range s.m {
			if Match(filter, k) {
				delete(s.m, k)
			}
		}
		s.mu.Unlock()
	}
}

// len returns the number of cached names.
func (c *cache[V]) len() int {
	n := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.RLock()
		n += len(s.m)
		s.mu.RUnlock()
	}
	return n
}
