package share

import (
	"math/bits"
	"math/rand/v2"
	"slices"
)

// Member is one subscriber of a share group as Pick sees it.
type Member[M comparable] struct {
	// ID is the member's client identifier. It identifies the member within
	// the group and is what the hash strategies score keys against, so it
	// must be the same string on every node.
	ID string
	// Local is true when the member's session is on this node. It decides
	// the member's place in the candidate list (local members first) and
	// the PreferLocal strategy.
	Local bool
	// Value is the caller's handle for the member (a session, or a node
	// address for a remote member). The package never looks inside it.
	Value M
}

// Key carries what the hash strategies hash. Both fields are byte slices so
// the broker can pass the fields of a decoded packet as they are, without a
// string conversion on the publish path; Pick does not retain them.
type Key struct {
	// ClientID is the publisher's client identifier (HashClientID).
	ClientID []byte
	// Topic is the topic name of the message (HashTopic).
	Topic []byte
}

// entry is a member plus what Pick needs about it precomputed.
type entry[M comparable] struct {
	Member[M]
	hash uint64 // memberHash(ID), fixed for the member's lifetime
}

// ranked is one row of the scratch table the hash strategies order.
type ranked struct {
	score uint64
	pos   int // position in Group.cands
}

// Group is one share group: its members in join order, the derived candidate
// list (this node's members first, then the others, each in join order) and
// the node-local cursor.
//
// A Group is not safe for concurrent use. The broker serialises access with
// its own lock; that is also what allows Pick to reuse internal scratch
// space instead of allocating.
type Group[M comparable] struct {
	name, filter string
	opts         Options

	entries []entry[M]     // join order
	byID    map[string]int // ID -> index in entries
	cands   []int          // indices into entries: local members, then remote
	hashes  []uint64       // memberHash of each candidate, parallel to cands
	nLocal  int            // cands[:nLocal] are the local members

	// cursor advances once per Pick that consults it; it is never shared
	// with other nodes. PreferLocal uses it for its local pass, so that on a
	// single node the sequence equals RoundRobin's, and remoteCursor for the
	// pass over the other nodes' members.
	cursor       uint64
	remoteCursor uint64

	// The Sticky strategy's current choice. stickyID survives rebuilds of
	// the candidate list; sticky is its position in cands, or -1.
	hasSticky bool
	stickyID  string
	sticky    int

	rng     rand.PCG // used when opts.Rand is nil
	scratch []ranked // hash strategies; len(cands) rows, reused by every Pick
}

// NewGroup returns an empty group for the share name and topic filter of a
// $share/<name>/<filter> subscription. The pair also seeds the default random
// source, so two groups with the same name and filter draw the same
// sequence.
func NewGroup[M comparable](name, filter string, opts Options) *Group[M] {
	g := &Group[M]{
		name:   name,
		filter: filter,
		opts:   opts,
		byID:   make(map[string]int),
		sticky: -1,
	}
	g.rng.Seed(mix(fnv1aString(name)), mix(fnv1aString(filter)^scoreSalt))
	return g
}

// Name returns the share name the group was created with.
func (g *Group[M]) Name() string { return g.name }

// Filter returns the topic filter the group was created with.
func (g *Group[M]) Filter() string { return g.filter }

// Options returns the group's current options.
func (g *Group[M]) Options() Options { return g.opts }

// SetOptions replaces the group's options. Members and cursors are kept, so
// a configuration reload does not restart the rotation; a change of
// strategy forgets the sticky choice, which only Sticky maintains.
func (g *Group[M]) SetOptions(o Options) {
	if o.Strategy != g.opts.Strategy {
		g.clearSticky()
	}
	g.opts = o
}

// Join adds m at the end of the join order and reports true. If a member
// with the same ID is already present (a resubscribe, or a session that
// moved to another node), its Value and Local are replaced in place, it
// keeps its position, and Join reports false.
func (g *Group[M]) Join(m Member[M]) bool {
	if g.byID == nil { // tolerate a zero Group
		g.byID = make(map[string]int)
		g.sticky = -1
	}
	if i, ok := g.byID[m.ID]; ok {
		moved := g.entries[i].Local != m.Local
		g.entries[i].Member = m
		if moved {
			g.rebuild()
		}
		return false
	}
	g.entries = append(g.entries, entry[M]{Member: m, hash: memberHash(m.ID)})
	g.byID[m.ID] = len(g.entries) - 1
	g.rebuild()
	return true
}

// Leave removes the member with the given ID and reports whether it was
// present. If it was the sticky choice, the next Sticky pick chooses again.
func (g *Group[M]) Leave(id string) bool {
	i, ok := g.byID[id]
	if !ok {
		return false
	}
	// slices.Delete zeroes the vacated tail slot, so a removed Value (often
	// a pointer to a session) is not kept alive by the backing array.
	g.entries = slices.Delete(g.entries, i, i+1)
	delete(g.byID, id)
	for j := i; j < len(g.entries); j++ {
		g.byID[g.entries[j].ID] = j
	}
	if g.hasSticky && g.stickyID == id {
		g.clearSticky()
	}
	g.rebuild()
	return true
}

