package bench

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/linemq/linemq/broker/packet"
)

// Scenario names a load pattern.
type Scenario string

// Scenarios.
const (
	// FanIn: Publishers publish on plant/line<k>/dev<i>/telemetry and a
	// shared group of Workers on $share/<Group>/plant/+/+/telemetry takes
	// every message once.
	FanIn Scenario = "fanin"
	// FanOut: Publishers as for FanIn, and Subscribers ordinary subscribers
	// on plant/+/+/telemetry each take every message.
	FanOut Scenario = "fanout"
	// Conns: Conns idle connections, to measure the broker's memory per
	// connection. Needs PID.
	Conns Scenario = "conns"
)

// Config describes one run. The zero value of a field means its default
// (listed per field), except where zero is itself meaningful (QoS 0, Rate 0).
type Config struct {
	// Broker is the broker's TCP address. Default "127.0.0.1:1883".
	Broker string
	// Scenario is the load pattern. Default FanIn.
	Scenario Scenario
	// Version is packet.V5 or packet.V311. Default V5.
	Version packet.Version
	// QoS of publishes and subscriptions: 0, 1 or 2.
	QoS byte

	// Publishers is the number of publishing connections. Default 8.
	Publishers int
	// Workers is the size of the shared group (FanIn). Default 4.
	Workers int
	// Subscribers is the number of ordinary subscribers (FanOut). Default 4.
	Subscribers int
	// Group is the share group name. Default "bench".
	Group string
	// Lines is the number of production lines the publishers' topics are
	// spread over: publisher i publishes on line i%Lines. Default 4.
	Lines int
	// PayloadSize is the PUBLISH payload in bytes, at least 16 (the
	// sequence number and timestamp). Default 300.
	PayloadSize int

	// Duration is how long publishers publish. Count is how many messages
	// each publishes. Publishing stops at whichever limit comes first; 0
	// means no limit, and when both are 0 Duration defaults to 10 s.
	Duration time.Duration
	Count    int
	// Rate paces publishing at this many messages per second in total,
	// spread evenly over the publishers; 0 publishes as fast as possible.
	// Latency is measured only when paced: unpaced, it would measure the
	// length of the broker's queues rather than its delay.
	Rate float64
	// Inflight is each publisher's window of unacknowledged QoS 1 and 2
	// PUBLISH packets, lowered to the broker's Receive Maximum. Default 64.
	Inflight int
	// WorkerReceiveMax is the Receive Maximum receivers advertise in a v5
	// CONNECT. Default 1000.
	WorkerReceiveMax uint16
	// SessionExpiry, when non-zero, gives the receivers persistent sessions
	// (MQTT 5 Session Expiry Interval in seconds; Clean Session 0 for
	// 3.1.1), so that a broker with persistence stores every delivery to
	// them. Default 0: clean sessions.
	SessionExpiry uint32
	// Drain is how long to wait, after publishing stops, for outstanding
	// acknowledgements and deliveries. Default 5 s.
	Drain time.Duration

	// PID is the broker's process id. When set, the broker's CPU time and
	// peak RSS are sampled from /proc every 100 ms.
	PID int
	// Conns is the number of idle connections (Conns). Default 10000.
	Conns int
	// Settle is how long the Conns scenario waits after the last connection
	// before it reads the broker's RSS. Default 1 s.
	Settle time.Duration

	// Timeout bounds every network step that waits on the broker: connect
	// and CONNACK, SUBACK, and one write. Default 10 s.
	Timeout time.Duration
	// Label is copied into the result to tell runs apart.
	Label string
}

// Defaults of Config.
const (
	DefaultBroker           = "127.0.0.1:1883"
	DefaultPublishers       = 8
	DefaultWorkers          = 4
	DefaultSubscribers      = 4
	DefaultGroup            = "bench"
	DefaultLines            = 4
	DefaultPayloadSize      = 300
	DefaultDuration         = 10 * time.Second
	DefaultInflight         = 64
	DefaultWorkerReceiveMax = 1000
	DefaultDrain            = 5 * time.Second
	DefaultConns            = 10000
	DefaultSettle           = time.Second
	DefaultTimeout          = 10 * time.Second

	// MinPayloadSize holds the sequence number and the send time.
	MinPayloadSize = 16
	// maxPublishers keeps the publisher index within the 24 bits the
	// sequence number gives it.
	maxPublishers = 1 << 24
)

