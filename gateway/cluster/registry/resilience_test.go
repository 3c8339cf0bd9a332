package registry_test

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/linemq/linemq/gateway/cluster/internal/etcdtest"
	"github.com/linemq/linemq/gateway/cluster/registry"
)

// fastWatch makes a registry notice a silent etcd within a second.
func fastWatch(o *registry.Options) {
	o.WatchCheck = 100 * time.Millisecond
	o.WatchTimeout = time.Second
	o.RequestTimeout = time.Second
}

// groupOf sets up five members of one group on b, one at a time so each
// has its own create revision, and one on a; it returns the revision.
func groupOf(t *testing.T, a, b *node) int64 {
	t.Helper()
	for _, c := range []string{"m1", "m2", "m3", "m4", "m5"} {
		wait(t, b.AddMember("g", "f", c, 1))
	}
	rev := wait(t, a.AddMember("g", "f", "a1", 1))
	caughtUp(t, rev, a, b)
	return rev
}

// changeWhileAway makes the changes a cut-off node must catch up with, and
// returns the revision they end at: m2 leaves, m6 joins, m4 leaves and
// joins again (so it moves to the end), b gains a route.
func changeWhileAway(t *testing.T, b *node) int64 {
	t.Helper()
	wait(t, b.RemoveMember("g", "f", "m2"))
	wait(t, b.AddMember("g", "f", "m6", 1))
	wait(t, b.AddRoute("x/#"))
	wait(t, b.RemoveMember("g", "f", "m4"))
	return wait(t, b.AddMember("g", "f", "m4", 1))
}

// What a node away during changeWhileAway must find on its return.
var (
	wantAfterAway  = []string{"b:m1", "b:m3", "b:m5", "a:a1", "b:m6", "b:m4"}
	wantEventsAway = []string{"MemberJoined b:m4", "MemberJoined b:m6", "MemberLeft b:m2", "MemberLeft b:m4", "RouteAdded b:x/#"}
)

func aboutB(e registry.Event) bool { return e.Node == "b" }

// TestResyncAfterCompaction cuts a node's connection to etcd briefly (the
// client's watch reconnects by itself), changes the registry and compacts
// the history meanwhile. The watch, resuming, finds its revision compacted;
// the node re-reads and reports exactly what changed, members keeping
// their places.
func TestResyncAfterCompaction(t *testing.T) {
	cli, proxy := shared.ProxiedClient(t)
	a := start(t, cli, "a", func(o *registry.Options) {
		// The stall detector must not fire first: this test is about the
		// watch coming back on its own to a compacted history.
		o.WatchCheck = 10 * time.Second
		o.WatchTimeout = time.Minute
	})
	admin := shared.Client(t)
	b := start(t, admin, "b", nil)
	groupOf(t, a, b)
	mark := a.mark()

	proxy.Cut()
	rev := changeWhileAway(t, b)
	compact(t, admin, rev)
	proxy.Resume()

	caughtUp(t, rev, a, b)
	if st := a.Stats(); st.Compacted == 0 || st.Loads < 2 {
		t.Fatalf("stats %+v: want the watch ended by the compaction and a re-read", st)
	}
	checkCaughtUp(t, a, b, mark)
}

// TestDegradedWhilePartitioned cuts a node off for longer than its watch
// timeout: it reports Degraded, keeps its last copy and queues its writes,
// then reconciles when the partition heals.
func TestDegradedWhilePartitioned(t *testing.T) {
	cli, proxy := shared.ProxiedClient(t)
	a := start(t, cli, "a", fastWatch)
	b := start(t, shared.Client(t), "b", nil)
	groupOf(t, a, b)
	mark := a.mark()

	proxy.Cut()
	inState(t, a, registry.Degraded)
	before := a.Members("g", "f")
	rev := changeWhileAway(t, b)
	compact(t, shared.Client(t), rev)
	w := a.AddMember("g", "f", "a2", 1) // queued while cut off
	if got := a.Members("g", "f"); !slices.Equal(who(got), who(before)) {
		t.Fatalf("the copy changed while cut off: %v", who(got))
	}
	select {
	case <-w.Done():
		t.Fatal("a write completed while cut off")
	default:
	}
	proxy.Resume()

	inState(t, a, registry.Healthy)
	rev = max(rev, wait(t, w))
	caughtUp(t, rev, a, b)
	checkCaughtUp(t, a, b, mark)
	if !slices.Contains(who(b.Members("g", "f")), "a:a2") {
		t.Fatal("b does not see the member a added while cut off")
	}
	if st := a.Stats(); st.WatchLost == 0 {
		t.Fatalf("stats %+v: want the lost watch counted", st)
	}
	checkReported(t, a)
}

