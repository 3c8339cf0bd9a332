package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/linemq/linemq/broker"
)

// testLink is a replica link with no sender: the test takes its batches
// itself (takeLocked) and answers for the replica (ackLocked).
func testLink() *replicaLink {
	return newReplicaLink(newReplicator(nil, 1, "a", slog.New(slog.DiscardHandler)), "b")
}

func saveOp(client string, seq uint64, sent bool) replicaOp {
	return replicaOp{kind: opSaveMsg, client: client, msg: &broker.MessageRecord{Seq: seq, Sent: sent, Message: &broker.Message{}}}
}

func deleteOp(client string, seq uint64) replicaOp {
	return replicaOp{kind: opDeleteMsg, client: client, seq: seq}
}

// sendBatch takes everything queued, as drain does, and the replica
// takes it; it returns the ops that travel (blanks left out).
func sendBatch(l *replicaLink) []replicaOp {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(l.ops)
	var live []replicaOp
	ops, _ := l.takeLocked(n)
	for _, op := range ops {
		if op.kind != 0 {
			live = append(live, op)
		}
	}
	l.ackLocked(uint64(n))
	return live
}

// kinds lists the kinds and seqs of ops, for comparing batches.
func kinds(ops []replicaOp) []string {
	var out []string
	for _, op := range ops {
		switch op.kind {
		case opSaveMsg:
			out = append(out, fmt.Sprint("save ", op.client, " ", op.msg.Seq))
		case opDeleteMsg:
			out = append(out, fmt.Sprint("delete ", op.client, " ", op.seq))
		case opDeleteSession:
			out = append(out, "delete session "+op.client)
		case opSaveSession:
			out = append(out, "save session "+op.client)
		}
	}
	return out
}

// TestAbsorb is what travels to a replica when a message's delete follows
// its save: nothing while every save of it is still queued, and the
// delete whenever the replica may have a save of it (one left in an
// earlier batch, or a resend the seqs cannot tell from a first save).
func TestAbsorb(t *testing.T) {
	session := replicaOp{kind: opSaveSession, client: "c", session: &broker.SessionRecord{ClientID: "c"}}
	for _, tc := range []struct {
		name    string
		batches [][]replicaOp // each queued, then sent as one batch
		want    []string      // what travelled, all batches together
		absorb  uint64
	}{
		{"saved and deleted in one wait",
			[][]replicaOp{{saveOp("c", 1, true), deleteOp("c", 1)}}, nil, 2},
		{"saved, sent again with its packet id, deleted",
			[][]replicaOp{{saveOp("c", 1, false), saveOp("c", 1, true), deleteOp("c", 1)}}, nil, 2},
		{"the save left in an earlier batch",
			[][]replicaOp{{saveOp("c", 1, true)}, {deleteOp("c", 1)}}, []string{"save c 1", "delete c 1"}, 0},
		{"saved again after its first save left",
			[][]replicaOp{{saveOp("c", 1, false)}, {saveOp("c", 1, true), deleteOp("c", 1)}},
			[]string{"save c 1", "save c 1", "delete c 1"}, 0},
		{"an older seq saved again (a resend) is not taken for a first save",
			[][]replicaOp{{saveOp("c", 2, true)}, {saveOp("c", 1, true), deleteOp("c", 1)}},
			[]string{"save c 2", "save c 1", "delete c 1"}, 0},
		{"a deleted session starts its seqs again",
			[][]replicaOp{{saveOp("c", 5, true)}, {{kind: opDeleteSession, client: "c"}, session, saveOp("c", 1, true), deleteOp("c", 1)}},
			[]string{"save c 5", "delete session c", "save session c"}, 2},
		{"other clients and other seqs untouched",
			[][]replicaOp{{saveOp("c", 1, true), saveOp("d", 1, true), saveOp("c", 2, true), deleteOp("d", 1), deleteOp("c", 3)}},
			[]string{"save c 1", "save c 2", "delete c 3"}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := testLink()
			var got []replicaOp
			for _, b := range tc.batches {
				for _, op := range b {
					l.queue(op)
				}
				got = append(got, sendBatch(l)...)
			}
			if g, w := kinds(got), tc.want; !slices.Equal(g, w) {
				t.Errorf("travelled %q, want %q", g, w)
			}
			if a := l.r.absorbed.Load(); a != tc.absorb {
				t.Errorf("absorbed %d, want %d", a, tc.absorb)
			}
			if len(l.fresh) != 0 {
				t.Errorf("%d fresh entries left after every save left", len(l.fresh))
			}
		})
	}
}

