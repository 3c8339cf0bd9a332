package topic

import (
	"fmt"
	"math/rand"
	"slices"
	"sync"
	"testing"
)

// newIndexNoCache returns the zero Index, which has no cache and walks the
// trie on every Match.
func newIndexNoCache[V comparable]() *Index[V] { return &Index[V]{} }

// entry is one (filter, value) pair of the naive model the Index is checked
// against.
type entry struct {
	filter string
	v      int
}

// naive returns the sorted values of every entry whose filter matches name.
func naive(entries []entry, name string) []int {
	var r []int
	for _, e := range entries {
		if Match(e.filter, name) {
			r = append(r, e.v)
		}
	}
	slices.Sort(r)
	return r
}

func sorted(r []int) []int {
	s := slices.Clone(r)
	slices.Sort(s)
	return s
}

func TestIndexMatchTable(t *testing.T) {
	for _, cached := range []bool{false, true} {
		x := newIndexNoCache[int]()
		if cached {
			x = NewIndex[int](0)
		}
		for i, tt := range matchTests {
			x.Add(tt.filter, i)
		}
		for i, tt := range matchTests {
			for range 2 { // a miss, then a hit when cached
				got := slices.Contains(x.Match([]byte(tt.name)), i)
				if got != tt.want {
					t.Errorf("cached=%v: Index with %q matching %q = %v, want %v", cached, tt.filter, tt.name, got, tt.want)
				}
			}
		}
	}
}

func TestIndexBasics(t *testing.T) {
	x := NewIndex[string](0)
	x.Add("a/b", "s1")
	x.Add("a/b", "s1") // duplicate: kept once
	x.Add("a/b", "s2")
	x.Add("a/+", "s1")
	x.Add("a/#", "s3")
	x.Add("#", "s4")
	if x.Len() != 5 || x.Filters() != 4 {
		t.Fatalf("Len, Filters = %d, %d; want 5, 4", x.Len(), x.Filters())
	}
	// s1 matches twice, once per filter; the caller deduplicates.
	if got, want := sorted2(x.Match([]byte("a/b"))), []string{"s1", "s1", "s2", "s3", "s4"}; !slices.Equal(got, want) {
		t.Errorf("Match(a/b) = %v, want %v", got, want)
	}
	if got := x.Match([]byte("$SYS/x")); got != nil {
		t.Errorf("Match($SYS/x) = %v, want nil", got)
	}
	if x.Remove("a/b", "nope") || x.Remove("a/c", "s1") || x.Remove("a/#/b", "s3") || x.Remove("+", "s1") {
		t.Error("Remove of an absent pair reported true")
	}
	if !x.Remove("a/b", "s1") || x.Remove("a/b", "s1") {
		t.Error("Remove(a/b, s1) twice: want true then false")
	}
	if x.Len() != 4 || x.Filters() != 4 {
		t.Fatalf("Len, Filters = %d, %d; want 4, 4", x.Len(), x.Filters())
	}
	x.Remove("a/b", "s2")
	x.Remove("a/+", "s1")
	x.Remove("a/#", "s3")
	x.Remove("#", "s4")
	if x.Len() != 0 || x.Filters() != 0 {
		t.Fatalf("Len, Filters = %d, %d; want 0, 0", x.Len(), x.Filters())
	}
	if !x.root.empty() {
		t.Errorf("root not pruned: %+v", x.root)
	}
	if got := x.Match([]byte("a/b")); got != nil {
		t.Errorf("Match(a/b) on empty index = %v", got)
	}
}

func sorted2(r []string) []string {
	s := slices.Clone(r)
	slices.Sort(s)
	return s
}