// checkCaughtUp checks that a, back in touch and caught up with b, reports
// exactly b's changes made while it was away (once each, as found by the
// re-read or the watch) and orders the group as b does.
func checkCaughtUp(t *testing.T, a, b *node, mark int) {
	t.Helper()
	evs := only(a.since(mark), aboutB)
	if got := describe(evs); !slices.Equal(got, wantEventsAway) {
		t.Fatalf("changes reported after reconnecting\n got %v\nwant %v", got, wantEventsAway)
	}
	got := who(a.Members("g", "f"))
	got = slices.DeleteFunc(got, func(s string) bool { return s == "a:a2" })
	if !slices.Equal(got, wantAfterAway) {
		t.Fatalf("order after reconnecting %v, want %v", got, wantAfterAway)
	}
	if x, y := who(a.Members("g", "f")), who(b.Members("g", "f")); !slices.Equal(x, y) {
		t.Fatalf("a and b disagree on the order:\n%v\n%v", x, y)
	}
}

func compact(t *testing.T, cli *clientv3.Client, rev int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if _, err := cli.Compact(ctx, rev, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
}

// TestLeaseLostReregisters revokes a living node's lease from outside, as
// an expiry during a long stall would: its keys vanish everywhere, and it
// takes a new lease and writes everything it holds again.
func TestLeaseLostReregisters(t *testing.T) {
	admin := shared.Client(t)
	a := start(t, shared.Client(t), "a", func(o *registry.Options) { o.TTL = 2 * time.Second })
	b := start(t, shared.Client(t), "b", nil)
	wait(t, a.AddRoute("r/#"))
	wait(t, a.AddMember("g", "f", "a1", 1))
	wait(t, a.AddMember("g", "f", "a2", 1))
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	c, err := a.ClaimSession(ctx, "a1")
	if err != nil {
		t.Fatal(err)
	}
	caughtUp(t, c.Revision, b)
	mark := b.mark()
	old := a.Lease()

	if _, err := admin.Revoke(ctx, old); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a to register again", func() bool {
		l := a.Lease()
		return l != 0 && l != old
	})
	eventually(t, "b to see a back", func() bool {
		o, _ := b.SessionOwner("a1")
		return len(b.Members("g", "f")) == 2 && len(b.Routes("a")) == 1 && o.Node == "a"
	})
	inState(t, a, registry.Healthy)

	// b saw a leave (all at once) and come back.
	var evs, left, joined []registry.Event
	eventually(t, "b's events", func() bool { evs = b.since(mark); return len(evs) >= 10 })
	for _, e := range evs {
		switch e.Kind {
		case registry.NodeLeft, registry.MemberLeft, registry.RouteRemoved, registry.SessionReleased:
			left = append(left, e)
		case registry.NodeJoined, registry.MemberJoined, registry.RouteAdded, registry.SessionOwned:
			joined = append(joined, e)
		}
	}
	if len(evs) != 10 || len(left) != 5 || len(joined) != 5 {
		t.Fatalf("b saw %d removals and %d additions, want 5 and 5: %v", len(left), len(joined), describe(evs))
	}
	for _, e := range left {
		if e.Revision != left[0].Revision {
			t.Fatalf("a's keys went in several revisions: %v", left)
		}
	}
	if st := a.Stats(); st.Leases != 2 {
		t.Fatalf("stats %+v: want 2 leases", st)
	}
	checkReported(t, a)
	onLease(t, admin, etcdtest.Prefix(t), "a", a.Lease(), 5)
}

// checkReported checks a node reported its trouble: healthy, then
// degraded at least once, and healthy again.
func checkReported(t *testing.T, n *node) {
	t.Helper()
	states := n.stateLog()
	if len(states) < 3 || states[0] != registry.Healthy || !slices.Contains(states, registry.Degraded) || states[len(states)-1] != registry.Healthy {
		t.Errorf("%s's state changes %v: want healthy, degraded, healthy", n.name, states)
	}
}

