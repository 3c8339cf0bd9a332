package watchdog

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/hw/internal/hwtest"
)

// fakeFeeder counts feeds.
type fakeFeeder struct {
	name    string
	timeout time.Duration
	feeds   atomic.Int64
	fail    atomic.Bool
	closed  atomic.Int64
	order   *[]string // appended to on Close, to check the order
	mu      *sync.Mutex
}

func (f *fakeFeeder) Feed() error {
	if f.fail.Load() {
		return errors.New("bus error")
	}
	f.feeds.Add(1)
	return nil
}
func (f *fakeFeeder) Timeout() time.Duration { return f.timeout }
func (f *fakeFeeder) String() string         { return f.name }
func (f *fakeFeeder) Close() error {
	f.closed.Add(1)
	if f.order != nil {
		f.mu.Lock()
		*f.order = append(*f.order, f.name)
		f.mu.Unlock()
	}
	return nil
}

// gate is a Gate a test switches, and can make block.
type gate struct {
	mu      sync.Mutex
	ok      bool
	reason  string
	calls   int
	block   chan struct{} // when not nil, Healthy waits for it to close
	entered chan struct{} // receives when Healthy starts to block
}

func newGate() *gate { return &gate{ok: true, entered: make(chan struct{}, 1)} }

func (g *gate) Healthy() (bool, string) {
	g.mu.Lock()
	g.calls++
	block := g.block
	g.mu.Unlock()
	if block != nil {
		g.entered <- struct{}{}
		<-block
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.ok, g.reason
}

func (g *gate) set(ok bool, reason string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.ok, g.reason = ok, reason
}

func (g *gate) nCalls() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.calls
}

// start runs a Supervisor on a fake clock and waits for its first check,
// which New starts at once.
func start(t *testing.T, g Gate, feeders ...Feeder) (*Supervisor, *hwtest.Clock) {
	t.Helper()
	clk := hwtest.NewClock(t)
	s, err := New(Options{Feeders: feeders, Gate: g, Now: clk.Now, Tick: clk.Tick})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	brokertest.Eventually(t, 5*time.Second, "first health check", func() bool { return !s.State().LastCheck.IsZero() })
	return s, clk
}

func TestFeedsOnlyWhileHealthy(t *testing.T) {
	g := newGate()
	f := &fakeFeeder{name: "hw", timeout: 10 * time.Second}
	s, clk := start(t, g, f)
	if clk.Period() != 5*time.Second {
		t.Errorf("period %v, want half the 10s timeout", clk.Period())
	}
	if n := f.feeds.Load(); n != 1 {
		t.Fatalf("%d feeds after the first check, want 1", n)
	}
	clk.Advance(5 * time.Second)
	clk.Advance(5 * time.Second)
	// The second Advance returned, so the first tick's check is done.
	if n := f.feeds.Load(); n < 2 {
		t.Fatalf("%d feeds after a tick, want 2", n)
	}

	g.set(false, "storage: commit failed: input/output error")
	clk.Advance(5 * time.Second) // the tick that sees the failure
	clk.Advance(5 * time.Second)
	clk.Advance(5 * time.Second) // all earlier checks finished
	fed := f.feeds.Load()
	brokertest.Eventually(t, 5*time.Second, "not feeding", func() bool { return !s.State().Feeding })
	for range 5 {
		clk.Advance(5 * time.Second)
	}
	clk.Advance(5 * time.Second)
	if n := f.feeds.Load(); n != fed {
		t.Errorf("fed %d times while the gate failed", n-fed)
	}
	st := s.State()
	if st.Feeding || st.Reason != "storage: commit failed: input/output error" {
		t.Errorf("State = %+v", st)
	}

	g.set(true, "")
	clk.Advance(5 * time.Second)
	clk.Advance(5 * time.Second)
	if n := f.feeds.Load(); n == fed {
		t.Error("feeding did not resume when the gate passed again")
	}
	if st := s.State(); !st.Feeding || st.Reason != "" || st.LastFeed != st.LastCheck {
		t.Errorf("State = %+v", st)
	}
}

// TestFeedingStopsWithinOnePeriod counts ticks exactly: the first tick
// after the gate fails feeds nothing.
func TestFeedingStopsWithinOnePeriod(t *testing.T) {
	g := newGate()
	f := &fakeFeeder{name: "hw", timeout: 2 * time.Second}
	_, clk := start(t, g, f)
	clk.Advance(time.Second)
	clk.Advance(time.Second)
	// The second Advance returning means its tick was received, not that
	// its check is done: wait for its feed (the first check's, then one a
	// tick), so that it cannot land after the gate fails.
	brokertest.Eventually(t, 5*time.Second, "the second tick's feed", func() bool { return f.feeds.Load() == 3 })
	before := f.feeds.Load()
	g.set(false, "broker: liveness probe timed out")
	clk.Advance(time.Second)
	clk.Advance(time.Second)
	if got := g.nCalls(); got < 4 {
		t.Fatalf("gate called %d times", got)
	}
	if n := f.feeds.Load(); n != before {
		t.Errorf("%d feeds after the gate failed", n-before)
	}
}

