package share

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// Test members use one-letter IDs so a pick sequence reads as a string.
// Upper case is local to the node under test, lower case remote.
func member(id string) Member[int] {
	return Member[int]{ID: id, Local: strings.ToUpper(id) == id, Value: int(id[0])}
}

// newGroup joins the members spelled by ids, in that order.
func newGroup(opts Options, ids string) *Group[int] {
	g := NewGroup[int]("g", "t/#", opts)
	for _, c := range ids {
		g.Join(member(string(c)))
	}
	return g
}

// verdictFunc answers for message number msg and member id.
type verdictFunc func(msg int, id string) Verdict

func allTake(int, string) Verdict { return Take }

// only answers v for the members listed in ids, Take for the others.
func only(ids string, v Verdict) verdictFunc {
	return func(_ int, id string) Verdict {
		if strings.Contains(ids, id) {
			return v
		}
		return Take
	}
}

// run picks msgs messages. seq has the chosen ID per message, or "-" when
// Pick reported false; asked has the IDs offered to accept, "/" between
// messages. It fails the test if accept sees a member twice in one Pick.
func run(t *testing.T, g *Group[int], msgs int, k Key, vf verdictFunc) (seq, asked string) {
	t.Helper()
	var s, a strings.Builder
	for i := range msgs {
		if i > 0 {
			a.WriteByte('/')
		}
		seen := map[string]bool{}
		m, ok := g.Pick(k, func(m Member[int]) Verdict {
			if seen[m.ID] {
				t.Fatalf("message %d: %s offered twice", i, m.ID)
			}
			seen[m.ID] = true
			a.WriteString(m.ID)
			return vf(i, m.ID)
		})
		if !ok {
			s.WriteByte('-')
			continue
		}
		if cur, found := g.Get(m.ID); !found || cur != m {
			t.Fatalf("message %d: picked %+v, current member is %+v, %v", i, m, cur, found)
		}
		s.WriteString(m.ID)
	}
	return s.String(), a.String()
}

func TestRoundRobinSequences(t *testing.T) {
	tests := []struct {
		name    string
		members string
		msgs    int
		want    string
	}{
		{"2 members x 4 messages", "AB", 4, "ABAB"},
		{"5 members x 10 messages", "ABCDE", 10, "ABCDEABCDE"},
		{"single member", "A", 3, "AAA"},
		// Candidate order is local members first, whatever the join order.
		{"locals before remotes", "dAeBC", 10, "ABCdeABCde"},
		{"remotes only, join order", "cab", 6, "cabcab"},
	}
	for _, tt := range tests {
		for _, s := range []Strategy{RoundRobin, PreferLocal} {
			if s == PreferLocal && strings.ContainsAny(tt.members, "abcde") {
				continue // mixed groups are PreferLocal's own business
			}
			t.Run(tt.name+"/"+s.String(), func(t *testing.T) {
				g := newGroup(Options{Strategy: s, SkipFull: true}, tt.members)
				got, _ := run(t, g, tt.msgs, Key{}, allTake)
				if got != tt.want {
					t.Errorf("sequence %q, want %q", got, tt.want)
				}
			})
		}
	}
}

