package web

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/linemq/linemq/bench"
	"github.com/linemq/linemq/broker"
	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/broker/packet"
)

var throughput = flag.Bool("throughput", false, "run TestThroughputWithPageOpen (about a minute of load)")

// TestLatency1000Clients measures how long the page and the API take to
// answer on loopback with 1,000 connected clients and 100 share groups of
// three members, and logs the figures (docs/api.md quotes them). It
// asserts nothing about time: a shared CI machine is no place for that.
func TestLatency1000Clients(t *testing.T) {
	if testing.Short() {
		t.Skip("connects 1,000 clients")
	}
	srv, addr := brokertest.RunServer(t, broker.Options{})
	const clients, groups = 1000, 100
	for i := range clients {
		cp := &packet.Connect{Version: packet.V5, ClientID: fmt.Appendf(nil, "dev-%04d", i), CleanStart: true, KeepAlive: 60}
		c, ack := brokertest.Connect(t, addr, cp)
		if ack.Reason != packet.Success {
			t.Fatalf("client %d refused: %v", i, ack.Reason)
		}
		if i < 3*groups {
			filter := fmt.Sprintf("$share/pool-%03d/plant/%03d/+", i/3, i/3)
			c.Subscribe(&packet.Subscribe{Subs: []packet.Subscription{{Filter: []byte(filter), QoS: 1}}})
		} else if i%10 == 0 {
			c.Subscribe(&packet.Subscribe{Subs: []packet.Subscription{{Filter: []byte("plant/+/alarms"), QoS: 0}}})
		}
	}
	s, base := startWeb(t, Options{Broker: srv, NodeID: "perf"})
	s.Start()
	brokertest.Eventually(t, 30*time.Second, "1,000 clients and 100 groups", func() bool {
		st := srv.Stats()
		return st.ClientsConnected == clients && st.ShareGroups == groups
	})

	runs := 50
	if raceEnabled {
		runs = 10 // the figures are not a normal build's anyway
	}
	var report strings.Builder
	fmt.Fprintf(&report, "\n%-34s %9s %9s %9s %10s\n", "endpoint", "p50", "p95", "max", "bytes")
	for _, path := range []string{
		"/", "/static/app.js", "/api/v1/status", "/api/v1/groups", "/api/v1/clients",
		"/api/v1/clients?limit=1000", "/api/v1/clients?q=dev-09", "/api/v1/clients/dev-0500", "/metrics",
	} {
		var times []time.Duration
		size := 0
		for range runs {
			start := time.Now()
			code, body := get(t, base+path)
			times = append(times, time.Since(start))
			if code != http.StatusOK {
				t.Fatalf("%s: %d", path, code)
			}
			size = len(body)
		}
		slices.Sort(times)
		fmt.Fprintf(&report, "%-34s %9s %9s %9s %10d\n", path,
			times[runs/2].Round(10*time.Microsecond), times[runs*95/100].Round(10*time.Microsecond),
			times[runs-1].Round(10*time.Microsecond), size)
	}
	// What the page costs per second: the requests its poll makes.
	start := time.Now()
	for range runs {
		get(t, base+"/api/v1/status")
		get(t, base+"/api/v1/groups")
	}
	fmt.Fprintf(&report, "%-34s %9s\n", "one page poll (status + groups)", (time.Since(start) / time.Duration(runs)).Round(10*time.Microsecond))
	note := ""
	if raceEnabled {
		note = " (race detector on: several times slower than a normal build)"
	}
	t.Logf("1,000 clients, 100 groups, %d requests each, loopback%s:%s", runs, note, report.String())
}

// TestThroughputWithPageOpen compares the broker's fan-in throughput
// (linemq-bench's engine: 8 publishers, a share group of 4, QoS 1, 300 B)
// with no web server, with the web server's sampler and $SYS running, and
// with that plus a browser's polling (status and groups each second,
// clients every three seconds). Runs alternate, five of each; the median
// and the best of each are logged (on a shared machine the best is the
// figure least disturbed by others). Run it with -throughput.
func TestThroughputWithPageOpen(t *testing.T) {
	if !*throughput {
		t.Skip("run with -throughput")
	}
	srv, addr := brokertest.RunServer(t, broker.Options{})
	s, base := startWeb(t, Options{Broker: srv, SysInterval: 10 * time.Second})

	measure := func(label string) float64 {
		res, err := bench.Run(context.Background(), bench.Config{
			Broker: addr, Scenario: bench.FanIn, QoS: 1, Duration: 3 * time.Second, Drain: 3 * time.Second, Label: label,
		})
		if err != nil {
			t.Fatalf("%s: %v", label, err)
		}
		if res.Lost != 0 {
			t.Fatalf("%s: %d lost", label, res.Lost)
		}
		return res.DeliveryRate
	}
	poll := func() func() {
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			for n := 0; ; n++ {
				for _, p := range []string{"/api/v1/status", "/api/v1/groups"} {
					req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+p, nil)
					if resp, err := http.DefaultClient.Do(req); err == nil {
						resp.Body.Close()
					}
				}
				if n%3 == 0 {
					req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/v1/clients?limit=50", nil)
					if resp, err := http.DefaultClient.Do(req); err == nil {
						resp.Body.Close()
					}
				}
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
			}
		}()
		return func() { cancel(); wg.Wait() }
	}

	rates := map[string][]float64{}
	started := false
	for range 5 {
		rates["no web server"] = append(rates["no web server"], measure("off"))
		if !started {
			s.Start()
			started = true
		}
		rates["sampler and $SYS"] = append(rates["sampler and $SYS"], measure("sampler"))
		stop := poll()
		rates["page open"] = append(rates["page open"], measure("page"))
		stop()
		// The next "off" round needs the sampler off: a fresh server
		// cannot be stopped and started again, so stop this one.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		s.Shutdown(ctx)
		cancel()
		s, base = startWeb(t, Options{Broker: srv, SysInterval: 10 * time.Second})
		started = false
	}
	var report strings.Builder
	keys := []string{"no web server", "sampler and $SYS", "page open"}
	med0, best0 := median(rates[keys[0]]), slices.Max(rates[keys[0]])
	for _, k := range keys {
		m, b := median(rates[k]), slices.Max(rates[k])
		fmt.Fprintf(&report, "\n%-18s median %8.0f msg/s (%+5.1f%%)  best %8.0f msg/s (%+5.1f%%)  runs %v",
			k, m, 100*(m-med0)/med0, b, 100*(b-best0)/best0, roundAll(rates[k]))
	}
	t.Logf("fan-in, 8 publishers -> share group of 4, QoS 1, 300 B, 3 s runs:%s", report.String())
}

func median(v []float64) float64 {
	c := slices.Clone(v)
	sort.Float64s(c)
	return c[len(c)/2]
}

func roundAll(v []float64) []int {
	out := make([]int, len(v))
	for i, x := range v {
		out[i] = int(x)
	}
	return out
}
