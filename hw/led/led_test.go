package led

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"periph.io/x/conn/v3/gpio"
	"periph.io/x/conn/v3/gpio/gpiotest"

	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/hw/internal/hwtest"
)

// recPin is a gpiotest pin that also records every level written to it, so
// a test sees each edge and any write that was not one.
type recPin struct {
	*gpiotest.Pin
	mu     sync.Mutex
	writes []gpio.Level
}

func newRecPin(name string) *recPin {
	return &recPin{Pin: &gpiotest.Pin{N: name, Num: 17}}
}

func (p *recPin) Out(l gpio.Level) error {
	p.mu.Lock()
	p.writes = append(p.writes, l)
	p.mu.Unlock()
	return p.Pin.Out(l)
}

func (p *recPin) nwrites() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.writes)
}

// newGroup returns a Group whose ticker never ticks by itself: tests call
// step directly, one Step at a time, or Advance the returned clock.
func newGroup(t *testing.T) (*Group, *hwtest.Clock) {
	t.Helper()
	clk := hwtest.NewClock(t)
	g := NewGroup(Options{Tick: clk.Tick})
	t.Cleanup(func() { g.Close() })
	if clk.Period() != Step {
		t.Fatalf("ticker period %v, want %v", clk.Period(), Step)
	}
	return g, clk
}

// trace runs n Steps and returns the pin's level after each: '#' for lit
// (the LED's active level), '.' for dark.
func trace(g *Group, p *recPin, lit gpio.Level, n int) string {
	var b strings.Builder
	for range n {
		g.step()
		if p.Read() == lit {
			b.WriteByte('#')
		} else {
			b.WriteByte('.')
		}
	}
	return b.String()
}

// edges counts the level changes in a trace, starting from dark.
func edges(s string) int {
	n, prev := 0, byte('.')
	for i := range len(s) {
		if s[i] != prev {
			n++
			prev = s[i]
		}
	}
	return n
}

func TestPatterns(t *testing.T) {
	tests := []struct {
		p    Pattern
		want string // two cycles or more, one character per 50 ms Step
	}{
		{Off, strings.Repeat(".", 30)},
		{On, strings.Repeat("#", 30)},
		{SlowBlink, "##########..........##########.........."},
		{FastBlink, "##..##..##..##..##..##.."},
		{Heartbeat, "##...##................." + "##...##................." + "##"},
	}
	for _, tt := range tests {
		for _, activeLow := range []bool{false, true} {
			name := tt.p.String()
			lit := gpio.High
			if activeLow {
				name += "/active low"
				lit = gpio.Low
			}
			t.Run(name, func(t *testing.T) {
				g, _ := newGroup(t)
				pin := newRecPin("GPIO17")
				light, err := NewGPIO(pin, activeLow)
				if err != nil {
					t.Fatal(err)
				}
				if pin.Read() == lit {
					t.Fatal("NewGPIO left the LED lit")
				}
				g.Add("status", light).Set(tt.p)
				before := pin.nwrites()
				got := trace(g, pin, lit, len(tt.want))
				if got != tt.want {
					t.Errorf("\n got %s\nwant %s", got, tt.want)
				}
				// One write per edge, plus the first Step's write, which
				// makes the pin's level the Group's even if someone else
				// changed it after NewGPIO.
				if w, e := pin.nwrites()-before, edges(got); w != e && w != e+1 {
					t.Errorf("%d writes for %d edges", w, e)
				}
			})
		}
	}
}

func TestPatternChangeStartsAtTheBeginning(t *testing.T) {
	g, _ := newGroup(t)
	pin := newRecPin("GPIO27")
	light, _ := NewGPIO(pin, false)
	l := g.Add("status", light)
	l.Set(SlowBlink)
	got := trace(g, pin, gpio.High, 12)
	l.Set(FastBlink) // mid-cycle: the new pattern still starts lit
	got += "|" + trace(g, pin, gpio.High, 6)
	l.Set(FastBlink) // the same pattern again does not restart it
	got += "|" + trace(g, pin, gpio.High, 4)
	if want := "##########..|##..##|..##"; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
	if l.Pattern() != FastBlink {
		t.Errorf("Pattern() = %v", l.Pattern())
	}
}