// TestClusterWorkedExample follows the documented three-node example: A, B
// and C on node 1, D on node 2, E on node 3, one group of five. Each node
// holds its own Group, built from the same membership in the same join
// order, differing only in which members are local.
func TestClusterWorkedExample(t *testing.T) {
	joins := []struct {
		id   string
		node int
	}{{"D", 2}, {"A", 1}, {"E", 3}, {"B", 1}, {"C", 1}}
	nodes := map[int]*Group[int]{}
	for n := 1; n <= 3; n++ {
		g := NewGroup[int]("workers", "sensors/#", Options{SkipFull: true})
		for _, j := range joins {
			g.Join(Member[int]{ID: j.id, Local: j.node == n})
		}
		nodes[n] = g
	}
	pick := func(n int) string {
		m, ok := nodes[n].Pick(Key{}, func(Member[int]) Verdict { return Take })
		if !ok {
			t.Fatalf("node %d: no pick", n)
		}
		return m.ID
	}

	var got strings.Builder
	for range 10 {
		got.WriteString(pick(1))
	}
	if got.String() != "ABCDEABCDE" {
		t.Errorf("node 1, 10 messages: %q, want ABCDEABCDE", got.String())
	}

	// Node 2 puts its own member first, then the others in join order.
	got.Reset()
	for range 5 {
		got.WriteString(pick(2))
	}
	if got.String() != "DAEBC" {
		t.Errorf("node 2, 5 messages: %q, want DAEBC", got.String())
	}

	// Interleaved publishes on all nodes: no global rotation, but over a
	// long run each member still ends up with exactly its fifth.
	count := map[string]int{}
	for i := range 3000 {
		count[pick(1+i%3)]++
	}
	for _, id := range []string{"A", "B", "C", "D", "E"} {
		if count[id] != 600 {
			t.Errorf("member %s got %d of 3000, want 600", id, count[id])
		}
	}
}

func TestPassOver(t *testing.T) {
	tests := []struct {
		name      string
		strategy  Strategy
		skipFull  bool
		members   string
		msgs      int
		verdict   verdictFunc
		want      string // chosen per message, "-" for none
		wantAsked string // offers per message, "/" between
	}{
		{
			name: "skip passes the turn on", skipFull: true,
			members: "ABC", msgs: 6, verdict: only("B", Skip),
			want: "ACCACC", wantAsked: "A/BC/C/A/BC/C",
		},
		{
			// A Skip lasts for one Pick: B is offered its turn again.
			name: "skip is per message", skipFull: true,
			members: "ABC", msgs: 6,
			verdict: func(msg int, id string) Verdict {
				if id == "B" && msg == 1 {
					return Skip
				}
				return Take
			},
			want: "ACCABC", wantAsked: "A/BC/C/A/B/C",
		},
		{
			name: "all skip loses the message after one pass", skipFull: true,
			members: "ABC", msgs: 3, verdict: only("ABC", Skip),
			want: "---", wantAsked: "ABC/BCA/CAB",
		},
		{
			name: "out of range verdict counts as skip", skipFull: true,
			members: "AB", msgs: 2, verdict: only("A", Verdict(9)),
			want: "BB", wantAsked: "AB/B",
		},
		{
			name: "full passed over while another takes", skipFull: true,
			members: "ABC", msgs: 6, verdict: only("B", Full),
			want: "ACCACC", wantAsked: "A/BC/C/A/BC/C",
		},
		{
			name: "all full falls back to the strategy's own choice", skipFull: true,
			members: "ABC", msgs: 4, verdict: only("ABC", Full),
			want: "ABCA", wantAsked: "ABC/BCA/CAB/ABC",
		},
		{
			name: "full beats skip", skipFull: true,
			members: "ABC", msgs: 3, verdict: only("AC", Skip),
			want: "BBB", wantAsked: "AB/B/CAB",
		},
		{
			name: "first full seen is remembered", skipFull: true,
			members: "ABC",
			msgs:    3,
			verdict: func(_ int, id string) Verdict {
				if id == "C" {
					return Skip
				}
				return Full
			},
			want: "ABA", wantAsked: "ABC/BCA/CAB",
		},
		{
			name: "without SkipFull full is taken: strict rotation", skipFull: false,
			members: "ABC", msgs: 6, verdict: only("B", Full),
			want: "ABCABC", wantAsked: "A/B/C/A/B/C",
		},
		{
			name: "without SkipFull skip still passes", skipFull: false,
			members: "ABC", msgs: 3, verdict: only("C", Skip),
			want: "ABA", wantAsked: "A/B/CA",
		},
		{
			name: "random: all skip", strategy: Random, skipFull: true,
			members: "ABCD", msgs: 1, verdict: only("ABCD", Skip),
			want: "-",
		},
		{
			name: "prefer_local: locals take", strategy: PreferLocal, skipFull: true,
			members: "ABxy", msgs: 4, verdict: allTake,
			want: "ABAB", wantAsked: "A/B/A/B",
		},
		{
			name: "prefer_local: locals skip, remotes rotate", strategy: PreferLocal, skipFull: true,
			members: "ABxy", msgs: 4, verdict: only("AB", Skip),
			want: "xyxy", wantAsked: "ABx/BAy/ABx/BAy",
		},
		{
			name: "prefer_local: one local skips, the other takes", strategy: PreferLocal, skipFull: true,
			members: "ABxy", msgs: 4, verdict: only("A", Skip),
			want: "BBBB", wantAsked: "AB/B/AB/B",
		},
		{
			name: "prefer_local: full locals passed over for a remote", strategy: PreferLocal, skipFull: true,
			members: "ABxy", msgs: 2, verdict: only("AB", Full),
			want: "xy", wantAsked: "ABx/BAy",
		},
		{
			name: "prefer_local: full locals, dead remotes: own choice", strategy: PreferLocal, skipFull: true,
			members: "ABxy", msgs: 2, verdict: func(_ int, id string) Verdict {
				if id == "A" || id == "B" {
					return Full
				}
				return Skip
			},
			want: "AB", wantAsked: "ABxy/BAyx",
		},
		{
			name: "prefer_local: full locals without SkipFull stay local", strategy: PreferLocal, skipFull: false,
			members: "ABxy", msgs: 2, verdict: only("AB", Full),
			want: "AB", wantAsked: "A/B",
		},
		{
			name: "prefer_local: no locals is round robin over remotes", strategy: PreferLocal, skipFull: true,
			members: "xyz", msgs: 4, verdict: only("y", Skip),
			want: "xzzx", wantAsked: "x/yz/z/x",
		},
		{
			name: "sticky: stays while others would take", strategy: Sticky, skipFull: true,
			members: "ABC", msgs: 4, verdict: allTake,
			want: "AAAA", wantAsked: "A/A/A/A",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newGroup(Options{Strategy: tt.strategy, SkipFull: tt.skipFull}, tt.members)
			got, asked := run(t, g, tt.msgs, Key{}, tt.verdict)
			if got != tt.want {
				t.Errorf("sequence %q, want %q", got, tt.want)
			}
			if tt.wantAsked != "" && asked != tt.wantAsked {
				t.Errorf("offers %q, want %q", asked, tt.wantAsked)
			}
		})
	}
}

