package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Result is what a run measured. Its JSON form is the tool's machine
// output; the package documentation describes every field. Fields a run
// did not measure are nil and encode as null, so every line has the same
// keys.
type Result struct {
	Label        string  `json:"label"`
	Scenario     string  `json:"scenario"`
	Broker       string  `json:"broker"`
	MQTT         string  `json:"mqtt"`
	QoS          int     `json:"qos"`
	Publishers   int     `json:"publishers"`
	Receivers    int     `json:"receivers"`
	Group        string  `json:"group"`
	PayloadBytes int     `json:"payload_bytes"`
	RateTarget   float64 `json:"rate_target"`
	Inflight     int     `json:"inflight"`
	DurationS    float64 `json:"duration_s"`
	ElapsedS     float64 `json:"elapsed_s"`

	Published      int64    `json:"published"`
	Acked          int64    `json:"acked"`
	Refused        int64    `json:"refused"`
	Unacked        int64    `json:"unacked"`
	NoMatch        int64    `json:"no_match"`
	Delivered      int64    `json:"delivered"`
	Distinct       int64    `json:"distinct"`
	Expected       int64    `json:"expected"`
	Lost           int64    `json:"lost"`
	Duplicates     int64    `json:"duplicates"`
	Foreign        int64    `json:"foreign"`
	PublishRate    float64  `json:"publish_rate"`
	DeliveryRate   float64  `json:"delivery_rate"`
	ReceiverCounts []int64  `json:"receiver_counts"`
	ShareMin       *float64 `json:"share_min"`
	ShareMax       *float64 `json:"share_max"`

	LatencySamples int64    `json:"latency_samples"`
	LatencyP50Ms   *float64 `json:"latency_p50_ms"`
	LatencyP99Ms   *float64 `json:"latency_p99_ms"`
	LatencyP999Ms  *float64 `json:"latency_p999_ms"`
	LatencyMaxMs   *float64 `json:"latency_max_ms"`

	Conns              int      `json:"conns"`
	ConnRate           *float64 `json:"conn_rate"`
	BrokerRSSBeforeMiB *float64 `json:"broker_rss_before_mib"`
	BrokerRSSAfterMiB  *float64 `json:"broker_rss_after_mib"`
	BytesPerConn       *float64 `json:"bytes_per_conn"`

	BrokerPID        int      `json:"broker_pid"`
	BrokerCPUS       *float64 `json:"broker_cpu_s"`
	BrokerPeakRSSMiB *float64 `json:"broker_peak_rss_mib"`
	BrokerHWMMiB     *float64 `json:"broker_hwm_mib"`
	BenchCPUS        float64  `json:"bench_cpu_s"`

	Notes []string `json:"notes"`
}

// WriteJSON writes r as one line of JSON.
func (r *Result) WriteJSON(w io.Writer) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// WriteTable writes r as a table for people: one measurement a row.
func (r *Result) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, format string, a ...any) { fmt.Fprintf(tw, "  %s\t"+format+"\n", append([]any{k}, a...)...) }
	title := fmt.Sprintf("linemq-bench %s  broker %s  MQTT %s", r.Scenario, r.Broker, r.MQTT)
	if r.Label != "" {
		title += "  [" + r.Label + "]"
	}
	fmt.Fprintln(tw, title)

	if r.Scenario == string(Conns) {
		row("connections", "%d", r.Conns)
		row("connect rate", "%s conn/s", opt(r.ConnRate, "%.0f"))
		row("broker rss before / after", "%s / %s MiB", opt(r.BrokerRSSBeforeMiB, "%.1f"), opt(r.BrokerRSSAfterMiB, "%.1f"))
		row("broker memory per conn", "%s bytes", opt(r.BytesPerConn, "%.0f"))
	} else {
		recv := "workers"
		if r.Scenario == string(FanOut) {
			recv = "subscribers"
		}
		row("qos", "%d", r.QoS)
		row("publishers / "+recv, "%d / %d", r.Publishers, r.Receivers)
		if r.Scenario == string(FanIn) {
			row("share group", "%s", r.Group)
		}
		row("payload", "%d B", r.PayloadBytes)
		rate := "unpaced"
		if r.RateTarget > 0 {
			rate = fmt.Sprintf("%.0f msg/s", r.RateTarget)
		}
		row("target rate", "%s", rate)
		if r.QoS > 0 {
			row("publisher window", "%d", r.Inflight)
		}
		row("publishing time", "%.2f s (run %.2f s)", r.DurationS, r.ElapsedS)
		row("published", "%d  (%.0f msg/s)", r.Published, r.PublishRate)
		if r.QoS > 0 {
			row("acked / refused / unacked", "%d / %d / %d", r.Acked, r.Refused, r.Unacked)
		}
		row("delivered", "%d  (%.0f msg/s)", r.Delivered, r.DeliveryRate)
		row("expected / distinct", "%d / %d", r.Expected, r.Distinct)
		row("lost / duplicates", "%d / %d", r.Lost, r.Duplicates)
		row("share min / max", "%s / %s  (1.0 = exact)", opt(r.ShareMin, "%.3f"), opt(r.ShareMax, "%.3f"))
		row("per "+strings.TrimSuffix(recv, "s"), "%v", r.ReceiverCounts)
		if r.LatencyP50Ms != nil {
			row("latency p50 / p99 / p999", "%s / %s / %s ms  (max %s, %d samples)",
				opt(r.LatencyP50Ms, "%.3f"), opt(r.LatencyP99Ms, "%.3f"), opt(r.LatencyP999Ms, "%.3f"),
				opt(r.LatencyMaxMs, "%.3f"), r.LatencySamples)
		} else {
			row("latency p50 / p99 / p999", "- (measured only with -rate)")
		}
	}
	if r.BrokerPID > 0 {
		row("broker cpu", "%s s  (pid %d)", opt(r.BrokerCPUS, "%.2f"), r.BrokerPID)
		row("broker peak rss", "%s MiB  (lifetime high-water %s MiB)", opt(r.BrokerPeakRSSMiB, "%.1f"), opt(r.BrokerHWMMiB, "%.1f"))
	} else {
		row("broker cpu / peak rss", "- (give -pid)")
	}
	row("bench cpu", "%.2f s", r.BenchCPUS)
	for _, n := range r.Notes {
		row("note", "%s", n)
	}
	return tw.Flush()
}

// opt formats an optional value, "-" when it was not measured.
func opt(v *float64, format string) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf(format, *v)
}

func ptr(v float64) *float64 { return &v }
