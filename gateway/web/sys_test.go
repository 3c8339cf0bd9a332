package web

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/internal/mqtttest"
)

// TestSysTopics subscribes to $SYS/# like an MQTT explorer would and
// checks each figure against the traffic.
func TestSysTopics(t *testing.T) {
	tr := newTraffic(t, nil)
	clk := brokertest.NewFakeClock()
	s, _ := startWeb(t, Options{Broker: tr.srv, Version: "1.2.3", Clock: clk})
	explorer, _ := mqtttest.DialV5Opts(t, tr.addr, connect("explorer", 0, 0), mqtttest.Options{})
	explorer.Sub("$SYS/#", 0)
	clk.Advance(75 * time.Second)

	topics := len(s.sysValues(clk.Now()))
	s.publishSys(clk.Now())
	got := make(map[string]string)
	brokertest.Eventually(t, 5*time.Second, "every $SYS topic received", func() bool {
		return len(kept(explorer, got)) == topics
	})
	n := tr.telemetry + tr.noise
	tel := strconv.Itoa(tr.telemetry)
	want := map[string]string{
		"$SYS/broker/version":                              "linemq 1.2.3",
		"$SYS/broker/uptime":                               "75 seconds",
		"$SYS/broker/clients/connected":                    "5",
		"$SYS/broker/clients/total":                        "5",
		"$SYS/broker/clients/disconnected":                 "0",
		"$SYS/broker/messages/received":                    strconv.Itoa(n),
		"$SYS/broker/messages/sent":                        strconv.Itoa(2 * tr.telemetry),
		"$SYS/broker/publish/messages/received":            strconv.Itoa(n),
		"$SYS/broker/publish/messages/sent":                strconv.Itoa(2 * tr.telemetry),
		"$SYS/broker/publish/messages/dropped":             "0",
		"$SYS/broker/bytes/received":                       strconv.Itoa(n * tr.payloadLen),
		"$SYS/broker/subscriptions/count":                  "4", // hist, the explorer, two workers
		"$SYS/broker/retained messages/count":              "0",
		"$SYS/broker/shared/count":                         "1",
		"$SYS/broker/shared/workers/members":               "2",
		"$SYS/broker/shared/workers/degraded":              "0",
		"$SYS/broker/shared/workers/messages/received":     tel,
		"$SYS/broker/shared/workers/messages/delivered":    tel,
		"$SYS/broker/shared/workers/messages/acknowledged": tel,
		"$SYS/broker/shared/workers/queued":                "0",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
}

// TestSysInterval checks that Start publishes $SYS every SysInterval and
// that Shutdown stops the publisher (it waits for its goroutine).
func TestSysInterval(t *testing.T) {
	srv, addr := brokertest.RunServer(t, broker.Options{})
	s, _ := startWeb(t, Options{Broker: srv, SysInterval: 20 * time.Millisecond})
	c, _ := mqtttest.DialV5Opts(t, addr, connect("explorer", 0, 0), mqtttest.Options{CountOnly: true})
	c.Sub("$SYS/broker/uptime", 0)
	s.Start()
	brokertest.Eventually(t, 5*time.Second, "three $SYS rounds", func() bool { return c.Received.Load() >= 3 })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}