func TestEmptyGroup(t *testing.T) {
	for s := range numStrategies {
		g := NewGroup[int]("g", "f", Options{Strategy: s})
		_, ok := g.Pick(Key{}, func(Member[int]) Verdict {
			t.Fatal("accept called on an empty group")
			return Take
		})
		if ok {
			t.Errorf("%v: Pick on an empty group reported a member", s)
		}
	}
}

func TestJoinLeave(t *testing.T) {
	g := NewGroup[int]("name", "a/+", Options{Strategy: HashTopic, SkipFull: true})
	if g.Name() != "name" || g.Filter() != "a/+" || g.Options().Strategy != HashTopic || !g.Options().SkipFull {
		t.Fatalf("accessors: %q %q %+v", g.Name(), g.Filter(), g.Options())
	}
	g.SetOptions(Options{Strategy: Random})
	if g.Options().Strategy != Random || g.Options().SkipFull {
		t.Fatalf("SetOptions not applied: %+v", g.Options())
	}

	for _, id := range []string{"x", "A", "y", "B"} {
		if !g.Join(member(id)) {
			t.Fatalf("Join(%s) = false for a new member", id)
		}
	}
	// Same ID again: value replaced in place, join order kept.
	if g.Join(Member[int]{ID: "A", Local: true, Value: 99}) {
		t.Fatal("Join of an existing ID reported true")
	}
	if m, ok := g.Get("A"); !ok || m.Value != 99 {
		t.Fatalf("Get(A) = %+v, %v; want Value 99", m, ok)
	}
	wantOrder := func(want string) {
		t.Helper()
		var got strings.Builder
		for _, m := range g.Members() {
			got.WriteString(m.ID)
		}
		if got.String() != want || g.Len() != len(want) {
			t.Fatalf("Members() = %q (Len %d), want %q", got.String(), g.Len(), want)
		}
	}
	wantOrder("xAyB")

	// Members returns a copy.
	ms := g.Members()
	ms[0].ID = "changed"
	wantOrder("xAyB")

	// A member moving to this node keeps its join position but becomes a
	// local candidate.
	g.SetOptions(Options{Strategy: RoundRobin})
	g.Join(Member[int]{ID: "x", Local: true})
	seq, _ := run(t, g, 4, Key{}, func(int, string) Verdict { return Take })
	// Candidates: locals x A B (join order), then remote y. The cursor has
	// not moved yet for this group.
	if seq != "xABy" {
		t.Errorf("after x moved here: %q, want xABy", seq)
	}
	wantOrder("xAyB")

	if g.Leave("nobody") {
		t.Error("Leave of an unknown ID reported true")
	}
	if !g.Leave("A") || g.Leave("A") {
		t.Error("Leave(A) twice: want true then false")
	}
	wantOrder("xyB")
	if _, ok := g.Get("A"); ok {
		t.Error("Get(A) after Leave found it")
	}
	if m, ok := g.Get("B"); !ok || m.ID != "B" {
		t.Errorf("Get(B) = %+v, %v after an earlier member left", m, ok)
	}
	for _, id := range []string{"x", "y", "B"} {
		g.Leave(id)
	}
	wantOrder("")
	if _, ok := g.Pick(Key{}, func(Member[int]) Verdict { return Take }); ok {
		t.Error("Pick after everyone left reported a member")
	}
	// The group is reusable after emptying.
	g.Join(member("Z"))
	if seq, _ := run(t, g, 2, Key{}, allTake); seq != "ZZ" {
		t.Errorf("rejoined group: %q", seq)
	}
}

