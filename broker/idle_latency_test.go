package broker_test

import (
	"slices"
	"testing"
	"time"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/broker/packet"
)

// TestIdleToHandledLatency measures how long the first packet on an idle
// (parked) connection takes to be answered, against a packet on an active
// one, with a thousand other idle connections parked beside it. It
// asserts nothing about time (figures belong in benchmarks): it logs
// p50/p99 of both, for docs/benchmarks.md, and checks that every PINGREQ
// is answered.
func TestIdleToHandledLatency(t *testing.T) {
	if testing.Short() {
		t.Skip("measurement")
	}
	srv, addr := brokertest.RunServer(t, broker.Options{IdleParkAfter: 20 * time.Millisecond})
	for i := range 1000 {
		c, _ := brokertest.Connect(t, addr, rawV5("idle-"+string(rune('a'+i%26))+string(rune('0'+i/26%10))+string(rune('0'+i/260)), true))
		_ = c
	}
	probe, _ := brokertest.Connect(t, addr, rawV5("probe", true))
	ping := func() time.Duration {
		start := time.Now()
		probe.Send(packet.AppendPingreq(nil))
		probe.Expect(packet.PINGRESP, nil)
		return time.Since(start)
	}
	var idle, active []time.Duration
	for range 50 {
		brokertest.Eventually(t, 5*time.Second, "probe parked", func() bool { return srv.Stats().ClientsParked == 1001 })
		idle = append(idle, ping())
		active = append(active, ping())
	}
	pct := func(d []time.Duration, p int) time.Duration {
		slices.Sort(d)
		return d[len(d)*p/100]
	}
	t.Logf("PINGREQ to PINGRESP with 1,000 parked: idle p50 %v p99 %v; active p50 %v p99 %v",
		pct(idle, 50), pct(idle, 99), pct(active, 50), pct(active, 99))
}
