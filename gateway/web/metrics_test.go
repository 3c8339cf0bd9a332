package web

import (
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/broker/packet"
	"github.com/linemq/linemq/gateway/health"
	"github.com/linemq/linemq/internal/mqtttest"
)

func TestMetricsMatchTraffic(t *testing.T) {
	tracker := NewTracker()
	tr := newTraffic(t, tracker)
	reg := health.New(health.Options{})
	reg.Set("broker", health.OK, "")
	reg.Set("storage", health.Degraded, "slow")
	s, base := startWeb(t, Options{
		Broker: tr.srv, Health: reg, Tracker: tracker, NodeID: "gw1", Version: "1.2.3",
		Storage: func() StorageStats { return StorageStats{PageBytesWritten: 8192, Commits: 2} },
	})
	s.SetReady(true)

	m := metricLines(t, base+"/metrics")
	n := tr.telemetry + tr.noise
	tel := tr.telemetry
	group := `{filter="plant/+/telemetry",group="workers"}`
	member := func(id string) string { return `{client="` + id + `",filter="plant/+/telemetry",group="workers"}` }
	want := map[string]string{
		"linemq_clients_connected":                           "4",
		"linemq_sessions":                                    "4",
		"linemq_subscriptions":                               "1",
		"linemq_share_groups":                                "1",
		"linemq_connects_total":                              "4",
		"linemq_messages_received_total":                     strconv.Itoa(n),
		"linemq_bytes_received_total":                        strconv.Itoa(n * tr.payloadLen),
		"linemq_packets_received_total":                      strconv.Itoa(4 + 3 + n + 2*tel),
		"linemq_messages_delivered_total":                    strconv.Itoa(2 * tel),
		"linemq_messages_acknowledged_total":                 strconv.Itoa(2 * tel),
		`linemq_messages_dropped_total{reason="queue_full"}`: "0",
		`linemq_build_info{goversion="` + runtime.Version() + `",node_id="gw1",version="1.2.3"}`: "1",
		"linemq_ready":                                       "1",
		`linemq_health_state{check="broker"}`:                "0",
		`linemq_health_state{check="storage"}`:               "1",
		"linemq_storage_page_bytes_written_total":            "8192",
		"linemq_storage_commits_total":                       "2",
		"linemq_share_group_members" + group:                 "2",
		"linemq_share_group_min_members" + group:             "2",
		"linemq_share_group_degraded" + group:                "0",
		"linemq_share_group_messages_total" + group:          strconv.Itoa(tel),
		"linemq_share_group_delivered_total" + group:         strconv.Itoa(tel),
		"linemq_share_group_acknowledged_total" + group:      strconv.Itoa(tel),
		"linemq_share_group_queued" + group:                  "0",
		"linemq_share_member_delivered_total" + member("w1"): strconv.FormatInt(tr.w1.Received.Load(), 10),
		"linemq_share_member_delivered_total" + member("w2"): strconv.FormatInt(tr.w2.Received.Load(), 10),
		"linemq_share_member_connected" + member("w1"):       "1",
		"linemq_share_member_receive_maximum" + member("w1"): "65535",
		`linemq_share_series_omitted{kind="group"}`:          "0",
		`linemq_share_series_omitted{kind="member"}`:         "0",
	}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %q, want %q", k, m[k], v)
		}
	}
	for _, k := range []string{"go_goroutines", "process_cpu_seconds_total", "linemq_start_time_seconds"} {
		if _, ok := m[k]; !ok {
			t.Errorf("%s missing", k)
		}
	}

	// A disconnect is counted by its reason code.
	tr.pub.Disconnect(&paho.Disconnect{})
	brokertest.Eventually(t, 5*time.Second, "disconnect counted", func() bool {
		return metricLines(t, base+"/metrics")[`linemq_client_disconnects_total{reason="`+packet.NormalDisconnection.String()+`"}`] == "1"
	})
}

// TestMetricsCardinality checks the bound on per-group and per-member
// series and the count of what was left out.
func TestMetricsCardinality(t *testing.T) {
	srv, addr := brokertest.RunServer(t, broker.Options{})
	for i, g := range []string{"a", "b", "c"} {
		for j := range 2 {
			c, _ := mqtttest.DialV5Opts(t, addr, connect(fmt.Sprintf("%s%d", g, j), 0, 0), mqtttest.Options{CountOnly: true})
			c.Sub(fmt.Sprintf("$share/%s/t/%d", g, i), 0)
		}
	}
	_, base := startWeb(t, Options{Broker: srv, MaxGroupSeries: 2, MaxMemberSeries: 3})
	m := metricLines(t, base+"/metrics")
	groups, members := 0, 0
	for k := range m {
		if strings.HasPrefix(k, "linemq_share_group_members{") {
			groups++
		}
		if strings.HasPrefix(k, "linemq_share_member_connected{") {
			members++
		}
	}
	if groups != 2 || members != 3 {
		t.Errorf("%d groups and %d members exported, want 2 and 3", groups, members)
	}
	if g, mm := m[`linemq_share_series_omitted{kind="group"}`], m[`linemq_share_series_omitted{kind="member"}`]; g != "1" || mm != "3" {
		t.Errorf("omitted groups %s, members %s; want 1 and 3", g, mm)
	}
	if _, ok := m[`linemq_share_group_members{filter="t/2",group="c"}`]; ok {
		t.Error("group c exported past the bound (groups go in name order)")
	}
}