// TestZeroGroup: a zero Group is usable, even though NewGroup is the way
// to make one.
func TestZeroGroup(t *testing.T) {
	var g Group[int]
	g.Join(member("A"))
	g.Join(member("B"))
	if seq, _ := run(t, &g, 4, Key{}, allTake); seq != "ABAB" {
		t.Errorf("zero group: %q", seq)
	}
	g.SetOptions(Options{Strategy: Sticky})
	if seq, _ := run(t, &g, 3, Key{}, allTake); seq != "AAA" {
		t.Errorf("zero group sticky: %q", seq)
	}
}

// chiSquare returns the statistic for counts against a uniform expectation.
func chiSquare(counts []int, total int) float64 {
	exp := float64(total) / float64(len(counts))
	var x float64
	for _, c := range counts {
		d := float64(c) - exp
		x += d * d / exp
	}
	return x
}

func TestRandomUniform(t *testing.T) {
	const members, picks = 10, 50_000
	// 27.88 is the 99.9th percentile of chi-square with 9 degrees of
	// freedom; the seeds are fixed, so this either always passes or never.
	const limit = 27.88
	sources := map[string]func() uint64{
		"default":  nil,
		"injected": rand.New(rand.NewPCG(1, 2)).Uint64,
	}
	for name, src := range sources {
		t.Run(name, func(t *testing.T) {
			g := newGroup(Options{Strategy: Random, Rand: src}, "ABCDEfghij")
			counts := make([]int, members)
			for range picks {
				m, _ := g.Pick(Key{}, func(Member[int]) Verdict { return Take })
				counts[strings.IndexByte("ABCDEfghij", m.ID[0])]++
			}
			x := chiSquare(counts, picks)
			if x > limit {
				t.Errorf("chi-square %.1f > %.1f, counts %v", x, limit, counts)
			}
			t.Logf("chi-square %.2f, counts %v", x, counts)
		})
	}
}

