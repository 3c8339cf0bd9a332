package registry_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/linemq/linemq/gateway/cluster/internal/etcdtest"
	"github.com/linemq/linemq/gateway/cluster/registry"
)

func TestRegistrationVisibleEverywhere(t *testing.T) {
	n1 := start(t, shared.Client(t), "n1", nil)
	n2 := start(t, shared.Client(t), "n2", nil)
	n3 := start(t, shared.Client(t), "gw/3", nil) // a name that needs escaping

	wait(t, n1.AddRoute("sensors/+/temp"))
	wait(t, n2.AddMember("workers", "jobs/#", "client/a", 1))
	rev := wait(t, n3.AddMember("workers", "jobs/#", "client/b", 2))
	caughtUp(t, rev, n1, n2, n3)

	for _, n := range []*node{n1, n2, n3} {
		var names []string
		for _, nd := range n.Nodes() {
			names = append(names, nd.Name)
			if nd.Addr != nd.Name+":7946" || nd.Version != "test" || nd.Epoch == 0 {
				t.Errorf("%s sees node %+v", n.name, nd)
			}
		}
		if !slices.Equal(names, []string{"gw/3", "n1", "n2"}) {
			t.Errorf("%s sees nodes %v", n.name, names)
		}
		if got := n.Routes("n1"); !slices.Equal(got, []string{"sensors/+/temp"}) {
			t.Errorf("%s sees n1's routes %v", n.name, got)
		}
		if got := n.RouteNodes("sensors/+/temp"); !slices.Equal(got, []string{"n1"}) {
			t.Errorf("%s sees route nodes %v", n.name, got)
		}
		if got := who(n.Members("workers", "jobs/#")); !slices.Equal(got, []string{"n2:client/a", "gw/3:client/b"}) {
			t.Errorf("%s sees members %v", n.name, got)
		}
		if got := n.Groups(); !slices.Equal(got, []registry.GroupKey{{Group: "workers", Filter: "jobs/#"}}) {
			t.Errorf("%s sees groups %v", n.name, got)
		}
		if s, err := n.State(); s != registry.Healthy {
			t.Errorf("%s is %v (%v)", n.name, s, err)
		}
	}
	m := n1.Members("workers", "jobs/#")[1]
	if m.QoS != 2 || m.Since.IsZero() || m.CreateRevision != rev {
		t.Errorf("member as seen: %+v (write revision %d)", m, rev)
	}
	// Each node saw every change once, as an event.
	evs := only(n1.since(0), func(e registry.Event) bool { return e.Kind == registry.MemberJoined })
	if got := describe(evs); !slices.Equal(got, []string{"MemberJoined gw/3:client/b", "MemberJoined n2:client/a"}) {
		t.Errorf("n1's member events %v", got)
	}
}

// TestWorkedExample is seed 000's cluster: members A, B, C on node 1, D on
// node 2, E on node 3. Every node agrees on the order; each puts its own
// members first.
func TestWorkedExample(t *testing.T) {
	n1 := start(t, shared.Client(t), "n1", nil)
	n2 := start(t, shared.Client(t), "n2", nil)
	n3 := start(t, shared.Client(t), "n3", nil)
	var rev int64
	for _, m := range []struct {
		n      *node
		client string
	}{{n1, "A"}, {n1, "B"}, {n1, "C"}, {n2, "D"}, {n3, "E"}} {
		rev = wait(t, m.n.AddMember("workers", "line/+/jobs", m.client, 1))
	}
	caughtUp(t, rev, n1, n2, n3)
	all := []string{"n1:A", "n1:B", "n1:C", "n2:D", "n3:E"}
	want := map[string][]string{
		"n1": all,
		"n2": {"n2:D", "n1:A", "n1:B", "n1:C", "n3:E"},
		"n3": {"n3:E", "n1:A", "n1:B", "n1:C", "n2:D"},
	}
	for _, n := range []*node{n1, n2, n3} {
		if got := who(n.Members("workers", "line/+/jobs")); !slices.Equal(got, all) {
			t.Errorf("%s: cluster order %v, want %v", n.name, got, all)
		}
		if got := who(n.MembersLocalFirst("workers", "line/+/jobs")); !slices.Equal(got, want[n.name]) {
			t.Errorf("%s: local first %v, want %v", n.name, got, want[n.name])
		}
	}
}

