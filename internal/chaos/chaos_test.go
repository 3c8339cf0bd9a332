package chaos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/linemq/linemq/broker/packet"
)

// TestPlanFromSeed: a plan depends on its seed alone, covers every listed
// kind, and keeps its faults apart.
func TestPlanFromSeed(t *testing.T) {
	kinds := []FaultKind{Kill, Stop, Move, Partition}
	a := NewPlan(7, 40*time.Second, kinds, DefaultHolds)
	b := NewPlan(7, 40*time.Second, kinds, DefaultHolds)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("seed 7 gave two plans:\n%+v\n%+v", a, b)
	}
	if c := NewPlan(8, 40*time.Second, kinds, DefaultHolds); reflect.DeepEqual(a.Faults, c.Faults) {
		t.Errorf("seeds 7 and 8 gave the same faults")
	}
	for _, k := range kinds {
		if !slices.ContainsFunc(a.Faults[:len(kinds)], func(f Fault) bool { return f.Kind == k }) {
			t.Errorf("the first %d faults lack %s: %+v", len(kinds), k, a.Faults)
		}
	}
	for i := 1; i < len(a.Faults); i++ {
		prev, f := a.Faults[i-1], a.Faults[i]
		if f.At < prev.At+prev.Hold+DefaultHolds.GapMin {
			t.Errorf("fault %d at %v overlaps fault %d (%v + %v)", i, f.At, i-1, prev.At, prev.Hold)
		}
		if f.Kind == Stop && (f.Hold < DefaultHolds.StopMin || f.Hold > DefaultHolds.StopMax) {
			t.Errorf("stop held %v", f.Hold)
		}
	}
	if len(a.Publishers) < 2 {
		t.Errorf("publishers on %v: want two or three nodes", a.Publishers)
	}
}

// TestParseFaults reads the -faults list.
func TestParseFaults(t *testing.T) {
	if ks, err := ParseFaults("kill, move"); err != nil || !slices.Equal(ks, []FaultKind{Kill, Move}) {
		t.Errorf("kill, move: %v %v", ks, err)
	}
	if ks, err := ParseFaults("all"); err != nil || len(ks) != len(AllFaults) {
		t.Errorf("all: %v %v", ks, err)
	}
	if _, err := ParseFaults("kill,flood"); err == nil {
		t.Error("flood accepted")
	}
}

// recordBuilder makes synthetic records for the checker's tests.
type recordBuilder struct {
	t0 time.Time
	s  Snapshot
}

func newBuilder() *recordBuilder {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	return &recordBuilder{t0: t0, s: Snapshot{End: t0.Add(60 * time.Second), RefusedConnects: map[packet.ReasonCode]int{}}}
}

func (b *recordBuilder) at(s float64) time.Time {
	return b.t0.Add(time.Duration(s * float64(time.Second)))
}

func (b *recordBuilder) conn(client string, node int, connack, closed float64) int {
	c := Conn{Client: client, Kind: "share", Node: node, Connack: b.at(connack)}
	// A later connection of the client resumes its session.
	c.SessionPresent = slices.ContainsFunc(b.s.Conns, func(o Conn) bool { return o.Client == client })
	if closed >= 0 {
		c.Closed, c.How = b.at(closed), "DISCONNECT 0x8e"
	}
	b.s.Conns = append(b.s.Conns, c)
	return len(b.s.Conns) - 1
}

func (b *recordBuilder) pub(pub string, seq uint64, reason packet.ReasonCode) {
	b.s.Publishes = append(b.s.Publishes, Publish{Msg: Msg{pub, seq}, Sent: b.at(1), Acked: b.at(1.01), Reason: reason})
}

func (b *recordBuilder) got(conn int, pub string, seq uint64, dup bool, at float64) {
	b.s.Deliveries = append(b.s.Deliveries, Delivery{Msg: Msg{pub, seq}, Kind: "share", Client: b.s.Conns[conn].Client, Conn: conn, Dup: dup, At: b.at(at)})
}

func violations(r Report) map[string]int {
	m := map[string]int{}
	for _, inv := range r.Invariants {
		if inv.Violations > 0 {
			m[inv.Name] = inv.Violations
		}
	}
	return m
}

