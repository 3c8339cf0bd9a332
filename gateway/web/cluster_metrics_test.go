package web

import (
	"github.com/linemq/linemq/gateway/peer"
	"strings"
	"testing"
	"time"

	"github.com/linemq/linemq/broker"
)

// TestClusterMetrics: the linemq_cluster_* families carry ClusterStats as
// given, one series per peer, and a standalone gateway exports none.
func TestClusterMetrics(t *testing.T) {
	b, err := broker.New(broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })

	_, standalone := startWeb(t, Options{Broker: b})
	for k := range metricLines(t, standalone+"/metrics") {
		if strings.HasPrefix(k, "linemq_cluster_") {
			t.Errorf("standalone gateway exports %s", k)
		}
	}

	cs := ClusterStats{
		Registry: RegistryStats{
			State: "degraded", Revision: 42, Lag: 3 * time.Millisecond, LagMax: 250 * time.Millisecond,
			LagSum: time.Second, LagCount: 100, Resyncs: 2, WatchLost: 1, Compacted: 1, Reregistrations: 1,
			Txns: 9, TxnOps: 1000, Queued: 3, Nodes: 3, Routes: 4, Members: 5, Sessions: 6,
		},
		Peers: []peer.PeerStats{
			{Node: "gw2", Connected: true, Available: true, Breaker: peer.BreakerClosed, RTT: 2 * time.Millisecond, SentFrames: 10, SentRecords: 100,
				RecvFrames: 11, RecvRecords: 101, Deliveries: 50, Accepted: 45, NotHere: 2, Timeouts: 1, Broken: 1, Refused: 1, RemoteErrors: 0, Dropped: 7},
			{Node: "gw3", Breaker: peer.BreakerOpen, Opens: 4},
		},
	}
	_, base := startWeb(t, Options{Broker: b, ClusterStats: func() ClusterStats { return cs }})
	m := metricLines(t, base+"/metrics")
	want := map[string]string{
		"linemq_cluster_forwards_total":                                       "0",
		"linemq_cluster_delivers_total":                                       "0",
		"linemq_cluster_repicks_total":                                        "0",
		"linemq_cluster_not_here_total":                                       "0",
		"linemq_cluster_redirects_total":                                      "0",
		"linemq_cluster_passed_on_total":                                      "0",
		"linemq_cluster_stalls_total":                                         "0",
		"linemq_cluster_stall_redeliveries_total":                             "0",
		"linemq_cluster_sessions_handed_over_total":                           "0",
		"linemq_cluster_sessions_adopted_total":                               "0",
		"linemq_cluster_retained_from_peers_total":                            "0",
		"linemq_cluster_retained_stale_total":                                 "0",
		"linemq_cluster_unrouted_waiting":                                     "0",
		"linemq_cluster_unrouted_dropped_total":                               "0",
		`linemq_cluster_registry_state{state="degraded"}`:                     "1",
		`linemq_cluster_registry_state{state="healthy"}`:                      "0",
		"linemq_cluster_registry_revision":                                    "42",
		"linemq_cluster_registry_lag_seconds":                                 "0.003",
		"linemq_cluster_registry_lag_max_seconds":                             "0.25",
		"linemq_cluster_registry_lag_seconds_total":                           "1",
		"linemq_cluster_registry_lag_measurements_total":                      "100",
		"linemq_cluster_registry_resyncs_total":                               "2",
		"linemq_cluster_registry_watch_lost_total":                            "1",
		"linemq_cluster_registry_watch_compacted_total":                       "1",
		"linemq_cluster_registry_reregistrations_total":                       "1",
		"linemq_cluster_registry_txns_total":                                  "9",
		"linemq_cluster_registry_txn_ops_total":                               "1000",
		"linemq_cluster_registry_queued_writes":                               "3",
		"linemq_cluster_registry_nodes":                                       "3",
		"linemq_cluster_registry_routes":                                      "4",
		"linemq_cluster_registry_members":                                     "5",
		"linemq_cluster_registry_sessions":                                    "6",
		`linemq_cluster_peer_up{peer="gw2"}`:                                  "1",
		`linemq_cluster_peer_available{peer="gw2"}`:                           "1",
		`linemq_cluster_peer_breaker_state{peer="gw2"}`:                       "0",
		`linemq_cluster_peer_rtt_seconds{peer="gw2"}`:                         "0.002",
		`linemq_cluster_peer_sent_frames_total{peer="gw2"}`:                   "10",
		`linemq_cluster_peer_sent_records_total{peer="gw2"}`:                  "100",
		`linemq_cluster_peer_received_frames_total{peer="gw2"}`:               "11",
		`linemq_cluster_peer_received_records_total{peer="gw2"}`:              "101",
		`linemq_cluster_peer_forwards_dropped_total{peer="gw2"}`:              "7",
		`linemq_cluster_peer_deliveries_sent_total{peer="gw2"}`:               "50",
		`linemq_cluster_peer_deliveries_total{outcome="accepted",peer="gw2"}`: "45",
		`linemq_cluster_peer_deliveries_total{outcome="not_here",peer="gw2"}`: "2",
		`linemq_cluster_peer_deliveries_total{outcome="timeout",peer="gw2"}`:  "1",
		`linemq_cluster_peer_deliveries_total{outcome="broken",peer="gw2"}`:   "1",
		`linemq_cluster_peer_deliveries_total{outcome="refused",peer="gw2"}`:  "1",
		`linemq_cluster_peer_deliveries_total{outcome="error",peer="gw2"}`:    "0",
		`linemq_cluster_peer_up{peer="gw3"}`:                                  "0",
		`linemq_cluster_peer_breaker_state{peer="gw3"}`:                       "2",
		`linemq_cluster_peer_breaker_opens_total{peer="gw3"}`:                 "4",
	}
	for k, v := range want {
		if got, ok := m[k]; !ok {
			t.Errorf("%s missing", k)
		} else if got != v {
			t.Errorf("%s = %s, want %s", k, got, v)
		}
	}
	n := 0
	for k := range m {
		if strings.HasPrefix(k, "linemq_cluster_peer_") {
			n++
		}
	}
	// 22 single families and 6 delivery outcomes, for each of two peers.
	if n != 2*(22+6) {
		t.Errorf("%d peer series, want %d", n, 2*(22+6))
	}
}