// TestSyncNeedsNoCopyOfAnAbsorbedMessage: a Sync waiting for a message's
// save goes as soon as its client's acknowledgement absorbs it, with no
// batch sent, unless a write before it still has to reach the replica.
func TestSyncNeedsNoCopyOfAnAbsorbedMessage(t *testing.T) {
	done := func(l *replicaLink, at uint64) bool {
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // not waited for: only whether it holds now
		return l.wait(ctx, at) == nil
	}

	l := testLink()
	l.queue(saveOp("c", 1, true))
	at := l.enq
	if done(l, at) {
		t.Fatal("a Sync went before its message was absorbed or copied")
	}
	l.queue(deleteOp("c", 1))
	if !done(l, at) {
		t.Fatal("a Sync waited for a message its client had acknowledged")
	}

	// A write before it, not absorbed, is still waited for.
	l = testLink()
	l.queue(replicaOp{kind: opSaveSession, client: "c", session: &broker.SessionRecord{ClientID: "c"}})
	l.queue(saveOp("c", 1, true))
	at = l.enq
	l.queue(deleteOp("c", 1))
	if done(l, at) {
		t.Fatal("a Sync went before the session's save reached the replica")
	}
	sendBatch(l)
	if !done(l, at) {
		t.Fatal("a Sync still waited after its batch was durable")
	}

	// So is a batch on its way.
	l = testLink()
	l.queue(saveOp("c", 1, true))
	l.mu.Lock()
	l.takeLocked(1) // sent, not answered yet
	l.mu.Unlock()
	l.queue(saveOp("c", 2, true))
	at = l.enq
	l.queue(deleteOp("c", 2))
	if done(l, at) {
		t.Fatal("a Sync went while a batch before it was on its way")
	}
}

// TestInStepOnceTheReplicaHasTheResync: a replica counts as in step once
// it has acknowledged the resync's end mark, not when the resync is
// queued; a gap opened before (a batch given up on) leaves it out of step.
func TestInStepOnceTheReplicaHasTheResync(t *testing.T) {
	inStep := func(l *replicaLink) bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.inStep
	}
	l := testLink()
	snap := func(string, func(*broker.SessionState)) bool { return false }
	l.r.snapshot.Store(&snap)
	l.startResync()
	if inStep(l) {
		t.Fatal("in step while the resync is still queued")
	}
	sendBatch(l)
	if !inStep(l) {
		t.Fatal("not in step after the replica acknowledged the resync")
	}

	l = testLink()
	l.r.snapshot.Store(&snap)
	l.startResync()
	l.mu.Lock()
	n := len(l.ops)
	l.takeLocked(n)
	l.giveUpLocked(n) // the batch did not reach the replica
	l.mu.Unlock()
	if inStep(l) {
		t.Fatal("in step after the resync was given up on")
	}
}

// TestReplicaBatchesNumberedAcrossLinks: the link to a replica made anew
// (its node gone and back) numbers its batches after the old link's. The
// replica answers a batch numbered at or below the last it applied from
// this run without applying it (a batch sent again); numbered from 1
// again, the new link's resync was dropped unseen.
func TestReplicaBatchesNumberedAcrossLinks(t *testing.T) {
	r := newReplicator(nil, 1, "a", slog.New(slog.DiscardHandler))
	defer r.close()
	snap := func(string, func(*broker.SessionState)) bool { return false }
	r.snapshot.Store(&snap)
	r.available = func(string) bool { return true }
	seqs := make(chan uint64, 64)
	r.call = func(_ context.Context, _, _ string, arg []byte) ([]byte, error) {
		bt, err := decodeBatch(arg)
		if err != nil {
			t.Error(err)
			return nil, err
		}
		seqs <- bt.seq
		return nil, nil
	}
	next := func() uint64 {
		select {
		case s := <-seqs:
			return s
		case <-time.After(10 * time.Second):
			t.Fatal("no batch sent to the replica")
			return 0
		}
	}
	r.setPeers([]string{"b"})
	first := next()
	r.setPeers(nil) // b leaves: its link is closed
	r.setPeers([]string{"b"})
	if again := next(); again <= first {
		t.Fatalf("the new link's first batch is numbered %d, not after the old link's %d", again, first)
	}
}
