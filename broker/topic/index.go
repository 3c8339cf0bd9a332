package topic

import (
	"bytes"
	"strings"
	"sync"
)

// Index maps topic filters to values (subscriptions) and finds every value
// whose filter matches a topic name. It is safe for concurrent use.
//
// Use [NewIndex]. The zero value is an empty Index that works but caches
// nothing, so every Match walks the trie and allocates.
type Index[V comparable] struct {
	mu      sync.RWMutex // guards root, entries, filters
	root    node[V]
	entries int    // (filter, value) pairs
	filters int    // nodes with at least one value
	gen     uint64 // Adds so far: see MatchGen

	cache   *cache[V] // nil for the zero value: no caching
	scratch sync.Pool // *[]V collecting a miss's result before it is copied out
}

// NewIndex returns an empty Index that caches match results for up to
// cacheSize distinct topic names ([DefaultCacheSize] if cacheSize <= 0).
func NewIndex[V comparable](cacheSize int) *Index[V] {
	if cacheSize <= 0 {
		cacheSize = DefaultCacheSize
	}
	return &Index[V]{cache: newCache[V](cacheSize)}
}

// node is one level of the trie. Literal children are in a map keyed by the
// level; the '+' child and the last-level '#' leaf are held apart so a match
// never has to look for them in the map. A '#' that is not the last level
// of its filter is only valid as a literal (see Match) and lives in lits.
type node[V comparable] struct {
	leaf[V]                     // values whose filter ends here
	lits    map[string]*node[V] // literal next levels; nil until needed
	plus    *node[V]            // '+' next level
	hash    *leaf[V]            // '#' as the last level
}

func (n *node[V]) empty() bool {
	return len(n.vals) == 0 && len(n.lits) == 0 && n.plus == nil && n.hash == nil
}

// leafIndexMin is the number of values at one filter beyond which a leaf
// keeps a map from value to position. Below it a linear scan is faster than
// hashing; above it, Add and Remove would be O(n) per call and a broadcast
// filter with 100k subscribers would make a reconnect storm quadratic.
const leafIndexMin = 16

// leaf is the set of values stored under one filter.
type leaf[V comparable] struct {
	vals []V
	pos  map[V]int // vals index of each value, once len(vals) > leafIndexMin
}

func (l *leaf[V]) find(v V) int {
	if l.pos != nil {
		if i, ok := l.pos[v]; ok {
			return i
		}
		return -1
	}
	for i, w := range l.vals {
		if w == v {
			return i
		}
	}
	return -1
}

// add adds v and reports whether it was not there yet.
func (l *leaf[V]) add(v V) bool {
	if l.find(v) >= 0 {
		return false
	}
	l.vals = append(l.vals, v)
	switch {
	case l.pos != nil:
		l.pos[v] = len(l.vals) - 1
	case len(l.vals) > leafIndexMin:
		l.pos = make(map[V]int, len(l.vals))
		for i, w := range l.vals {
			l.pos[w] = i
		}
	}
	return true
}

// remove removes v and reports whether it was there. The last value takes
// the removed one's place, so order within a leaf is deterministic for a
// given history of adds and removes but is not insertion order.
func (l *leaf[V]) remove(v V) bool {
	i := l.find(v)
	if i < 0 {
		return false
	}
	last := len(l.vals) - 1
	if i != last {
		l.vals[i] = l.vals[last]
		if l.pos != nil {
			l.pos[l.vals[i]] = i
		}
	}
	var zero V
	l.vals[last] = zero // do not pin what V may point to
	l.vals = l.vals[:last]
	if l.pos != nil {
		delete(l.pos, v)
	}
	if len(l.vals) == 0 {
		l.vals, l.pos = nil, nil
	}
	return true
}

// Add adds v under filter. Adding the same (filter, v) pair again is a no-op.
// The filter should have passed [ValidateFilter]; see the package doc for how
// an invalid one is treated.
func (x *Index[V]) Add(filter string, v V) { x.AddGen(filter, v) }

// AddGen is Add, returning the index generation that includes v: a
// [Index.MatchGen] of a name filter matches that returns a smaller
// generation did not see v, one that returns this or a larger one did
// (unless v was removed since).
func (x *Index[V]) AddGen(filter string, v V) uint64 {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.gen++
	gen := x.gen
	n := &x.root
	var l *leaf[V]
	for i := 0; ; {
		j := levelEnd(filter, i)
		lev, last := filter[i:j], j == len(filter)
		if lev == "#" && last {
			if n.hash == nil {
				n.hash = new(leaf[V])
			}
			l = n.hash
			break
		}
		if lev == "+" {
			if n.plus == nil {
				n.plus = new(node[V])
			}
			n = n.plus
		} else {
			c := n.lits[lev]
			if c == nil {
				if n.lits == nil {
					n.lits = make(map[string]*node[V])
				}
				c = new(node[V])
				// Clone: a substring key would pin the whole filter
				// string that first created this node for as long as
				// the node lives.
				n.lits[strings.Clone(lev)] = c
			}
			n = c
		}
		if last {
			l = &n.leaf
			break
		}
		i = j + 1
	}
	if !l.add(v) {
		return gen
	}
	x.entries++
	if len(l.vals) == 1 {
		x.filters++
	}
	if x.cache != nil {
		x.cache.invalidate(filter)
	}
	return gen
}