// withDefaults returns c with every zero field that has a default set.
func (c Config) withDefaults() Config {
	if c.Broker == "" {
		c.Broker = DefaultBroker
	}
	if c.Scenario == "" {
		c.Scenario = FanIn
	}
	if c.Version == 0 {
		c.Version = packet.V5
	}
	if c.Publishers == 0 {
		c.Publishers = DefaultPublishers
	}
	if c.Workers == 0 {
		c.Workers = DefaultWorkers
	}
	if c.Subscribers == 0 {
		c.Subscribers = DefaultSubscribers
	}
	if c.Group == "" {
		c.Group = DefaultGroup
	}
	if c.Lines == 0 {
		c.Lines = DefaultLines
	}
	if c.PayloadSize == 0 {
		c.PayloadSize = DefaultPayloadSize
	}
	if c.Duration == 0 && c.Count == 0 {
		c.Duration = DefaultDuration
	}
	if c.Inflight == 0 {
		c.Inflight = DefaultInflight
	}
	if c.WorkerReceiveMax == 0 {
		c.WorkerReceiveMax = DefaultWorkerReceiveMax
	}
	if c.Drain == 0 {
		c.Drain = DefaultDrain
	}
	if c.Conns == 0 {
		c.Conns = DefaultConns
	}
	if c.Settle == 0 {
		c.Settle = DefaultSettle
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	return c
}

// Validate reports every field that is out of range, after defaults are
// applied.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf("bench: "+format, a...)) }
	switch c.Scenario {
	case FanIn, FanOut, Conns:
	default:
		bad("unknown scenario %q (fanin, fanout or conns)", c.Scenario)
	}
	if c.Version != packet.V5 && c.Version != packet.V311 {
		bad("MQTT version %d not supported (5 or 3.1.1)", c.Version)
	}
	if c.QoS > 2 {
		bad("QoS %d out of range (0..2)", c.QoS)
	}
	if c.Publishers < 0 || c.Publishers >= maxPublishers {
		bad("publishers %d out of range (1..%d)", c.Publishers, maxPublishers-1)
	}
	if c.Workers < 0 || c.Subscribers < 0 || c.Conns < 0 || c.Count < 0 || c.Lines < 0 {
		bad("counts must not be negative")
	}
	if c.Group == "" || strings.ContainsAny(c.Group, "/+#") {
		bad("share group name %q must be non-empty and free of '/', '+' and '#'", c.Group) // [MQTT-4.8.2-2]
	}
	if c.PayloadSize < MinPayloadSize || c.PayloadSize > 1<<20 {
		bad("payload %d bytes out of range (%d..%d)", c.PayloadSize, MinPayloadSize, 1<<20)
	}
	if c.Duration < 0 || c.Drain < 0 || c.Settle < 0 || c.Timeout < 0 {
		bad("durations must not be negative")
	}
	if c.Rate < 0 {
		bad("rate %v must not be negative", c.Rate)
	}
	if c.Inflight < 0 || c.Inflight > 65535 {
		bad("inflight %d out of range (1..65535)", c.Inflight)
	}
	if c.Scenario == Conns && c.PID <= 0 {
		bad("the conns scenario measures the broker's memory and needs its pid (-pid)")
	}
	return errors.Join(errs...)
}

// receivers is how many receiving connections the scenario uses.
func (c Config) receivers() int {
	if c.Scenario == FanOut {
		return c.Subscribers
	}
	return c.Workers
}

// versionName is the protocol version as people write it.
func versionName(v packet.Version) string {
	if v == packet.V311 {
		return "3.1.1"
	}
	return "5"
}

// ParseVersion turns "5", "311", "3.1.1" or "4" into a protocol version.
func ParseVersion(s string) (packet.Version, error) {
	switch s {
	case "5", "5.0":
		return packet.V5, nil
	case "311", "3.1.1", "4":
		return packet.V311, nil
	}
	return 0, fmt.Errorf("bench: MQTT version %q not supported (5 or 311)", s)
}
