package registry_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/linemq/linemq/gateway/cluster/internal/etcdtest"
	"github.com/linemq/linemq/gateway/cluster/registry"
)

// shared is the one etcd member the package's tests share, each under a
// prefix of its own. Tests that stop etcd start their own. It is set once,
// in TestMain, before any test runs.
var shared *etcdtest.Etcd

func TestMain(m *testing.M) {
	etcdtest.MainShared(m, func(e *etcdtest.Etcd) { shared = e })
}

// waitFor bounds every wait in these tests.
const waitFor = 15 * time.Second

// node is a registry under test with everything it reported recorded.
type node struct {
	*registry.Registry
	name string

	mu     sync.Mutex
	events []registry.Event
	states []registry.State
}

// start starts a registry named name on cli under the test's prefix, waits
// until it is ready, and closes it when the test ends. tweak, if not nil,
// adjusts the options first.
func start(t *testing.T, cli *clientv3.Client, name string, tweak func(*registry.Options)) *node {
	t.Helper()
	n := &node{name: name}
	o := registry.Options{
		Client:  cli,
		Node:    name,
		Prefix:  etcdtest.Prefix(t),
		Addr:    name + ":7946",
		Version: "test",
		OnEvent: func(ev registry.Event) {
			n.mu.Lock()
			n.events = append(n.events, ev)
			n.mu.Unlock()
		},
		OnState: func(s registry.State, _ error) {
			n.mu.Lock()
			n.states = append(n.states, s)
			n.mu.Unlock()
		},
	}
	if tweak != nil {
		tweak(&o)
	}
	r, err := registry.New(o)
	if err != nil {
		t.Fatal(err)
	}
	n.Registry = r
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	select {
	case <-r.Ready():
	case <-time.After(waitFor):
		st, err := r.State()
		t.Fatalf("%s not ready after %v: %v %v", name, waitFor, st, err)
	}
	return n
}

// mark returns a position in the node's event log, for since.
func (n *node) mark() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.events)
}

// since returns the events recorded after mark.
func (n *node) since(mark int) []registry.Event {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.events[mark:])
}

func (n *node) stateLog() []registry.State {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.states)
}

// eventually polls cond until it holds or waitFor passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", waitFor, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// wait waits for a write to commit.
func wait(t *testing.T, w *registry.Write) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := w.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	return w.Revision()
}

// caughtUp waits until every node's copy has reached rev.
func caughtUp(t *testing.T, rev int64, nodes ...*node) {
	t.Helper()
	for _, n := range nodes {
		eventually(t, fmt.Sprintf("%s to reach revision %d", n.name, rev), func() bool { return n.Revision() >= rev })
	}
}

func inState(t *testing.T, n *node, want registry.State) {
	t.Helper()
	eventually(t, fmt.Sprintf("%s to be %v", n.name, want), func() bool {
		s, _ := n.State()
		return s == want
	})
}

// who lists members as "node:client", in order.
func who(ms []registry.Member) []string {
	out := make([]string, 0, len(ms))
	for _, m := range ms {
		out = append(out, m.Node+":"+m.Client)
	}
	return out
}

// describe renders events as sorted "Kind node:client-or-filter" strings,
// for comparing sets of changes.
func describe(evs []registry.Event) []string {
	out := make([]string, 0, len(evs))
	for _, e := range evs {
		what := e.Client
		if what == "" {
			what = e.Filter
		}
		out = append(out, fmt.Sprintf("%v %s:%s", e.Kind, e.Node, what))
	}
	slices.Sort(out)
	return out
}

func only(evs []registry.Event, keep func(registry.Event) bool) []registry.Event {
	var out []registry.Event
	for _, e := range evs {
		if keep(e) {
			out = append(out, e)
		}
	}
	return out
}

// percentile returns the p-th percentile (0-100) of sorted durations.
func percentile(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := (len(sorted)*p + 99) / 100
	return sorted[min(max(i-1, 0), len(sorted)-1)]
}