// TestIndexPrune checks that Remove leaves no empty node behind, whichever
// order overlapping filters are removed in.
func TestIndexPrune(t *testing.T) {
	filters := []string{"a/b/c", "a/b", "a/+/c", "a/#", "+/#", "#", "a/b/#", "/", "//+", "a/#/b", "+", "a//"}
	rng := rand.New(rand.NewSource(1))
	for round := 0; round < 50; round++ {
		x := NewIndex[int](0)
		for i, f := range filters {
			x.Add(f, i)
			x.Add(f, i+100)
		}
		order := rng.Perm(2 * len(filters))
		for _, k := range order {
			i, v := k%len(filters), k%len(filters)+100*(k/len(filters))
			if !x.Remove(filters[i], v) {
				t.Fatalf("Remove(%q, %d) = false", filters[i], v)
			}
		}
		if !x.root.empty() || x.Len() != 0 || x.Filters() != 0 {
			t.Fatalf("round %d: index not empty after removing everything: %+v", round, x.root)
		}
	}
}

// TestLeafManyValues crosses leafIndexMin both ways and checks Add/Remove
// keep vals and pos consistent.
func TestLeafManyValues(t *testing.T) {
	x := NewIndex[int](0)
	const n = 200
	for v := range n {
		x.Add("bcast", v)
		x.Add("bcast", v)
	}
	if x.Len() != n || x.Filters() != 1 {
		t.Fatalf("Len, Filters = %d, %d", x.Len(), x.Filters())
	}
	rng := rand.New(rand.NewSource(2))
	live := map[int]bool{}
	for v := range n {
		live[v] = true
	}
	for _, v := range rng.Perm(n) {
		if !x.Remove("bcast", v) {
			t.Fatalf("Remove(%d) = false", v)
		}
		delete(live, v)
		got := x.Match([]byte("bcast"))
		if len(got) != len(live) {
			t.Fatalf("after removing %d: %d values, want %d", v, len(got), len(live))
		}
		for _, w := range got {
			if !live[w] {
				t.Fatalf("after removing %d: stale value %d", v, w)
			}
		}
		if len(live) == 0 {
			break
		}
		if l := &x.root.lits["bcast"].leaf; l.pos != nil {
			for i, w := range l.vals {
				if l.pos[w] != i || len(l.pos) != len(l.vals) {
					t.Fatalf("pos out of step with vals at %d", i)
				}
			}
		}
	}
	if x.root.lits != nil && len(x.root.lits) != 0 {
		t.Errorf("bcast node not pruned")
	}
}

// TestMatchResultImmutable checks that a returned slice does not change when
// the index does.
func TestMatchResultImmutable(t *testing.T) {
	x := NewIndex[int](0)
	x.Add("a/+", 1)
	x.Add("a/b", 2)
	r := x.Match([]byte("a/b"))
	before := slices.Clone(r)
	x.Add("a/#", 3)
	x.Remove("a/b", 2)
	x.Add("a/b", 4)
	if !slices.Equal(r, before) {
		t.Errorf("earlier result changed from %v to %v", before, r)
	}
	if got, want := sorted(x.Match([]byte("a/b"))), []int{1, 3, 4}; !slices.Equal(got, want) {
		t.Errorf("Match = %v, want %v", got, want)
	}
}

func TestMatchHitNoAlloc(t *testing.T) {
	x := NewIndex[int](0)
	x.Add("plant/+/dev1/#", 1)
	x.Add("plant/line1/dev1/telemetry", 2)
	name := []byte("plant/line1/dev1/telemetry")
	x.Match(name)
	if n := testing.AllocsPerRun(1000, func() { x.Match(name) }); n != 0 {
		t.Errorf("cache hit allocated %v times per Match", n)
	}
	none := []byte("nobody/listens")
	x.Match(none)
	if n := testing.AllocsPerRun(1000, func() { x.Match(none) }); n != 0 {
		t.Errorf("cached empty result allocated %v times per Match", n)
	}
}

func TestCacheBounded(t *testing.T) {
	for _, size := range []int{1, 3, 10, 100, 1024, 5000} {
		x := NewIndex[int](size)
		x.Add("#", 1)
		for i := range 3 * size {
			x.Match(fmt.Appendf(nil, "t/%d", i))
			if n := x.cache.len(); n > size {
				t.Fatalf("size %d: cache holds %d names", size, n)
			}
		}
		if n := x.cache.len(); n == 0 {
			t.Errorf("size %d: cache is empty", size)
		}
	}
}