// Len returns the number of members.
func (g *Group[M]) Len() int { return len(g.entries) }

// Members returns a copy of the members in join order.
func (g *Group[M]) Members() []Member[M] {
	out := make([]Member[M], len(g.entries))
	for i := range g.entries {
		out[i] = g.entries[i].Member
	}
	return out
}

// Get returns the member with the given ID.
func (g *Group[M]) Get(id string) (Member[M], bool) {
	if i, ok := g.byID[id]; ok {
		return g.entries[i].Member, true
	}
	return Member[M]{}, false
}

// rebuild derives the candidate list from the join order. Membership changes
// are rare next to publishes, so the work is done here and Pick only reads.
func (g *Group[M]) rebuild() {
	g.cands = g.cands[:0]
	for i := range g.entries {
		if g.entries[i].Local {
			g.cands = append(g.cands, i)
		}
	}
	g.nLocal = len(g.cands)
	for i := range g.entries {
		if !g.entries[i].Local {
			g.cands = append(g.cands, i)
		}
	}
	// The hash strategies read member hashes from a dense slice in
	// candidate order rather than through entries, keeping their one
	// unavoidable pass over the group tight.
	g.hashes = g.hashes[:0]
	for _, e := range g.cands {
		g.hashes = append(g.hashes, g.entries[e].hash)
	}
	if cap(g.scratch) < len(g.cands) {
		g.scratch = make([]ranked, len(g.cands))
	}
	g.sticky = -1
	if g.hasSticky {
		e := g.byID[g.stickyID] // present: Leave clears a leaving sticky member
		g.sticky = slices.Index(g.cands, e)
	}
}

func (g *Group[M]) clearSticky() {
	g.hasSticky, g.stickyID, g.sticky = false, "", -1
}

func (g *Group[M]) setSticky(pos int) {
	g.hasSticky, g.stickyID, g.sticky = true, g.entries[g.cands[pos]].ID, pos
}

// Pick chooses the member that receives one message, or reports false when
// every member answered Skip; the group then loses the message and the
// caller accounts for it.
//
// accept is asked about candidates in the order the strategy defines, at
// most once each, and never more than one pass over the group. The first
// candidate to answer Take is chosen. When Options.SkipFull is set, a Full
// candidate is passed over but the first one seen is remembered and chosen
// if no candidate answers Take; for the rotating strategies that is the
// strategy's own choice whenever that member was Full. Without SkipFull,
// Full is as good as Take.
//
// k is used only by the hash strategies. Pick does not allocate.
func (g *Group[M]) Pick(k Key, accept func(Member[M]) Verdict) (Member[M], bool) {
	n := len(g.cands)
	if n == 0 {
		return Member[M]{}, false
	}
	var pos int
	switch g.opts.Strategy {
	case Random:
		pos = g.choose(g.walk(0, n, g.randIndex(n), n, accept, -1))
	case Sticky:
		pos = g.pickSticky(accept)
	case HashClientID:
		pos = g.pickHash(keyHash(k.ClientID), accept)
	case HashTopic:
		pos = g.pickHash(keyHash(k.Topic), accept)
	case PreferLocal:
		pos = g.pickPreferLocal(accept)
	default: // RoundRobin, and any unknown value
		pos = g.choose(g.walk(0, n, g.next(n), n, accept, -1))
	}
	if pos < 0 {
		return Member[M]{}, false
	}
	return g.entries[g.cands[pos]].Member, true
}

// Repick chooses again for a message whose chosen member could not take it
// after all (its node answered that the client is not there, or did not
// answer), within the same pass: the cursor is not advanced, so the turn
// passes to the member after the one that failed, and accept must answer
// Skip for the members already tried.
func (g *Group[M]) Repick(k Key, accept func(Member[M]) Verdict) (Member[M], bool) {
	cursor, remote := g.cursor, g.remoteCursor
	// Start where the last pick started: the member that failed there is
	// skipped, so the walk goes on to the next in turn.
	if g.cursor > 0 {
		g.cursor--
	}
	if g.remoteCursor > 0 {
		g.remoteCursor--
	}
	m, ok := g.Pick(k, accept)
	g.cursor, g.remoteCursor = cursor, remote
	return m, ok
}

// next returns the round-robin start position over size candidates and
// advances the cursor by one, whatever happens to the message afterwards:
// members passed over do not consume turns, so the rotation stays even.
func (g *Group[M]) next(size int) int {
	i := int(g.cursor % uint64(size))
	g.cursor++
	return i
}

// randIndex returns a uniform index below n. The multiply-high reduction
// avoids the division of a modulo; its bias is below n/2^64.
func (g *Group[M]) randIndex(n int) int {
	var r uint64
	if g.opts.Rand != nil {
		r = g.opts.Rand()
	} else {
		r = g.rng.Uint64()
	}
	hi, _ := bits.Mul64(r, uint64(n))
	return int(hi)
}

