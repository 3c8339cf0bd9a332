package share

import (
	"cmp"
	"slices"
	"strconv"
	"testing"
)

// FuzzPick drives a group through random joins, leaves and picks with random
// verdicts. Each pick is checked twice: against the invariants every
// strategy must keep (the chosen member is a current member, nobody is
// offered the message twice, a Take is never passed over), and against a
// straightforward reference model of the strategy's candidate order.
//
// ops is read a byte at a time; the low two bits select the operation:
//
//	0 join   id = bits 2-5, local = bit 6
//	1 leave  id = bits 2-5
//	2,3 pick verdict seed = the byte; keys are derived from it too
func FuzzPick(f *testing.F) {
	f.Add(uint8(RoundRobin), true, []byte{0x00, 0x44, 0x08, 0x02, 0x03, 0x06, 0x07})
	f.Add(uint8(PreferLocal), true, []byte{0x40, 0x04, 0x48, 0x4c, 0x02, 0x06, 0x0a, 0x01, 0x0e})
	f.Fuzz(func(t *testing.T, strategy uint8, skipFull bool, ops []byte) {
		// One value past the last strategy checks that an unknown one
		// behaves as round robin.
		s := Strategy(strategy % uint8(numStrategies+1))
		g := NewGroup[int]("fuzz", "f/#", Options{Strategy: s, SkipFull: skipFull})
		m := &model{strategy: s, skipFull: skipFull}
		value := 0
		for i, b := range ops {
			id := "m" + strconv.Itoa(int(b>>2&0x0f))
			switch b & 3 {
			case 0:
				value++
				mem := Member[int]{ID: id, Local: b&0x40 != 0, Value: value}
				if got, want := g.Join(mem), m.join(mem); got != want {
					t.Fatalf("op %d: Join(%s) = %v, want %v", i, id, got, want)
				}
			case 1:
				if got, want := g.Leave(id), m.leave(id); got != want {
					t.Fatalf("op %d: Leave(%s) = %v, want %v", i, id, got, want)
				}
			default:
				checkPick(t, i, g, m, b)
			}
			if got := g.Members(); !slices.Equal(got, m.members) || g.Len() != len(m.members) {
				t.Fatalf("op %d: Members() = %v, want %v", i, got, m.members)
			}
		}
	})
}

// fuzzVerdict derives a member's verdict from the op byte and the member,
// including an out-of-range value that Pick must treat as Skip.
func fuzzVerdict(b byte, pick int, id string) Verdict {
	v := mix(uint64(b)<<40 | uint64(pick)<<8 | uint64(fnv1aString(id)&0xff))
	if v%4 == 3 {
		return Verdict(5)
	}
	return Verdict(v % 4)
}

func checkPick(t *testing.T, op int, g *Group[int], m *model, b byte) {
	t.Helper()
	m.picks++
	k := Key{ClientID: []byte{b, 'c'}, Topic: []byte{'t', b}}
	var calls []string
	var verdicts []Verdict
	got, ok := g.Pick(k, func(c Member[int]) Verdict {
		if slices.Contains(calls, c.ID) {
			t.Fatalf("op %d: %s offered twice; offers so far %v", op, c.ID, calls)
		}
		if i := m.index(c.ID); i < 0 || m.members[i] != c {
			t.Fatalf("op %d: offered %+v, not a current member", op, c)
		}
		calls = append(calls, c.ID)
		v := fuzzVerdict(b, m.picks, c.ID)
		verdicts = append(verdicts, v)
		return v
	})

	// Strategy-independent invariants.
	if len(calls) > len(m.members) {
		t.Fatalf("op %d: %d offers for %d members", op, len(calls), len(m.members))
	}
	wins := func(v Verdict) bool { return v == Take || v == Full && !m.skipFull }
	firstWin, firstFull := slices.IndexFunc(verdicts, wins), slices.Index(verdicts, Full)
	switch {
	case firstWin >= 0:
		if !ok || got.ID != calls[firstWin] || firstWin != len(calls)-1 {
			t.Fatalf("op %d: offers %v verdicts %v: picked %q (%v), want the first taker, offered last",
				op, calls, verdicts, got.ID, ok)
		}
	case len(calls) != len(m.members):
		t.Fatalf("op %d: nobody took, but only %d of %d members offered", op, len(calls), len(m.members))
	case firstFull >= 0:
		if !ok || got.ID != calls[firstFull] {
			t.Fatalf("op %d: offers %v verdicts %v: picked %q (%v), want the first Full", op, calls, verdicts, got.ID, ok)
		}
	case ok:
		t.Fatalf("op %d: every member skipped, yet %s was picked", op, got.ID)
	}
	if ok {
		if i := m.index(got.ID); i < 0 || m.members[i] != got {
			t.Fatalf("op %d: picked %+v, not a current member", op, got)
		}
	}

	// The strategy's order.
	want := m.pick(k, calls, func(id string) Verdict { return fuzzVerdict(b, m.picks, id) })
	if !slices.Equal(calls, want) {
		t.Fatalf("op %d (%v): offers %v, model %v", op, m.strategy, calls, want)
	}
}

