package chaos

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// FaultKind names one kind of fault.
type FaultKind string

// The faults a plan can draw from.
const (
	// Kill is SIGKILL of one node, restarted on its data directory after
	// the fault's hold.
	Kill FaultKind = "kill"
	// Stop freezes one node (SIGSTOP) for the hold, then resumes it
	// (SIGCONT).
	Stop FaultKind = "stop"
	// Leader is SIGKILL of the node hosting the etcd leader (found at
	// run time with the etcd client's Status), restarted after the hold.
	Leader FaultKind = "leader"
	// Move has one persistent subscriber of each kind (a share-group
	// member, an ordinary subscriber) leave its node and take its session
	// up on another one with clean start = false.
	Move FaultKind = "move"
	// Partition takes one node's link to the others down for the hold;
	// its clients still reach it. Needs network namespaces.
	Partition FaultKind = "partition"
	// Line kills all three nodes at once and restarts them after the hold.
	Line FaultKind = "line"
	// Wipe is SIGKILL of one node and the loss of its data directory (a
	// dead SD card): after the hold a blank replacement joins under its
	// name, its etcd member replaced with linemq cluster replace.
	Wipe FaultKind = "wipe"
)

// AllFaults lists every fault kind, in the order the flags document them.
var AllFaults = []FaultKind{Kill, Stop, Leader, Move, Partition, Line, Wipe}

// ParseFaults reads a comma-separated list of fault kinds; "all" is every
// kind.
func ParseFaults(s string) ([]FaultKind, error) {
	if s == "all" {
		return append([]FaultKind(nil), AllFaults...), nil
	}
	var out []FaultKind
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		ok := false
		for _, k := range AllFaults {
			if FaultKind(f) == k {
				ok = true
			}
		}
		if !ok {
			return nil, fmt.Errorf("unknown fault %q (known: %s)", f, joinKinds(AllFaults))
		}
		out = append(out, FaultKind(f))
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no fault in %q", s)
	}
	return out, nil
}

func joinKinds(ks []FaultKind) string {
	s := make([]string, len(ks))
	for i, k := range ks {
		s[i] = string(k)
	}
	return strings.Join(s, ",")
}

// Fault is one planned fault and, once run, what happened.
type Fault struct {
	Kind FaultKind
	// At is the planned start, from the start of the load. A fault starts
	// at At or once the one before it has finished, whichever is later.
	At time.Duration
	// Node is the node (0-based) the fault hits; for Move the subscriber
	// of that node's index (m1 for node 0) that moves, wherever it is;
	// for Leader and Line it is decided at run time (Leader) or all
	// nodes (Line).
	Node int
	// Step, for Move, says where to: the subscriber's current node plus
	// Step (1 or 2), modulo 3.
	Step int
	// Hold is how long the node stays dead, frozen or cut off.
	Hold time.Duration
	// Abrupt: the moving subscriber (Move, or for Partition the cut-off
	// node's subscribers) opens its new connection without closing the
	// old one, as a client that gave up on a connection does; the old
	// connection is then the node's to close.
	Abrupt bool

	// Filled in by the run:
	Start, End time.Time // when the fault began, and when the node was back (or the move done)
	Victim     int       // the node hit (Leader: the leader's; Move: the node left)
	Note       string    // what happened, in words
	Skipped    string    // why the fault was not run, if it was not
}

// Describe is the fault as one line of a schedule.
func (f *Fault) Describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "t=%5.1fs %-9s", f.At.Seconds(), f.Kind)
	switch f.Kind {
	case Kill, Stop, Partition, Wipe:
		fmt.Fprintf(&b, " n%d hold %.1fs", f.Node+1, f.Hold.Seconds())
	case Leader, Line:
		fmt.Fprintf(&b, " hold %.1fs", f.Hold.Seconds())
	case Move:
		fmt.Fprintf(&b, " m%d by +%d", f.Node+1, f.Step)
	}
	if f.Abrupt {
		b.WriteString(" abrupt")
	}
	return b.String()
}

// Plan is everything a seed decides about a run.
type Plan struct {
	Seed       uint64
	Publishers []int // the nodes (0-based) with a publisher
	Faults     []Fault
}

// Holds bounds the random holds of each fault kind.
type Holds struct {
	KillMin, KillMax           time.Duration // down time before the restart
	StopMin, StopMax           time.Duration // frozen time
	PartitionMin, PartitionMax time.Duration // cut-off time
	GapMin, GapMax             time.Duration // calm between two faults
}

// DefaultHolds: a node dead, frozen or cut off 1 to 3 s up to 15 s, so
// that some outlast the 10 s lease of its etcd registrations (after which
// another node takes its clients' sessions up, and the node must let them
// go when it is back) and some do not.
var DefaultHolds = Holds{
	KillMin: 1 * time.Second, KillMax: 15 * time.Second,
	StopMin: 2 * time.Second, StopMax: 15 * time.Second,
	PartitionMin: 3 * time.Second, PartitionMax: 15 * time.Second,
	GapMin: 2 * time.Second, GapMax: 5 * time.Second,
}

// Warmup is the load before the first fault: the figures of a calm
// cluster, against which the faults' are read.
const Warmup = 3 * time.Second

// NewPlan derives a plan from seed: the publishers' nodes, then faults of
// the given kinds until duration. Each listed kind comes once first, in an
// order the seed shuffles, so that a short run covers its list; the rest
// are drawn at random. A hold is cut so that its fault ends by duration,
// but never below its minimum.
func NewPlan(seed uint64, duration time.Duration, kinds []FaultKind, h Holds) Plan {
	// Two streams of the PCG with fixed increments: the plan depends on
	// the seed alone, never on the clock.
	rng := rand.New(rand.NewPCG(seed, 0x6c696e656d712d63))
	p := Plan{Seed: seed}
	if rng.IntN(2) == 0 {
		p.Publishers = []int{0, 1, 2}
	} else {
		skip := rng.IntN(3)
		for i := range 3 {
			if i != skip {
				p.Publishers = append(p.Publishers, i)
			}
		}
	}
	first := append([]FaultKind(nil), kinds...)
	rng.Shuffle(len(first), func(i, j int) { first[i], first[j] = first[j], first[i] })
	between := func(lo, hi time.Duration) time.Duration {
		if hi <= lo {
			return lo
		}
		// Rounded to 100 ms: a schedule people read and compare.
		d := lo + time.Duration(rng.Int64N(int64(hi-lo)))
		return d.Round(100 * time.Millisecond)
	}
	t := Warmup
	for n := 0; t < duration || n == 0; n++ {
		var k FaultKind
		if n < len(first) {
			k = first[n]
		} else {
			k = kinds[rng.IntN(len(kinds))]
		}
		f := Fault{Kind: k, At: t, Node: rng.IntN(3), Step: 1 + rng.IntN(2), Abrupt: rng.IntN(2) == 0}
		left := duration - t
		switch k {
		case Kill, Leader, Line, Wipe:
			f.Hold = min(between(h.KillMin, h.KillMax), max(left, h.KillMin))
		case Stop:
			f.Hold = min(between(h.StopMin, h.StopMax), max(left, h.StopMin))
		case Partition:
			f.Hold = min(between(h.PartitionMin, h.PartitionMax), max(left, h.PartitionMin))
		}
		if k == Leader || k == Line {
			f.Node = -1
		}
		if k != Move && k != Partition {
			f.Abrupt = false
		}
		if k != Move {
			f.Step = 0
		}
		p.Faults = append(p.Faults, f)
		t += f.Hold + between(h.GapMin, h.GapMax)
	}
	return p
}