func TestRandomSourceDeterministic(t *testing.T) {
	seq := func(name string, src func() uint64) string {
		g := NewGroup[int](name, "t/#", Options{Strategy: Random, Rand: src})
		for _, c := range "ABCDEFGH" {
			g.Join(member(string(c)))
		}
		s, _ := run(t, g, 32, Key{}, allTake)
		return s
	}
	if a, b := seq("g", nil), seq("g", nil); a != b {
		t.Errorf("same group key, different sequences: %q %q", a, b)
	}
	if a, b := seq("g", nil), seq("h", nil); a == b {
		t.Errorf("different group keys, same sequence %q", a)
	}
	// An injected source is used instead of the default.
	calls := 0
	zero := func() uint64 { calls++; return 0 }
	if s := seq("g", zero); s != strings.Repeat("A", 32) || calls != 32 {
		t.Errorf("source returning 0: %q after %d calls; want all A, 32 calls", s, calls)
	}
}

func TestSticky(t *testing.T) {
	g := newGroup(Options{Strategy: Sticky, SkipFull: true}, "ABC")
	expect := func(msgs int, vf verdictFunc, want string) {
		t.Helper()
		if got, _ := run(t, g, msgs, Key{}, vf); got != want {
			t.Fatalf("sequence %q, want %q", got, want)
		}
	}
	expect(5, allTake, "AAAAA")
	g.Join(member("D"))
	expect(3, allTake, "AAA")
	g.Leave("B")
	expect(3, allTake, "AAA")

	// A Full sticky member lets one message pass to the next member but
	// keeps its place.
	expect(1, only("A", Full), "C")
	expect(2, allTake, "AA")

	// All others Skip and the sticky member is Full: it still gets it.
	expect(1, func(_ int, id string) Verdict {
		if id == "A" {
			return Full
		}
		return Skip
	}, "A")

	// Everybody skips: no pick, and the choice is kept.
	expect(1, only("ACD", Skip), "-")
	expect(1, allTake, "A")

	// The sticky member Skips: the member that takes over becomes sticky
	// and stays when the old one recovers.
	expect(1, only("A", Skip), "C")
	expect(3, allTake, "CCC")

	// It Skips and the next is Full: the Full member would have to queue,
	// so D takes it and becomes sticky.
	expect(1, func(_ int, id string) Verdict {
		switch id {
		case "C":
			return Skip
		case "A":
			return Full
		}
		return Take
	}, "D")
	expect(2, allTake, "DD")

	// Leave: the next pick chooses again by rotation over A C. The cursor
	// has advanced once (the first pick), so position 1: C.
	g.Leave("D")
	expect(3, allTake, "CCC")
	g.Leave("C")
	expect(2, allTake, "AA")
	g.Leave("A")
	expect(1, allTake, "-")
	g.Join(member("E"))
	expect(2, allTake, "EE")

	// A switch away from Sticky and back chooses afresh.
	g.Join(member("F"))
	g.SetOptions(Options{Strategy: RoundRobin, SkipFull: true})
	g.SetOptions(Options{Strategy: Sticky, SkipFull: true})
	if got, _ := run(t, g, 2, Key{}, allTake); got != "FF" && got != "EE" {
		t.Fatalf("after strategy switch: %q", got)
	}
}

