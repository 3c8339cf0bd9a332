package registry_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/linemq/linemq/gateway/cluster/internal/etcdtest"
	"github.com/linemq/linemq/gateway/cluster/registry"
)

// TestWriteToVisibleLatency measures, against a member that fsyncs as a
// real one does, how long a membership takes from AddMember on one node to
// committed (what a SUBACK waits for) and to visible in another node's
// copy (when that node can route to it): 1,000 one at a time, then 1,000
// at once. It logs the figures and asserts none: timing depends on the
// machine. docs/cluster.md quotes them.
func TestWriteToVisibleLatency(t *testing.T) {
	if testing.Short() {
		t.Skip("measurement")
	}
	e := etcdtest.Start(t, etcdtest.Options{Fsync: true})
	var (
		mu      sync.Mutex
		visible = map[string]chan time.Time{}
	)
	seen := func(client string) chan time.Time {
		mu.Lock()
		defer mu.Unlock()
		c, ok := visible[client]
		if !ok {
			c = make(chan time.Time, 1)
			visible[client] = c
		}
		return c
	}
	a := start(t, e.Client(t), "a", nil)
	start(t, e.Client(t), "b", func(o *registry.Options) {
		o.OnEvent = func(ev registry.Event) {
			if ev.Kind == registry.MemberJoined {
				seen(ev.Client) <- time.Now()
			}
		}
	})
	const n = 1000

	// One at a time: each write waits for the one before to be visible.
	var commit, vis []time.Duration
	for i := range n {
		c := fmt.Sprint("seq-", i)
		t0 := time.Now()
		w := a.AddMember("g", "f", c, 1)
		wait(t, w)
		commit = append(commit, time.Since(t0))
		select {
		case at := <-seen(c):
			vis = append(vis, at.Sub(t0))
		case <-time.After(waitFor):
			t.Fatalf("%s never became visible", c)
		}
	}
	report(t, "one at a time: committed", commit)
	report(t, "one at a time: visible on the other node", vis)

	// A burst: n subscribes arriving together share transactions.
	before := a.Stats()
	commit, vis = commit[:0], vis[:0]
	t0 := time.Now()
	ws := make([]*registry.Write, n)
	for i := range ws {
		ws[i] = a.AddMember("g", "f", fmt.Sprint("burst-", i), 1)
	}
	for _, w := range ws {
		wait(t, w)
		commit = append(commit, time.Since(t0))
	}
	for i := range n {
		select {
		case at := <-seen(fmt.Sprint("burst-", i)):
			vis = append(vis, at.Sub(t0))
		case <-time.After(waitFor):
			t.Fatalf("burst-%d never became visible", i)
		}
	}
	after := a.Stats()
	report(t, "burst of 1000: committed", commit)
	report(t, "burst of 1000: visible on the other node", vis)
	t.Logf("burst of 1000: %d transactions, %v in all", after.Txns-before.Txns, vis[len(vis)-1])
	st := a.Stats()
	t.Logf("registry lag (own writes, send to own watch): last %v, max %v, mean %v over %d",
		st.Lag, st.LagMax, st.LagSum/time.Duration(max(st.LagCount, 1)), st.LagCount)
}

func report(t *testing.T, what string, ds []time.Duration) {
	t.Helper()
	s := slices.Clone(ds)
	slices.Sort(s)
	t.Logf("%-42s p50 %8v  p99 %8v  max %8v  (n=%d)", what, percentile(s, 50).Round(time.Microsecond),
		percentile(s, 99).Round(time.Microsecond), s[len(s)-1].Round(time.Microsecond), len(s))
}
