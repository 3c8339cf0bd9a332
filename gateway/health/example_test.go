package health_test

import (
	"context"
	"fmt"
	"time"

	"github.com/linemq/linemq/gateway/health"
)

// The gateway's wiring: the broker's liveness probe is polled (a wedged
// router then fails it by its timeout), the store pushes its state as
// commits succeed or fail, and the watchdog feeds through Healthy.
func ExampleRegistry() {
	reg := health.New(health.Options{})
	defer reg.Close()

	// (*broker.Server).Probe in the gateway; here one that answers only
	// once the example has printed, so the output is always the same.
	printed := make(chan struct{})
	probe := func(ctx context.Context) error {
		select {
		case <-printed:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := reg.Poll("broker", 5*time.Second, 2*time.Second, probe); err != nil {
		panic(err)
	}
	reg.Set("storage", health.Degraded, "last commit took 3.2s")

	changes, stop := reg.Subscribe(16)
	defer stop()
	go func() {
		for c := range changes {
			_ = c // drive the status LED from c.Overall
		}
	}()

	ok, reason := reg.Healthy()
	fmt.Println(ok, reason)
	close(printed)
	// Output: true broker: degraded: no answer yet; storage: degraded: last commit took 3.2s
}