// TestConcurrentJoinsAgree subscribes members on three nodes at once: the
// order is whatever etcd made it, but it is the same on every node.
func TestConcurrentJoinsAgree(t *testing.T) {
	nodes := []*node{
		start(t, shared.Client(t), "n1", nil),
		start(t, shared.Client(t), "n2", nil),
		start(t, shared.Client(t), "n3", nil),
	}
	var ws []*registry.Write
	for i := range 20 {
		for _, n := range nodes {
			ws = append(ws, n.AddMember("g", "f", fmt.Sprintf("%s-%02d", n.name, i), 1))
		}
	}
	var rev int64
	for _, w := range ws {
		rev = max(rev, wait(t, w))
	}
	caughtUp(t, rev, nodes...)
	first := who(nodes[0].Members("g", "f"))
	if len(first) != 60 {
		t.Fatalf("%d members, want 60", len(first))
	}
	for _, n := range nodes[1:] {
		if got := who(n.Members("g", "f")); !slices.Equal(got, first) {
			t.Errorf("%s's order differs from n1's:\n%v\n%v", n.name, got, first)
		}
	}
}

func TestNodeLeavesInOneRevision(t *testing.T) {
	n1 := start(t, shared.Client(t), "n1", nil)
	n2 := start(t, shared.Client(t), "n2", nil)
	n3 := start(t, shared.Client(t), "n3", nil)
	wait(t, n3.AddRoute("a/#"))
	wait(t, n3.AddRoute("b"))
	wait(t, n3.AddMember("g", "f", "x", 1))
	wait(t, n3.AddMember("g", "f", "y", 1))
	if _, err := n3.ClaimSession(context.Background(), "x"); err != nil {
		t.Fatal(err)
	}
	rev := wait(t, n2.AddMember("g", "f", "z", 0))
	caughtUp(t, rev, n1)
	mark := n1.mark()

	n3.Close() // revokes the lease: everything of n3's goes at once
	eventually(t, "n1 to see n3 leave", func() bool { _, ok := n1.NodeInfo("n3"); return !ok })

	evs := n1.since(mark)
	want := []string{"MemberLeft n3:x", "MemberLeft n3:y", "NodeLeft n3:", "RouteRemoved n3:a/#", "RouteRemoved n3:b", "SessionReleased n3:x"}
	eventually(t, "all of n3's keys to go", func() bool { evs = n1.since(mark); return len(evs) >= len(want) })
	if got := describe(evs); !slices.Equal(got, want) {
		t.Fatalf("events after n3 closed\n got %v\nwant %v", got, want)
	}
	for _, e := range evs {
		if e.Revision != evs[0].Revision {
			t.Fatalf("n3's keys went in several revisions: %v", evs)
		}
	}
	if got := who(n1.Members("g", "f")); !slices.Equal(got, []string{"n2:z"}) {
		t.Errorf("members left %v", got)
	}
	if got := n1.Routes("n3"); len(got) != 0 {
		t.Errorf("n3's routes left behind: %v", got)
	}
	if s, err := n3.State(); s != registry.Closed {
		t.Errorf("closed registry reports %v, %v", s, err)
	}
	if err := n3.AddRoute("c").Err(); !errors.Is(err, registry.ErrClosed) {
		t.Errorf("write after Close: %v, want ErrClosed", err)
	}
}