// TestCheckHealthy: a record in which everything went right holds every
// invariant, duplicates with DUP and refused messages included.
func TestCheckHealthy(t *testing.T) {
	b := newBuilder()
	c1 := b.conn("share-1", 0, 0, 10)   // closed before its successor
	c1b := b.conn("share-1", 1, 11, -1) // moved to n2
	c2 := b.conn("share-2", 1, 0, -1)
	b.pub("p1", 1, packet.Success)
	b.pub("p1", 2, packet.Success)
	b.pub("p1", 3, packet.QuotaExceeded) // refused: need not arrive
	b.pub("p1", 4, packet.Success)
	b.got(c1, "p1", 1, false, 2)
	b.got(c2, "p1", 2, false, 2)
	b.got(c1b, "p1", 1, true, 12) // redelivered with DUP after the move
	b.got(c1b, "p1", 4, false, 12)
	r := Check(b.s, Units([]SubKind{ShareGroup}, 3), nil, b.t0, Options{})
	if v := violations(r); len(v) > 0 || !r.OK() {
		t.Fatalf("violations %v in a healthy record", v)
	}
	if r.Acked != 3 || r.Delivered != 3 || r.Duplicates != 1 || r.Refused[packet.QuotaExceeded] != 1 {
		t.Errorf("figures %+v", r)
	}
}

// TestCheckViolations: each invariant catches its failure.
func TestCheckViolations(t *testing.T) {
	b := newBuilder()
	old := b.conn("share-1", 0, 0, -1) // never closed
	b.conn("share-1", 1, 20, -1)       // took the session up at 20 s
	c2 := b.conn("share-2", 1, 0, -1)
	late := b.conn("share-3", 2, 0, 28) // closed 8 s after its successor
	b.conn("share-3", 0, 20, -1)        // ... which connected at 20 s
	b.pub("p1", 1, packet.Success)      // lost
	b.pub("p1", 2, packet.Success)      // twice without DUP
	b.pub("p1", 3, packet.Success)      // out of order
	b.got(c2, "p1", 2, false, 2)        //
	b.got(old, "p1", 2, false, 3)       // second copy, no DUP
	b.got(c2, "p1", 3, false, 1.5)      // 3 before 2 at share-2...
	b.got(late, "p1", 3, true, 4)       // a DUP copy: fine
	b.s.Moves = append(b.s.Moves, MoveResult{Client: "share-2", From: 1, To: 2, Node: 2, At: b.at(5), ExpectPresent: true})
	b.s.Conns[c2].Closed, b.s.Conns[c2].How = b.at(29), "connection closed"
	b.s.Conns[b.conn("share-2", 0, 30, -1)].SessionPresent = false // its session lost
	r := Check(b.s, Units([]SubKind{ShareGroup}, 3), nil, b.t0, Options{})
	want := map[string]int{InvNoLoss: 1, InvDupFlag: 1, InvOrder: 1, InvOneSession: 2, InvMoved: 1, InvResumed: 1}
	if got := violations(r); !reflect.DeepEqual(got, want) {
		var sb strings.Builder
		r.Write(&sb)
		t.Fatalf("violations %v, want %v\n%s", got, want, sb.String())
	}
}

// TestCheckOutageExtendsTakeover: a connection on a node frozen when its
// session was taken up elsewhere has the bound from the node's resumption.
func TestCheckOutageExtendsTakeover(t *testing.T) {
	b := newBuilder()
	b.conn("share-1", 0, 0, 24) // closed 4 s after n1 resumed at 20 s
	b.conn("share-1", 1, 12, -1)
	b.s.Outages = []Outage{{Node: 0, From: b.at(5), To: b.at(20), What: Stop}}
	r := Check(b.s, nil, nil, b.t0, Options{TakeoverBound: 5 * time.Second})
	if v := violations(r); len(v) > 0 {
		t.Errorf("violations %v: the frozen node closed within the bound of its resumption", v)
	}
	b.s.Conns[0].Closed = b.at(26) // 6 s after: too late
	r = Check(b.s, nil, nil, b.t0, Options{TakeoverBound: 5 * time.Second})
	if v := violations(r); v[InvOneSession] != 1 {
		t.Errorf("violations %v: want one of %s", v, InvOneSession)
	}
}

