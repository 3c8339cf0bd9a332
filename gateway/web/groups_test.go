package web

import (
	"strings"
	"testing"
	"time"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/brokertest"
)

// ruleServer is a server whose rules are driven by hand: the tests build
// group snapshots and client figures and feed them to the sampler's track
// and to judge, with a fake clock.
func ruleServer(t *testing.T, th Thresholds) (*Server, *brokertest.FakeClock) {
	t.Helper()
	b, err := broker.New(broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	clk := brokertest.NewFakeClock()
	return newTestServer(b, Options{Clock: clk, Degraded: th}), clk
}

func pool(strategy string, delivered ...uint64) broker.GroupStats {
	g := broker.GroupStats{Name: "report-prep", Filter: "plant/+/telemetry", Strategy: strategy, Members: len(delivered), MinMembers: len(delivered)}
	for i, d := range delivered {
		g.MemberStats = append(g.MemberStats, broker.MemberStats{ClientID: "w" + string(rune('1'+i)), Connected: true, Delivered: d})
		g.Delivered += d
		g.In += d
	}
	return g
}

func windows(ids ...string) map[string]broker.ClientStats {
	out := make(map[string]broker.ClientStats)
	for _, id := range ids {
		out[id] = broker.ClientStats{ClientID: id, Connected: true, ReceiveMaximum: 10}
	}
	return out
}

func reasons(v groupView) string { return strings.Join(v.Reasons, " | ") }

func TestWindowFullRule(t *testing.T) {
	s, clk := ruleServer(t, Thresholds{WindowFull: 10 * time.Second})
	tr := &groupTrack{fullSince: map[string]time.Time{}, memberRate: map[string]float64{}}
	g := pool("round_robin", 0, 0, 0)
	cl := windows("w1", "w2", "w3")
	s.track(tr, &g, cl, clk.Now())
	if v := s.judge(&g, tr, cl, clk.Now()); v.degraded() {
		t.Fatalf("healthy pool degraded: %s", reasons(v))
	}

	// w3 stops acknowledging: its window fills.
	w3 := cl["w3"]
	w3.InFlight = 10
	cl["w3"] = w3
	clk.Advance(time.Second)
	s.track(tr, &g, cl, clk.Now())
	clk.Advance(10*time.Second - time.Millisecond)
	if v := s.judge(&g, tr, cl, clk.Now()); v.degraded() || v.Members[2].WindowFull != 10*time.Second-time.Millisecond {
		t.Fatalf("degraded before the limit: %s (full for %v)", reasons(v), v.Members[2].WindowFull)
	}
	clk.Advance(time.Millisecond)
	v := s.judge(&g, tr, cl, clk.Now())
	want := "member w3: send window full for 10s (10 of Receive Maximum 10 in flight; limit 10s)"
	if reasons(v) != want || len(v.Members[2].Reasons) != 1 || len(v.Members[0].Reasons) != 0 {
		t.Fatalf("reasons %q, want %q", reasons(v), want)
	}

	// It acknowledges again: the next sample clears it.
	w3.InFlight = 2
	cl["w3"] = w3
	s.track(tr, &g, cl, clk.Now())
	if v := s.judge(&g, tr, cl, clk.Now()); v.degraded() {
		t.Fatalf("still degraded after recovery: %s", reasons(v))
	}
}

func TestShareRule(t *testing.T) {
	s, clk := ruleServer(t, Thresholds{ShareWindow: time.Minute, ShareMinMessages: 100, ShareTolerance: 0.5})
	for _, tc := range []struct {
		name      string
		strategy  string
		delivered []uint64 // after one minute
		want      string
	}{
		{"even", "round_robin", []uint64{70, 70, 70}, ""},
		{"within tolerance", "round_robin", []uint64{90, 70, 40}, ""},
		{"one starved", "round_robin", []uint64{100, 100, 10}, "member w3: got 5% of the last 1m0s's deliveries, expected 33%"},
		{"one hogging: the others are marked", "round_robin", []uint64{170, 20, 20}, "member w2: got 10% of the last 1m0s's deliveries, expected 33% | member w3: got 10% of the last 1m0s's deliveries, expected 33%"},
		{"too few to judge", "round_robin", []uint64{50, 40, 0}, ""},
		{"hash strategies are uneven by design", "hash_topic", []uint64{200, 10, 0}, ""},
		{"the historian case: two halves", "random", []uint64{100, 100}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := &groupTrack{fullSince: map[string]time.Time{}, memberRate: map[string]float64{}}
			zero := make([]uint64, len(tc.delivered))
			g := pool(tc.strategy, zero...)
			cl := windows("w1", "w2", "w3")
			t0 := clk.Now()
			s.track(tr, &g, cl, t0)
			g = pool(tc.strategy, tc.delivered...)
			// Before half the window has passed nothing is judged.
			if v := s.judge(&g, tr, cl, t0.Add(29*time.Second)); v.degraded() {
				t.Fatalf("judged early: %s", reasons(v))
			}
			v := s.judge(&g, tr, cl, t0.Add(time.Minute))
			if reasons(v) != tc.want {
				t.Fatalf("reasons %q, want %q", reasons(v), tc.want)
			}
		})
	}
}

func TestGroupRules(t *testing.T) {
	s, clk := ruleServer(t, Thresholds{QueueAge: 30 * time.Second})
	g := pool("round_robin", 5, 5)
	g.MinMembers = 3
	g.Queued, g.OldestQueued = 4, 31*time.Second
	g.MemberStats[1].Connected = false
	cl := windows("w1")
	v := s.judge(&g, nil, cl, clk.Now())
	want := "2 members, below min_members 3 | queue not draining: 4 queued, oldest waiting 31s (limit 30s) | member w2: offline"
	if reasons(v) != want {
		t.Fatalf("reasons\n got %q\nwant %q", reasons(v), want)
	}

	// Rules turned off with negative thresholds.
	s2, _ := ruleServer(t, Thresholds{QueueAge: -1, WindowFull: -1, ShareWindow: -1})
	g.MinMembers = 0
	g.MemberStats[1].Connected = true
	if v := s2.judge(&g, nil, windows("w1", "w2"), clk.Now()); v.degraded() {
		t.Fatalf("disabled rules fired: %s", reasons(v))
	}
}

// TestTrackBounds checks that a group's history spans the share window and
// no more, and that counters starting over (the group ended and began
// again between samples) restart it instead of producing huge rates.
func TestTrackBounds(t *testing.T) {
	s, clk := ruleServer(t, Thresholds{ShareWindow: 10 * time.Second})
	tr := &groupTrack{fullSince: map[string]time.Time{}, memberRate: map[string]float64{}}
	cl := windows("w1", "w2")
	for i := range 100 {
		g := pool("round_robin", uint64(10*i), uint64(10*i))
		s.track(tr, &g, cl, clk.Now())
		clk.Advance(time.Second)
	}
	if n := len(tr.samples); n != 11 {
		t.Fatalf("%d samples kept, want 11 (10 s window at 1 s)", n)
	}
	if tr.rateDelivered != 20 || tr.memberRate["w1"] != 10 {
		t.Fatalf("rates %v %v", tr.rateDelivered, tr.memberRate)
	}
	g := pool("round_robin", 3, 3)
	s.track(tr, &g, cl, clk.Now())
	if len(tr.samples) != 1 || tr.rateDelivered != 0 {
		t.Fatalf("after a restart: %d samples, rate %v", len(tr.samples), tr.rateDelivered)
	}
}