// offer asks accept about the candidate at position pos. It reports the
// verdict and whether the candidate wins outright; a Full candidate passed
// over is recorded in *full if it is the first.
func (g *Group[M]) offer(pos int, accept func(Member[M]) Verdict, full *int) (Verdict, bool) {
	v := accept(g.entries[g.cands[pos]].Member)
	switch v {
	case Take:
		return v, true
	case Full:
		if !g.opts.SkipFull {
			return v, true
		}
		if *full < 0 {
			*full = pos
		}
	}
	return v, false
}

// walk offers count candidates of the segment cands[lo:lo+size], beginning
// at lo+start and wrapping inside the segment. It returns the winning
// position or -1, and the first Full position seen so far (full carries it
// in from an earlier walk in the same Pick).
func (g *Group[M]) walk(lo, size, start, count int, accept func(Member[M]) Verdict, full int) (int, int) {
	i := start
	for range count {
		if _, ok := g.offer(lo+i, accept, &full); ok {
			return lo + i, full
		}
		if i++; i == size {
			i = 0
		}
	}
	return -1, full
}

// choose turns walk's results into the final position: the winner, else the
// remembered Full candidate, else -1.
func (g *Group[M]) choose(pos, full int) int {
	if pos >= 0 {
		return pos
	}
	return full
}

// pickSticky offers the sticky member first, then the others in candidate
// order after it. The choice moves only when the sticky member answers Skip
// (it cannot take messages now, so the member that does becomes the new
// choice) or leaves. A Full sticky member keeps its place: the message goes
// elsewhere, but a momentarily full window is not a reason to move the whole
// stream, which would defeat the strategy's purpose.
func (g *Group[M]) pickSticky(accept func(Member[M]) Verdict) int {
	n := len(g.cands)
	if g.sticky < 0 {
		// First pick, or the sticky member left: choose by rotation, and
		// whoever ends up with the message becomes sticky.
		pos := g.choose(g.walk(0, n, g.next(n), n, accept, -1))
		if pos >= 0 {
			g.setSticky(pos)
		}
		return pos
	}
	s := g.sticky
	full := -1
	v, ok := g.offer(s, accept, &full)
	if ok {
		return s
	}
	start := s + 1
	if start == n {
		start = 0
	}
	pos := g.choose(g.walk(0, n, start, n-1, accept, full))
	if v != Full && pos >= 0 {
		g.setSticky(pos)
	}
	return pos
}

// pickHash offers candidates in descending rendezvous score for the key
// hash kh. The scores depend only on member IDs and the key, never on the
// node's candidate order, so every node that sees the same members picks the
// same owner for a key. Removing a member changes the owner only of the keys
// it owned, and a key whose owner cannot take a message goes to the member
// that would own it if the owner left.
//
// The common case is that the owner takes the message, so the first pass
// only computes scores and keeps the best. Only when the owner declines are
// the scores written to the scratch table and the rest offered by a lazy
// selection sort, each step moving the best remaining row to the front.
func (g *Group[M]) pickHash(kh uint64, accept func(Member[M]) Verdict) int {
	best, top := 0, score(kh, g.hashes[0])
	for i := 1; i < len(g.hashes); i++ {
		if s := score(kh, g.hashes[i]); s > top || s == top && g.idLess(i, best) {
			best, top = i, s
		}
	}
	full := -1
	if _, ok := g.offer(best, accept, &full); ok {
		return best
	}

	n := len(g.cands)
	r := g.scratch[:n]
	for i, h := range g.hashes {
		r[i] = ranked{score: score(kh, h), pos: i}
	}
	r[0], r[best] = r[best], r[0]
	for done := 1; done < n; done++ {
		best := done
		for j := done + 1; j < n; j++ {
			if g.outranks(r[j], r[best]) {
				best = j
			}
		}
		r[done], r[best] = r[best], r[done]
		if _, ok := g.offer(r[done].pos, accept, &full); ok {
			return r[done].pos
		}
	}
	return full
}

// outranks orders rows by score, breaking the (astronomically rare) exact
// ties by member ID so the order still does not depend on the node.
func (g *Group[M]) outranks(a, b ranked) bool {
	if a.score != b.score {
		return a.score > b.score
	}
	return g.idLess(a.pos, b.pos)
}

// idLess compares the IDs of the candidates at positions a and b.
func (g *Group[M]) idLess(a, b int) bool {
	return g.entries[g.cands[a]].ID < g.entries[g.cands[b]].ID
}

// pickPreferLocal rotates over the local members with the group cursor and,
// only if none of them takes the message, over the remote members with a
// cursor of their own. The remote cursor advances only when a message
// reaches the remote pass, so the overflow is itself spread evenly.
func (g *Group[M]) pickPreferLocal(accept func(Member[M]) Verdict) int {
	n, nl := len(g.cands), g.nLocal
	pos, full := -1, -1
	if nl > 0 {
		if pos, full = g.walk(0, nl, g.next(nl), nl, accept, full); pos >= 0 {
			return pos
		}
	}
	if nr := n - nl; nr > 0 {
		start := int(g.remoteCursor % uint64(nr))
		g.remoteCursor++
		pos, full = g.walk(nl, nr, start, nr, accept, full)
	}
	return g.choose(pos, full)
}