// TestCheckEverySubscriber: an ordinary kind needs each subscriber to get
// each message, and judges DUP per subscriber.
func TestCheckEverySubscriber(t *testing.T) {
	b := newBuilder()
	a := b.conn("plain-1", 0, 0, -1)
	c := b.conn("plain-2", 1, 0, -1)
	b.conn("plain-3", 2, 0, -1)
	b.pub("p1", 1, packet.Success)
	b.got(a, "p1", 1, false, 2)
	b.got(c, "p1", 1, false, 2) // a copy each: not a duplicate
	r := Check(b.s, Units([]SubKind{Plain}, 3), nil, b.t0, Options{})
	if v := violations(r); !reflect.DeepEqual(v, map[string]int{InvNoLoss: 1}) {
		t.Errorf("violations %v: want plain-3's loss only", v)
	}
}

// The fixed set: three seeds against real processes (a share-group member
// and a persistent ordinary subscriber on every node), each a fault
// schedule of 25 s. Seed 1 plays a node frozen 11.6 s, an abrupt move, two kills;
// seed 36 a node cut off 11.8 s whose subscriber moves away abruptly, a
// move, and the etcd leader killed (partition only where namespaces
// work); seed 5 a move, a node's data directory deleted and a blank
// replacement joining 2.9 s later (its sessions failed over from their
// replicas), then three kills. The freeze and the cut outlast the 10 s lease of a
// node's registrations, after which another node takes a session up while
// the old connection is still open: the case of invariant 2.
//
// Seed 1 (a freeze past the lease, an abrupt move, two short kills) lost
// acknowledged messages in about one run of three until three causes were
// fixed: a restarted node that took its previous run's session record for
// its own claim and kept the session of a client served elsewhere as a
// group member; a session adopted for a claim that then failed, dropped
// with the share messages it took meanwhile; and a restarted node's routes
// and members missing for a moment while it registered.
var fixedSet = []struct {
	seed   uint64
	faults []FaultKind
	known  string // why the seed is left out of make test, if it is
}{
	{1, []FaultKind{Kill, Stop, Move}, ""},
	{36, []FaultKind{Partition, Move, Leader}, ""},
	{5, []FaultKind{Wipe, Kill, Move}, ""},
}

// testHolds keep the fixed set near 45 s a seed under the race detector
// on two cores, with a freeze and a cut that outlast the lease.
var testHolds = Holds{
	KillMin: time.Second, KillMax: 3 * time.Second,
	StopMin: 10 * time.Second, StopMax: 13 * time.Second,
	PartitionMin: 11 * time.Second, PartitionMax: 13 * time.Second,
	GapMin: 2 * time.Second, GapMax: 3 * time.Second,
}

// TestFaultSuite runs the fixed set. It fails while the cluster loses
// acknowledged messages, leaves sessions open on two nodes, delivers
// duplicates without DUP or out of order: the report says which seed and
// how (reproduce with go run ./cmd/linemq-chaos -seed N -faults ...).
func TestFaultSuite(t *testing.T) {
	bin := suiteBinary(t, "three linemq processes under faults for about two minutes")
	for _, run := range fixedSet {
		if run.known != "" && os.Getenv("LINEMQ_FAULT_SUITE") != "all" {
			t.Logf("seed %d left out (LINEMQ_FAULT_SUITE=all runs it): %s", run.seed, run.known)
			continue
		}
		faults := run.faults
		if why := NetnsUsable(); why != nil && slices.Contains(faults, Partition) {
			t.Logf("seed %d: partition skipped: network namespaces unusable here (%v)", run.seed, why)
			faults = slices.DeleteFunc(slices.Clone(faults), func(k FaultKind) bool { return k == Partition })
		}
		t.Run(joinKinds(faults), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			// LINEMQ_CHAOS_DIR keeps the processes' data and logs there.
			dir := t.TempDir()
			if keep := os.Getenv("LINEMQ_CHAOS_DIR"); keep != "" {
				dir = filepath.Join(keep, fmt.Sprint("seed-", run.seed))
			}
			res, err := Run(ctx, Config{Linemq: bin, Seed: run.seed, Duration: 25 * time.Second, Faults: faults,
				Holds: testHolds, Dir: dir, Log: testWriter{t}})
			if res != nil {
				var sb strings.Builder
				res.Write(&sb)
				t.Log("\n" + sb.String())
			}
			if err != nil {
				t.Fatalf("seed %d: %v", run.seed, err)
			}
			if !res.Report.OK() {
				var sb strings.Builder
				res.WriteExcerpts(&sb, 120)
				t.Log("what the nodes logged about the clients named above:\n" + sb.String())
				t.Errorf("seed %d (faults %s): invariants violated: %v", run.seed, joinKinds(faults), res.Report.Failed())
			}
		})
	}
}

