package cluster_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/linemq/linemq/broker/brokertest"
	"github.com/linemq/linemq/gateway/cluster"
)

// TestUpdateLock: one gateway of a line holds the update lock at a time;
// another waits, saying for whom, and takes it once it is let go; a
// rollback's halt makes the version's waiters give it up, not another
// version's. On a real etcd.
func TestUpdateLock(t *testing.T) {
	_, cs := startGRPCNodes(t, 2)
	n1, n2 := cs[0], cs[1]
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	if err := n1.AcquireUpdate(ctx, "v2"); err != nil {
		t.Fatal(err)
	}
	if h, err := n1.UpdateHolder(ctx); err != nil || h == nil || h.Node != "n1" || h.Version != "v2" || h.Lease == 0 {
		t.Fatalf("holder %+v, %v", h, err)
	}
	got := make(chan error, 1)
	go func() { got <- n2.AcquireUpdate(ctx, "v2") }()
	if !brokertest.Until(10*time.Second, func() bool { return strings.Contains(n2.UpdateWaiting(), "waiting for n1, updating to v2") }) {
		t.Fatalf("n2 waits with %q", n2.UpdateWaiting())
	}
	if err := n1.ReleaseUpdate(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("n2 after n1 let go: %v", err)
	}
	if n2.UpdateWaiting() != "" {
		t.Errorf("n2 still says it waits: %q", n2.UpdateWaiting())
	}
	if st := n1.Stats().Update; st.Waiting != "" {
		t.Errorf("n1's panel: %+v", st)
	}

	// n2's trial fails: it lets go with a halt; n1, with v2 installed,
	// gives it up, but would update to v3.
	halt := &cluster.UpdateHalt{Version: "v2", At: time.Now().UTC(), Reason: "unhealthy for 16s during its trial"}
	if err := n2.ReleaseUpdate(ctx, halt); err != nil {
		t.Fatal(err)
	}
	if err := n1.AcquireUpdate(ctx, "v2"); !errors.Is(err, cluster.ErrUpdateHalted) || !strings.Contains(err.Error(), "on n2") {
		t.Fatalf("v2 after its halt: %v", err)
	}
	if h, _ := n1.UpdateHalted(ctx); h == nil || h.Node != "n2" || h.Reason != halt.Reason {
		t.Errorf("halt mark %+v", h)
	}
	if err := n1.AcquireUpdate(ctx, "v3"); err != nil {
		t.Fatalf("v3: %v", err)
	}
	// Held by n1, the lock is n1's again after a restart (HoldUpdate), and
	// not n2's.
	if held, err := n1.HoldUpdate(ctx, "v3"); err != nil || !held {
		t.Errorf("n1 HoldUpdate: %v %v", held, err)
	}
	if held, err := n2.HoldUpdate(ctx, "v3"); err != nil || held {
		t.Errorf("n2 HoldUpdate: %v %v", held, err)
	}
	if err := n2.ReleaseUpdate(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if h, _ := n1.UpdateHolder(ctx); h == nil || h.Node != "n1" {
		t.Errorf("n2's release took n1's lock: %+v", h)
	}
}