// TestStickyCandidateMove checks the sticky choice follows its member when
// the candidate list is rebuilt around it.
func TestStickyCandidateMove(t *testing.T) {
	g := newGroup(Options{Strategy: Sticky}, "aBC")
	run(t, g, 1, Key{}, allTake) // cursor 0 -> B (locals first: B C a)
	g.Join(Member[int]{ID: "a", Local: true, Value: 'a'})
	g.Join(member("D"))
	g.Leave("C")
	for range 3 {
		m, _ := g.Pick(Key{}, func(Member[int]) Verdict { return Take })
		if m.ID != "B" {
			t.Fatalf("sticky member moved to %s", m.ID)
		}
	}
}

// keys returns n distinct publisher IDs as byte slices.
func keys(n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = fmt.Appendf(nil, "meter-%05d", i)
	}
	return out
}

func hashGroup(s Strategy, n int) *Group[int] {
	g := NewGroup[int]("g", "t/#", Options{Strategy: s, SkipFull: true})
	for i := range n {
		g.Join(Member[int]{ID: fmt.Sprintf("worker-%d", i), Local: i%3 == 0, Value: i})
	}
	return g
}

func takeAll(Member[int]) Verdict { return Take }

// owners maps each key to the member that takes it when everyone takes.
func owners(g *Group[int], s Strategy, ks [][]byte) []string {
	out := make([]string, len(ks))
	for i, k := range ks {
		out[i] = pickOne(g, s, k, takeAll)
	}
	return out
}

func hashKey(s Strategy, k []byte) Key {
	if s == HashTopic {
		return Key{ClientID: []byte("ignored"), Topic: k}
	}
	return Key{ClientID: k, Topic: []byte("ignored")}
}

func pickOne(g *Group[int], s Strategy, k []byte, accept func(Member[int]) Verdict) string {
	m, ok := g.Pick(hashKey(s, k), accept)
	if !ok {
		return "-"
	}
	return m.ID
}

func TestHashStable(t *testing.T) {
	for _, s := range []Strategy{HashClientID, HashTopic} {
		t.Run(s.String(), func(t *testing.T) {
			g := hashGroup(s, 10)
			ks := keys(1000)
			first := owners(g, s, ks)
			for range 3 {
				if again := owners(g, s, ks); !slices.Equal(first, again) {
					t.Fatal("owners changed with a stable membership")
				}
			}
			// Reasonably even: 1000 keys over 10 members.
			count := map[string]int{}
			for _, o := range first {
				count[o]++
			}
			for id, c := range count {
				if c < 60 || c > 140 {
					t.Errorf("%s owns %d of 1000 keys", id, c)
				}
			}
			if len(count) != 10 {
				t.Errorf("only %d of 10 members own keys", len(count))
			}
			// The other field of the key is ignored.
			m1, _ := g.Pick(Key{ClientID: []byte("a"), Topic: []byte("a")}, takeAll)
			other := Key{ClientID: []byte("a"), Topic: []byte("a")}
			if s == HashClientID {
				other.Topic = []byte("b")
			} else {
				other.ClientID = []byte("b")
			}
			if m2, _ := g.Pick(other, takeAll); m1 != m2 {
				t.Errorf("the unused key field changed the owner")
			}
		})
	}
}

// TestHashNodeIndependent: two nodes with the same members, joined in
// different orders and with different local sets, agree on every owner.
func TestHashNodeIndependent(t *testing.T) {
	a := NewGroup[int]("g", "t/#", Options{Strategy: HashClientID})
	b := NewGroup[int]("g", "t/#", Options{Strategy: HashClientID})
	for i := range 12 {
		a.Join(Member[int]{ID: fmt.Sprintf("w%d", i), Local: i < 4})
		b.Join(Member[int]{ID: fmt.Sprintf("w%d", 11-i), Local: i%2 == 0})
	}
	ks := keys(2000)
	if oa, ob := owners(a, HashClientID, ks), owners(b, HashClientID, ks); !slices.Equal(oa, ob) {
		t.Error("nodes disagree on key owners")
	}
}