// TestOrdinarySubscribersCutOff is issue 27's third recipe: one node cut
// off from the others for 20 s in a network namespace, under the suite's
// load, with a persistent ordinary subscriber on every node: every
// acknowledged message reaches every ordinary subscriber, the cut-off
// node's included, in order, any second copy with DUP.
func TestOrdinarySubscribersCutOff(t *testing.T) {
	bin := suiteBinary(t, "three linemq processes, one cut off for 20 s")
	if why := NetnsUsable(); why != nil {
		t.Skipf("network namespaces unusable here: %v", why)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cut := Holds{PartitionMin: 20 * time.Second, PartitionMax: 20 * time.Second, GapMin: 2 * time.Second, GapMax: 2 * time.Second}
	// Ordinary subscribers only: the share group's bounds after a cut
	// this long are the fixed set's (seed 36) to check.
	res, err := Run(ctx, Config{Linemq: bin, Seed: 27, Duration: 4 * time.Second, Faults: []FaultKind{Partition},
		Holds: cut, Kinds: []SubKind{Plain}, Dir: t.TempDir(), Log: testWriter{t}})
	if res != nil {
		var sb strings.Builder
		res.Write(&sb)
		t.Log("\n" + sb.String())
	}
	if err != nil {
		t.Fatal(err)
	}
	if !res.Report.OK() {
		var sb strings.Builder
		res.WriteExcerpts(&sb, 120)
		t.Log("what the nodes logged about the clients named above:\n" + sb.String())
		t.Errorf("invariants violated: %v", res.Report.Failed())
	}
}

// TestWriteExcerpts: a failed run's report comes with what the nodes
// logged about the clients its violations name, and the registry's lines,
// without etcd's.
func TestWriteExcerpts(t *testing.T) {
	dir := t.TempDir()
	log := `level=INFO msg="client connected" component=broker client=share-1 present=false
level=INFO msg="client connected" component=broker client=share-2 present=true
level=WARN msg="lease lost; registering again" component=registry node=n1
level=INFO msg="raft stuff" component=etcd client=share-1
`
	if err := os.WriteFile(filepath.Join(dir, "n1.log"), []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	r := &Result{Dir: dir, Report: Report{Invariants: []Invariant{{Name: InvMoved, Violations: 1,
		Examples: []string{"share-1 moved from n2 to n1 (t=17.57s): Session Present 0"}}}}}
	var sb strings.Builder
	r.WriteExcerpts(&sb, 10)
	got := sb.String()
	for _, want := range []string{"n1.log: 2 lines about share-1", "client=share-1 present=false", "lease lost"} {
		if !strings.Contains(got, want) {
			t.Errorf("excerpts lack %q:\n%s", want, got)
		}
	}
	for _, not := range []string{"share-2", "raft stuff"} {
		if strings.Contains(got, not) {
			t.Errorf("excerpts have %q:\n%s", not, got)
		}
	}
	r.Report.Invariants[0].Violations = 0
	sb.Reset()
	if r.WriteExcerpts(&sb, 10); sb.Len() != 0 {
		t.Errorf("a run that held printed excerpts: %s", sb.String())
	}
}

// testWriter sends the run's progress to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestCheckBoundedWait: a publish to a node that could answer waiting past
// the bound is a violation (a publisher on a node cut off from the others
// held 3.4 s); one to the node that was itself frozen is not.
func TestCheckBoundedWait(t *testing.T) {
	b := newBuilder()
	b.pub("p1", 1, packet.Success)
	b.pub("p2", 1, packet.Success)
	b.s.Publishes[0].Node, b.s.Publishes[0].Sent, b.s.Publishes[0].Acked = 0, b.at(10), b.at(13.4) // cut off: its node answers
	b.s.Publishes[1].Node, b.s.Publishes[1].Sent, b.s.Publishes[1].Acked = 1, b.at(10), b.at(16)   // its own node frozen
	faults := []Fault{
		{Kind: Partition, Victim: 0, Start: b.at(10), End: b.at(14)},
		{Kind: Stop, Victim: 1, Start: b.at(10), End: b.at(15.5)},
	}
	r := Check(b.s, nil, faults, b.t0, Options{})
	if got := violations(r); got[InvWait] != 1 {
		var sb strings.Builder
		r.Write(&sb)
		t.Fatalf("violations %v, want one %s\n%s", got, InvWait, sb.String())
	}
}
