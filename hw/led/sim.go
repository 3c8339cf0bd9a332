package led

import "sync"

// Sim is a simulated lamp: it records its state and counts its edges. It
// stands in for real LEDs on a machine without GPIO, so the rest of the
// gateway (and its status page) work the same, and in tests. Unlike the
// other lights it is safe for concurrent use, so a test can read it while
// a Group drives it.
type Sim struct {
	mu     sync.Mutex
	lit    bool
	edges  int
	closed bool
}

// NewSim returns a dark simulated lamp.
func NewSim() *Sim { return &Sim{} }

// Set implements Light.
func (s *Sim) Set(on bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if on != s.lit {
		s.lit = on
		s.edges++
	}
	return nil
}

// Close implements Light: the lamp goes dark.
func (s *Sim) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed && s.lit {
		s.lit = false
		s.edges++
	}
	s.closed = true
	return nil
}

// Lit reports whether the lamp is lit.
func (s *Sim) Lit() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lit
}

// Edges returns how many times the lamp changed state.
func (s *Sim) Edges() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.edges
}

// Closed reports whether Close was called.
func (s *Sim) Closed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// String implements fmt.Stringer.
func (s *Sim) String() string { return "simulated" }