// TestCacheInvalidation checks that Add and Remove drop exactly the right
// cached names: after any change, every cached result equals a fresh walk,
// and names a literal filter cannot match stay cached.
func TestCacheInvalidation(t *testing.T) {
	x := NewIndex[int](0)
	names := []string{"a/b", "a/c", "a", "b/b", "$SYS/x", "a/b/c"}
	warm := func() {
		for _, n := range names {
			x.Match([]byte(n))
		}
	}
	check := func(what string) {
		t.Helper()
		for _, n := range names {
			if got, want := x.Match([]byte(n)), x.walk([]byte(n)); !slices.Equal(got, want) {
				t.Errorf("%s: Match(%q) = %v, fresh walk = %v", what, n, got, want)
			}
		}
	}
	warm()
	x.Add("a/b", 1) // literal: only "a/b" is dropped
	if _, ok, _ := x.cache.get([]byte("a/c")); !ok {
		t.Error("literal Add dropped an unrelated cached name")
	}
	check("Add a/b")
	warm()
	x.Add("a/+", 2)
	if _, ok, _ := x.cache.get([]byte("b/b")); !ok {
		t.Error("Add a/+ dropped b/b")
	}
	check("Add a/+")
	warm()
	x.Add("#", 3)
	check("Add #")
	warm()
	x.Add("+/+", 4)
	check("Add +/+")
	warm()
	x.Remove("#", 3)
	check("Remove #")
	warm()
	x.Remove("a/b", 1)
	check("Remove a/b")
}

// TestIndexProperty compares the Index with the naive model over random
// filters and names, with a cold and a warm cache, through Adds and Removes.
func TestIndexProperty(t *testing.T) {
	rng := rand.New(rand.NewSource(42))
	levels := []string{"a", "b", "c", "", "$s", "+", "#"}
	randTopic := func(wild bool) string {
		n := 1 + rng.Intn(4)
		s := ""
		for i := range n {
			if i > 0 {
				s += "/"
			}
			l := levels[rng.Intn(len(levels))]
			for !wild && (l == "+" || l == "#") {
				l = levels[rng.Intn(len(levels))]
			}
			// '#' is only valid last; keep filters valid.
			if l == "#" && i != n-1 {
				l = "+"
			}
			s += l
		}
		return s
	}
	for _, cacheSize := range []int{-1, 4, 64} {
		var x *Index[int]
		if cacheSize < 0 {
			x = newIndexNoCache[int]()
		} else {
			x = NewIndex[int](cacheSize)
		}
		var model []entry
		names := make([]string, 200)
		for i := range names {
			names[i] = randTopic(false)
		}
		verify := func(step int) {
			t.Helper()
			for _, n := range names {
				for range 2 { // miss then (maybe) hit
					if got, want := sorted(x.Match([]byte(n))), naive(model, n); !slices.Equal(got, want) {
						t.Fatalf("cache %d, step %d: Match(%q) = %v, want %v", cacheSize, step, n, got, want)
					}
				}
			}
			if x.Len() != len(model) {
				t.Fatalf("Len = %d, want %d", x.Len(), len(model))
			}
			fs := map[string]bool{}
			for _, e := range model {
				fs[e.filter] = true
			}
			if x.Filters() != len(fs) {
				t.Fatalf("Filters = %d, want %d", x.Filters(), len(fs))
			}
		}
		for step := range 2000 {
			if len(model) > 0 && rng.Intn(3) == 0 {
				k := rng.Intn(len(model))
				e := model[k]
				if !x.Remove(e.filter, e.v) {
					t.Fatalf("Remove(%q, %d) = false", e.filter, e.v)
				}
				model = slices.Delete(model, k, k+1)
			} else {
				e := entry{randTopic(true), rng.Intn(20)}
				x.Add(e.filter, e.v)
				if !slices.Contains(model, e) {
					model = append(model, e)
				}
			}
			if step%50 == 0 {
				verify(step)
			} else {
				// Keep the cache warm with a few names between checks.
				for range 5 {
					x.Match([]byte(names[rng.Intn(len(names))]))
				}
			}
		}
		verify(-1)
	}
}

