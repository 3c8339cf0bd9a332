package web

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/internal/mqtttest"
)

// TestWedgedWorker runs the incident the status page exists for: three
// workers share a stream, one stops acknowledging while its connection
// stays up. The API must show that member, and its group, degraded, with
// the reason, and /metrics must agree.
func TestWedgedWorker(t *testing.T) {
	srv, addr := brokertest.RunServer(t, broker.Options{
		Shares: broker.ShareOptions{Groups: []broker.GroupPolicy{{Name: "report-prep", MinMembers: 3}}},
	})
	s, base := startWeb(t, Options{
		Broker: srv, SampleInterval: 20 * time.Millisecond,
		Degraded: Thresholds{WindowFull: 300 * time.Millisecond},
	})
	s.Start()
	workers := make([]*mqtttest.V5, 3)
	for i, id := range []string{"w1", "w2", "w3"} {
		workers[i], _ = mqtttest.DialV5Opts(t, addr, connect(id, 5, 0), mqtttest.Options{CountOnly: true, ManualAck: true})
		workers[i].Sub("$share/report-prep/plant/+/telemetry", 1)
	}
	stop := publishLoop(t, addr, "plant/l3/telemetry", 2*time.Millisecond)
	defer stop()

	brokertest.Eventually(t, 10*time.Second, "every worker busy", func() bool {
		return workers[0].Received.Load() > 10 && workers[1].Received.Load() > 10 && workers[2].Received.Load() > 10
	})
	var gs groupsJSON
	getJSON(t, base+"/api/v1/groups/report-prep", &gs)
	if g := gs.Groups[0]; g.State != "ok" || g.MemberCount != 3 {
		t.Fatalf("before: %+v", g)
	}

	workers[2].Acking.Store(false)
	var g groupJSON
	brokertest.Eventually(t, 10*time.Second, "w3 shown degraded", func() bool {
		getJSON(t, base+"/api/v1/groups/report-prep", &gs)
		g = gs.Groups[0]
		return g.State == "degraded"
	})
	if len(g.Reasons) != 1 || !strings.HasPrefix(g.Reasons[0], "member w3: send window full for ") {
		t.Fatalf("reasons %q", g.Reasons)
	}
	for _, m := range g.Members {
		if (m.ClientID == "w3") != (m.State == "degraded") {
			t.Errorf("member %s state %s %q", m.ClientID, m.State, m.Reasons)
		}
		if m.ClientID == "w3" && (m.SessionInFlight != 5 || m.ReceiveMaximum != 5 || m.WindowFullSeconds < 0.3) {
			t.Errorf("w3 %+v", m)
		}
	}
	// The others still get the stream.
	w1 := workers[0].Received.Load()
	brokertest.Eventually(t, 10*time.Second, "w1 still receiving", func() bool { return workers[0].Received.Load() > w1+10 })
	m := metricLines(t, base+"/metrics")
	if v := m[`linemq_share_member_degraded{client="w3",filter="plant/+/telemetry",group="report-prep"}`]; v != "1" {
		t.Errorf("member degraded metric %q", v)
	}
	if v := m[`linemq_share_group_degraded{filter="plant/+/telemetry",group="report-prep"}`]; v != "1" {
		t.Errorf("group degraded metric %q", v)
	}
}

// publishLoop publishes QoS 1 messages to topic every period until the
// returned function is called (which waits for the loop to end).
func publishLoop(t testing.TB, addr, topic string, period time.Duration) func() {
	t.Helper()
	p, _ := mqtttest.DialV5Opts(t, addr, connect("publisher-"+strings.ReplaceAll(topic, "/", "-"), 0, 0), mqtttest.Options{CountOnly: true})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := p.Publish(pctx, pahoPublish(topic))
			pcancel()
			if err != nil && ctx.Err() == nil {
				t.Errorf("publish: %v", err)
				return
			}
		}
	}()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); wg.Wait() }) }
	t.Cleanup(stop)
	return stop
}
