package main

// The three-node fan-in: three linemq processes, each hosting one of three
// etcd members (as cmd/linemq's cluster tests start them), with publishers
// and members of one share group on every node, next to a single linemq
// carrying the same load. linemq-bench drives one broker address, so this
// file has its own small load: the same payload size, QoS 1 with a window
// per publisher, sequence numbers in the payloads to count losses and
// duplicates, and a delivery's node against its publisher's node to count
// what crossed between gateways.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/linemq/linemq/broker/packet"
)

// The load: per node, clusterPubs publishers and clusterWorkers members.
const (
	clusterNodes   = 3
	clusterPubs    = 3
	clusterWorkers = 2
	clusterWindow  = 64      // unacknowledged publishes per publisher
	clusterPayload = 300     // bytes
	clusterMaxSeq  = 1 << 23 // messages one publisher may send in a run
	probeTopic     = "plant/probe/probe/telemetry"
)

// clusterResult is one run of the cluster load.
type clusterResult struct {
	rate        float64 // distinct deliveries per second of publishing
	delivered   int64   // distinct deliveries
	acked       int64
	lost, dups  int64
	crossed     float64       // share of deliveries whose member is on another node than their publisher
	cpuS        float64       // the brokers' CPU time over the run, all processes
	shareLo, hi float64       // each member's count against an even split
	wrote       []uint64      // bytes each process wrote over the run
	p50, p99    time.Duration // PUBACK latency, one publish at a time (loadOptions.latency)
}

// loadOptions vary the cluster load.
type loadOptions struct {
	expiry  uint32 // the members' Session Expiry: above 0, every delivery is stored
	latency int    // after the run, this many publishes one at a time from node 1, timed
}

// startCluster starts three linemq processes forming one cluster, each with
// an embedded etcd member, and waits until each serves MQTT clients (which
// it does once its registry copy is loaded).
func startCluster(linemqBin string) []*broker { return startClusterConfig(linemqBin, "") }