func TestFlicker(t *testing.T) {
	t.Run("over off", func(t *testing.T) {
		g, _ := newGroup(t)
		pin := newRecPin("GPIO22")
		light, _ := NewGPIO(pin, false)
		l := g.Add("traffic", light)
		var got strings.Builder
		got.WriteString(trace(g, pin, gpio.High, 2))
		l.Count(1)
		got.WriteString("|" + trace(g, pin, gpio.High, 3))
		// A burst is one flicker, not a backlog of a thousand.
		l.Count(1000)
		got.WriteString("|" + trace(g, pin, gpio.High, 4))
		// Steady traffic: a message every Step flutters at half the Step
		// rate, each flicker followed by a Step of the pattern.
		got.WriteString("|")
		for range 6 {
			l.Count(1)
			got.WriteString(trace(g, pin, gpio.High, 1))
		}
		if want := "..|#..|#...|#.#.#."; got.String() != want {
			t.Errorf("got %s, want %s", got.String(), want)
		}
	})
	t.Run("over on", func(t *testing.T) {
		g, _ := newGroup(t)
		pin := newRecPin("GPIO22")
		light, _ := NewGPIO(pin, true)
		l := g.Add("traffic", light)
		l.Set(On)
		l.Count(1)
		if got, want := trace(g, pin, gpio.Low, 3), ".##"; got != want {
			t.Errorf("got %s, want %s", got, want)
		}
	})
	t.Run("every n", func(t *testing.T) {
		g, _ := newGroup(t)
		sim := NewSim()
		l := g.Add("traffic", sim)
		l.SetFlickerEvery(3)
		var got strings.Builder
		for _, n := range []uint64{1, 1, 0, 1, 0, 2, 0, 0, 1, 0} {
			l.Count(n)
			g.step()
			got.WriteByte(".#"[b2i(sim.Lit())])
		}
		if want := "...#....#."; got.String() != want {
			t.Errorf("got %s, want %s", got.String(), want)
		}
		l.SetFlickerEvery(0) // taken as 1
		l.Count(1)
		g.step()
		if !sim.Lit() {
			t.Error("SetFlickerEvery(0) did not flicker on one message")
		}
	})
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestGroupTicks runs the Group's own goroutine from its ticker: each
// expected observation is a change, waited for with a deadline.
func TestGroupTicks(t *testing.T) {
	g, clk := newGroup(t)
	status, traffic := NewSim(), NewSim()
	ls := g.Add("status", status)
	lt := g.Add("traffic", traffic)
	ls.Set(SlowBlink)
	clk.Advance(Step)
	brokertest.Eventually(t, 5*time.Second, "status lit on the first tick", status.Lit)
	for range slowHalf {
		clk.Advance(Step)
	}
	brokertest.Eventually(t, 5*time.Second, "status dark after 500 ms", func() bool { return !status.Lit() })
	// The Group writes the light before it records the level, so the two
	// agree a moment after the light changes, not at once.
	brokertest.Eventually(t, 5*time.Second, "LED.Lit agrees with the light", func() bool { return !ls.Lit() })
	lt.Count(1)
	clk.Advance(Step)
	brokertest.Eventually(t, 5*time.Second, "traffic flickered", func() bool { return traffic.Edges() == 1 })
	clk.Advance(Step)
	brokertest.Eventually(t, 5*time.Second, "traffic dark again", func() bool { return traffic.Edges() == 2 })
	if got := g.LEDs(); len(got) != 2 || got[0].Name() != "status" || got[1].Name() != "traffic" {
		t.Errorf("LEDs() = %v", got)
	}
}

func TestClose(t *testing.T) {
	g, clk := newGroup(t)
	high, low := newRecPin("GPIO17"), newRecPin("GPIO27")
	lh, _ := NewGPIO(high, false)
	ll, _ := NewGPIO(low, true)
	sim := NewSim()
	for name, l := range map[string]Light{"high": lh, "low": ll, "sim": sim} {
		g.Add(name, l).Set(On)
	}
	g.step()
	if high.Read() != gpio.High || low.Read() != gpio.Low || !sim.Lit() {
		t.Fatal("LEDs not lit before Close")
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if high.Read() != gpio.Low || low.Read() != gpio.High || sim.Lit() || !sim.Closed() {
		t.Error("Close left an LED lit")
	}
	if !clk.Stopped() {
		t.Error("Close did not stop the ticker")
	}
	if err := g.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	late := NewSim()
	g.Add("late", late).Set(On)
	if !late.Closed() {
		t.Error("Add after Close did not close the light")
	}
}

// failing is a Light whose Set fails while broken is set.
type failing struct {
	mu     sync.Mutex
	broken bool
	sets   int
}

func (f *failing) Set(bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sets++
	if f.broken {
		return errors.New("i2c: no ack")
	}
	return nil
}

func (f *failing) Close() error { return nil }

func TestFailingLightLogsOnce(t *testing.T) {
	var buf bytes.Buffer
	clk := hwtest.NewClock(t)
	g := NewGroup(Options{Tick: clk.Tick, Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	defer g.Close()
	f := &failing{broken: true}
	l := g.Add("status", f)
	l.Set(FastBlink)
	for range 10 {
		g.step()
	}
	if n := strings.Count(buf.String(), "cannot set"); n != 1 {
		t.Errorf("%d warnings, want 1:\n%s", n, buf.String())
	}
	if f.sets != 10 {
		t.Errorf("%d attempts in 10 Steps; a failed write should be retried every Step", f.sets)
	}
	f.broken = false
	g.step()
	if !strings.Contains(buf.String(), "works again") {
		t.Errorf("recovery not logged:\n%s", buf.String())
	}
}

func TestPatternString(t *testing.T) {
	if got := SlowBlink.String(); got != "slow blink" {
		t.Errorf("SlowBlink.String() = %q", got)
	}
	if got := Pattern(42).String(); got != "Pattern(42)" {
		t.Errorf("Pattern(42).String() = %q", got)
	}
}
