// Command linemq-bench is a load generator for MQTT brokers: linemq, or any
// other broker speaking MQTT 3.1.1 or 5.0 over TCP.
//
// Usage:
//
//	linemq-bench [-broker HOST:PORT] [-scenario fanin|fanout|conns]
//	             [-publishers N] [-workers N | -subscribers N] [-group NAME]
//	             [-qos 0|1|2] [-mqtt 5|311] [-payload BYTES]
//	             [-duration D] [-count N] [-rate MSG/S] [-inflight N]
//	             [-worker-receive-max N] [-drain D] [-pid PID]
//	             [-conns N] [-settle D] [-timeout D] [-json] [-label NAME]
//
// Scenarios: fanin has -publishers publishers on
// plant/line<k>/dev<i>/telemetry and a share group of -workers workers on
// $share/<group>/plant/+/+/telemetry; fanout has -subscribers ordinary
// subscribers on plant/+/+/telemetry instead; conns opens -conns idle
// connections and reports the broker's memory per connection (needs -pid).
// Example, the reference set-up (8 publishers, 4 workers, 300-byte
// payloads, MQTT 5):
//
//	linemq-bench -scenario fanin -qos 1 -duration 10s -pid $(pidof linemq)
//
// For QoS 1 and 2 each publisher keeps up to -inflight publishes
// unacknowledged, fewer if the broker's MQTT 5 Receive Maximum says so.
// MQTT 3.1.1 has no way to say so: set -inflight to the broker's limit
// (Mosquitto's max_inflight_messages, 20 by default), since a broker may
// drop what exceeds it, which the run then reports as lost.
//
// The output is a table, then one line of JSON with the same figures (only
// the JSON line with -json); package bench documents every JSON field.
// Latency percentiles are measured only when the run is paced with -rate.
// The broker's CPU time and peak RSS need its -pid on the same machine.
//
// SIGINT or SIGTERM ends publishing early and still reports (the result
// carries an "interrupted" note); a second signal kills the tool.
//
// Exit status: 0 after a run, 1 when the run failed (broker unreachable,
// connection or subscription refused, a connection lost mid-run), 2 for a
// bad command line.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/linemq/linemq/bench"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is the whole program; it returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	cfg, jsonOnly, err := parseFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		if !errors.Is(err, errUsage) {
			fmt.Fprintf(stderr, "linemq-bench: %v\n", err)
		}
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		// After the first signal, restore the default action so a second
		// one kills a run that is slow to wind down.
		<-ctx.Done()
		stop()
	}()

	res, err := bench.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "linemq-bench: %v\n", err)
		return 1
	}
	if !jsonOnly {
		if err := res.WriteTable(stdout); err != nil {
			fmt.Fprintf(stderr, "linemq-bench: %v\n", err)
			return 1
		}
	}
	if err := res.WriteJSON(stdout); err != nil {
		fmt.Fprintf(stderr, "linemq-bench: %v\n", err)
		return 1
	}
	return 0
}

// errUsage is a command-line error the flag package has already printed.
var errUsage = errors.New("usage")