// startClusterConfig is startCluster with a linemq configuration file for
// every node ("" for none).
func startClusterConfig(linemqBin, config string) []*broker {
	var peers, clients, mqtt [clusterNodes]string
	var ic []string
	for i := range clusterNodes {
		peers[i], clients[i], mqtt[i] = "http://"+freePort(), "http://"+freePort(), freePort()
		ic = append(ic, fmt.Sprintf("n%d=%s", i+1, peers[i]))
	}
	var bs []*broker
	for i := range clusterNodes {
		name := fmt.Sprint("n", i+1)
		dir, err := os.MkdirTemp("", "linemq-compare-"+name+"-")
		if err != nil {
			fatal(err)
		}
		b := &broker{addr: mqtt[i], dir: dir}
		args := []string{"-node-id", name, "-data-dir", b.dir, "-log-level", "error",
			"-mqtt-listen", mqtt[i], "-http-listen", "", "-cluster-listen", "127.0.0.1:0",
			"-etcd-embed", "-etcd-peer-listen", peers[i], "-etcd-client-listen", clients[i], "-etcd-initial-cluster", strings.Join(ic, ",")}
		if config != "" {
			conf := filepath.Join(dir, "linemq.yaml")
			if err := os.WriteFile(conf, []byte(config), 0o644); err != nil {
				fatal(err)
			}
			args = append(args, "-config", conf)
		}
		b.cmd = exec.Command(linemqBin, args...)
		b.cmd.Stderr = os.Stderr
		if err := b.cmd.Start(); err != nil {
			fatal(err)
		}
		bs = append(bs, b)
	}
	for _, b := range bs {
		waitListening(b.addr, 60*time.Second)
	}
	// A gateway accepts connections before it has joined its line, and
	// refuses a CONNECT (0x88) until then.
	for _, b := range bs {
		deadline := time.Now().Add(60 * time.Second)
		for {
			c, err := dialLoad(b.addr, "lmqc-ready", 0)
			if err == nil {
				c.nc.Close()
				break
			}
			if time.Now().After(deadline) {
				fatal(fmt.Errorf("%s not serving after 60 s: %v", b.addr, err))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return bs
}

// stopAll stops brokers together (a cluster's last member would
// otherwise wait for a quorum to leave), killing what is still running
// after 3 s: a cluster's etcd leader stopping after its followers waits
// 10 s for a leadership transfer, which the measurement has no use for.
func stopAll(bs []*broker) {
	var wg sync.WaitGroup
	for _, b := range bs {
		wg.Go(func() {
			b.cmd.Process.Signal(syscall.SIGTERM)
			t := time.AfterFunc(3*time.Second, func() { b.cmd.Process.Kill() })
			b.cmd.Wait()
			t.Stop()
		})
	}
	wg.Wait()
	for _, b := range bs {
		os.RemoveAll(b.dir)
	}
}

func freePort() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func waitListening(addr string, within time.Duration) {
	deadline := time.Now().Add(within)
	for {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			fatal(fmt.Errorf("nothing listening on %s after %v", addr, within))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// runClusterLoad runs the load against brokers (one or three): publishers
// and members spread evenly over them, as many in all either way.
func runClusterLoad(bs []*broker, duration time.Duration, o loadOptions) (*clusterResult, error) {
	nPubs, nWorkers := clusterNodes*clusterPubs, clusterNodes*clusterWorkers
	seen := make([][]atomic.Uint64, nPubs)
	for i := range seen {
		seen[i] = make([]atomic.Uint64, clusterMaxSeq/64)
	}
	var workers []*loadWorker
	for i := range nWorkers {
		node := i % len(bs)
		c, err := dialLoadSession(bs[node].addr, fmt.Sprintf("lmqc-w%d", i), 1000, o.expiry)
		if err != nil {
			return nil, err
		}
		w := &loadWorker{c: c, node: node, nodes: len(bs), seen: seen, probes: make([]atomic.Bool, len(bs)), subacked: make(chan struct{})}
		workers = append(workers, w)
		go w.loop()
		c.write((&packet.Subscribe{PacketID: 1, Subs: []packet.Subscription{{Filter: []byte("$share/cmp/plant/+/+/telemetry"), QoS: 1}}}).Append(nil, packet.V5))
	}
	defer func() {
		for _, w := range workers {
			w.c.nc.Close()
		}
	}()
	for _, w := range workers {
		select {
		case <-w.subacked:
		case <-time.After(10 * time.Second):
			return nil, errors.New("no SUBACK within 10 s")
		}
	}
	var pubs []*loadPublisher
	for i := range nPubs {
		node := i % len(bs)
		c, err := dialLoad(bs[node].addr, fmt.Sprintf("lmqc-p%d", i), 0)
		if err != nil {
			return nil, err
		}
		p := &loadPublisher{c: c, idx: i, node: node, window: make(chan struct{}, min(clusterWindow, int(c.receiveMax)))}
		pubs = append(pubs, p)
		go p.readLoop()
	}
	defer func() {
		for _, p := range pubs {
			p.c.nc.Close()
		}
	}()
	// Every node routes to every member before the run: probes from each
	// node until every member has had one from every node.
	deadline := time.Now().Add(60 * time.Second)
	for !allProbed(workers) {
		if time.Now().After(deadline) {
			return nil, errors.New("the nodes did not route to every member within 60 s")
		}
		for _, p := range pubs[:len(bs)] {
			p.probe()
		}
		time.Sleep(5 * time.Millisecond)
	}

	// The probes' acknowledgements are not the run's.
	for time.Now().Before(deadline) && outstanding(pubs) > 0 {
		time.Sleep(5 * time.Millisecond)
	}
	base := sumAcked(pubs)

	cpu0 := cpuOf(bs)
	wrote0 := make([]uint64, len(bs))
	for i, b := range bs {
		wrote0[i] = writeBytes(b.pid())
	}
	start, publishing := publishAndDrain(pubs, workers, base, duration)
	acked := sumAcked(pubs) - base
	cpu1 := cpuOf(bs)

	r := &clusterResult{acked: acked, cpuS: cpu1 - cpu0}
	for i, b := range bs {
		r.wrote = append(r.wrote, writeBytes(b.pid())-wrote0[i])
	}
	if o.latency > 0 {
		var err error
		if r.p50, r.p99, err = pubackLatency(bs[0].addr, o.latency); err != nil {
			return nil, err
		}
	}
	var distinct, crossed, last int64
	counts := make([]float64, len(workers))
	for i, w := range workers {
		distinct += w.distinct.Load()
		r.dups += w.dups.Load()
		crossed += w.crossed.Load()
		last = max(last, w.lastAt.Load())
		counts[i] = float64(w.distinct.Load())
	}
	r.lost = max(0, acked-distinct)
	r.delivered = distinct
	if d := time.Duration(last - start.UnixNano()); d > 0 {
		r.rate = float64(distinct) / max(d, publishing).Seconds()
	}
	if distinct > 0 {
		r.crossed = float64(crossed) / float64(distinct)
		even := float64(distinct) / float64(len(workers))
		r.shareLo, r.hi = slices.Min(counts)/even, slices.Max(counts)/even
	}
	return r, nil
}

// publishAndDrain runs the publishers for duration, then waits until
// every message acknowledged since base is in (or 10 s), and returns when
// publishing started and how long it lasted.
func publishAndDrain(pubs []*loadPublisher, workers []*loadWorker, base int64, duration time.Duration) (time.Time, time.Duration) {
	start := time.Now()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, p := range pubs {
		wg.Go(func() { p.send(stop) })
	}
	time.Sleep(duration)
	close(stop)
	wg.Wait()
	publishing := time.Since(start)
	for drainEnd := time.Now().Add(10 * time.Second); time.Now().Before(drainEnd); {
		var distinct int64
		for _, w := range workers {
			distinct += w.distinct.Load()
		}
		if outstanding(pubs) == 0 && distinct >= sumAcked(pubs)-base {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	return start, publishing
}

func sumAcked(pubs []*loadPublisher) int64 {
	var n int64
	for _, p := range pubs {
		n += p.acked.Load()
	}
	return n
}

func outstanding(pubs []*loadPublisher) int {
	n := 0
	for _, p := range pubs {
		n += len(p.window)
	}
	return n
}

func allProbed(ws []*loadWorker) bool {
	for _, w := range ws {
		for i := range w.probes {
			if !w.probes[i].Load() {
				return false
			}
		}
	}
	return true
}

// cpuOf returns the CPU time, in seconds, the processes have used so far.
func cpuOf(bs []*broker) float64 {
	var s float64
	for _, b := range bs {
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", b.pid()))
		if err != nil {
			continue
		}
		// Fields after the command name, which is in parentheses.
		f := strings.Fields(string(st[bytes.LastIndexByte(st, ')')+1:]))
		if len(f) > 12 {
			u, _ := strconv.ParseFloat(f[11], 64)
			k, _ := strconv.ParseFloat(f[12], 64)
			s += (u + k) / 100 // clock ticks (USER_HZ, 100 on Linux)
		}
	}
	return s
}

// loadConn is an MQTT 5 connection of the load.
type loadConn struct {
	nc         net.Conn
	wmu        sync.Mutex
	buf        []byte // read, not yet framed
	off        int
	receiveMax uint16
}

func dialLoad(addr, id string, receiveMax uint16) (*loadConn, error) {
	return dialLoadSession(addr, id, receiveMax, 0)
}

// dialLoadSession is dialLoad with a Session Expiry Interval (seconds; 0
// for a clean session).
func dialLoadSession(addr, id string, receiveMax uint16, expiry uint32) (*loadConn, error) {
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	cp := &packet.Connect{ProtocolName: []byte("MQTT"), Version: packet.V5, CleanStart: true, ClientID: []byte(id)}
	if expiry > 0 {
		cp.Props.Set(packet.PropSessionExpiry)
		cp.Props.SessionExpiry = expiry
	}
	if receiveMax > 0 {
		cp.Props.Set(packet.PropReceiveMaximum)
		cp.Props.ReceiveMaximum = receiveMax
	}
	c := &loadConn{nc: nc, buf: make([]byte, 0, 256<<10), receiveMax: 65535}
	if err := c.write(cp.Append(nil)); err != nil {
		return nil, err
	}
	nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	h, body, err := c.next()
	nc.SetReadDeadline(time.Time{})
	if err != nil || h.Type != packet.CONNACK {
		return nil, fmt.Errorf("%s: no CONNACK: %v", id, err)
	}
	var ca packet.Connack
	if err := ca.Decode(packet.V5, body); err != nil || ca.Reason != packet.Success {
		return nil, fmt.Errorf("%s: CONNACK %v %v", id, ca.Reason, err)
	}
	if ca.Props.Has(packet.PropReceiveMaximum) {
		c.receiveMax = ca.Props.ReceiveMaximum
	}
	return c, nil
}

func (c *loadConn) write(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err := c.nc.Write(b)
	return err
}

// next returns the next packet; its body is valid until the next call.
func (c *loadConn) next() (packet.FixedHeader, []byte, error) {
	for {
		h, hl, err := packet.ReadFrame(c.buf[c.off:], 0)
		if err != nil {
			return h, nil, err
		}
		if hl > 0 && len(c.buf)-c.off >= hl+h.Remaining {
			body := c.buf[c.off+hl : c.off+hl+h.Remaining]
			c.off += hl + h.Remaining
			return h, body, nil
		}
		if c.off > 0 {
			c.buf = c.buf[:copy(c.buf, c.buf[c.off:])]
			c.off = 0
		}
		if len(c.buf) == cap(c.buf) {
			c.buf = slices.Grow(c.buf, cap(c.buf))
		}
		n, err := c.nc.Read(c.buf[len(c.buf):cap(c.buf)])
		c.buf = c.buf[:len(c.buf)+n]
		if n == 0 && err != nil {
			return h, nil, err
		}
	}
}

// buffered reports whether a whole packet may be waiting in the buffer.
func (c *loadConn) buffered() bool { return len(c.buf) > c.off }

// loadWorker is a member of the share group: it acknowledges each PUBLISH
// (one write per read) and records its sequence number.
type loadWorker struct {
	c        *loadConn
	node     int
	nodes    int
	seen     [][]atomic.Uint64
	subacked chan struct{}
	probes   []atomic.Bool // a probe from each node has arrived

	distinct, dups, crossed atomic.Int64
	lastAt                  atomic.Int64 // Unix nanoseconds of the last delivery
}

func (w *loadWorker) loop() {
	var p packet.Publish
	var acks []byte
	for {
		h, body, err := w.c.next()
		if err != nil {
			return
		}
		switch h.Type {
		case packet.SUBACK:
			close(w.subacked)
		case packet.PUBLISH:
			if p.Decode(packet.V5, h.Flags, body) != nil {
				return
			}
			acks = (&packet.Ack{Type: packet.PUBACK, PacketID: p.PacketID}).Append(acks, packet.V5)
			if len(p.Payload) < 8 {
				break
			}
			seq := binary.BigEndian.Uint64(p.Payload)
			pub, n := int(seq>>40), seq&(1<<40-1)
			if string(p.Topic) == probeTopic {
				w.probes[pub].Store(true) // pub is the probing node
				break
			}
			if pub >= len(w.seen) || n >= clusterMaxSeq {
				break
			}
			bit := uint64(1) << (n % 64)
			if w.seen[pub][n/64].Or(bit)&bit != 0 {
				w.dups.Add(1)
				break
			}
			w.distinct.Add(1)
			if pub%w.nodes != w.node {
				w.crossed.Add(1)
			}
			w.lastAt.Store(time.Now().UnixNano())
		}
		if !w.c.buffered() && len(acks) > 0 {
			if w.c.write(acks) != nil {
				return
			}
			acks = acks[:0]
		}
	}
}

// loadPublisher publishes QoS 1 with a window of unacknowledged messages.
type loadPublisher struct {
	c      *loadConn
	idx    int
	node   int
	window chan struct{} // one token per unacknowledged publish
	nextID uint16
	probes uint64
	acked  atomic.Int64
}

func (p *loadPublisher) id() uint16 {
	p.nextID = p.nextID%65535 + 1
	return p.nextID
}

// probe publishes one probe, tagged with the publisher's node.
func (p *loadPublisher) probe() {
	p.window <- struct{}{}
	payload := make([]byte, 16)
	p.probes++
	binary.BigEndian.PutUint64(payload, uint64(p.node)<<40|p.probes)
	p.c.write((&packet.Publish{Topic: []byte(probeTopic), QoS: 1, PacketID: p.id(), Payload: payload}).Append(nil, packet.V5))
}

// send publishes until stop closes, in batches of whatever the window
// allows, one write each.
func (p *loadPublisher) send(stop <-chan struct{}) {
	pk := packet.Publish{Topic: fmt.Appendf(nil, "plant/line%d/dev%d/telemetry", p.idx%4, p.idx), QoS: 1, Payload: make([]byte, clusterPayload)}
	var buf []byte
	for n := uint64(0); n < clusterMaxSeq; {
		select {
		case <-stop:
			return
		case p.window <- struct{}{}:
		}
		buf = buf[:0]
		for k := 0; ; k++ {
			binary.BigEndian.PutUint64(pk.Payload, uint64(p.idx)<<40|n)
			n++
			pk.PacketID = p.id()
			buf = pk.Append(buf, packet.V5)
			if k == 63 || n == clusterMaxSeq {
				break
			}
			select {
			case p.window <- struct{}{}:
				continue
			default:
			}
			break
		}
		if p.c.write(buf) != nil {
			return
		}
	}
}

// readLoop takes the PUBACKs and returns their window tokens.
func (p *loadPublisher) readLoop() {
	var a packet.Ack
	for {
		h, body, err := p.c.next()
		if err != nil {
			return
		}
		if h.Type != packet.PUBACK || a.Decode(packet.V5, h.Type, body) != nil {
			continue
		}
		<-p.window
		if a.Reason < 0x80 && a.Reason != packet.NoMatchingSubscribers {
			p.acked.Add(1)
		}
	}
}

// clusterRow is the three-node figures next to the single node's, over
// the repetitions.
type clusterRow struct{ single, cluster []*clusterResult }

// runCluster runs the load reps times on a single linemq and on three,
// alternating.
func runCluster(linemqBin string, reps int, duration time.Duration) clusterRow {
	var row clusterRow
	for i := range reps {
		for _, three := range []bool{false, true} {
			var bs []*broker
			label := "single node"
			if three {
				bs, label = startCluster(linemqBin), "3 nodes"
			} else {
				bs = []*broker{startBroker("linemq", linemqBin, "")}
			}
			res, err := runClusterLoad(bs, duration, loadOptions{})
			stopAll(bs)
			if err != nil {
				fmt.Fprintf(os.Stderr, "cluster fan-in %s rep %d: %v\n", label, i, err)
				continue
			}
			fmt.Fprintf(os.Stderr, "cluster fan-in QoS 1, %-11s rep %d: delivered %.0f msg/s, lost %d, dup %d, crossed nodes %.0f %%, broker CPU %.1f s\n",
				label, i, res.rate, res.lost, res.dups, 100*res.crossed, res.cpuS)
			if three {
				row.cluster = append(row.cluster, res)
			} else {
				row.single = append(row.single, res)
			}
		}
	}
	return row
}

const (
	clusterBegin = "<!-- bench-compare-cluster:begin -->"
	clusterEnd   = "<!-- bench-compare-cluster:end -->"
)

// writeClusterDoc replaces the cluster section of the benchmarks document.
func writeClusterDoc(path string, row clusterRow, reps int, duration time.Duration) error {
	med := func(rs []*clusterResult, f func(*clusterResult) float64) string {
		if len(rs) == 0 {
			return "-"
		}
		var v []float64
		for _, r := range rs {
			v = append(v, f(r))
		}
		m := medianOf(v)
		if m >= 1000 {
			return fmt.Sprintf("%.0f", m)
		}
		return fmt.Sprintf("%.2f", m)
	}
	sum := sumOver[clusterResult]
	var b bytes.Buffer
	fmt.Fprintln(&b, clusterBegin)
	fmt.Fprintf(&b, "Generated by `make bench-compare` (or `linemq-compare -only cluster`) on %s; machine: %s.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), strings.TrimSuffix(machine(), ", mosquitto"))
	fmt.Fprintf(&b, "Three linemq processes on loopback, each hosting one of three etcd members, against one linemq; the same load on both: "+
		"%d publishers and a share group of %d members (on the cluster, %d publishers and %d members on each node), QoS 1, "+
		"a window of %d publishes per publisher, %d-byte payloads, MQTT 5. Medians of %d runs each, alternating, publishing for %v.\n\n",
		clusterNodes*clusterPubs, clusterNodes*clusterWorkers, clusterPubs, clusterWorkers, clusterWindow, clusterPayload, reps, duration)
	fmt.Fprintln(&b, "| fan-in QoS 1 | single node | 3 nodes | ratio |")
	fmt.Fprintln(&b, "|---|---|---|---|")
	rate := func(r *clusterResult) float64 { return r.rate }
	s, c := med(row.single, rate), med(row.cluster, rate)
	ratio := "-"
	if len(row.single) > 0 && len(row.cluster) > 0 {
		var sv, cv []float64
		for _, r := range row.single {
			sv = append(sv, r.rate)
		}
		for _, r := range row.cluster {
			cv = append(cv, r.rate)
		}
		ratio = fmt.Sprintf("%.2f", medianOf(cv)/medianOf(sv))
	}
	fmt.Fprintf(&b, "| delivered msg/s | %s | %s | %s |\n", s, c, ratio)
	lost := func(r *clusterResult) int64 { return r.lost }
	dups := func(r *clusterResult) int64 { return r.dups }
	fmt.Fprintf(&b, "| lost / duplicates (all runs) | %d / %d | %d / %d | |\n", sum(row.single, lost), sum(row.single, dups), sum(row.cluster, lost), sum(row.cluster, dups))
	fmt.Fprintf(&b, "| deliveries crossing nodes | - | %s %% | |\n", med(row.cluster, func(r *clusterResult) float64 { return 100 * r.crossed }))
	fmt.Fprintf(&b, "| share min / max | %s / %s | %s / %s | |\n",
		med(row.single, func(r *clusterResult) float64 { return r.shareLo }), med(row.single, func(r *clusterResult) float64 { return r.hi }),
		med(row.cluster, func(r *clusterResult) float64 { return r.shareLo }), med(row.cluster, func(r *clusterResult) float64 { return r.hi }))
	fmt.Fprintf(&b, "| brokers' CPU s (all processes) | %s | %s | |\n", med(row.single, func(r *clusterResult) float64 { return r.cpuS }), med(row.cluster, func(r *clusterResult) float64 { return r.cpuS }))
	perMsg := func(r *clusterResult) float64 { return 1e6 * r.cpuS / float64(max(r.delivered, 1)) }
	fmt.Fprintf(&b, "| brokers' CPU µs per delivered message | %s | %s | |\n", med(row.single, perMsg), med(row.cluster, perMsg))
	fmt.Fprintln(&b, clusterEnd)
	return replaceSection(path, clusterBegin, clusterEnd, b.String())
}

// replaceSection puts section (which starts with begin and ends with end
// and a newline) in place of the one between the markers in the file at
// path, or appends it.
func replaceSection(path, begin, end, section string) error {
	doc, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	s := string(doc)
	i, j := strings.Index(s, begin), strings.Index(s, end)
	if i >= 0 && j > i {
		s = s[:i] + section + s[j+len(end)+1:]
	} else {
		s += "\n" + section
	}
	return os.WriteFile(path, []byte(s), 0o644)
}