// step is one edge walked by Remove, kept so empty nodes can be pruned
// bottom-up.
type step[V comparable] struct {
	parent *node[V]
	lev    string
}

// Remove removes v from filter and reports whether it was there. Nodes left
// empty are pruned, so an Index that sees subscriptions come and go does not
// keep the trie of every filter ever used.
func (x *Index[V]) Remove(filter string, v V) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	var buf [16]step[V]
	path := buf[:0]
	n := &x.root
	var l *leaf[V]
	for i := 0; ; {
		j := levelEnd(filter, i)
		lev, last := filter[i:j], j == len(filter)
		if lev == "#" && last {
			if n.hash == nil {
				return false
			}
			l = n.hash
			break
		}
		var c *node[V]
		if lev == "+" {
			c = n.plus
		} else {
			c = n.lits[lev]
		}
		if c == nil {
			return false
		}
		path = append(path, step[V]{n, lev})
		n = c
		if last {
			l = &n.leaf
			break
		}
		i = j + 1
	}
	if !l.remove(v) {
		return false
	}
	x.entries--
	if len(l.vals) == 0 {
		x.filters--
		if l == n.hash {
			n.hash = nil
		}
	}
	// n is the deepest node walked; prune it and its ancestors while empty.
	for k := len(path) - 1; k >= 0 && n.empty(); k-- {
		p := path[k]
		if p.lev == "+" {
			p.parent.plus = nil
		} else {
			delete(p.parent.lits, p.lev)
		}
		n = p.parent
	}
	if x.cache != nil {
		x.cache.invalidate(filter)
	}
	return true
}

// Match returns every value whose filter matches name, one entry per
// matching (filter, value) pair, in an order that is deterministic for a
// given history of Add and Remove calls. It returns nil when nothing
// matches.
//
// The result is shared with other callers and with the cache: do not modify
// it. It is never modified afterwards, so it stays valid after later Add and
// Remove calls. A cache hit does not allocate.
func (x *Index[V]) Match(name []byte) []V {
	r, _ := x.MatchGen(name)
	return r
}

// MatchGen is Match, also returning the index generation the result
// reflects (see [Index.AddGen]): it tells whoever adds a value whether a
// match made concurrently saw it.
func (x *Index[V]) MatchGen(name []byte) ([]V, uint64) {
	c := x.cache
	if c == nil {
		x.mu.RLock()
		r, gen := x.walk(name), x.gen
		x.mu.RUnlock()
		return r, gen
	}
	// A cached result is as old as its generation says, and still right:
	// an Add that would change it invalidates it before returning.
	e, ok, h := c.get(name)
	if ok {
		return e.r, e.gen
	}
	x.mu.RLock()
	e = cached[V]{r: x.walk(name), gen: x.gen}
	// Store while holding the read lock: an Add or Remove that changes this
	// result waits for it and then invalidates the entry, rather than
	// running between the walk and the store and being overwritten by a
	// stale result.
	c.put(h, name, e)
	x.mu.RUnlock()
	return e.r, e.gen
}

// walk matches name against the trie and returns a new slice of exactly the
// matches (nil if none). The caller holds x.mu for reading.
func (x *Index[V]) walk(name []byte) []V {
	sp, _ := x.scratch.Get().(*[]V)
	if sp == nil {
		sp = new([]V)
	}
	buf := collect(&x.root, name, 0, (*sp)[:0])
	var r []V
	if len(buf) > 0 {
		r = make([]V, len(buf))
		copy(r, buf)
	}
	clear(buf) // do not pin what V may point to
	// A huge fan-out would otherwise keep its scratch buffer alive in the
	// pool; let the GC have those.
	if cap(buf) <= 1<<16 {
		*sp = buf[:0]
		x.scratch.Put(sp)
	}
	return r
}

// collect appends to out the values under n matching the levels of name
// from index i on. It iterates down literal levels and recurses only into
// '+' children, so the recursion depth is bounded by the filters, not by the
// name.
func collect[V comparable](n *node[V], name []byte, i int, out []V) []V {
	for {
		if i > len(name) {
			// Every level consumed: filters ending here match, and so
			// does "<here>/#", since '#' includes the parent level
			// [MQTT-4.7.1-2].
			out = append(out, n.vals...)
			if n.hash != nil {
				out = append(out, n.hash.vals...)
			}
			return out
		}
		j := len(name) // end of this level; IndexByte is vectorised
		if k := bytes.IndexByte(name[i:], '/'); k >= 0 {
			j = i + k
		}
		// A first level starting with '$' is not matched by a first-level
		// wildcard [MQTT-4.7.2-1].
		if i > 0 || !dollar(name) {
			if n.hash != nil {
				out = append(out, n.hash.vals...) // this level and all below
			}
			if n.plus != nil {
				out = collect(n.plus, name, j+1, out)
			}
		}
		c := n.lits[string(name[i:j])]
		if c == nil {
			return out
		}
		n, i = c, j+1
	}
}

// Len returns the number of (filter, value) pairs in the index.
func (x *Index[V]) Len() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.entries
}

// Filters returns the number of distinct filters with at least one value.
func (x *Index[V]) Filters() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.filters
}