func TestRoutesCounted(t *testing.T) {
	n1 := start(t, shared.Client(t), "n1", nil)
	n2 := start(t, shared.Client(t), "n2", nil)
	wait(t, n1.AddRoute("t/#"))
	wait(t, n1.AddRoute("t/#")) // a second subscriber of the same filter
	rev := wait(t, n1.RemoveRoute("t/#"))
	caughtUp(t, rev, n2)
	if got := n2.Routes("n1"); !slices.Equal(got, []string{"t/#"}) {
		t.Fatalf("route gone while one subscriber remains: %v", got)
	}
	rev = wait(t, n1.RemoveRoute("t/#"))
	caughtUp(t, rev, n2)
	if got := n2.Routes("n1"); len(got) != 0 {
		t.Fatalf("route kept after the last subscriber left: %v", got)
	}
	if err := n1.RemoveRoute("t/#").Err(); !errors.Is(err, registry.ErrNotHeld) {
		t.Fatalf("unbalanced RemoveRoute: %v, want ErrNotHeld", err)
	}
	routeEvents := only(n2.since(0), func(e registry.Event) bool { return e.Node == "n1" && e.Filter == "t/#" })
	if got := describe(routeEvents); !slices.Equal(got, []string{"RouteAdded n1:t/#", "RouteRemoved n1:t/#"}) {
		t.Fatalf("route events %v: the key must be written on the first subscribe and the last unsubscribe only", got)
	}
}

func TestWritesAreBatched(t *testing.T) {
	n1 := start(t, shared.Client(t), "n1", nil)
	n2 := start(t, shared.Client(t), "n2", nil)
	before := n1.Stats()
	const n = 300
	ws := make([]*registry.Write, n)
	for i := range ws {
		ws[i] = n1.AddMember("g", "f", fmt.Sprint(i), 1)
	}
	var rev int64
	for _, w := range ws {
		rev = max(rev, wait(t, w))
	}
	after := n1.Stats()
	txns, ops := after.Txns-before.Txns, after.TxnOps-before.TxnOps
	t.Logf("%d member writes in %d transactions", ops, txns)
	if ops != n || txns >= n {
		t.Fatalf("%d ops in %d transactions: queued writes must share transactions", ops, txns)
	}
	caughtUp(t, rev, n2)
	ids := who(n2.Members("g", "f"))
	if len(ids) != n {
		t.Fatalf("n2 sees %d members, want %d", len(ids), n)
	}
	for i := range ids {
		ids[i] = strings.TrimPrefix(ids[i], "n1:")
	}
	// The same member again with the same QoS writes nothing; a new QoS
	// updates in place.
	before = n1.Stats()
	wait(t, n1.AddMember("g", "f", "7", 1))
	if after := n1.Stats(); after.TxnOps != before.TxnOps {
		t.Fatalf("re-adding an unchanged member wrote %d ops", after.TxnOps-before.TxnOps)
	}
	rev = wait(t, n1.AddMember("g", "f", "7", 2))
	caughtUp(t, rev, n2)
	// Written in one transaction, the members share a create revision
	// and are ordered by client id.
	ms := n2.Members("g", "f")
	if i := slices.IndexFunc(ms, func(m registry.Member) bool { return m.Client == "7" }); i != slices.Index(ids, "7") || ms[i].QoS != 2 {
		t.Fatalf("QoS update moved or missed the member: at %d, %+v", i, ms[i])
	}
	for i := range ws {
		ws[i] = n1.RemoveMember("g", "f", fmt.Sprint(i))
	}
	for _, w := range ws {
		rev = max(rev, wait(t, w))
	}
	caughtUp(t, rev, n2)
	if g := n2.Groups(); len(g) != 0 {
		t.Fatalf("groups left after every member left: %v", g)
	}
}

