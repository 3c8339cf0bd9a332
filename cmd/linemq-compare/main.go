// Command linemq-compare runs the bench scenarios against linemq and
// Debian's Mosquitto side by side on this machine and writes the medians,
// the ratios and the machine description into docs/benchmarks.md, between
// the markers it owns. `make bench-compare` runs it.
//
// Both brokers run as separate processes on loopback with their default
// settings (Mosquitto: listener and anonymous access only). Each scenario
// runs -reps times per broker, alternating linemq and Mosquitto, so that
// noise from the shared machine falls on both alike; the medians and the
// ratio linemq/Mosquitto of the medians are reported.
//
// Then the three-node fan-in (cluster.go): three linemq processes forming
// one cluster next to a single linemq under the same load, and the same
// three nodes with persistent members and cluster.replicas 0 and 1
// (replicas.go), each written to a section of its own; -only cluster and
// -only replicas run just that part.
package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/linemq/linemq/bench"
)

func main() {
	linemqBin := flag.String("linemq", "bin/linemq", "the linemq binary")
	mosquittoBin := flag.String("mosquitto", "mosquitto", "the mosquitto binary")
	reps := flag.Int("reps", 3, "repetitions of each scenario per broker")
	duration := flag.Duration("duration", 5*time.Second, "publishing time of each run")
	conns := flag.Int("conns", 10000, "idle connections for the memory scenario (0 skips it)")
	conns2 := flag.Int("conns-large", 19000, "a second, larger idle-connection count (0 skips it)")
	out := flag.String("out", "docs/benchmarks.md", "file whose generated sections are replaced")
	only := flag.String("only", "", "run one part only: \"cluster\" (the three-node fan-in), \"forwards\" (QoS 1 to an ordinary subscriber on another node, kept or best effort) or \"replicas\" (the fan-in to persistent members with cluster.replicas 0 and 1); no Mosquitto needed")
	flag.Parse()

	switch *only {
	case "":
	case "cluster":
		row := runCluster(*linemqBin, *reps, *duration)
		if err := writeClusterDoc(*out, row, *reps, *duration); err != nil {
			fatal(err)
		}
		return
	case "forwards":
		row := runForwards(*linemqBin, *reps, *duration)
		if err := writeForwardsDoc(*out, row, *reps, *duration); err != nil {
			fatal(err)
		}
		return
	case "replicas":
		row := runReplicas(*linemqBin, *reps, *duration)
		if err := writeReplicasDoc(*out, row, *reps, *duration); err != nil {
			fatal(err)
		}
		return
	default:
		fmt.Fprintf(os.Stderr, "linemq-compare: -only %q: the parts are \"cluster\", \"forwards\" and \"replicas\"\n", *only)
		os.Exit(2)
	}
	if _, err := exec.LookPath(*mosquittoBin); err != nil {
		fmt.Fprintln(os.Stderr, "linemq-compare: mosquitto not found; install Debian's mosquitto package")
		os.Exit(2)
	}
	raiseFileLimit()
	scenarios := []scenario{
		{name: "fan-in QoS 0, unpaced", cfg: bench.Config{Scenario: bench.FanIn, QoS: 0}},
		{name: "fan-in QoS 1, unpaced", cfg: bench.Config{Scenario: bench.FanIn, QoS: 1}},
		{name: "fan-in QoS 1 at 20k msg/s", cfg: bench.Config{Scenario: bench.FanIn, QoS: 1, Rate: 20000}},
	}
	var results []row
	for _, sc := range scenarios {
		r := row{name: sc.name}
		for i := range *reps {
			for _, b := range []string{"linemq", "mosquitto"} {
				br := startBroker(b, *linemqBin, *mosquittoBin)
				cfg := sc.cfg
				cfg.Broker, cfg.PID, cfg.Duration, cfg.Label = br.addr, br.pid(), *duration, b
				cfg.Publishers, cfg.Workers, cfg.PayloadSize, cfg.Version = 8, 4, 300, 5
				res, err := bench.Run(context.Background(), cfg)
				br.stop()
				if err != nil {
					fmt.Fprintf(os.Stderr, "%s %s rep %d: %v\n", sc.name, b, i, err)
					continue
				}
				fmt.Fprintf(os.Stderr, "%-28s %-9s rep %d: delivered %.0f msg/s lost %d dup %d p99 %v\n",
					sc.name, b, i, res.DeliveryRate, res.Lost, res.Duplicates, fmtPtr(res.LatencyP99Ms))
				r.add(b, res)
			}
		}
		results = append(results, r)
	}
	var persist []persistRow
	for _, mode := range []string{"always", "batch", "none"} {
		var rates, perMsg []float64
		for range *reps {
			br := startBrokerArgs("linemq", *linemqBin, *mosquittoBin, compareConfig+"storage:\n  sync: "+mode+"\n")
			before := writeBytes(br.pid())
			res, err := bench.Run(context.Background(), bench.Config{Scenario: bench.FanIn, QoS: 1, Broker: br.addr, PID: br.pid(),
				Duration: *duration, Publishers: 8, Workers: 4, PayloadSize: 300, Version: 5, SessionExpiry: 3600, Label: "linemq-" + mode})
			after := writeBytes(br.pid())
			br.stop()
			if err != nil {
				fmt.Fprintf(os.Stderr, "persistent %s: %v\n", mode, err)
				continue
			}
			rates = append(rates, res.DeliveryRate)
			if res.Delivered > 0 && after >= before {
				perMsg = append(perMsg, float64(after-before)/float64(res.Delivered))
			}
			fmt.Fprintf(os.Stderr, "persistent fan-in QoS 1, sync %-6s: delivered %.0f msg/s lost %d, %.0f disk bytes/msg\n",
				mode, res.DeliveryRate, res.Lost, float64(after-before)/float64(max(res.Delivered, 1)))
		}
		persist = append(persist, persistRow{mode: mode, rate: medianOf(rates), bytes: medianOf(perMsg)})
	}
	for _, n := range []int{*conns, *conns2} {
		if n == 0 {
			continue
		}
		r := row{name: fmt.Sprintf("memory per idle connection, %d connections", n)}
		for _, b := range []string{"linemq", "mosquitto"} {
			br := startBroker(b, *linemqBin, *mosquittoBin)
			res, err := bench.Run(context.Background(), bench.Config{Scenario: bench.Conns, Broker: br.addr, PID: br.pid(),
				Conns: n, Version: 5, Label: b, Timeout: time.Minute, Settle: 8 * time.Second})
			br.stop()
			if err != nil {
				fmt.Fprintf(os.Stderr, "conns %d %s: %v\n", n, b, err)
				continue
			}
			fmt.Fprintf(os.Stderr, "conns %d %s: %s bytes per connection\n", n, b, fmtPtr(res.BytesPerConn))
			r.add(b, res)
		}
		results = append(results, r)
	}
	if err := writeDoc(*out, results, persist, *reps, *duration); err != nil {
		fmt.Fprintln(os.Stderr, "linemq-compare:", err)
		os.Exit(1)
	}
	if err := writeClusterDoc(*out, runCluster(*linemqBin, *reps, *duration), *reps, *duration); err != nil {
		fatal(err)
	}
	if err := writeReplicasDoc(*out, runReplicas(*linemqBin, *reps, *duration), *reps, *duration); err != nil {
		fatal(err)
	}
}

