package main

// The cost of keeping forwards: QoS 1 publishes on node 1 of a three-node
// cluster to an ordinary persistent subscriber on node 2, with the
// messages kept in node 2's outbox on node 1 until node 2 has them (the
// default) and with cluster.forwards.best_effort (sent once, not kept).
// Throughput with publishers' windows full, the PUBACK latency of one
// publisher sending one message at a time, and what node 1 wrote to disk
// per delivered message.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/linemq/linemq/broker/packet"
)

// forwardLatencyCount is how many one-at-a-time publishes the latency
// figure is taken over.
const forwardLatencyCount = 2000

// forwardResult is one run of the forwards load.
type forwardResult struct {
	rate       float64 // distinct deliveries per second of publishing
	lost, dups int64
	p50, p99   time.Duration // PUBACK latency, one publish at a time
	diskPerMsg float64       // bytes node 1 wrote per delivered message
}

// forwardModes are the configurations compared, in the table's order.
var forwardModes = []struct {
	label, config string
	clean         bool // the subscriber's session is clean (else it lasts an hour)
}{
	{"kept (default)", "", false},
	{"kept, storage.sync: always", "storage:\n  sync: always\n", false},
	{"kept, clean subscriber", "", true},
	{"best effort", "cluster:\n  forwards:\n    best_effort: true\n", false},
}

// forwardRow is each mode's results over the repetitions.
type forwardRow [][]*forwardResult

func runForwards(linemqBin string, reps int, duration time.Duration) forwardRow {
	row := make(forwardRow, len(forwardModes))
	for i := range reps {
		for m, mode := range forwardModes {
			bs := startClusterConfig(linemqBin, mode.config)
			res, err := runForwardLoad(bs, duration, mode.clean)
			stopAll(bs)
			if err != nil {
				fmt.Fprintf(os.Stderr, "forwards %s rep %d: %v\n", mode.label, i, err)
				continue
			}
			fmt.Fprintf(os.Stderr, "forwards QoS 1, %-26s rep %d: delivered %.0f msg/s, lost %d, dup %d, PUBACK p50 %v p99 %v, node 1 wrote %.0f B/msg\n",
				mode.label, i, res.rate, res.lost, res.dups, res.p50, res.p99, res.diskPerMsg)
			row[m] = append(row[m], res)
		}
	}
	return row
}

// runForwardLoad runs clusterPubs publishers on bs[0] against one
// ordinary subscriber on bs[1], persistent unless clean.
func runForwardLoad(bs []*broker, duration time.Duration, clean bool) (*forwardResult, error) {
	seen := make([][]atomic.Uint64, clusterPubs+1)
	for i := range seen {
		seen[i] = make([]atomic.Uint64, clusterMaxSeq/64)
	}
	expiry := uint32(3600)
	if clean {
		expiry = 0
	}
	c, err := dialLoadSession(bs[1].addr, "lmqc-historian", 1000, expiry)
	if err != nil {
		return nil, err
	}
	defer c.nc.Close()
	// Publisher k is tagged k; its node (for the probe) is 0.
	w := &loadWorker{c: c, node: 1, nodes: clusterNodes, seen: seen, probes: make([]atomic.Bool, 1), subacked: make(chan struct{})}
	go w.loop()
	c.write((&packet.Subscribe{PacketID: 1, Subs: []packet.Subscription{{Filter: []byte("plant/+/+/telemetry"), QoS: 1}}}).Append(nil, packet.V5))
	select {
	case <-w.subacked:
	case <-time.After(10 * time.Second):
		return nil, errors.New("no SUBACK within 10 s")
	}
	var pubs []*loadPublisher
	for i := range clusterPubs {
		pc, err := dialLoad(bs[0].addr, fmt.Sprintf("lmqc-p%d", i), 0)
		if err != nil {
			return nil, err
		}
		p := &loadPublisher{c: pc, idx: i, node: 0, window: make(chan struct{}, min(clusterWindow, int(pc.receiveMax)))}
		pubs = append(pubs, p)
		go p.readLoop()
	}
	defer func() {
		for _, p := range pubs {
			p.c.nc.Close()
		}
	}()
	deadline := time.Now().Add(60 * time.Second)
	for !w.probes[0].Load() {
		if time.Now().After(deadline) {
			return nil, errors.New("node 1 did not forward to node 2 within 60 s")
		}
		pubs[0].probe()
		time.Sleep(5 * time.Millisecond)
	}
	for time.Now().Before(deadline) && outstanding(pubs) > 0 {
		time.Sleep(5 * time.Millisecond)
	}
	base := sumAcked(pubs)

	wrote0 := writeBytes(bs[0].pid())
	start, publishing := publishAndDrain(pubs, []*loadWorker{w}, base, duration)
	acked := sumAcked(pubs) - base
	wrote := int64(writeBytes(bs[0].pid()) - wrote0)
	r := &forwardResult{dups: w.dups.Load()}
	distinct := w.distinct.Load()
	r.lost = max(0, acked-distinct)
	if d := time.Duration(w.lastAt.Load() - start.UnixNano()); d > 0 {
		r.rate = float64(distinct) / max(d, publishing).Seconds()
	}
	if distinct > 0 {
		r.diskPerMsg = float64(wrote) / float64(distinct)
	}

	r.p50, r.p99, err = pubackLatency(bs[0].addr, forwardLatencyCount)
	if err != nil {
		return nil, err
	}
	return r, nil
}