func TestGateBlocked(t *testing.T) {
	g := newGate()
	f := &fakeFeeder{name: "hw", timeout: 10 * time.Second}
	s, clk := start(t, g, f)
	fed := f.feeds.Load()

	block := make(chan struct{})
	g.mu.Lock()
	g.block = block
	g.mu.Unlock()
	clk.Advance(5 * time.Second)
	<-g.entered
	if st := s.State(); !st.Feeding {
		t.Errorf("a check that just started already counts as failed: %+v", st)
	}
	// The goroutine is stuck in the gate, so no tick can be delivered;
	// time moves on regardless.
	clk.Move(6 * time.Second)
	st := s.State()
	if st.Feeding || !strings.Contains(st.Reason, "has not answered for 6s") {
		t.Errorf("State with a blocked gate = %+v", st)
	}
	if n := f.feeds.Load(); n != fed {
		t.Errorf("fed %d times while the gate was blocked", n-fed)
	}

	// Close does not wait for the stuck gate, and nothing is fed after.
	closed := make(chan error)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Error(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close waited for a blocked gate")
	}
	close(block)
	brokertest.Eventually(t, 5*time.Second, "supervisor goroutine exits", func() bool {
		select {
		case <-s.exited:
			return true
		default:
			return false
		}
	})
	if n := f.feeds.Load(); n != fed {
		t.Errorf("fed %d times after Close", n-fed)
	}
	if f.closed.Load() != 1 {
		t.Errorf("feeder closed %d times", f.closed.Load())
	}
}

func TestCloseOrderAndIdempotence(t *testing.T) {
	var order []string
	var mu sync.Mutex
	a := &fakeFeeder{name: "device", timeout: 10 * time.Second, order: &order, mu: &mu}
	b := &fakeFeeder{name: "systemd", order: &order, mu: &mu}
	s, _ := start(t, newGate(), a, b)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if strings.Join(order, ",") != "systemd,device" {
		t.Errorf("closed in order %v, want reverse of feeding order", order)
	}
	if st := s.State(); st.Feeding || st.Reason != "stopped" {
		t.Errorf("State after Close = %+v", st)
	}
	if err := s.Ready(); err == nil {
		t.Error("Ready after Close succeeded")
	}
}

func TestFeedErrorLoggedOnce(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	clk := hwtest.NewClock(t)
	f := &fakeFeeder{name: "ic", timeout: 2 * time.Second}
	f.fail.Store(true)
	s, err := New(Options{
		Feeders: []Feeder{f}, Gate: newGate(), Now: clk.Now, Tick: clk.Tick,
		Logger: slog.New(slog.NewTextHandler(lockedWriter{&buf, &mu}, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for range 4 {
		clk.Advance(time.Second)
	}
	clk.Advance(time.Second)
	mu.Lock()
	log := buf.String()
	mu.Unlock()
	if n := strings.Count(log, "feed failed"); n != 1 {
		t.Errorf("%d feed failures logged, want 1:\n%s", n, log)
	}
	if st := s.State(); len(st.Errors) != 1 || !strings.Contains(st.Errors[0], "ic: bus error") {
		t.Errorf("State.Errors = %q", st.Errors)
	}
	f.fail.Store(false)
	clk.Advance(time.Second)
	clk.Advance(time.Second)
	if st := s.State(); len(st.Errors) != 0 {
		t.Errorf("State.Errors after recovery = %q", st.Errors)
	}
}

type lockedWriter struct {
	b  *bytes.Buffer
	mu *sync.Mutex
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func TestChoosePeriod(t *testing.T) {
	f := func(d time.Duration) Feeder { return &fakeFeeder{name: "f" + d.String(), timeout: d} }
	tests := []struct {
		feeders []Feeder
		want    time.Duration
	}{
		{nil, DefaultPeriod},
		{[]Feeder{f(0)}, DefaultPeriod},
		{[]Feeder{f(15 * time.Second), f(0), f(4 * time.Second)}, 2 * time.Second},
		{[]Feeder{f(1600 * time.Millisecond)}, 800 * time.Millisecond},
	}
	for _, tt := range tests {
		if got := choosePeriod(tt.feeders); got != tt.want {
			t.Errorf("choosePeriod(%d feeders) = %v, want %v", len(tt.feeders), got, tt.want)
		}
	}
}

func TestNoFeeders(t *testing.T) {
	s, err := New(Options{Gate: newGate()})
	if err != nil {
		t.Fatal(err)
	}
	if st := s.State(); st.Feeding || st.Reason != "no watchdog configured" {
		t.Errorf("State = %+v", st)
	}
	if err := s.Ready(); err != nil {
		t.Error(err)
	}
	if err := s.Close(); err != nil {
		t.Error(err)
	}
	if _, err := New(Options{}); err == nil {
		t.Error("New without a Gate succeeded")
	}
}