// onLease checks that node's keys (its node key, routes, members and the
// sessions it owns) number want and are all bound to lease: nothing is
// left on an old one.
func onLease(t *testing.T, cli *clientv3.Client, prefix, node string, lease clientv3.LeaseID, want int) {
	t.Helper()
	n := 0
	for k, l := range keysOf(t, cli, prefix) {
		rest := strings.TrimPrefix(k, prefix)
		if rest != "nodes/"+node && !strings.HasPrefix(rest, "routes/"+node+"/") &&
			!strings.HasPrefix(rest, "members/"+node+"/") && !strings.HasPrefix(rest, "sessions/"+node) {
			continue
		}
		n++
		if l != lease {
			t.Errorf("key %s on lease %x, want %x", k, l, lease)
		}
	}
	if n != want {
		t.Errorf("%s has %d keys, want %d", node, n, want)
	}
}

// TestEtcdRestart stops etcd for longer than the lease TTL while two nodes
// run: both report Degraded and keep their copies; a write queued
// meanwhile commits once etcd is back; the lost leases are renewed and
// everything reconciles without leftovers.
func TestEtcdRestart(t *testing.T) {
	e := etcdtest.Start(t, etcdtest.Options{})
	tweak := func(o *registry.Options) {
		fastWatch(o)
		o.TTL = 2 * time.Second
	}
	cliA, _ := e.ProxiedClient(t)
	cliB, _ := e.ProxiedClient(t)
	a := start(t, cliA, "a", tweak)
	b := start(t, cliB, "b", tweak)
	wait(t, a.AddMember("g", "f", "a1", 1))
	rev := wait(t, b.AddMember("g", "f", "b1", 1))
	caughtUp(t, rev, a, b)
	leaseA := a.Lease()

	e.Stop(t)
	inState(t, a, registry.Degraded)
	inState(t, b, registry.Degraded)
	w := a.AddMember("g", "f", "a2", 1)
	if got := who(a.Members("g", "f")); !slices.Equal(got, []string{"a:a1", "b:b1"}) {
		t.Fatalf("a's copy while etcd is down: %v", got)
	}
	// The client gives the lease up once its TTL passes unrenewed.
	eventually(t, "a to give up its lease", func() bool { return a.Lease() == 0 })
	e.Restart(t)

	inState(t, a, registry.Healthy)
	inState(t, b, registry.Healthy)
	wait(t, w)
	// Whether a1 and b1 keep their places depends on whether their old
	// leases outlived the restart until the nodes registered again; that
	// every node agrees does not.
	eventually(t, "both to agree on the group", func() bool {
		x, y := who(a.Members("g", "f")), who(b.Members("g", "f"))
		return len(x) == 3 && slices.Equal(x, y)
	})
	if l := a.Lease(); l == 0 || l == leaseA {
		t.Fatalf("a's lease %x after the restart, want a new one (old %x)", l, leaseA)
	}
	// Every key of a's is on its new lease, none left on the old one.
	admin := e.Client(t)
	onLease(t, admin, etcdtest.Prefix(t), "a", a.Lease(), 3)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if ttl, err := admin.TimeToLive(ctx, leaseA); err == nil && ttl.TTL > 0 {
		t.Errorf("a's old lease still lives (TTL %d)", ttl.TTL)
	}
	checkReported(t, a)
	checkReported(t, b)
}

// TestRestartedNodeClearsItsLeftovers crashes a node (its client goes
// without revoking the lease) and starts it again at once: the new run
// revokes the old run's lease before it is ready, so the old run's
// members and sessions do not linger for a TTL in everyone's copy.
func TestRestartedNodeClearsItsLeftovers(t *testing.T) {
	admin := shared.Client(t)
	b := start(t, admin, "b", nil)
	crashing := crashableClient(t)
	// Its Close, trying to revoke through a closed client, gives up after
	// the request timeout.
	old := start(t, crashing, "a", func(o *registry.Options) { o.RequestTimeout = 200 * time.Millisecond })
	wait(t, old.AddMember("g", "f", "gone", 1))
	wait(t, old.AddRoute("gone/#"))
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	c, err := old.ClaimSession(ctx, "gone")
	if err != nil {
		t.Fatal(err)
	}
	caughtUp(t, c.Revision, b)
	oldLease := old.Lease()
	crashing.Close() // the lease can no longer be revoked nor kept alive
	old.Close()
	if ttl, err := admin.TimeToLive(ctx, oldLease); err != nil || ttl.TTL <= 0 {
		t.Fatalf("the crashed run's lease should still live: %v, %v", ttl, err)
	}

	a := start(t, shared.Client(t), "a", nil) // ready: the old lease is revoked
	if ttl, err := admin.TimeToLive(ctx, oldLease); err != nil || ttl.TTL > 0 {
		t.Fatalf("the crashed run's lease outlived the restart: %v, %v", ttl, err)
	}
	onLease(t, admin, etcdtest.Prefix(t), "a", a.Lease(), 1)
	eventually(t, "b to forget the old run", func() bool {
		_, owned := b.SessionOwner("gone")
		return len(b.Members("g", "f")) == 0 && len(b.Routes("a")) == 0 && !owned
	})
}