// pubackLatency publishes count QoS 1 messages to addr one at a time, on a
// publisher of its own, and returns the median and 99th percentile of the
// time to each PUBACK. The payloads carry a publisher tag no load worker
// counts.
func pubackLatency(addr string, count int) (p50, p99 time.Duration, err error) {
	lc, err := dialLoad(addr, "lmqc-latency", 0)
	if err != nil {
		return 0, 0, err
	}
	defer lc.nc.Close()
	pk := packet.Publish{Topic: []byte("plant/line0/latency/telemetry"), QoS: 1, Payload: make([]byte, clusterPayload)}
	lats := make([]time.Duration, 0, count)
	for n := range count {
		binary.BigEndian.PutUint64(pk.Payload, uint64(latencyTag)<<40|uint64(n))
		pk.PacketID = uint16(n%65535 + 1)
		t0 := time.Now()
		if err := lc.write(pk.Append(nil, packet.V5)); err != nil {
			return 0, 0, err
		}
		lc.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		h, _, err := lc.next()
		if err != nil || h.Type != packet.PUBACK {
			return 0, 0, fmt.Errorf("latency: no PUBACK: %v", err)
		}
		lats = append(lats, time.Since(t0))
	}
	slices.Sort(lats)
	return lats[len(lats)/2], lats[len(lats)*99/100], nil
}

// medianCell formats the median of f over rs, "-" when there is none.
func medianCell[R any](rs []*R, f func(*R) float64, format string) string {
	if len(rs) == 0 {
		return "-"
	}
	return fmt.Sprintf(format, medianOver(rs, f))
}

// medianOver is the median of f over rs.
func medianOver[R any](rs []*R, f func(*R) float64) float64 {
	v := make([]float64, 0, len(rs))
	for _, r := range rs {
		v = append(v, f(r))
	}
	return medianOf(v)
}

// sumOver is the sum of f over rs.
func sumOver[R any](rs []*R, f func(*R) int64) (n int64) {
	for _, r := range rs {
		n += f(r)
	}
	return n
}

// millis is d in milliseconds.
func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// latencyTag is the publisher tag of pubackLatency's payloads: beyond
// every load's publishers, so the workers count none of them.
const latencyTag = 1 << 20

const (
	forwardsBegin = "<!-- bench-compare-forwards:begin -->"
	forwardsEnd   = "<!-- bench-compare-forwards:end -->"
)

// writeForwardsDoc replaces the forwards section of the benchmarks
// document.
func writeForwardsDoc(path string, row forwardRow, reps int, duration time.Duration) error {
	med, sum, ms := medianCell[forwardResult], sumOver[forwardResult], millis
	var b bytes.Buffer
	fmt.Fprintln(&b, forwardsBegin)
	fmt.Fprintf(&b, "Generated by `linemq-compare -only forwards` on %s; machine: %s.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), strings.TrimSuffix(machine(), ", mosquitto"))
	fmt.Fprintf(&b, "Three linemq processes on loopback, each hosting one of three etcd members; %d QoS 1 publishers on node 1 "+
		"(a window of %d each, %d-byte payloads, MQTT 5) and one ordinary subscriber on node 2, persistent unless the column says clean. "+
		"Kept: the default, each message in node 2's outbox on node 1 until node 2 has it, the PUBACK after node 2's answer "+
		"(which, for a persistent subscriber, comes after node 2's commit); best effort: "+
		"`cluster.forwards.best_effort: true`. Latency: one publisher sending one message at a time, %d messages. "+
		"Disk: what node 1's process wrote (its etcd member included) per delivered message. Medians of %d runs each, alternating, publishing for %v; `storage.sync` at its default (`batch`, 10 ms) unless the column says otherwise.\n\n",
		clusterPubs, clusterWindow, clusterPayload, forwardLatencyCount, reps, duration)
	line := func(name string, cell func(rs []*forwardResult) string) {
		fmt.Fprintf(&b, "| %s |", name)
		for _, rs := range row {
			fmt.Fprintf(&b, " %s |", cell(rs))
		}
		fmt.Fprintln(&b)
	}
	fmt.Fprint(&b, "| QoS 1 to a subscriber on another node |")
	for _, m := range forwardModes {
		fmt.Fprintf(&b, " %s |", m.label)
	}
	fmt.Fprintln(&b)
	fmt.Fprintln(&b, "|---"+strings.Repeat("|---", len(forwardModes))+"|")
	line("delivered msg/s", func(rs []*forwardResult) string {
		return med(rs, func(r *forwardResult) float64 { return r.rate }, "%.0f")
	})
	line("PUBACK p50 / p99, ms", func(rs []*forwardResult) string {
		return med(rs, func(r *forwardResult) float64 { return ms(r.p50) }, "%.2f") + " / " + med(rs, func(r *forwardResult) float64 { return ms(r.p99) }, "%.2f")
	})
	line("bytes written on node 1 per message", func(rs []*forwardResult) string {
		return med(rs, func(r *forwardResult) float64 { return r.diskPerMsg }, "%.0f")
	})
	line("acknowledged and never delivered / duplicates (all runs)", func(rs []*forwardResult) string {
		return fmt.Sprintf("%d / %d", sum(rs, func(r *forwardResult) int64 { return r.lost }), sum(rs, func(r *forwardResult) int64 { return r.dups }))
	})
	fmt.Fprintln(&b, forwardsEnd)
	return replaceSection(path, forwardsBegin, forwardsEnd, b.String())
}
