package sparkplug

import (
	"testing"
	"time"

	"github.com/linemq/linemq/broker"
)

// payload encodes a Sparkplug B payload with seq (>= 0) and bdSeq (>= 0).
func payload(seq, bdSeq int) []byte {
	p := Payload{Timestamp: 1_700_000_000_000, HasTimestamp: true,
		Seq: uint64(max(seq, 0)), HasSeq: seq >= 0, BdSeq: uint64(max(bdSeq, 0)), HasBdSeq: bdSeq >= 0}
	return p.Append(nil)
}

// msg makes a message as a client's publish on some gateway would be.
func msg(topic string, p []byte) *broker.Message {
	m := broker.NewMessage(topic, p, 0, false)
	m.Origin = "edge"
	return m
}

// step is one message shown to the tracker and what it must answer.
type step struct {
	topic string
	p     []byte
	from  string
	want  broker.Observation
}

func run(t testing.TB, tr *Tracker, steps []step) {
	t.Helper()
	for i, s := range steps {
		got, after := tr.Observe(msg(s.topic, s.p), s.from)
		if after != nil {
			after()
		}
		if got != s.want {
			t.Fatalf("step %d (%s from %q): %v, want %v", i, s.topic, s.from, got, s.want)
		}
	}
}

const (
	nbirth = "spBv1.0/G/NBIRTH/E"
	ndeath = "spBv1.0/G/NDEATH/E"
	dbirth = "spBv1.0/G/DBIRTH/E/D"
	ddata  = "spBv1.0/G/DDATA/E/D"
)

// TestTrackerStaleMessages: the rules that hold back an earlier session's
// messages on a line of gateways n1, n2, n3 (this tracker is n3's).
func TestTrackerStaleMessages(t *testing.T) {
	up := map[string]bool{"n1": true, "n2": true}
	tr := NewTracker(Options{Node: "n3", Reachable: func(n string) bool { return up[n] }})
	run(t, tr, []step{
		{nbirth, payload(0, 1), "n1", broker.Watched},
		{dbirth, payload(1, -1), "n1", broker.Watched},
		// The edge node moves to n2: its new birth, then its old
		// session's late DDATA and NDEATH from n1.
		{nbirth, payload(0, 2), "n2", broker.Watched},
		{ddata, payload(2, -1), "n1", broker.HeldBack},
		{ndeath, payload(-1, 1), "n1", broker.HeldBack},
		// An NDEATH with the old bdSeq is stale wherever it enters.
		{ndeath, payload(-1, 1), "n2", broker.HeldBack},
		// The current session's data passes, in sequence.
		{dbirth, payload(1, -1), "n2", broker.Watched},
		{ddata, payload(2, -1), "n2", broker.Watched},
		// An NDEATH with a bdSeq never born is not judged stale.
		{ndeath, payload(-1, 9), "n2", broker.Watched},
	})
	n := tr.Stats(time.Now()).EdgeNodes[0]
	if n.Online || n.HeldBack != 3 || n.Births != 2 || n.Deaths != 1 {
		t.Errorf("after the moves: %+v", n)
	}

	// n2 dies with the edge node on it: the line publishes its will from
	// n3, which is not stale.
	run(t, tr, []step{{nbirth, payload(0, 3), "n2", broker.Watched}})
	up["n2"] = false
	run(t, tr, []step{{ndeath, payload(-1, 3), "", broker.Watched}})
	if n := tr.Stats(time.Now()).EdgeNodes[0]; n.Online {
		t.Errorf("the line's NDEATH left the edge node online")
	}
}

// TestTrackerSequence: gaps and late messages modulo 256 (a jump of 128 or
// more forward is taken as a late message), an NBIRTH resetting the
// sequence.
func TestTrackerSequence(t *testing.T) {
	tr := NewTracker(Options{})
	steps := []step{{nbirth, payload(0, 0), "", broker.Watched}}
	seqs := []int{}
	for seq := 1; seq <= 255; seq++ {
		seqs = append(seqs, seq)
	}
	seqs = append(seqs, 0, 1, 4, 5, 3, 6) // the wrap, then 2 and 3 missing, 3 late
	for _, seq := range seqs {
		steps = append(steps, step{ddata, payload(seq, -1), "", broker.Watched})
	}
	run(t, tr, steps)
	n := tr.Stats(time.Now()).EdgeNodes[0]
	if n.SeqGaps != 2 || n.OutOfOrder != 1 || n.Messages != uint64(len(steps)) {
		t.Errorf("gaps %d, out of order %d, messages %d", n.SeqGaps, n.OutOfOrder, n.Messages)
	}
	run(t, tr, []step{{nbirth, payload(0, 1), "", broker.Watched}, {ddata, payload(1, -1), "", broker.Watched}})
	if n := tr.Stats(time.Now()).EdgeNodes[0]; n.SeqGaps != 2 {
		t.Errorf("a rebirth's sequence counted as a gap: %d", n.SeqGaps)
	}
}