// parseFlags turns the command line into a configuration.
func parseFlags(args []string, stderr io.Writer) (bench.Config, bool, error) {
	var cfg bench.Config
	fs := flag.NewFlagSet("linemq-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.Broker, "broker", bench.DefaultBroker, "broker `address` (host:port)")
	scenario := fs.String("scenario", string(bench.FanIn), "`scenario`: fanin, fanout or conns")
	fs.IntVar(&cfg.Publishers, "publishers", bench.DefaultPublishers, "publishing connections")
	fs.IntVar(&cfg.Workers, "workers", bench.DefaultWorkers, "workers in the share group (fanin)")
	fs.IntVar(&cfg.Subscribers, "subscribers", bench.DefaultSubscribers, "ordinary subscribers (fanout)")
	fs.StringVar(&cfg.Group, "group", bench.DefaultGroup, "share group `name` (fanin)")
	fs.IntVar(&cfg.Lines, "lines", bench.DefaultLines, "production lines the publisher topics spread over")
	qos := fs.Int("qos", 0, "QoS of publishes and subscriptions: 0, 1 or 2")
	version := fs.String("mqtt", "5", "protocol `version`: 5 or 311")
	fs.IntVar(&cfg.PayloadSize, "payload", bench.DefaultPayloadSize, "payload `bytes` (at least 16)")
	fs.DurationVar(&cfg.Duration, "duration", bench.DefaultDuration, "publishing time (with -count: whichever ends first)")
	fs.IntVar(&cfg.Count, "count", 0, "messages per publisher; alone, it replaces the default -duration")
	fs.Float64Var(&cfg.Rate, "rate", 0, "total publish rate in `msg/s`; 0 = as fast as possible (latency is measured only when paced)")
	fs.IntVar(&cfg.Inflight, "inflight", bench.DefaultInflight, "unacknowledged QoS 1/2 publishes per publisher (capped by the broker's Receive Maximum)")
	receiveMax := fs.Int("worker-receive-max", bench.DefaultWorkerReceiveMax, "Receive Maximum the receivers advertise (MQTT 5)")
	expiry := fs.Uint("session-expiry", 0, "give receivers persistent sessions with this expiry in `seconds` (0: clean sessions)")
	fs.DurationVar(&cfg.Drain, "drain", bench.DefaultDrain, "how long to wait for acknowledgements and deliveries after publishing")
	fs.IntVar(&cfg.PID, "pid", 0, "broker process id, for its CPU time and memory from /proc")
	fs.IntVar(&cfg.Conns, "conns", bench.DefaultConns, "idle connections (conns)")
	fs.DurationVar(&cfg.Settle, "settle", bench.DefaultSettle, "wait after the last connection before reading the broker's memory (conns)")
	fs.DurationVar(&cfg.Timeout, "timeout", bench.DefaultTimeout, "limit on any single wait for the broker (connect, SUBACK, a write)")
	jsonOnly := fs.Bool("json", false, "print only the JSON line")
	fs.StringVar(&cfg.Label, "label", "", "a `name` for this run, copied into the JSON")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return cfg, false, err
		}
		return cfg, false, errUsage
	}
	if fs.NArg() > 0 {
		return cfg, false, fmt.Errorf("unexpected argument %q (flags only; see -help)", fs.Arg(0))
	}
	set := make(map[string]bool)
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	cfg.Scenario = bench.Scenario(*scenario)
	v, err := bench.ParseVersion(*version)
	if err != nil {
		return cfg, false, err
	}
	cfg.Version = v
	if *qos < 0 || *qos > 2 {
		return cfg, false, fmt.Errorf("-qos %d: must be 0, 1 or 2", *qos)
	}
	cfg.QoS = byte(*qos)
	if *receiveMax < 1 || *receiveMax > 65535 {
		return cfg, false, fmt.Errorf("-worker-receive-max %d: must be 1..65535", *receiveMax)
	}
	cfg.WorkerReceiveMax = uint16(*receiveMax)
	cfg.SessionExpiry = uint32(*expiry)
	// In bench.Config zero means "default"; on the command line a zero is a
	// mistake worth saying so, not a silent default.
	for name, n := range map[string]int{"publishers": cfg.Publishers, "workers": cfg.Workers,
		"subscribers": cfg.Subscribers, "lines": cfg.Lines, "inflight": cfg.Inflight, "conns": cfg.Conns} {
		if n < 1 {
			return cfg, false, fmt.Errorf("-%s %d: must be at least 1", name, n)
		}
	}
	if set["count"] && !set["duration"] {
		cfg.Duration = 0 // exactly -count messages per publisher, however long that takes
	}
	if cfg.Duration <= 0 && cfg.Count <= 0 {
		return cfg, false, errors.New("-duration or -count must be positive")
	}
	if cfg.Drain <= 0 {
		cfg.Drain = time.Millisecond // "no drain": Config would read 0 as the default
	}
	if err := cfg.Validate(); err != nil {
		return cfg, false, err
	}
	return cfg, *jsonOnly, nil
}