type scenario struct {
	name string
	cfg  bench.Config
}

// row collects one scenario's results per broker.
type row struct {
	name string
	res  map[string][]*bench.Result
}

func (r *row) add(b string, res *bench.Result) {
	if r.res == nil {
		r.res = map[string][]*bench.Result{}
	}
	r.res[b] = append(r.res[b], res)
}

// median of f over the broker's results; ok false when there are none.
func (r *row) median(b string, f func(*bench.Result) (float64, bool)) (float64, bool) {
	var v []float64
	for _, res := range r.res[b] {
		if x, ok := f(res); ok {
			v = append(v, x)
		}
	}
	if len(v) == 0 {
		return 0, false
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2], true
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2, true
}

func (r *row) sum(b string, f func(*bench.Result) int64) int64 {
	var n int64
	for _, res := range r.res[b] {
		n += f(res)
	}
	return n
}

// persistRow is one sync mode's persistent-session figures.
type persistRow struct {
	mode        string
	rate, bytes float64
}

func medianOf(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// writeBytes returns the bytes a process caused to be written to storage.
func writeBytes(pid int) uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "write_bytes: "); ok {
			var n uint64
			fmt.Sscan(v, &n)
			return n
		}
	}
	return 0
}

// broker is a broker process under test.
type broker struct {
	cmd  *exec.Cmd
	addr string
	dir  string
}

