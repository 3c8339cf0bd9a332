package web

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/linemq/linemq/broker"
)

// TestBridges: /api/v1/bridges, the bridges of /api/v1/status and the
// linemq_bridge_* families carry Options.Bridges as given, one series per
// bridge; a gateway without bridges shows an empty list and exports none.
func TestBridges(t *testing.T) {
	b, err := broker.New(broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })

	for name, f := range map[string]func() []BridgeStats{"nil": nil, "empty": func() []BridgeStats { return nil }} {
		_, base := startWeb(t, Options{Broker: b, Bridges: f})
		code, body := get(t, base+"/api/v1/bridges")
		if code != 200 || strings.TrimSpace(string(body)) != `{"bridges":[]}` {
			t.Errorf("%s: /api/v1/bridges: %d %s", name, code, body)
		}
		var st map[string]json.RawMessage
		getJSON(t, base+"/api/v1/status", &st)
		if string(st["bridges"]) != "[]" {
			t.Errorf("%s: status bridges %s, want []", name, st["bridges"])
		}
		for k := range metricLines(t, base+"/metrics") {
			if strings.HasPrefix(k, "linemq_bridge_") {
				t.Errorf("%s: gateway without bridges exports %s", name, k)
			}
		}
	}

	since := time.Date(2026, 12, 1, 6, 0, 0, 0, time.UTC)
	errAt := time.Date(2026, 12, 1, 6, 30, 15, 500_000_000, time.UTC)
	bs := []BridgeStats{
		{
			Name: "site", State: "connected", Since: since, Remote: []string{"site-a:1883", "site-b:1883"}, Protocol: 5,
			Queued: 12, QueuedBytes: 3456, OldestQueued: 1500 * time.Millisecond, InFlight: 3,
			Sent: 1000, Received: 20, Enqueued: 1012, Dropped: 1, Expired: 2, Rejected: 3, DroppedQoS0: 4, Loops: 5, Retries: 6,
			SentRate: 12.345, ReceivedRate: 0.5,
		},
		{
			Name: "cloud", State: "down", Since: since.Add(time.Hour), Remote: []string{"tls://mqtt.example.com:8883"}, Protocol: 311,
			Queued: 40000, QueuedBytes: 12 << 20, OldestQueued: 90 * time.Minute,
			Enqueued: 40000, Retries: 17, LastError: "connect: dial tcp: i/o timeout", LastErrorAt: errAt,
		},
	}
	_, base := startWeb(t, Options{Broker: b, Bridges: func() []BridgeStats { return bs }})

	wantJSON := `{"bridges":[
	 {"name":"site","state":"connected","since":"2026-12-01T06:00:00Z","remote":["site-a:1883","site-b:1883"],"protocol":5,
	  "queued":12,"queued_bytes":3456,"oldest_queued_seconds":1.5,"in_flight":3,
	  "sent":1000,"received":20,"enqueued":1012,"dropped":1,"expired":2,"rejected":3,"dropped_qos0":4,"loops":5,"retries":6,
	  "sent_rate":12.35,"received_rate":0.5,"last_error":"","last_error_at":null},
	 {"name":"cloud","state":"down","since":"2026-12-01T07:00:00Z","remote":["tls://mqtt.example.com:8883"],"protocol":311,
	  "queued":40000,"queued_bytes":12582912,"oldest_queued_seconds":5400,"in_flight":0,
	  "sent":0,"received":0,"enqueued":40000,"dropped":0,"expired":0,"rejected":0,"dropped_qos0":0,"loops":0,"retries":17,
	  "sent_rate":0,"received_rate":0,"last_error":"connect: dial tcp: i/o timeout","last_error_at":"2026-12-01T06:30:15.5Z"}]}`
	var want, got any
	if err := json.Unmarshal([]byte(wantJSON), &want); err != nil {
		t.Fatal(err)
	}
	code, body := get(t, base+"/api/v1/bridges")
	if code != 200 {
		t.Fatalf("/api/v1/bridges: %d %s", code, body)
	}
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("/api/v1/bridges:\n got %s\nwant %s", body, wantJSON)
	}
	var st map[string]any
	getJSON(t, base+"/api/v1/status", &st)
	if !reflect.DeepEqual(st["bridges"], want.(map[string]any)["bridges"]) {
		t.Errorf("status bridges: %v", st["bridges"])
	}

	m := metricLines(t, base+"/metrics")
	wantM := map[string]string{
		`linemq_bridge_up{bridge="site"}`:                            "1",
		`linemq_bridge_state{bridge="site",state="connecting"}`:      "0",
		`linemq_bridge_state{bridge="site",state="connected"}`:       "1",
		`linemq_bridge_state{bridge="site",state="down"}`:            "0",
		`linemq_bridge_state{bridge="site",state="stopped"}`:         "0",
		`linemq_bridge_queued_messages{bridge="site"}`:               "12",
		`linemq_bridge_queued_bytes{bridge="site"}`:                  "3456",
		`linemq_bridge_oldest_queued_seconds{bridge="site"}`:         "1.5",
		`linemq_bridge_in_flight{bridge="site"}`:                     "3",
		`linemq_bridge_sent_total{bridge="site"}`:                    "1000",
		`linemq_bridge_received_total{bridge="site"}`:                "20",
		`linemq_bridge_enqueued_total{bridge="site"}`:                "1012",
		`linemq_bridge_dropped_total{bridge="site"}`:                 "1",
		`linemq_bridge_expired_total{bridge="site"}`:                 "2",
		`linemq_bridge_rejected_total{bridge="site"}`:                "3",
		`linemq_bridge_dropped_qos0_total{bridge="site"}`:            "4",
		`linemq_bridge_loops_total{bridge="site"}`:                   "5",
		`linemq_bridge_retries_total{bridge="site"}`:                 "6",
		`linemq_bridge_last_error_timestamp_seconds{bridge="site"}`:  "0",
		`linemq_bridge_up{bridge="cloud"}`:                           "0",
		`linemq_bridge_state{bridge="cloud",state="connecting"}`:     "0",
		`linemq_bridge_state{bridge="cloud",state="connected"}`:      "0",
		`linemq_bridge_state{bridge="cloud",state="down"}`:           "1",
		`linemq_bridge_state{bridge="cloud",state="stopped"}`:        "0",
		`linemq_bridge_queued_messages{bridge="cloud"}`:              "40000",
		`linemq_bridge_queued_bytes{bridge="cloud"}`:                 "1.2582912e+07",
		`linemq_bridge_oldest_queued_seconds{bridge="cloud"}`:        "5400",
		`linemq_bridge_in_flight{bridge="cloud"}`:                    "0",
		`linemq_bridge_sent_total{bridge="cloud"}`:                   "0",
		`linemq_bridge_received_total{bridge="cloud"}`:               "0",
		`linemq_bridge_enqueued_total{bridge="cloud"}`:               "40000",
		`linemq_bridge_dropped_total{bridge="cloud"}`:                "0",
		`linemq_bridge_expired_total{bridge="cloud"}`:                "0",
		`linemq_bridge_rejected_total{bridge="cloud"}`:               "0",
		`linemq_bridge_dropped_qos0_total{bridge="cloud"}`:           "0",
		`linemq_bridge_loops_total{bridge="cloud"}`:                  "0",
		`linemq_bridge_retries_total{bridge="cloud"}`:                "17",
		`linemq_bridge_last_error_timestamp_seconds{bridge="cloud"}`: "1.7961066155e+09",
	}
	for k, v := range wantM {
		if g, ok := m[k]; !ok {
			t.Errorf("%s missing", k)
		} else if g != v {
			t.Errorf("%s = %s, want %s", k, g, v)
		}
	}
	for k := range m {
		if _, ok := wantM[k]; strings.HasPrefix(k, "linemq_bridge_") && !ok {
			t.Errorf("unexpected series %s", k)
		}
	}
}
