package broker

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestProbe: a live broker answers its liveness probe, repeatedly, without
// it showing in the client-facing figures; a wedged one (its server lock
// held, as by a deadlock) fails the probe by its deadline instead of being
// assumed alive.
func TestProbe(t *testing.T) {
	srv, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := srv.Probe(ctx); err != nil {
			t.Fatalf("probe: %v", err)
		}
		cancel()
	}
	if st := srv.Stats(); st.Subscriptions != 0 || st.Queued != 0 || st.MessagesRouted != 0 {
		t.Fatalf("probes show in the figures: %+v", st)
	}

	srv.mu.Lock()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	err = srv.Probe(ctx)
	cancel()
	srv.mu.Unlock()
	if !errors.Is(err, ErrProbeTimeout) {
		t.Fatalf("probe of a wedged broker: %v, want ErrProbeTimeout", err)
	}
}