// TestCrashedNodeExpires crashes a node (its client goes, nothing is
// revoked): once its lease's TTL passes, etcd deletes all its keys in one
// revision and the other nodes see it leave.
func TestCrashedNodeExpires(t *testing.T) {
	b := start(t, shared.Client(t), "b", nil)
	crashing := crashableClient(t)
	a := start(t, crashing, "a", func(o *registry.Options) {
		o.TTL = 2 * time.Second
		o.RequestTimeout = 200 * time.Millisecond
	})
	wait(t, a.AddRoute("r"))
	rev := wait(t, a.AddMember("g", "f", "a1", 1))
	caughtUp(t, rev, b)
	mark := b.mark()
	crashed := time.Now()
	crashing.Close()
	a.Close() // cannot revoke: the keys stay until the TTL

	eventually(t, "b to see a expire", func() bool { _, ok := b.NodeInfo("a"); return !ok })
	t.Logf("a left b's copy %v after the crash (TTL 2s)", time.Since(crashed).Round(time.Millisecond))
	var evs []registry.Event // the copy changes before the events are told
	eventually(t, "b's events", func() bool { evs = b.since(mark); return len(evs) >= 3 })
	if got := describe(evs); !slices.Equal(got, []string{"MemberLeft a:a1", "NodeLeft a:", "RouteRemoved a:r"}) {
		t.Fatalf("events after a crashed: %v", got)
	}
	for _, e := range evs {
		if e.Revision != evs[0].Revision {
			t.Fatalf("a's keys expired in several revisions: %v", evs)
		}
	}
}

// TestRestartedNodeKeepsWhatItStillHolds: a node restarted at once after a
// crash registers the routes and members its restored sessions hold (queued
// before its registry starts) in the transaction that clears its previous
// run's keys, so the other nodes never see them go: a route missing for a
// moment is a moment in which nothing is forwarded to the node's
// subscribers, and a member missing re-orders its group.
func TestRestartedNodeKeepsWhatItStillHolds(t *testing.T) {
	admin := shared.Client(t)
	b := start(t, admin, "b", nil)
	crashing := crashableClient(t)
	old := start(t, crashing, "a", func(o *registry.Options) { o.RequestTimeout = 200 * time.Millisecond })
	wait(t, old.AddRoute("kept/#"))
	wait(t, old.AddMember("g", "f", "kept", 1))
	eventually(t, "b to see a's route and member", func() bool {
		return len(b.Routes("a")) == 1 && len(b.Members("g", "f")) == 1
	})
	crashing.Close() // a crash: the lease is neither revoked nor kept alive
	old.Close()

	mark := b.mark()
	r := newRun(t, "a")
	route, member := r.AddRoute("kept/#"), r.AddMember("g", "f", "kept", 1) // restored before the start
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	wait(t, route)
	wait(t, member)
	<-r.Ready()
	caughtUp(t, r.Revision(), b)
	for _, ev := range b.since(mark) {
		if ev.Node == "a" && (ev.Kind == registry.RouteRemoved || ev.Kind == registry.MemberLeft) {
			t.Errorf("b saw %v %s%s during a's restart", ev.Kind, ev.Filter, ev.Client)
		}
	}
}

