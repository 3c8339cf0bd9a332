//go:build browser

package web

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/performance"
	"github.com/chromedp/chromedp"

	"github.com/linemq/linemq/bench"
	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/internal/mqtttest"
)

var (
	pageCost          = flag.Bool("pagecost", false, "run TestPageCostInBrowser (30 s of the page open in Chromium on a broker under load)")
	browserThroughput = flag.Int("browser-throughput", 0, "run TestThroughputWithBrowser with this many rounds of each set-up (e.g. 5)")
)

// benchScene is a broker under linemq-bench's fan-in load (8 publishers, a
// share group of 4 workers, QoS 1, 300 B), with 40 idle clients to fill
// the clients table, and its web server.
type benchScene struct {
	addr, base string
}

func newBenchScene(t *testing.T) *benchScene {
	t.Helper()
	tracker := NewTracker()
	srv, addr := brokertest.RunServer(t, broker.Options{Events: tracker})
	for i := range 40 {
		mqtttest.DialV5Opts(t, addr, connect(fmt.Sprintf("plc-%02d", i), 0, 0), mqtttest.Options{CountOnly: true})
	}
	s, base := startWeb(t, Options{Broker: srv, Tracker: tracker, NodeID: "bench-gw", Version: "dev", SysInterval: 10 * time.Second})
	s.Start()
	s.SetReady(true)
	return &benchScene{addr: addr, base: base}
}

// load runs the fan-in for d and returns its delivery rate.
func (b *benchScene) load(t *testing.T, d time.Duration, label string) float64 {
	t.Helper()
	res, err := bench.Run(context.Background(), bench.Config{
		Broker: b.addr, Scenario: bench.FanIn, QoS: 1, Duration: d, Drain: 3 * time.Second, Label: label,
	})
	if err != nil {
		t.Fatalf("%s: %v", label, err)
	}
	if res.Lost != 0 {
		t.Fatalf("%s: %d lost", label, res.Lost)
	}
	return res.DeliveryRate
}

// openPage opens the status page in a new headless Chromium and waits
// for its first poll to be drawn. It returns the tab's context and the
// browser's process id.
func openPage(t *testing.T, exe, url string) (context.Context, int) {
	t.Helper()
	ctx := newBrowser(t, exe)
	c, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(c,
		chromedp.EmulateViewport(1440, 900),
		chromedp.Navigate(url),
		chromedp.WaitVisible(chromedp.CSS(`#live.on`)),
	); err != nil {
		t.Fatalf("opening the page: %v", err)
	}
	return ctx, chromedp.FromContext(ctx).Browser.Process().Pid
}

// treeCPU returns the CPU time (user and system) used so far by pid and
// every process below it: Chromium's browser, renderer, GPU and utility
// processes together.
func treeCPU(pid int) time.Duration {
	children := map[int][]int{}
	cpu := map[int]time.Duration{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ... utime stime: fields after the comm's ")".
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) < 13 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		children[ppid] = append(children[ppid], p)
		cpu[p] = time.Duration(ut+st) * 10 * time.Millisecond // USER_HZ is 100 on Linux
	}
	var total time.Duration
	for todo := []int{pid}; len(todo) > 0; {
		p := todo[0]
		todo = append(todo[1:], children[p]...)
		total += cpu[p]
	}
	return total
}

// pageMetrics reads the renderer's Performance metrics of the tab.
func pageMetrics(t *testing.T, ctx context.Context) map[string]float64 {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	res, err := chromedp.Run(c, func(ctx context.Context, tg *chromedp.Target) (performance.GetMetricsResult, error) {
		return cdp.Call(ctx, tg, performance.GetMetrics, cdp.Empty{})
	})
	if err != nil {
		t.Fatalf("Performance.getMetrics: %v", err)
	}
	m := map[string]float64{}
	for _, x := range res.Metrics {
		m[x.Name] = x.Value
	}
	return m
}