// TestRendezvousRemap checks the property that makes rendezvous hashing
// worth its cost per pick. With the simple alternative, owner = hash(key) mod
// n, going from 10 members to 9 or 11 changes the owner of about 90% of the
// keys (a key keeps its owner only if hash mod 10 equals hash mod 9), so every
// member's cache and ordering is disturbed at once. Here removal moves only
// the leaver's keys and an addition moves only the keys the newcomer wins.
func TestRendezvousRemap(t *testing.T) {
	ks := keys(10_000)
	for _, s := range []Strategy{HashClientID, HashTopic} {
		t.Run(s.String(), func(t *testing.T) {
			g := hashGroup(s, 10)
			before := owners(g, s, ks)

			// The leaver's keys go to the member next in line, which is what
			// a Skip from the owner picks while it is still in the group.
			const leaver = "worker-3"
			nextInLine := make([]string, len(ks))
			for i, k := range ks {
				nextInLine[i] = pickOne(g, s, k, func(m Member[int]) Verdict {
					if m.ID == before[i] {
						return Skip
					}
					return Take
				})
			}

			g.Leave(leaver)
			after := owners(g, s, ks)
			spread := map[string]int{}
			for i := range ks {
				switch {
				case before[i] != leaver && after[i] != before[i]:
					t.Fatalf("key %s moved %s -> %s though %s left", ks[i], before[i], after[i], leaver)
				case before[i] == leaver:
					spread[after[i]]++
					if after[i] != nextInLine[i] {
						t.Fatalf("key %s: moved to %s, next in line was %s", ks[i], after[i], nextInLine[i])
					}
				}
			}
			if len(spread) != 9 {
				t.Errorf("the leaver's keys went to %d members, want all 9: %v", len(spread), spread)
			}

			g.Join(Member[int]{ID: "worker-3", Value: 3})
			if again := owners(g, s, ks); !slices.Equal(again, before) {
				t.Error("rejoining did not restore the original owners")
			}

			g.Join(Member[int]{ID: "worker-10", Value: 10})
			grown := owners(g, s, ks)
			moved := 0
			for i := range ks {
				if grown[i] != before[i] {
					moved++
					if grown[i] != "worker-10" {
						t.Fatalf("key %s moved %s -> %s, not to the new member", ks[i], before[i], grown[i])
					}
				}
			}
			f := float64(moved) / float64(len(ks))
			if f < 0.06 || f > 0.13 {
				t.Errorf("adding an 11th member moved %.3f of keys, want about 1/11", f)
			}
			t.Logf("leaver's keys spread over %v; an 11th member took %.4f of the keys", spread, f)
		})
	}
}

// TestHashPassOver: when the owner cannot take, the candidates follow in
// descending score, and a Full owner still wins if nobody takes.
func TestHashPassOver(t *testing.T) {
	g := hashGroup(HashClientID, 6)
	k := []byte("meter-1")
	var order []string
	g.Pick(hashKey(HashClientID, k), func(m Member[int]) Verdict {
		order = append(order, m.ID)
		return Skip
	})
	if len(order) != 6 {
		t.Fatalf("all-skip offered %d members, want 6", len(order))
	}
	// The order is the score order.
	kh := keyHash(k)
	for i := 1; i < len(order); i++ {
		if score(kh, memberHash(order[i-1])) < score(kh, memberHash(order[i])) {
			t.Fatalf("offers not in descending score: %v", order)
		}
	}
	got := pickOne(g, HashClientID, k, func(m Member[int]) Verdict {
		if m.ID == order[0] {
			return Full
		}
		return Take
	})
	if got != order[1] {
		t.Errorf("full owner: picked %s, want runner-up %s", got, order[1])
	}
	got = pickOne(g, HashClientID, k, func(m Member[int]) Verdict {
		if m.ID == order[0] || m.ID == order[1] {
			return Full
		}
		return Skip
	})
	if got != order[0] {
		t.Errorf("full owner, rest skip: picked %s, want owner %s", got, order[0])
	}
}