// newRun makes the registry of a new run of node, not yet started: what
// the run restored is queued or named before Start.
func newRun(t *testing.T, node string) *registry.Registry {
	t.Helper()
	r, err := registry.New(registry.Options{Client: shared.Client(t), Node: node, Prefix: etcdtest.Prefix(t), Addr: node + ":7946", Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// crashableClient is an etcd client of its own for a node whose crash a
// test plays by closing it: its lease can then be neither revoked nor kept
// alive.
func crashableClient(t *testing.T) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{shared.Endpoint()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	return cli
}

// TestHandedOverClaimOutlivesItsCaller: a claim of a session handed over
// to a, sent while a is cut off from etcd and given up by its caller,
// lands when a is back and stays (ResumeHandedOver): the node that handed
// the session over lets go of its copy when it sees the claim, so the
// record must name the node that has one. A plain resumption given up so
// is undone instead. Either way the will the claim wrote goes: its
// connection was refused, and the line must not publish it.
func TestHandedOverClaimOutlivesItsCaller(t *testing.T) {
	cli, proxy := shared.ProxiedClient(t)
	a := start(t, cli, "a", nil)
	b := start(t, shared.Client(t), "b", nil)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	resume := func(ctx context.Context, client, will string) (registry.Claim, error) {
		seen, _, err := a.LookupSession(ctx, client) // b's, read before the cut
		if err != nil {
			return registry.Claim{}, err
		}
		proxy.Cut()
		return a.ResumeConnection(ctx, client, will, seen)
	}
	handedOver := func(ctx context.Context, client, will string) (registry.Claim, error) {
		seen, _, err := a.LookupSession(ctx, client) // b's, which handed it over
		if err != nil {
			return registry.Claim{}, err
		}
		proxy.Cut()
		return a.ResumeHandedOver(ctx, client, will, seen)
	}
	for _, c := range []struct {
		client string
		claim  func(context.Context, string, string) (registry.Claim, error)
		kept   bool
	}{
		{"kept", handedOver, true},
		{"undone", resume, false},
	} {
		if _, err := b.ClaimConnection(ctx, c.client, ""); err != nil {
			t.Fatal(err)
		}
		// The registrar sends a claim as soon as it is queued, and the
		// reply cannot come while a is cut off: its caller gives up.
		short, stop := context.WithTimeout(ctx, time.Second)
		_, err := c.claim(short, c.client, "will-"+c.client)
		stop()
		if err == nil {
			t.Fatalf("%s: claimed while cut off from etcd", c.client)
		}
		proxy.Resume()
		eventually(t, c.client+": the claim settled", func() bool {
			o, ok, err := b.LookupSession(ctx, c.client)
			_, will, werr := b.Will(ctx, c.client)
			if err != nil || werr != nil || will {
				return false
			}
			if c.kept {
				return ok && o.Node == "a"
			}
			return !ok
		})
	}
}

// TestHandedOverClaimLosesToALaterClaim: a claim of a session handed over
// to a, sent while a is cut off from etcd, does not land over a claim b
// made meanwhile (its client back on b): b has the session, and a let its
// copy go when it saw b's record. Retried over it, a's claim took the
// session from b for a node without it (fault suite, seed 2: the client,
// resuming on a, got Session Present 0).
func TestHandedOverClaimLosesToALaterClaim(t *testing.T) {
	cli, proxy := shared.ProxiedClient(t)
	a := start(t, cli, "a", nil)
	b := start(t, shared.Client(t), "b", nil)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	first, err := b.ClaimConnection(ctx, "c", "")
	if err != nil {
		t.Fatal(err)
	}
	caughtUp(t, first.Revision, a)
	seen, _ := a.SessionOwner("c") // b's record, under which b handed it over
	proxy.Cut()
	short, stop := context.WithTimeout(ctx, time.Second)
	_, err = a.ResumeHandedOver(short, "c", "", seen)
	stop()
	if err == nil {
		t.Fatal("claimed while cut off from etcd")
	}
	later, err := b.ClaimConnection(ctx, "c", "") // the client back on b
	if err != nil {
		t.Fatal(err)
	}
	proxy.Resume()
	// a's claim is resolved once a's copy has seen a revision written by a
	// after the resume.
	wait(t, a.AddRoute("after/#"))
	caughtUp(t, a.Revision(), b)
	if o, ok := b.SessionOwner("c"); !ok || o.Node != "b" || o.Revision != later.Revision {
		t.Fatalf("after a's handed-over claim settled, c is owned by %+v (%v); want b's later claim (revision %d)", o, ok, later.Revision)
	}
}

// TestCatchUpBeforeRegisteringAgain: a node whose lease ran out while it
// was cut off from etcd registers again only once its copy has delivered
// what changed meanwhile. A session another node took in the meantime
// reaches its OnEvent while it still has no lease, so its gateway lets the
// client go before the other nodes see it back and forward anything to it
// (fault-suite seed 5: an ordinary subscriber still connected to such a
// gateway got a newer message there before the older ones its adopted
// session brought back).
func TestCatchUpBeforeRegisteringAgain(t *testing.T) {
	cli, proxy := shared.ProxiedClient(t)
	var self atomic.Pointer[registry.Registry]
	var leaseAtTakeover atomic.Int64
	leaseAtTakeover.Store(-1) // not seen yet
	a := start(t, cli, "a", func(o *registry.Options) {
		o.TTL = 2 * time.Second
		record := o.OnEvent
		o.OnEvent = func(ev registry.Event) {
			record(ev)
			if r := self.Load(); r != nil && ev.Kind == registry.SessionOwned && ev.Client == "c1" && ev.Owner.Node == "b" {
				leaseAtTakeover.Store(int64(r.Lease()))
			}
		}
	})
	self.Store(a.Registry)
	b := start(t, shared.Client(t), "b", nil)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	c, err := a.ClaimSession(ctx, "c1")
	if err != nil {
		t.Fatal(err)
	}
	caughtUp(t, c.Revision, b)
	old := a.Lease()

	proxy.Cut()
	eventually(t, "a's lease to run out (its record of c1 gone)", func() bool {
		_, ok := b.SessionOwner("c1")
		return !ok
	})
	if _, err := b.ClaimSession(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	proxy.Resume()
	eventually(t, "a to register again", func() bool {
		l := a.Lease()
		return l != 0 && l != old
	})
	eventually(t, "a to see b's claim of c1", func() bool { return leaseAtTakeover.Load() != -1 })
	if l := leaseAtTakeover.Load(); l != 0 {
		t.Errorf("a saw b's claim of c1 holding lease %x: it registered again before its copy caught up", l)
	}
}

// TestRestartedNodeKeepsItsRestoredSessionsOwned: a node restarted at once
// after a crash names the sessions it restored from its store before it
// starts (KeepRestored); their ownership records go over to the new lease
// in the registration that revokes the old one, so no other node ever
// sees them unowned (a client resuming there meanwhile would get a new,
// empty session: fault-suite seeds 5 and 12). A record the old run left
// for a session the new run did not restore goes with the old lease.
func TestRestartedNodeKeepsItsRestoredSessionsOwned(t *testing.T) {
	admin := shared.Client(t)
	b := start(t, admin, "b", nil)
	crashing := crashableClient(t)
	old := start(t, crashing, "a", func(o *registry.Options) { o.RequestTimeout = 200 * time.Millisecond })
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	for _, c := range []string{"kept", "gone"} {
		claim, err := old.ClaimSession(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		caughtUp(t, claim.Revision, b)
	}
	oldLease := old.Lease()
	crashing.Close() // a crash: the lease is neither revoked nor kept alive
	old.Close()

	mark := b.mark()
	r := newRun(t, "a")
	r.KeepRestored([]string{"kept"})
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	<-r.Ready()
	if ttl, err := admin.TimeToLive(ctx, oldLease); err != nil || ttl.TTL > 0 {
		t.Fatalf("the crashed run's lease outlived the restart: %v, %v", ttl, err)
	}
	caughtUp(t, r.Revision(), b)
	if o, owned := b.SessionOwner("kept"); !owned || o.Node != "a" {
		t.Errorf("kept after the restart: owner %+v, %v; want a", o, owned)
	}
	if _, owned := b.SessionOwner("gone"); owned {
		t.Error("gone, not restored, is still owned after the old lease was revoked")
	}
	for _, ev := range b.since(mark) {
		if ev.Client == "kept" && ev.Kind == registry.SessionReleased {
			t.Errorf("b saw kept released during a's restart (revision %d)", ev.Revision)
		}
	}
	// The new run claims it as a restarted gateway does (Reconcile).
	if _, err := r.ClaimSession(ctx, "kept"); err != nil {
		t.Fatalf("claiming the kept session: %v", err)
	}
}