// model is a reference implementation kept deliberately naive: it recomputes
// the candidate list on every pick and sorts for the hash strategies.
type model struct {
	strategy Strategy
	skipFull bool
	members  []Member[int]
	picks    int

	cursor, remote uint64
	sticky         string
	hasSticky      bool
}

func (m *model) index(id string) int {
	return slices.IndexFunc(m.members, func(c Member[int]) bool { return c.ID == id })
}

func (m *model) join(c Member[int]) bool {
	if i := m.index(c.ID); i >= 0 {
		m.members[i] = c
		return false
	}
	m.members = append(m.members, c)
	return true
}

func (m *model) leave(id string) bool {
	i := m.index(id)
	if i < 0 {
		return false
	}
	m.members = slices.Delete(m.members, i, i+1)
	if m.hasSticky && m.sticky == id {
		m.hasSticky = false
	}
	return true
}

func (m *model) split() (local, remote []string) {
	for _, c := range m.members {
		if c.Local {
			local = append(local, c.ID)
		} else {
			remote = append(remote, c.ID)
		}
	}
	return local, remote
}

func rotate(ids []string, start int) []string {
	return append(slices.Clone(ids[start:]), ids[:start]...)
}

// offer walks order like Pick does and returns the IDs offered, the winner
// (or "") and the first Full ID (or "").
func (m *model) offer(order []string, verdict func(string) Verdict, full string) (offered []string, won, firstFull string) {
	for _, id := range order {
		offered = append(offered, id)
		switch verdict(id) {
		case Take:
			return offered, id, full
		case Full:
			if !m.skipFull {
				return offered, id, full
			}
			if full == "" {
				full = id
			}
		}
	}
	return offered, "", full
}

// pick returns the offers the model expects. For Random only the start is
// unpredictable; the model takes it from the first actual offer.
func (m *model) pick(k Key, actual []string, verdict func(string) Verdict) []string {
	local, remote := m.split()
	cands := append(slices.Clone(local), remote...)
	n := len(cands)
	if n == 0 {
		return nil
	}
	next := func(size int) int {
		i := int(m.cursor % uint64(size))
		m.cursor++
		return i
	}
	var order []string
	switch m.strategy {
	case Random:
		if len(actual) == 0 {
			return []string{"<at least one offer>"}
		}
		order = rotate(cands, max(0, slices.Index(cands, actual[0])))
	case Sticky:
		if !m.hasSticky {
			offered, won, full := m.offer(rotate(cands, next(n)), verdict, "")
			if won == "" {
				won = full
			}
			if won != "" {
				m.sticky, m.hasSticky = won, true
			}
			return offered
		}
		order = rotate(cands, slices.Index(cands, m.sticky))
		offered, won, full := m.offer(order, verdict, "")
		if won == "" {
			won = full
		}
		if verdict(m.sticky) != Full && verdict(m.sticky) != Take && won != "" {
			m.sticky = won
		}
		return offered
	case HashClientID, HashTopic:
		kb := k.ClientID
		if m.strategy == HashTopic {
			kb = k.Topic
		}
		kh := keyHash(kb)
		order = slices.Clone(cands)
		slices.SortFunc(order, func(a, b string) int {
			if c := cmp.Compare(score(kh, memberHash(b)), score(kh, memberHash(a))); c != 0 {
				return c
			}
			return cmp.Compare(a, b)
		})
	case PreferLocal:
		var offered []string
		full := ""
		if len(local) > 0 {
			var won string
			offered, won, full = m.offer(rotate(local, next(len(local))), verdict, "")
			if won != "" {
				return offered
			}
		}
		if len(remote) > 0 {
			start := int(m.remote % uint64(len(remote)))
			m.remote++
			more, _, _ := m.offer(rotate(remote, start), verdict, full)
			offered = append(offered, more...)
		}
		return offered
	default:
		order = rotate(cands, next(n))
	}
	offered, _, _ := m.offer(order, verdict, "")
	return offered
}