// TestClaimsNeverDouble has three nodes claim one client over and over at
// once. Each successful claim must take over from exactly the claim before
// it in revision order: ownership passes along one chain and never forks.
func TestClaimsNeverDouble(t *testing.T) {
	nodes := []*node{
		start(t, shared.Client(t), "n1", nil),
		start(t, shared.Client(t), "n2", nil),
		start(t, shared.Client(t), "n3", nil),
	}
	type result struct {
		node  string
		claim registry.Claim
	}
	var (
		mu        sync.Mutex
		results   []result
		contended int
		wg        sync.WaitGroup
	)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	for _, n := range nodes {
		for range 2 {
			wg.Go(func() {
				for range 10 {
					c, err := n.ClaimSession(ctx, "line/1/plc")
					mu.Lock()
					switch {
					case err == nil:
						results = append(results, result{n.name, c})
					case errors.Is(err, registry.ErrContended):
						contended++
					default:
						t.Error(err)
					}
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	slices.SortFunc(results, func(a, b result) int { return int(a.claim.Revision - b.claim.Revision) })
	t.Logf("%d claims succeeded, %d gave up contended", len(results), contended)
	if len(results) == 0 {
		t.Fatal("no claim succeeded")
	}
	if p := results[0].claim.Prev; p.Node != "" {
		t.Errorf("first claim took over from %+v, want nobody", p)
	}
	for i := 1; i < len(results); i++ {
		prev, cur := results[i-1], results[i]
		if cur.claim.Revision == prev.claim.Revision {
			t.Fatalf("two claims made revision %d", cur.claim.Revision)
		}
		if cur.claim.Prev.Revision != prev.claim.Revision || cur.claim.Prev.Node != prev.node {
			t.Fatalf("claim %d by %s at %d took over from %+v, want %s's claim at %d: ownership forked",
				i, cur.node, cur.claim.Revision, cur.claim.Prev, prev.node, prev.claim.Revision)
		}
	}
	last := results[len(results)-1]
	caughtUp(t, last.claim.Revision, nodes...)
	for _, n := range nodes {
		if o, ok := n.SessionOwner("line/1/plc"); !ok || o.Node != last.node || o.Revision != last.claim.Revision {
			t.Errorf("%s sees owner %+v, want %s at %d", n.name, o, last.node, last.claim.Revision)
		}
	}
}

func TestSessionTakeoverAndRelease(t *testing.T) {
	n1 := start(t, shared.Client(t), "n1", nil)
	n2 := start(t, shared.Client(t), "n2", nil)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()

	c1, err := n1.ClaimSession(ctx, "dev/7")
	if err != nil || c1.Prev.Node != "" {
		t.Fatalf("first claim: %+v, %v", c1, err)
	}
	again, err := n1.ClaimSession(ctx, "dev/7") // the client reconnects to the same node
	if err != nil || again.Prev.Node != "n1" || again.Prev.Revision != c1.Revision {
		t.Fatalf("reclaim on the same node: %+v, %v", again, err)
	}
	caughtUp(t, again.Revision, n1, n2)
	mark := n1.mark()
	c2, err := n2.ClaimSession(ctx, "dev/7") // the client moves to n2
	if err != nil || c2.Prev.Node != "n1" || c2.Prev.Revision != again.Revision {
		t.Fatalf("takeover: %+v, %v; want it taken from n1 at %d", c2, err, again.Revision)
	}
	caughtUp(t, c2.Revision, n1)
	// n1 learns it lost the client through its copy.
	evs := only(n1.since(mark), func(e registry.Event) bool { return e.Client == "dev/7" })
	if len(evs) != 1 || evs[0].Kind != registry.SessionOwned || evs[0].Owner.Node != "n2" || evs[0].Prev.Node != "n1" {
		t.Fatalf("n1's events for the takeover: %+v", evs)
	}
	// n1 no longer owns it: its release leaves n2's ownership alone.
	if err := n1.ReleaseSession(ctx, "dev/7"); err != nil {
		t.Fatal(err)
	}
	if o, _ := n1.SessionOwner("dev/7"); o.Node != "n2" {
		t.Fatalf("owner after a stale release: %+v", o)
	}
	if err := n2.ReleaseSession(ctx, "dev/7"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the release to reach n1", func() bool { _, ok := n1.SessionOwner("dev/7"); return !ok })
}

func TestClaimGivenUpIsUndone(t *testing.T) {
	n1 := start(t, shared.Client(t), "n1", nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := n1.ClaimSession(ctx, "late"); !errors.Is(err, context.Canceled) {
		t.Fatalf("claim with a cancelled context: %v", err)
	}
	// Whatever happened to the claim, the release queued behind it leaves
	// nobody owning the client once it is through.
	wait(t, n1.AddRoute("barrier"))
	if err := n1.ReleaseSession(context.Background(), "late"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "n1's copy to settle", func() bool { _, ok := n1.SessionOwner("late"); return !ok })
}

func TestReadyWaitsForEtcd(t *testing.T) {
	cli, proxy := shared.ProxiedClient(t)
	proxy.Cut()
	r, err := registry.New(registry.Options{Client: cli, Node: "late", Prefix: etcdtest.Prefix(t), RequestTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	w := r.AddMember("g", "f", "c", 1)
	// Once a request has timed out the registry says why it is not ready.
	eventually(t, "a reason to be reported", func() bool { _, why := r.State(); return why != nil })
	select {
	case <-r.Ready():
		t.Fatal("ready while etcd is unreachable")
	case <-w.Done():
		t.Fatal("a write completed while etcd is unreachable")
	default:
	}
	if s, why := r.State(); s != registry.Starting {
		t.Fatalf("state %v (%v); want starting", s, why)
	}
	proxy.Resume()
	select {
	case <-r.Ready():
	case <-time.After(waitFor):
		t.Fatal("not ready after etcd became reachable")
	}
	wait(t, w)
}

func TestOptionsChecked(t *testing.T) {
	cli := shared.Client(t)
	for _, o := range []registry.Options{
		{Node: "x"},
		{Client: cli},
		{Client: cli, Node: "x", Prefix: "/no-slash"},
		{Client: cli, Node: "x", WatchCheck: time.Second, WatchTimeout: time.Millisecond},
	} {
		if _, err := registry.New(o); err == nil {
			t.Errorf("New(%+v) accepted", o)
		}
	}
	r, err := registry.New(registry.Options{Client: cli, Node: "x"})
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	if err := r.Start(); !errors.Is(err, registry.ErrClosed) {
		t.Errorf("Start after Close: %v", err)
	}
}

// keysOf returns the keys under prefix with their leases, read directly.
func keysOf(t *testing.T, cli *clientv3.Client, prefix string) map[string]clientv3.LeaseID {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]clientv3.LeaseID{}
	for _, kv := range resp.Kvs {
		out[string(kv.Key)] = clientv3.LeaseID(kv.Lease)
	}
	return out
}

// TestLongKeysSplitTransactions registers members whose filters are near
// MQTT's 64 KiB limit: 30 of them exceed etcd's request size limit
// together, so they must go in several transactions, and all arrive.
func TestLongKeysSplitTransactions(t *testing.T) {
	n1 := start(t, shared.Client(t), "n1", nil)
	filter := strings.Repeat("x/", 30000) + "#"
	before := n1.Stats()
	ws := make([]*registry.Write, 30)
	for i := range ws {
		ws[i] = n1.AddMember("g", filter, fmt.Sprint(i), 1)
	}
	var rev int64
	for _, w := range ws {
		rev = max(rev, wait(t, w))
	}
	caughtUp(t, rev, n1)
	if got := len(n1.Members("g", filter)); got != 30 {
		t.Fatalf("%d members, want 30", got)
	}
	if st := n1.Stats(); st.Txns-before.Txns < 2 || st.TxnErrors != before.TxnErrors {
		t.Fatalf("stats %+v: want several transactions and no errors", st)
	}
}

// TestNewStoreWaitsForPredecessor: a run whose store is not the one its
// node's live registration names (the data directory was lost) registers
// only once that registration's lease has ended, so that the others see
// the earlier run leave; a run with the same store, or none, takes the
// registration over at once.
func TestNewStoreWaitsForPredecessor(t *testing.T) {
	cli := shared.Client(t)
	prefix := etcdtest.Prefix(t)
	crashed := func(name, store string) clientv3.LeaseID {
		// What a run that died leaves: its node key, under a live lease.
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		grant, err := cli.Grant(ctx, 60)
		if err != nil {
			t.Fatal(err)
		}
		v := fmt.Sprintf(`{"addr":"%s:7946","epoch":1,"store":%q}`, name, store)
		if _, err := cli.Put(ctx, prefix+"nodes/"+name, v, clientv3.WithLease(grant.ID)); err != nil {
			t.Fatal(err)
		}
		return grant.ID
	}
	obs := start(t, cli, "obs", func(o *registry.Options) { o.Prefix = prefix })

	// Same store: registers over the earlier run at once.
	crashed("same", "s1")
	start(t, cli, "same", func(o *registry.Options) { o.Prefix, o.Store = prefix, "s1" })

	// Another store: waits, saying why, until the earlier lease ends.
	lease := crashed("blank", "s1")
	eventually(t, "the observer to see the earlier run", func() bool { info, ok := obs.NodeInfo("blank"); return ok && info.Store == "s1" })
	mark := obs.mark()
	r, err := registry.New(registry.Options{Client: cli, Node: "blank", Prefix: prefix, Addr: "blank:7946", Store: "s2"})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the new run to say it waits", func() bool {
		_, err := r.State()
		return err != nil && strings.Contains(err.Error(), "earlier run's lease")
	})
	select {
	case <-r.Ready():
		t.Fatal("registered over an earlier run with another store")
	default:
	}
	if _, err := cli.Revoke(context.Background(), lease); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.Ready():
	case <-time.After(waitFor):
		t.Fatal("not registered after the earlier run's lease ended")
	}
	eventually(t, "the observer to see the new run", func() bool { info, ok := obs.NodeInfo("blank"); return ok && info.Store == "s2" })
	var kinds []registry.EventKind
	for _, ev := range obs.since(mark) {
		if ev.Node == "blank" {
			kinds = append(kinds, ev.Kind)
		}
	}
	if !slices.Equal(kinds, []registry.EventKind{registry.NodeLeft, registry.NodeJoined}) {
		t.Fatalf("the observer saw %v of node blank, want NodeLeft then NodeJoined", kinds)
	}
}

// TestBarrier: a barrier completes after the route and member writes
// queued before it, with a revision no lower than theirs, so a node whose
// copy reaches it sees them (the fail-over waits for that, markAt).
func TestBarrier(t *testing.T) {
	n1 := start(t, shared.Client(t), "n1", nil)
	n2 := start(t, shared.Client(t), "n2", nil)
	w1 := n1.AddRoute("plant/#")
	w2 := n1.AddMember("workers", "jobs/#", "client/a", 1)
	rev := wait(t, n1.Barrier())
	if r1, r2 := wait(t, w1), wait(t, w2); rev < r1 || rev < r2 {
		t.Fatalf("barrier at revision %d, before the writes queued ahead of it (%d, %d)", rev, r1, r2)
	}
	caughtUp(t, rev, n2)
	if got := n2.Routes("n1"); !slices.Equal(got, []string{"plant/#"}) {
		t.Errorf("n2's copy at the barrier's revision has routes %v", got)
	}
	if got := who(n2.Members("workers", "jobs/#")); !slices.Equal(got, []string{"n1:client/a"}) {
		t.Errorf("n2's copy at the barrier's revision has members %v", got)
	}
}

// TestResumeKeepsTheReplicaLineage: a session adopted from n1's replica
// keeps naming n1 while its client resumes it (on the adopter, then on a
// third node), so that n1, coming back with messages only it had, knows
// to hand them on; a clean start ends the lineage, and so does the session
// coming back to n1 itself.
func TestResumeKeepsTheReplicaLineage(t *testing.T) {
	n2 := start(t, shared.Client(t), "n2", nil)
	n3 := start(t, shared.Client(t), "n3", nil)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	owner := func(want registry.Owner) {
		t.Helper()
		eventually(t, fmt.Sprintf("the owner %s (replica of %q)", want.Node, want.ReplicaOf), func() bool {
			o, ok := n3.SessionOwner("hist")
			return ok && o.Node == want.Node && o.ReplicaOf == want.ReplicaOf
		})
	}
	if _, err := n2.ClaimReplica(ctx, "hist", "n1"); err != nil {
		t.Fatal(err)
	}
	owner(registry.Owner{Node: "n2", ReplicaOf: "n1"})
	seen := func() registry.Owner { // what a node resuming the client reads first
		o, _, err := n3.LookupSession(ctx, "hist")
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	if _, err := n2.ResumeConnection(ctx, "hist", "", seen()); err != nil { // the client resumes on the adopter
		t.Fatal(err)
	}
	owner(registry.Owner{Node: "n2", ReplicaOf: "n1"})
	if _, err := n3.ResumeConnection(ctx, "hist", "", seen()); err != nil { // and moves on (handed over)
		t.Fatal(err)
	}
	owner(registry.Owner{Node: "n3", ReplicaOf: "n1"})
	if _, err := n2.ClaimConnection(ctx, "hist", ""); err != nil { // a clean start
		t.Fatal(err)
	}
	owner(registry.Owner{Node: "n2"})

	if err := n2.ReleaseSession(ctx, "hist"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "hist released", func() bool { _, ok := n3.SessionOwner("hist"); return !ok })
	if _, err := n3.ClaimReplica(ctx, "hist", "n2"); err != nil {
		t.Fatal(err)
	}
	if _, err := n2.ResumeConnection(ctx, "hist", "", seen()); err != nil { // back where it was adopted from
		t.Fatal(err)
	}
	owner(registry.Owner{Node: "n2"})
}

// TestResumeDoesNotTakeOverALaterClaim: a resumption claims over the record
// its caller looked at, or this node's own, never over one another node
// wrote since: that node has the session (it adopted it from a replica,
// or its client resumed there) and must be asked for it. Fault-suite seed
// 44: a gateway that had just run again after a stall looked, found no
// owner, and took over the session another gateway had adopted a few
// milliseconds later, starting it empty over 1,120 queued messages.
func TestResumeDoesNotTakeOverALaterClaim(t *testing.T) {
	a := start(t, shared.Client(t), "a", nil)
	b := start(t, shared.Client(t), "b", nil)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()

	seen, ok, err := a.LookupSession(ctx, "late")
	if err != nil || ok {
		t.Fatalf("a found an owner of a new client: %v %v", ok, err)
	}
	if _, err := b.ClaimReplica(ctx, "late", "gone"); err != nil { // b adopts it meanwhile
		t.Fatal(err)
	}
	if _, err := a.ResumeConnection(ctx, "late", "", seen); !errors.Is(err, registry.ErrOwned) {
		t.Fatalf("resuming over a claim made after the look: %v, want ErrOwned", err)
	}
	if o, ok, err := a.LookupSession(ctx, "late"); err != nil || !ok || o.Node != "b" {
		t.Fatalf("the record after the refused resumption: %+v %v %v, want b's", o, ok, err)
	}

	// Looking again, a finds b's record; b hands the session over, and the
	// resumption replaces that record.
	seen, _, err = a.LookupSession(ctx, "late")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.ResumeConnection(ctx, "late", "", seen); err != nil {
		t.Fatalf("resuming over the record looked at: %v", err)
	}
	// And a resumption over a's own record, whatever it looked at.
	if _, err := a.ResumeConnection(ctx, "late", "", registry.Owner{}); err != nil {
		t.Fatalf("resuming over this node's own record: %v", err)
	}
	if o, ok, err := b.LookupSession(ctx, "late"); err != nil || !ok || o.Node != "a" {
		t.Fatalf("the record: %+v %v %v, want a's", o, ok, err)
	}
}
