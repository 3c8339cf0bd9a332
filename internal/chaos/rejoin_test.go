package chaos

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/linemq/linemq/broker/brokertest"
)

// TestCutOffMemberRejoins: a gateway cut off from the others past its
// lease (15 s) has an etcd member that hears the line's leader again
// within rejoinBound of the heal. etcd's raft streams outlive the cut
// (their read timeout is never applied), and without the gateway's help
// (etcdembed's streamWatch) they carry data again only at TCP's next
// retransmission: 11.8 s after the heal in this test's one run without it, during which the gateway
// learns nothing from etcd, such as that a client of its own has moved
// to another gateway and its old connection here must close (the fault
// suite's 5 s takeover bound).
func TestCutOffMemberRejoins(t *testing.T) {
	bin := suiteBinary(t, "three linemq processes, one cut off for 15 s")
	if why := NetnsUsable(); why != nil {
		t.Skipf("network namespaces unusable here: %v", why)
	}
	const (
		cut         = 15 * time.Second
		rejoinBound = 3 * time.Second
	)
	topo, err := NewNetns(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := topo.Close(); err != nil {
			t.Errorf("removing the namespaces: %v", err)
		}
	})
	dir := t.TempDir()
	cl := &cluster{bin: bin, dir: dir, topo: topo}
	t.Cleanup(cl.stop) // before the namespaces go (cleanups run last first)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := cl.startAll(ctx); err != nil {
		t.Fatal(err)
	}
	leader, err := cl.leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	victim := (leader + 1) % 3 // a follower: the others keep their leader
	cli, eps, err := cl.etcd()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	// leaderOf is the leader the victim's member knows of, 0 for none or
	// when it does not answer (the harness reaches it on its client link,
	// which the cut leaves up).
	leaderOf := func() uint64 {
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		st, err := cli.Status(sctx, eps[victim])
		if err != nil {
			return 0
		}
		return st.Leader
	}

	if err := topo.Cut(victim); err != nil {
		t.Fatal(err)
	}
	cutAt := time.Now()
	if !brokertest.Until(10*time.Second, func() bool { return leaderOf() == 0 }) {
		t.Fatalf("n%d's member still had a leader 10 s into the cut", victim+1)
	}
	sleep(ctx, cut-time.Since(cutAt)) // the fault's hold, not a wait for a condition
	if err := topo.Heal(victim); err != nil {
		t.Fatal(err)
	}
	healed := time.Now()
	if !brokertest.Until(30*time.Second, func() bool { return leaderOf() != 0 }) {
		t.Fatalf("n%d's member had no leader 30 s after the heal (logs in %s)", victim+1, dir)
	}
	took := time.Since(healed)
	t.Logf("n%d cut off %.1f s; its member heard a leader again %.2f s after the heal", victim+1, healed.Sub(cutAt).Seconds(), took.Seconds())
	if took > rejoinBound {
		t.Errorf("n%d's member heard a leader %.2f s after the heal; want at most %v (logs in %s)", victim+1, took.Seconds(), rejoinBound, dir)
	}
}