// TestTrackerWillMismatch: an NBIRTH whose bdSeq is not its connection's
// NDEATH will's is flagged.
func TestTrackerWillMismatch(t *testing.T) {
	tr := NewTracker(Options{})
	tr.WillSet(broker.ClientInfo{ClientID: "edge"}, msg(ndeath, payload(-1, 4)))
	run(t, tr, []step{{nbirth, payload(0, 5), "", broker.Watched}})
	s := tr.Stats(time.Now())
	if n := s.EdgeNodes[0]; !n.Mismatch || n.WillBdSeq != 4 || n.BdSeq != 5 || s.Groups[0].Mismatch != 1 {
		t.Errorf("mismatch not flagged: %+v", n)
	}
}

// TestTrackerWillFromTheLine: another gateway's will announcement, after
// the birth it belongs to, sets the will's bdSeq and judges the birth.
func TestTrackerWillFromTheLine(t *testing.T) {
	tr := NewTracker(Options{Node: "n3"})
	run(t, tr, []step{{nbirth, payload(0, 5), "n1", broker.Watched}})
	if _, err := tr.HandleWill("n1", []byte(`{"group":"G","edge_node":"E","client":"edge","bdseq":4}`)); err != nil {
		t.Fatal(err)
	}
	if n := tr.Stats(time.Now()).EdgeNodes[0]; !n.Mismatch || n.WillBdSeq != 4 {
		t.Errorf("after the will: %+v", n)
	}
	if _, err := tr.HandleWill("n1", []byte(`{"group":"G"}`)); err == nil {
		t.Error("an incomplete announcement accepted")
	}
}

// TestTrackerBounds: past MaxEdgeNodes an offline edge node is forgotten
// for a new one, and with none offline new ones go untracked.
func TestTrackerBounds(t *testing.T) {
	tr := NewTracker(Options{MaxEdgeNodes: 2})
	run(t, tr, []step{
		{"spBv1.0/G/NBIRTH/A", payload(0, 0), "", broker.Watched},
		{"spBv1.0/G/NDEATH/A", payload(-1, 0), "", broker.Watched},
		{"spBv1.0/G/NBIRTH/B", payload(0, 0), "", broker.Watched},
		{"spBv1.0/G/NBIRTH/C", payload(0, 0), "", broker.Watched}, // A forgotten
		{"spBv1.0/G/NBIRTH/D", payload(0, 0), "", broker.Watched}, // untracked
	})
	s := tr.Stats(time.Now())
	if len(s.EdgeNodes) != 2 || s.EdgeNodes[0].EdgeNode != "B" || s.EdgeNodes[1].EdgeNode != "C" || s.Untracked != 1 {
		t.Errorf("edge nodes %+v, untracked %d", s.EdgeNodes, s.Untracked)
	}
}

func TestStateOnline(t *testing.T) {
	for _, c := range []struct {
		in         string
		online, ok bool
	}{
		{`{"online" : true, "timestamp" : 1668114759262}`, true, true},
		{`{"timestamp":1,"online":false}`, false, true},
		{"ONLINE", true, true},
		{"OFFLINE", false, true},
		{`{"online": maybe}`, false, false},
		{"", false, false},
	} {
		if online, ok := stateOnline([]byte(c.in)); online != c.online || ok != c.ok {
			t.Errorf("stateOnline(%q) = %v, %v", c.in, online, ok)
		}
	}
}

// BenchmarkObserveDDATA is the tracker's cost per DDATA on the fan-in
// path: topic, seq, the edge node's counters under its lock.
func BenchmarkObserveDDATA(b *testing.B) {
	tr := NewTracker(Options{})
	run(b, tr, []step{{nbirth, payload(0, 0), "", broker.Watched}})
	ms := make([]*broker.Message, 256)
	for i := range ms {
		ms[i] = msg(ddata, payload(i, -1))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		_, after := tr.Observe(ms[(i+1)&255], "")
		after()
	}
}

// TestTrackerLateDeathOfAnEarlierSession: session 16's NDEATH that comes
// after session 17's (its gateway learned late of the takeover, after 17
// was taken over too) is held back: the edge node is offline already, and
// a host must not see 16's death after 17's birth. With a bdSeq that never
// changes (Eclipse Tahu's JavaScript client keeps 0) nothing tells the
// sessions apart, and it passes.
func TestTrackerLateDeathOfAnEarlierSession(t *testing.T) {
	tr := NewTracker(Options{Node: "n3", Reachable: func(string) bool { return true }})
	run(t, tr, []step{
		{nbirth, payload(0, 16), "n1", broker.Watched},
		{nbirth, payload(0, 17), "n2", broker.Watched},
		{ndeath, payload(-1, 17), "n2", broker.Watched},
		{ndeath, payload(-1, 16), "n1", broker.HeldBack},
	})
	tahu := NewTracker(Options{Node: "n3", Reachable: func(string) bool { return true }})
	run(t, tahu, []step{
		{nbirth, payload(0, 0), "n1", broker.Watched},
		{nbirth, payload(0, 0), "n2", broker.Watched},
		{ndeath, payload(-1, 0), "n2", broker.Watched},
		{ndeath, payload(-1, 0), "n1", broker.Watched},
	})
}