func (b *broker) pid() int { return b.cmd.Process.Pid }

func (b *broker) stop() {
	b.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { b.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		b.cmd.Process.Kill()
		<-done
	}
	os.RemoveAll(b.dir)
}

// compareConfig is the linemq configuration of every run: the defaults,
// but for the connection limit (2048 by default), which the idle
// connections scenario goes past; Mosquitto's default has none.
const compareConfig = "mqtt:\n  max_connections: unlimited\n"

// startBroker starts a fresh broker process on a loopback port chosen by
// the OS and waits until it accepts connections.
func startBroker(kind, linemqBin, mosquittoBin string) *broker {
	return startBrokerArgs(kind, linemqBin, mosquittoBin, compareConfig)
}

// startBrokerArgs is startBroker with a linemq configuration file.
func startBrokerArgs(kind, linemqBin, mosquittoBin, linemqConfig string) *broker {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	dir, err := os.MkdirTemp("", "linemq-compare-")
	if err != nil {
		fatal(err)
	}
	b := &broker{addr: addr, dir: dir}
	_, port, _ := net.SplitHostPort(addr)
	switch kind {
	case "linemq":
		args := []string{"-mqtt-listen", addr, "-http-listen", "", "-data-dir", dir, "-log-level", "warn"}
		if linemqConfig != "" {
			conf := filepath.Join(dir, "linemq.yaml")
			os.WriteFile(conf, []byte(linemqConfig), 0o644)
			args = append(args, "-config", conf)
		}
		b.cmd = exec.Command(linemqBin, args...)
	default:
		conf := filepath.Join(dir, "mosquitto.conf")
		os.WriteFile(conf, []byte(fmt.Sprintf("listener %s 127.0.0.1\nallow_anonymous true\npersistence false\nlog_dest none\n", port)), 0o644)
		b.cmd = exec.Command(mosquittoBin, "-c", conf)
	}
	b.cmd.Stderr = os.Stderr
	if err := b.cmd.Start(); err != nil {
		fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err == nil {
			c.Close()
			return b
		}
		if time.Now().After(deadline) {
			fatal(fmt.Errorf("%s did not start listening on %s", kind, addr))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// raiseFileLimit lets the memory scenario open as many connections as the
// hard limit allows; broker processes inherit it.
func raiseFileLimit() {
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) == nil && l.Cur < l.Max {
		l.Cur = l.Max
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
	}
}

const (
	beginMarker = "<!-- bench-compare:begin -->"
	endMarker   = "<!-- bench-compare:end -->"
)

// writeDoc replaces the generated section of the benchmarks document.
func writeDoc(path string, rows []row, persist []persistRow, reps int, duration time.Duration) error {
	var b bytes.Buffer
	fmt.Fprintln(&b, beginMarker)
	fmt.Fprintf(&b, "Generated by `make bench-compare` on %s.\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(&b, "Machine: %s\n\n", machine())
	fmt.Fprintf(&b, "Each figure is the median of %d runs per broker, alternating the brokers; runs publish for %v. "+
		"Load: 8 publishers, a shared group of 4 workers, 300-byte payloads, MQTT 5, brokers on their defaults. "+
		"Ratio = linemq / Mosquitto.\n\n", reps, duration)
	fmt.Fprintln(&b, "| figure | linemq | Mosquitto | ratio |")
	fmt.Fprintln(&b, "|---|---|---|---|")
	for _, r := range rows {
		if strings.HasPrefix(r.name, "memory") {
			f := func(x *bench.Result) (float64, bool) {
				if x.BytesPerConn == nil {
					return 0, false
				}
				return *x.BytesPerConn, true
			}
			writeRow(&b, r, r.name+" (bytes)", f, "%.0f")
			continue
		}
		writeRow(&b, r, r.name+": delivered msg/s", func(x *bench.Result) (float64, bool) { return x.DeliveryRate, true }, "%.0f")
		lost := func(x *bench.Result) int64 { return x.Lost }
		dups := func(x *bench.Result) int64 { return x.Duplicates }
		fmt.Fprintf(&b, "| %s: lost / duplicates (all runs) | %d / %d | %d / %d | |\n", r.name,
			r.sum("linemq", lost), r.sum("linemq", dups), r.sum("mosquitto", lost), r.sum("mosquitto", dups))
		writeRow(&b, r, r.name+": share min", func(x *bench.Result) (float64, bool) {
			if x.ShareMin == nil {
				return 0, false
			}
			return *x.ShareMin, true
		}, "%.2f")
		writeRow(&b, r, r.name+": share max", func(x *bench.Result) (float64, bool) {
			if x.ShareMax == nil {
				return 0, false
			}
			return *x.ShareMax, true
		}, "%.2f")
		if r.name == "fan-in QoS 1 at 20k msg/s" {
			writeRow(&b, r, r.name+": latency p50 ms", func(x *bench.Result) (float64, bool) { return ptr(x.LatencyP50Ms) }, "%.2f")
			writeRow(&b, r, r.name+": latency p99 ms", func(x *bench.Result) (float64, bool) { return ptr(x.LatencyP99Ms) }, "%.2f")
			writeRow(&b, r, r.name+": latency p999 ms", func(x *bench.Result) (float64, bool) { return ptr(x.LatencyP999Ms) }, "%.2f")
		}
		writeRow(&b, r, r.name+": broker CPU s", func(x *bench.Result) (float64, bool) { return ptr(x.BrokerCPUS) }, "%.2f")
	}
	fmt.Fprintln(&b)
	fmt.Fprintln(&b, "Persistent sessions (linemq only; the 4 workers have Session Expiry 3600, so every delivery is stored "+
		"before its publisher is acknowledged). Disk bytes per message: the broker's write_bytes from /proc/<pid>/io "+
		"over the run, divided by the messages delivered (in `none` mode the kernel writes back later, so most writes are not seen).")
	fmt.Fprintln(&b)
	fmt.Fprintln(&b, "| storage.sync | delivered msg/s | disk bytes per message |")
	fmt.Fprintln(&b, "|---|---|---|")
	for _, p := range persist {
		fmt.Fprintf(&b, "| %s | %.0f | %.0f |\n", p.mode, p.rate, p.bytes)
	}
	fmt.Fprintln(&b, endMarker)

	doc, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	s := string(doc)
	i, j := strings.Index(s, beginMarker), strings.Index(s, endMarker)
	if i >= 0 && j > i {
		s = s[:i] + b.String() + s[j+len(endMarker)+1:]
	} else {
		s += "\n" + b.String()
	}
	return os.WriteFile(path, []byte(s), 0o644)
}

func writeRow(b *bytes.Buffer, r row, label string, f func(*bench.Result) (float64, bool), format string) {
	l, lok := r.median("linemq", f)
	m, mok := r.median("mosquitto", f)
	cell := func(v float64, ok bool) string {
		if !ok {
			return "-"
		}
		return fmt.Sprintf(format, v)
	}
	ratio := "-"
	if lok && mok && m != 0 {
		ratio = fmt.Sprintf("%.2f", l/m)
	}
	fmt.Fprintf(b, "| %s | %s | %s | %s |\n", label, cell(l, lok), cell(m, mok), ratio)
}

func ptr(p *float64) (float64, bool) {
	if p == nil {
		return 0, false
	}
	return *p, true
}

func fmtPtr(p *float64) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprintf("%.2f", *p)
}

// machine describes the host: CPU model, cores, memory, kernel, Go and
// Mosquitto versions.
func machine() string {
	cpu := "unknown CPU"
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				cpu = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	mem := ""
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		mem = strings.Join(strings.Fields(strings.SplitN(string(b), "\n", 2)[0])[1:], " ")
	}
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	mosq := "mosquitto"
	if out, err := exec.Command("mosquitto", "-h").CombinedOutput(); err == nil || len(out) > 0 {
		mosq = strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
	}
	return fmt.Sprintf("%s, %d cores, %s RAM, Linux %s, %s, %s", cpu, runtime.NumCPU(), mem,
		strings.TrimSpace(string(kernel)), runtime.Version(), mosq)
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "linemq-compare:", err)
	os.Exit(1)
}
