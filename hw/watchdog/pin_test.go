package watchdog

import (
	"sync"
	"testing"
	"time"

	"periph.io/x/conn/v3/gpio"
	"periph.io/x/conn/v3/gpio/gpiotest"
)

// recPin records every level written to a gpiotest pin.
type recPin struct {
	*gpiotest.Pin
	mu     sync.Mutex
	writes []gpio.Level
}

func (p *recPin) Out(l gpio.Level) error {
	p.mu.Lock()
	p.writes = append(p.writes, l)
	p.mu.Unlock()
	return p.Pin.Out(l)
}

func (p *recPin) trace() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	b := make([]byte, len(p.writes))
	for i, l := range p.writes {
		b[i] = "LH"[b2i(bool(l))]
	}
	return string(b)
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestPinToggles(t *testing.T) {
	p := &recPin{Pin: &gpiotest.Pin{N: "GPIO27", Num: 27, L: gpio.High, P: gpio.PullDown}}
	w, err := NewPin(p, PinOptions{Timeout: 1600 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	g := newGate()
	s, clk := start(t, g, w)
	if clk.Period() != 800*time.Millisecond {
		t.Errorf("period %v, want half the IC's timeout", clk.Period())
	}
	clk.Advance(800 * time.Millisecond)
	clk.Advance(800 * time.Millisecond)
	g.set(false, "broker: liveness probe blocked")
	clk.Advance(800 * time.Millisecond)
	clk.Advance(800 * time.Millisecond)
	before := p.trace()
	clk.Advance(800 * time.Millisecond)
	clk.Advance(800 * time.Millisecond)
	if got := p.trace(); got != before {
		t.Errorf("edges while the gate failed: %q, then %q", before, got)
	}
	// Low at start, then one edge per feed: the first check and at least
	// the first tick's.
	if len(before) < 3 || before[:3] != "LHL" {
		t.Errorf("pin writes %q, want L then alternating edges", before)
	}
	s.Close()
	if got := p.trace(); got != before {
		t.Errorf("Close drove the pin: %q", got)
	}
	if p.Pull() != gpio.Float {
		t.Errorf("Close left the pin with pull %v, want a floating input", p.Pull())
	}
}

func TestPinPulses(t *testing.T) {
	p := &recPin{Pin: &gpiotest.Pin{N: "GPIO27", Num: 27}}
	w, err := NewPin(p, PinOptions{Timeout: 10 * time.Second, Pulse: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var slept []time.Duration
	w.sleep = func(d time.Duration) { slept = append(slept, d) }
	for range 2 {
		if err := w.Feed(); err != nil {
			t.Fatal(err)
		}
	}
	if got := p.trace(); got != "LHLHL" {
		t.Errorf("pin writes %q, want L, then a pulse per feed", got)
	}
	if len(slept) != 2 || slept[0] != time.Millisecond {
		t.Errorf("pulse widths %v", slept)
	}
	if _, err := NewPin(p, PinOptions{Timeout: time.Second, Pulse: time.Second}); err == nil {
		t.Error("a pulse as long as the timeout was accepted")
	}
}