// TestPageCostInBrowser measures what the open status page costs the
// browser on a broker under load: the renderer's main-thread time (task,
// script, layout, style) from Performance.getMetrics over 30 s, and the
// CPU time of all Chromium's processes (what a browser on the gateway's
// own cores takes from the broker). Run it with -pagecost; docs/api.md
// quotes the figures.
func TestPageCostInBrowser(t *testing.T) {
	if !*pageCost {
		t.Skip("run with -pagecost")
	}
	exe := chromium()
	if exe == "" {
		t.Skip("no Chromium (apt-get install chromium, or set LINEMQ_CHROMIUM)")
	}
	const span = 30 * time.Second
	b := newBenchScene(t)
	done := make(chan float64)
	go func() { done <- b.load(t, span+15*time.Second, "page-cost") }()
	ctx, pid := openPage(t, exe, b.base+"/")
	c, cancel := context.WithTimeout(ctx, 10*time.Second)
	if err := chromedp.Do(c, func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
		_, err := cdp.Call(ctx, tg, performance.Enable, performance.EnableParams{})
		return chromedp.Void{}, err
	}); err != nil {
		t.Fatalf("Performance.enable: %v", err)
	}
	cancel()
	time.Sleep(5 * time.Second) // past the first loads
	m0, cpu0, t0 := pageMetrics(t, ctx), treeCPU(pid), time.Now()
	time.Sleep(span)
	m1, cpu1, el := pageMetrics(t, ctx), treeCPU(pid), time.Since(t0)
	rate := <-done

	var report strings.Builder
	per := func(name string) float64 { return (m1[name] - m0[name]) / el.Seconds() }
	for _, k := range []string{"TaskDuration", "ScriptDuration", "LayoutDuration", "RecalcStyleDuration"} {
		fmt.Fprintf(&report, "\n%-22s %6.1f ms/s (%4.1f%% of a core)", k, 1000*per(k), 100*per(k))
	}
	for _, k := range []string{"LayoutCount", "RecalcStyleCount", "Nodes", "JSHeapUsedSize"} {
		if strings.HasSuffix(k, "Count") {
			fmt.Fprintf(&report, "\n%-22s %6.1f /s", k, per(k))
		} else {
			fmt.Fprintf(&report, "\n%-22s %8.0f", k, m1[k])
		}
	}
	fmt.Fprintf(&report, "\n%-22s %6.1f ms/s (%4.1f%% of a core)", "Chromium CPU (all processes)",
		1000*(cpu1-cpu0).Seconds()/el.Seconds(), 100*(cpu1-cpu0).Seconds()/el.Seconds())
	t.Logf("the page open %v under fan-in load (%.0f msg/s):%s", el.Round(time.Second), rate, report.String())
}

// TestThroughputWithBrowser compares linemq-bench's fan-in throughput with
// and without the status page open in headless Chromium on the same
// machine, runs interleaved (A B A B ...) so that whatever else the
// machine does falls on both alike; it logs medians and every run. Run it
// with -browser-throughput N (N rounds of each).
func TestThroughputWithBrowser(t *testing.T) {
	rounds := *browserThroughput
	if rounds == 0 {
		t.Skip("run with -browser-throughput N")
	}
	exe := chromium()
	if exe == "" {
		t.Skip("no Chromium (apt-get install chromium, or set LINEMQ_CHROMIUM)")
	}
	const d = 6 * time.Second
	b := newBenchScene(t)
	b.load(t, 2*time.Second, "warm-up")
	var without, with []float64
	for range rounds {
		without = append(without, b.load(t, d, "without"))
		tab, _ := openPage(t, exe, b.base+"/")
		time.Sleep(2 * time.Second)
		with = append(with, b.load(t, d, "with"))
		chromedp.Cancel(tab) // closes the browser
	}
	mw, mb := median(without), median(with)
	t.Logf("fan-in, 8 publishers -> share group of 4, QoS 1, 300 B, %v runs, interleaved:"+
		"\nwithout the page  median %8.0f msg/s  runs %v (spread %.0f..%.0f)"+
		"\nwith the page     median %8.0f msg/s  runs %v (spread %.0f..%.0f)  %+.1f%%",
		d, mw, roundAll(without), slices.Min(without), slices.Max(without),
		mb, roundAll(with), slices.Min(with), slices.Max(with), 100*(mb-mw)/mw)
}
