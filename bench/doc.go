// Package bench is the load generator behind cmd/linemq-bench: scenarios
// that drive any MQTT 3.1.1 or 5.0 broker over TCP and measure what it
// delivered, how fast, how evenly across a shared group, how late, and at
// what cost in the broker's CPU and memory.
//
// # Scenarios
//
//   - fanin: Publishers connections publish on plant/line<k>/dev<i>/telemetry
//     (k = i mod Lines); a share group of Workers subscribes to
//     $share/<Group>/plant/+/+/telemetry and should receive every message
//     exactly once between them.
//   - fanout: the same publishers; Subscribers ordinary subscriptions to
//     plant/+/+/telemetry, each of which should receive every message.
//   - conns: Conns idle connections; the broker's resident memory (VmRSS of
//     its pid) before and after, divided by the connections still open.
//
// Receivers subscribe, and every SUBACK must have arrived (a refusal is an
// error), before the first PUBLISH. Publishing lasts Duration and/or Count
// messages per publisher, paced at Rate messages per second in total when
// Rate > 0; then the run drains for up to Drain: it waits for outstanding
// acknowledgements and then for deliveries, ending early once every
// expected message arrived or nothing arrived for half the drain time (at
// least a second).
//
// # Client
//
// The scenarios run on a minimal client of this package over net.Conn
// rather than on a general MQTT library, for two reasons: the bench must
// cost little CPU per message (PUBLISH packets are encoded with
// packet.Publish.Append into one reused buffer and written in batches;
// deliveries are framed with packet.ReadFrame and decoded in place over one
// read buffer; acknowledgements for everything one read brought are written
// at once; nothing is allocated per message), and 3.1.1 and 5.0 must be
// measured through the same code (paho.golang speaks only 5.0). A publisher
// keeps up to Inflight QoS 1/2 PUBLISH packets unacknowledged, never more
// than the broker's Receive Maximum; receivers acknowledge QoS 1 with PUBACK
// and QoS 2 with PUBREC, then PUBCOMP for the PUBREL.
//
// # Payload
//
// Every payload starts with an 8-byte sequence number (publisher index <<
// 40 | counter) and the 8-byte send time (nanoseconds since the run began,
// monotonic clock), then a 4-byte tag identifying the run when the payload
// has room, then zero padding. Receivers mark each sequence number in a
// bitmap shared by the group, which yields distinct and duplicate counts
// without a lock, and ignore messages whose tag is not the run's (retained
// messages, another bench on the same broker). When paced, receivers record
// each message's latency, from its scheduled send time to the read that
// brought it, into a log-linear histogram (exact below 128 µs, within 1/64
// above); measuring from the scheduled time counts a stalled publisher as
// latency rather than hiding it.
//
// # Result fields
//
// [Result] encodes as one JSON object per run with these keys, always all
// present; a value the run did not measure is null.
//
//	label                  Config.Label
//	scenario               "fanin", "fanout" or "conns"
//	broker                 the broker's address
//	mqtt                   "5" or "3.1.1"
//	qos                    QoS of publishes and subscriptions
//	publishers             publishing connections
//	receivers              workers (fanin) or subscribers (fanout)
//	group                  share group name (fanin), else ""
//	payload_bytes          payload size
//	rate_target            target publish rate in msg/s, total; 0 = unpaced
//	inflight               publisher window in force: min(Inflight, broker's Receive Maximum); 0 for QoS 0
//	duration_s             publishing time: start to the last PUBLISH written
//	elapsed_s              the whole run, connecting and draining included
//	published              PUBLISH packets written by all publishers
//	acked                  publishes the broker accepted: QoS 0 = published; QoS 1 PUBACK, QoS 2 PUBCOMP with a success reason
//	refused                QoS 1/2 publishes answered with an error reason (>= 0x80)
//	unacked                QoS 1/2 publishes with no final acknowledgement by the end of the drain
//	no_match               successful acknowledgements with reason 0x10 No matching subscribers (v5)
//	delivered              PUBLISH packets of this run received by all receivers, duplicates included
//	distinct               distinct messages received (per subscriber in fanout, summed)
//	expected               acked, times the number of subscribers in fanout
//	lost                   expected - distinct, not below 0
//	duplicates             delivered - distinct
//	foreign                deliveries that were not this run's messages (ignored)
//	publish_rate           published / duration_s, msg/s
//	delivery_rate          delivered / (start of publishing to the last delivery), msg/s
//	receiver_counts        deliveries per receiver, in connection order
//	share_min, share_max   smallest and largest receiver count / (delivered / receivers); 1.0 = an exact split
//	latency_samples        latencies recorded (paced runs only)
//	latency_p50_ms         median latency, ms (paced runs only; likewise the next three)
//	latency_p99_ms         99th percentile, ms
//	latency_p999_ms        99.9th percentile, ms
//	latency_max_ms         largest latency, ms
//	conns                  idle connections open at the measurement (conns)
//	conn_rate              connections opened per second (conns)
//	broker_rss_before_mib  broker VmRSS before connecting, MiB (conns)
//	broker_rss_after_mib   broker VmRSS after Settle, MiB (conns)
//	bytes_per_conn         (after - before) / conns, bytes (conns)
//	broker_pid             Config.PID, 0 when not given
//	broker_cpu_s           broker user+system CPU seconds over the run (needs pid)
//	broker_peak_rss_mib    largest broker VmRSS sampled during the run, MiB (needs pid)
//	broker_hwm_mib         the broker's VmHWM at the end: its peak RSS since it started, MiB (needs pid)
//	bench_cpu_s            this process's user+system CPU seconds over the run (getrusage)
//	notes                  anything that qualifies the figures, as sentences; null when none
//
// Broker figures come from /proc/<pid>/stat and /proc/<pid>/status sampled
// every 100 ms, so the tool needs Linux and a broker on the same machine for
// them. When the broker runs inside the bench's own process (tests),
// bench_cpu_s includes the broker's work.
package bench