// TestPreferLocalEqualsRoundRobin compares the two on single-node groups
// (and remote-only ones) under the same arbitrary verdicts.
func TestPreferLocalEqualsRoundRobin(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	for _, members := range []string{"A", "AB", "ABCDEFG", "abcde"} {
		for _, skipFull := range []bool{false, true} {
			verdicts := make([]Verdict, 2000*len(members))
			for i := range verdicts {
				verdicts[i] = Verdict(r.IntN(3))
			}
			vf := func(msg int, id string) Verdict {
				return verdicts[msg*len(members)+strings.Index(members, id)]
			}
			rr := newGroup(Options{Strategy: RoundRobin, SkipFull: skipFull}, members)
			pl := newGroup(Options{Strategy: PreferLocal, SkipFull: skipFull}, members)
			a, aa := run(t, rr, 2000, Key{}, vf)
			b, bb := run(t, pl, 2000, Key{}, vf)
			if a != b || aa != bb {
				t.Errorf("%s skipFull=%v: round robin and prefer_local differ", members, skipFull)
			}
		}
	}
}

func TestPreferLocalMixed(t *testing.T) {
	g := newGroup(Options{Strategy: PreferLocal, SkipFull: true}, "xAyBz")
	seq, _ := run(t, g, 6, Key{}, allTake)
	if seq != "ABABAB" {
		t.Errorf("all take: %q, want locals only", seq)
	}
	// Round robin over the same group sends 3/5 remote.
	rr := newGroup(Options{Strategy: RoundRobin, SkipFull: true}, "xAyBz")
	if seq, _ := run(t, rr, 5, Key{}, allTake); seq != "ABxyz" {
		t.Errorf("round robin: %q", seq)
	}
	// Overflow rotates over remotes with its own cursor.
	seq, _ = run(t, g, 6, Key{}, only("AB", Skip))
	if seq != "xyzxyz" {
		t.Errorf("locals skip: %q, want xyzxyz", seq)
	}
	// The local cursor kept turning meanwhile.
	seq, _ = run(t, g, 2, Key{}, allTake)
	if seq != "AB" {
		t.Errorf("locals back: %q", seq)
	}
}

// TestPickAllocs holds Pick to zero allocations for every strategy, with a
// mix of verdicts so the passing-over paths run too.
func TestPickAllocs(t *testing.T) {
	for s := range numStrategies {
		t.Run(s.String(), func(t *testing.T) {
			g := NewGroup[int]("g", "t/#", Options{Strategy: s, SkipFull: true})
			for i := range 16 {
				g.Join(Member[int]{ID: fmt.Sprintf("w%02d", i), Local: i%2 == 0, Value: i})
			}
			k := Key{ClientID: []byte("meter-00001"), Topic: []byte("site/1/meter/2")}
			n := 0
			accept := func(m Member[int]) Verdict {
				n++
				return Verdict(uint(m.Value+n) % 3)
			}
			if a := testing.AllocsPerRun(1000, func() { g.Pick(k, accept) }); a != 0 {
				t.Errorf("Pick allocates %.1f times per call", a)
			}
		})
	}
}

// TestHashSkewBound documents the balance of the score function: over
// many keys the busiest member stays near the mean.
func TestHashSkewBound(t *testing.T) {
	g := hashGroup(HashTopic, 64)
	count := map[string]int{}
	for _, k := range keys(64_000) {
		count[pickOne(g, HashTopic, k, takeAll)]++
	}
	var hi, lo = 0, math.MaxInt
	for _, c := range count {
		hi, lo = max(hi, c), min(lo, c)
	}
	// Mean 1000, binomial sd about 31: 5 sd either side.
	if hi > 1160 || lo < 840 {
		t.Errorf("64 members, 64000 keys: min %d max %d", lo, hi)
	}
}