// TestIndexConcurrent runs Add, Remove and Match together; run it with
// -race. Each writer owns its values, so a reader can check that a value it
// sees under a literal filter it knows is live at some point.
func TestIndexConcurrent(t *testing.T) {
	x := NewIndex[int](64)
	x.Add("stable/#", -1)
	const writers, readers, rounds = 4, 4, 2000
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(w)))
			for i := range rounds {
				f := fmt.Sprintf("stable/%d/+", rng.Intn(8))
				if i%3 == 0 {
					f = fmt.Sprintf("stable/%d/x", rng.Intn(8))
				}
				v := w*rounds + i
				x.Add(f, v)
				if rng.Intn(2) == 0 {
					x.Remove(f, v)
				}
			}
		}()
	}
	for r := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(100 + r)))
			for range rounds * 2 {
				name := fmt.Appendf(nil, "stable/%d/x", rng.Intn(8))
				res := x.Match(name)
				if !slices.Contains(res, -1) {
					t.Errorf("Match(%s) lost the stable subscription: %v", name, res)
					return
				}
				_ = slices.Clone(res) // read every element under -race
			}
		}()
	}
	wg.Wait()
	// Quiescent now: the cache must agree with a fresh walk.
	for i := range 8 {
		name := fmt.Appendf(nil, "stable/%d/x", i)
		if got, want := x.Match(name), x.walk(name); !slices.Equal(got, want) {
			t.Errorf("after the storm, Match(%s) = %v, fresh walk = %v", name, got, want)
		}
	}
}

// TestMatchGen: a match reports the generation its result reflects, with or
// without the cache, so that whoever adds a value can tell whether a match
// saw it: for a value whose filter matches the name, an older generation
// never includes it and the same or a newer one always does.
func TestMatchGen(t *testing.T) {
	for _, tc := range []struct {
		name string
		x    *Index[int]
	}{{"cache", NewIndex[int](0)}, {"no cache", newIndexNoCache[int]()}} {
		t.Run(tc.name, func(t *testing.T) {
			x := tc.x
			r, g0 := x.MatchGen([]byte("a/b"))
			if len(r) != 0 {
				t.Fatalf("empty index matched %v", r)
			}
			x.Match([]byte("a/b")) // cached now (with the cache)
			g1 := x.AddGen("a/+", 1)
			if g1 <= g0 {
				t.Fatalf("AddGen %d not above the earlier match's %d", g1, g0)
			}
			r, g := x.MatchGen([]byte("a/b"))
			if !slices.Equal(r, []int{1}) || g < g1 {
				t.Fatalf("after AddGen %d: %v at %d, want [1] at >= %d", g1, r, g, g1)
			}
			// An Add elsewhere changes nothing for a/b: the result still
			// holds 1 (its generation may or may not move: only values
			// whose filter matches the name are promised anything).
			x.AddGen("c", 2)
			r, g = x.MatchGen([]byte("a/b"))
			if !slices.Equal(r, []int{1}) || g < g1 {
				t.Fatalf("after AddGen(c): %v at %d, want [1] at >= %d", r, g, g1)
			}
		})
	}
}

// TestMatchGenConcurrent: matches racing with adds (through the cache,
// which the adds invalidate) never report a generation at or above a
// matching value's without the value, nor one below it with it.
func TestMatchGenConcurrent(t *testing.T) {
	x := NewIndex[int](0)
	const n = 200
	gens := make([]uint64, n)
	var wg sync.WaitGroup
	var mu sync.Mutex
	type seen struct {
		r   []int
		gen uint64
	}
	var results []seen
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := range n {
			g := x.AddGen(fmt.Sprintf("t/%d", i%7), i)
			mu.Lock()
			gens[i] = g
			mu.Unlock()
		}
	}()
	go func() {
		defer wg.Done()
		for range 5 * n {
			r, g := x.MatchGen([]byte("t/3"))
			results = append(results, seen{r, g})
		}
	}()
	wg.Wait()
	for _, s := range results {
		for i := 3; i < n; i += 7 {
			has := slices.Contains(s.r, i)
			if has != (s.gen >= gens[i]) {
				t.Fatalf("match at generation %d: holds %d = %v, but %d was added at %d", s.gen, i, has, i, gens[i])
			}
		}
	}
}
