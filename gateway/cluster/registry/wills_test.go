package registry_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
)

// A connection's claim writes its will record, or deletes the record of
// an earlier connection; the record outlives the node's lease; of many
// nodes taking one record, one succeeds; a stale drop leaves a newer
// record alone.
func TestWillRecords(t *testing.T) {
	cli := shared.Client(t)
	n1 := start(t, cli, "n1", nil)
	n2 := start(t, cli, "n2", nil)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()

	if _, err := n1.ClaimConnection(ctx, "edge/1", "will-a"); err != nil {
		t.Fatal(err)
	}
	if _, err := n1.ClaimConnection(ctx, "edge/2", "will-b"); err != nil {
		t.Fatal(err)
	}
	recs, _, err := n2.Wills(ctx)
	if err != nil || len(recs) != 2 || recs[0].Client != "edge/1" || string(recs[0].Value) != "will-a" {
		t.Fatalf("wills: %+v, %v", recs, err)
	}
	// A restored session's claim leaves the record alone; a new connection
	// without a will deletes it.
	if _, err := n1.ClaimSession(ctx, "edge/2"); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := n1.Will(ctx, "edge/2"); !ok {
		t.Fatal("a session claim deleted the will record")
	}
	if _, err := n2.ClaimConnection(ctx, "edge/2", ""); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := n1.Will(ctx, "edge/2"); ok {
		t.Fatal("a connection without a will left the earlier will's record")
	}

	// The record outlives its node's lease.
	n1.Close()
	rec, ok, err := n2.Will(ctx, "edge/1")
	if err != nil || !ok {
		t.Fatalf("edge/1's will after its node left: %v %v", ok, err)
	}
	// Five takers, one winner.
	var won atomic.Int32
	var wg sync.WaitGroup
	for range 5 {
		wg.Go(func() {
			if took, err := n2.TakeWill(ctx, "edge/1", rec.ModRevision); err == nil && took {
				won.Add(1)
			}
		})
	}
	wg.Wait()
	if won.Load() != 1 {
		t.Fatalf("%d takers got the will", won.Load())
	}

	// A drop compares the value: a newer connection's record stays.
	if _, err := n2.ClaimConnection(ctx, "edge/3", "old"); err != nil {
		t.Fatal(err)
	}
	if _, err := n2.ClaimConnection(ctx, "edge/3", "new"); err != nil {
		t.Fatal(err)
	}
	if dropped, err := n2.DropWill(ctx, "edge/3", "old"); err != nil || dropped {
		t.Fatalf("stale drop: %v %v", dropped, err)
	}
	if dropped, err := n2.DropWill(ctx, "edge/3", "new"); err != nil || !dropped {
		t.Fatalf("drop: %v %v", dropped, err)
	}
}
